"""Where training writes its records: loss curves (``*.loss.csv``), run records
(``*.train.json``), parity references (``*.reference.npz``) and tokenizers (``*.tokenizer.json``).

They belong to the checkout's ``training/`` folder, not beside the GGUF in ``src/pymtp/models``:
the wheel ships the models, not how they were made.
"""

from __future__ import annotations

from pathlib import Path

#: The checkout's records folder (relative, like the scripts' default --out paths).
RECORDS_DIR = Path("training")


def record_path(model: str | Path, suffix: str, records: str | Path = RECORDS_DIR) -> Path:
    """``<records>/<model's name without .gguf><suffix>``, e.g. training/pymtp-default.loss.csv."""
    name = Path(model).name
    stem = name[: -len(".gguf")] if name.endswith(".gguf") else Path(name).stem
    return Path(records) / f"{stem}{suffix}"
