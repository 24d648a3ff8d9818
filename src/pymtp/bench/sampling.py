"""The sampling settings a bench runs under, named, for pymtp and llama.cpp's tools alike.

``--temps 0,0.8`` (the default) gives settings ``T=0`` and ``T=0.8`` with top-k/top-p/min-p
off and no repetition penalty; ``--sampling greedy,qwen`` gives the named presets instead:

* ``greedy``: temperature 0;
* ``qwen``: Qwen's recommended settings, T=0.7, top-p 0.8, top-k 20, repetition penalty
  1.05 (over the last 64 tokens, pymtp's window, passed to llama.cpp as --repeat-last-n).

Both engines get the same numbers, but not quite the same transform: pymtp (like HF
transformers and vLLM) applies the temperature before top-k/top-p, llama.cpp's default
sampler chain applies top-k/top-p to the untempered logits and the temperature last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..config import SamplingConfig
from .base import BenchError


@dataclass(frozen=True)
class SamplingSetting:
    name: str
    temperature: float
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0

    def generate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for pymtp.generate()."""
        return {k: v for k, v in asdict(self).items() if k != "name"}

    def config(self, seed: int | None = None) -> SamplingConfig:
        return SamplingConfig(seed=seed, **self.generate_kwargs())

    def llama_args(self) -> list[str]:
        """The same settings as llama.cpp's common flags."""
        return [
            "--temp",
            f"{self.temperature:g}",
            "--top-k",
            str(self.top_k),
            "--top-p",
            f"{self.top_p:g}",
            "--min-p",
            f"{self.min_p:g}",
            "--repeat-penalty",
            f"{self.repetition_penalty:g}",
            "--repeat-last-n",
            str(SamplingConfig().repetition_window),
        ]


PRESETS: dict[str, SamplingSetting] = {
    "greedy": SamplingSetting("greedy", 0.0),
    "qwen": SamplingSetting("qwen", 0.7, top_k=20, top_p=0.8, repetition_penalty=1.05),
}


def from_temperature(t: float) -> SamplingSetting:
    """A --temps value: that temperature, no truncation, no penalty."""
    return SamplingSetting(f"T={t:g}", float(t))


def settings(sampling: Sequence[str] | None, temps: Sequence[float]) -> list[SamplingSetting]:
    """The settings of a run: the --sampling presets when given, else one per --temps value."""
    if not sampling:
        return [from_temperature(t) for t in temps]
    out = []
    for name in sampling:
        if name not in PRESETS:
            raise BenchError(f"--sampling {name}: the presets are {', '.join(PRESETS)}")
        out.append(PRESETS[name])
    return out
