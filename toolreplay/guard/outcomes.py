"""What the gate answers: an `Answer` with its `Outcome`, and a `Refusal` when the tool did not run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from toolreplay.policy.refusals import REFUSAL_WORDING, RefusalReason

__all__ = ["DECLINED", "NOT_ASKED", "OUTCOMES", "STOP_REASONS", "TIMED_OUT", "Answer", "Outcome", "Refusal",
           "RefusalReason", "StopReason"]

# What happened to a request (the record format's meta.outcome): the tool ran; an earlier identical
# call answered it; the gate refused it; the client cancelled it; nobody can know (a write cut short).
Outcome = Literal["ran", "cached", "refused", "cancelled", "unknown"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)

# What stopped a session: a limit of the policy, or a record that could not be written.
StopReason = Literal["max_steps", "budget", "time", "record"]
STOP_REASONS: tuple[StopReason, ...] = get_args(StopReason)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the gate did not run a call: its `reason`, the exact `message` the client sees, and the `rule`
    that denied it (for the reason "rule")."""

    reason: RefusalReason
    message: str
    rule: str | None = None

    def __post_init__(self) -> None:
        wording = REFUSAL_WORDING.get(self.reason)
        if wording is not None and not self.message.startswith(wording):  # a record read back knows it by its text
            raise ValueError(f"a {self.reason} refusal must begin {wording!r}: {self.message!r}")

    @property
    def response(self) -> dict[str, Any]:
        """The response the agent sees (a new dict each time: it is the caller's)."""
        return {"ok": False, "error": self.message}


# How a call that needed a person's yes and did not get it is refused: nobody could be asked, the person said
# no, nobody answered in time (the first is the SPEC's wording; the gate's, and the receipts' when the
# person was asked in the inbox).
NOT_ASKED = Refusal("not_asked", "confirmation required")
DECLINED = Refusal("declined", "confirmation declined")
TIMED_OUT = Refusal("timed_out", "confirmation timed out")


@dataclass(frozen=True, slots=True)
class Answer:
    """What the gate answered a request, and how; `refusal` says why, when the tool did not run for it."""

    response: dict[str, Any]
    outcome: Outcome
    index: int | None = None  # the record's index, when it was recorded
    refusal: Refusal | None = None
