"""User-facing settings, validated by pydantic (a bad value names its field).

These three models are the one source of every generation option's type, bounds, default and
description: pymtp.request resolves a request into them, the server's request schemas and the
CLI's flags are derived from their fields."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class SamplingConfig(BaseModel):
    """How the next token is chosen. temperature == 0 means greedy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # [0, 100]: the sampler is exact at any temperature; OpenAI's API stops at 2, the server
    # takes the same range as the Python API (one bound, from this field).
    temperature: float = Field(0.0, ge=0.0, le=100.0, description="0 = greedy; higher = more random")
    top_k: int = Field(0, ge=0, description="keep the k most likely tokens (0 = all)")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus: smallest set with this much mass")
    min_p: float = Field(0.0, ge=0.0, lt=1.0, description="drop tokens below min_p x the top probability")
    repetition_penalty: float = Field(
        1.0,
        gt=0.0,
        le=10.0,
        description="divide a recent token's positive logit by it, multiply a negative one (1 = off)",
    )
    repetition_window: int = Field(64, ge=0, description="recent tokens the penalties look at")
    # OpenAI's additive penalties, counted over the same window of recent tokens
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0, description="subtracted once from a recent token's logit")
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0, description="subtracted per occurrence in the window")
    logit_bias: tuple[tuple[int, float], ...] = Field(
        (), description="(token, bias) pairs added to the logits first; a dict {token: bias} is accepted"
    )
    seed: int | None = Field(None, ge=0, description="seed of the sampling RNG (None: a random seed)")
    # Coupled: each token is an exponential race keyed by (seed, position), so speculation
    # emits exactly the tokens plain decoding draws for that seed, whatever the drafts, batch
    # or policy; a draft token is kept when it wins the target's race (a little less often
    # than rejection sampling keeps it). Rejection: speculative sampling, min(1, p/q), exact
    # in distribution only. Auto: coupled when a seed is given.
    sampling_rule: Literal["auto", "coupled", "rejection"] = Field(
        "auto", description="coupled: a seed gives the same tokens speculative or not; rejection: most acceptance"
    )

    @field_validator("logit_bias", mode="before")
    @classmethod
    def _bias_pairs(cls, value: Any) -> Any:
        if isinstance(value, dict):  # OpenAI sends {"token id": bias}
            value = value.items()
        try:
            pairs = tuple(sorted((int(t), float(b)) for t, b in value))
        except (TypeError, ValueError):
            raise ValueError("logit_bias maps token ids (integers) to biases, e.g. {15: -100}") from None
        for t, b in pairs:
            if t < 0:
                raise ValueError(f"logit_bias: token {t} is negative")
            if not -100.0 <= b <= 100.0:
                raise ValueError(f"logit_bias: {b} for token {t} is outside [-100, 100]")
        if len({t for t, _ in pairs}) != len(pairs):
            raise ValueError("logit_bias names a token twice")
        return pairs

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def coupled(self) -> bool:
        """Sampling by seeded races (see sampling_rule)."""
        return not self.greedy and (
            self.sampling_rule == "coupled" or (self.sampling_rule == "auto" and self.seed is not None)
        )


#: The settings of the fixed and adaptive policies: a SpecConfig that sets any of them (and no
#: policy) keeps the policy those settings were made for, "fixed" (or "adaptive" with adaptive=True).
LEGACY_POLICY_FIELDS = ("n_draft", "p_min", "adaptive", "cooldown", "cooldown_steps", "n_min")


class SpecConfig(BaseModel):
    """Who drafts (the MTP head, or prompt lookup), and the policy that sizes drafts.

    policy: auto (the default unless one of the fixed settings below is given): each step the
      draft length in 0..n_draft (0: a plain decode step) with the most expected tokens per
      second, from costs measured for this model and machine and recent acceptance
      (pymtp.policy); fixed: n_draft every step (with p_min and cooldown); adaptive: the
      earlier adaptive length in n_min..n_draft.
    n_draft: most tokens drafted per step (chained-head models cap it at their head count).
    p_min: stop drafting when the head's top probability falls below it.
    adaptive: choose each draft's length for the most expected tokens per second, from
      recent per-position acceptance and measured draft / verify costs (see DraftPolicy).
    cooldown: after a step where no draft token was accepted, draft this many
      fewer tokens (down to 0: plain steps) for the next `cooldown_steps` steps.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: Literal["auto", "fixed", "adaptive"] = Field(
        "auto",
        description="auto: the draft length (0 included) with the most expected tokens per second, "
        "from measured costs and recent acceptance; fixed: n_draft every step; adaptive: the earlier "
        "adaptive length. Default: auto, or fixed/adaptive when n_draft, p_min, adaptive, cooldown, "
        "cooldown_steps or n_min is given",
    )
    n_draft: int = Field(3, ge=1, le=16)
    p_min: float = Field(0.0, ge=0.0, le=1.0)
    # Fixed length 3 measured fastest at greedy on the deep benchmark variant (1.66x plain;
    # adaptive 1.45x; at T=0.8 k=2 1.48x, k=3 1.37x): tools/measure_policy.py, README.
    adaptive: bool = False
    adaptive_window: int = Field(16, ge=2, le=1024, description="steps the acceptance estimates average over")
    cooldown: int = Field(0, ge=0, le=16)
    cooldown_steps: int = Field(1, ge=0, le=1024)
    n_min: int = Field(1, ge=1, le=16, description="the shortest draft the adaptive policy uses")
    drafter: Literal["mtp", "lookup", "hybrid"] = Field(
        "mtp",
        description="mtp: the model's MTP head; lookup: copy what followed the last n-gram "
        "earlier in the text (prompt lookup, no model call; works without MTP blocks); hybrid: lookup "
        "where it matches, the MTP head elsewhere (pymtp.hybrid)",
    )
    ngram: int = Field(3, ge=1, le=16, description="prompt lookup: the longest suffix it matches")
    heads: Literal["chain", "first"] = Field(
        "chain",
        description="models with several MTP heads (step35, mimo2): chain: head i drafts token i+1, "
        "as llama.cpp's driver does (drafts of at most the head count; every head is fed the accepted "
        "tokens); first: head 0 drafts every token, recursing on its own hidden row like a single-head "
        "model (one head to feed, drafts up to n_draft)",
    )
    # 4096 measured best on the default model: draft cost / 4.25, acceptance at draft length 1
    # within a point of the whole vocabulary, short and long contexts (tools/measure_draft_vocab.py).
    draft_vocab: int = Field(
        4096,
        ge=0,
        description="MTP head: score only the N most frequent tokens (a trimmed draft vocabulary, "
        "pymtp.draft_vocab; exact either way) where the model allows it; 0 = the whole vocabulary",
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy_policy(cls, data: Any) -> Any:
        if isinstance(data, dict) and "policy" not in data and any(k in data for k in LEGACY_POLICY_FIELDS):
            data = {**data, "policy": "adaptive" if data.get("adaptive") else "fixed"}
        return data

    @model_validator(mode="after")
    def _bounds(self) -> SpecConfig:
        if self.n_min > self.n_draft:
            raise ValueError(f"n_min ({self.n_min}) must not exceed n_draft ({self.n_draft})")
        return self


class GenerationConfig(BaseModel):
    """Limits of one generation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_tokens: int = Field(256, ge=1, le=1 << 24, description="most tokens to generate")
    stop: tuple[str, ...] = Field(
        (), description="end the text before the first of these strings (one string is accepted)"
    )
    ignore_eos: bool = Field(False, description="keep going past end-of-generation tokens")

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_as_tuple(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(s == "" for s in value):
            raise ValueError("stop strings must not be empty")
        return value
