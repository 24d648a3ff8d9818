"""The one drafter factory: a SpecConfig's ``drafter`` setting -> the Drafter of one text.

Every entry point makes its drafters here (a Session's speculator, each slot of a Batch, and
through them generate(), stream(), the CLI and the server), so a setting means the same
wherever it is given."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from .drafter import Drafter
from .errors import UnsupportedError
from .hybrid import HybridDrafter
from .lookup import PromptLookupDrafter
from .mtp_drafter import MTPDrafter

if TYPE_CHECKING:
    from .model import DraftContext, Model
    from .seqview import DraftView

#: The kinds SpecConfig.drafter names; the ones that run the model's MTP head.
KINDS = ("mtp", "lookup", "hybrid")
NEEDS_HEAD = ("mtp", "hybrid")


def drafter_kind(spec) -> str | None:
    """The drafter a SpecConfig asks for (None: no SpecConfig, plain decoding)."""
    return None if spec is None else spec.drafter


def check_can_draft(model: Model, kind: str | None) -> None:
    """UnsupportedError when this model cannot draft with kind (no MTP blocks loaded)."""
    if kind in NEEDS_HEAD and not model.mtp_loaded:
        raise UnsupportedError(
            f"{model.path.name} has no MTP blocks (architecture {model.architecture}, n_mtp_layers="
            f"{model.n_mtp_layers}, loaded={model.mtp_loaded}): speculative decoding needs them. Run it with "
            "speculative=False, or draft by prompt lookup: speculative={'drafter': 'lookup'}."
        )


def make_drafter(kind: str | None, model: Model, draft: DraftContext | DraftView | None) -> Drafter | None:
    """A fresh drafter of this kind for one text; draft: the head's context (or one sequence
    of a shared one) for the kinds that need it. None for kind None (plain decoding)."""
    if kind is None:
        return None
    if kind not in KINDS:
        raise ValueError(f"unknown drafter {kind!r}: one of {', '.join(KINDS)}")
    check_can_draft(model, kind)
    if kind in NEEDS_HEAD and draft is None:
        raise UnsupportedError(f"the {kind} drafter needs the MTP head's context")
    if kind == "lookup":
        return PromptLookupDrafter(model.n_vocab)
    head = cast("DraftContext", draft)  # checked above; a sequence's view stands in for a context
    if kind == "mtp":
        return MTPDrafter(head)
    return HybridDrafter(MTPDrafter(head), PromptLookupDrafter(model.n_vocab))
