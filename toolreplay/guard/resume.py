"""Resume: what a gate reads back from a record it continues after a restart (docs/guard.md, Resuming).

The writes the record holds answer their repeats (they are not run again); the writes announced in the
intents file and never recorded have an unknown outcome (refused until a person resolves them); the
steps and result bytes count for the budgets, and the calls for the rules' history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from toolreplay.format.canonical import canonical_json
from toolreplay.format.records import ts_nanoseconds
from toolreplay.guard.intents import unresolved
from toolreplay.policy.redaction import holds_marks
from toolreplay.policy.refusals import is_refusal
from toolreplay.policy.rules import COUNTED_OUTCOMES

if TYPE_CHECKING:
    from toolreplay.format.records import Record
    from toolreplay.guard.idempotency import IdempotencyStore
    from toolreplay.guard.recorder import SessionRecorder
    from toolreplay.policy.model import Policy
    from toolreplay.policy.rules import RuleSet, RuleState

__all__ = ["Resumed", "resume"]


@dataclass(frozen=True, slots=True)
class Resumed:
    """What a continued record counts for the budgets: its requests and its results' canonical bytes."""

    steps: int
    result_bytes: int


def resume(recorder: SessionRecorder, policy: Policy, store: IdempotencyStore, *, writes: frozenset[str],
           repeatable: frozenset[str], rules: RuleState | None, rule_set: RuleSet, started: float,
           now: int) -> Resumed:
    """Bring back into `store` the writes the record holds and the announced writes it does not hold, into
    `rules` the record's calls (`started` is the session's clock at its start, `now` the wall clock's ns),
    and count the budgets."""
    intents = list(recorder.previous_intents)
    wanted = {intent.call for intent in intents}
    landed: dict[bytes, list[int]] = {}
    steps = result_bytes = 0
    for record in recorder.history():
        if rules is not None:
            _remember_for_rules(record, policy, rules, rule_set, started, now)
        steps += 1
        if is_refusal(record.response):
            continue
        # every answer that is no refusal counts, a repeat included: a record (format 1.0) does not
        # say which answers were cached, and counting too much stops early rather than late
        result_bytes += len(record.canonical_response)
        if record.tool not in writes:
            continue
        identity = record.canonical_call
        if identity in wanted:  # a repeatable write's record settles its intent too
            landed.setdefault(identity, []).append(record.index)
        if record.tool in repeatable:
            continue
        if recorder.redactor is not None and holds_marks(record.response):
            store.keep_index(identity, record.index)  # its real answer is gone with the process that got it
            continue
        store.keep_recorded(identity, record.response, len(record.canonical_response), record.index)
    unknown = unresolved(intents, landed)
    for intent in unknown:
        store.mark_unknown(intent.call, f"{intent.tool} {canonical_json(intent.args)}")
    recorder.keep_intents(unknown)
    return Resumed(steps, result_bytes)


def _remember_for_rules(record: Record, policy: Policy, rules: RuleState, rule_set: RuleSet, started: float,
                        now: int) -> None:
    """A resumed record counts for later rules (`after`, `count`, `rate`) as when it was made: at its
    `meta.ts` (`now` is the wall clock's time, in ns, of the resume), or, without one, at the start."""
    if record.tool not in policy.allowed_tools:
        return
    when = started
    ts = record.meta.get("ts") if record.meta is not None else None
    if isinstance(ts, str):  # a rate's window holds only the calls of its last seconds, not all of the record
        when -= max(0, now - ts_nanoseconds(ts)) / 1e9
    ruling = rules.check(record.tool, rule_set.prepare(record.tool, record.args), when)
    # as `scope` counts: what ran, by its outcome (a format 1.0 record: any answer but a refusal)
    counted = record.outcome in COUNTED_OUTCOMES if record.meta is not None else not is_refusal(record.response)
    if not counted:
        rules.withdraw(ruling)

