"""Resume: what a gate reads back from a record it continues after a restart (docs/guard.md, Resuming).

The writes the record holds answer their repeats (they are not run again); the writes announced in the
intents file and never recorded have an unknown outcome (refused until a person resolves them); the
steps and result bytes count for the budgets, and the calls for the rules' history.

A `GateHistory` is that reading, one record at a time: a gate folds a continued record's records into one
and starts from it (`resume`); a long-lived process that opens the same record for one short gate after
another (the hook server) keeps one per record, adds the records appended since, and starts each gate
from a copy (`GateHistory.start`), which is the state a full read of the record would have built.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from toolreplay.format.canonical import canonical_json
from toolreplay.format.records import ts_nanoseconds
from toolreplay.guard.idempotency import IdempotencyStore
from toolreplay.guard.intents import unresolved
from toolreplay.policy.redaction import holds_marks
from toolreplay.policy.refusals import is_refusal
from toolreplay.policy.rules import COUNTED_OUTCOMES, RuleSet, RuleState

if TYPE_CHECKING:
    from toolreplay.format.records import Record
    from toolreplay.guard.recorder import SessionRecorder
    from toolreplay.policy.model import Policy

__all__ = ["GateHistory", "Resumed", "resume"]


@dataclass(frozen=True, slots=True)
class Resumed:
    """What a gate starts from: its store and rules' state, and what the record counts for the budgets (its
    requests and its results' canonical bytes)."""

    steps: int
    result_bytes: int
    store: IdempotencyStore | None = None
    rules: RuleState | None = None


class GateHistory:
    """A record's records as a gate of one configuration reads them back, folded one at a time (thread-safe).

    `writes` and `repeatable` are the gate's, `redacting` whether its recorder redacts; `wanted` (the calls
    of the intents a one-shot gate resumes with) limits which writes' record indexes are kept for settling
    intents; None keeps those of every write since the oldest intent that may still need them (`start`)."""

    def __init__(self, policy: Policy, *, writes: frozenset[str], repeatable: frozenset[str], redacting: bool,
                 store: IdempotencyStore, rule_set: RuleSet | None = None, rules: RuleState | None = None,
                 wanted: frozenset[bytes] | None = None) -> None:
        """`store` (empty) and `rules` (a new state of `rule_set`, made when the policy has rules and none is
        given) receive what the records bring back."""
        self.policy = policy
        self.writes, self.repeatable, self.redacting = writes, repeatable, redacting
        self.rule_set = rule_set if rule_set is not None else RuleSet(policy.rules)
        self.store = store
        self.rules = rules if rules is not None else RuleState(self.rule_set) if policy.rules else None
        self.steps = self.result_bytes = 0
        self.next_index = 0  # the index the next record folded must have
        self._wanted = wanted
        self._landed: dict[bytes, list[int]] = {}  # the writes' record indexes (no refusals), by call
        self._landed_from = 0  # `_landed` holds every index from here on
        self._lock = threading.Lock()

    def add(self, records: Iterable[Record], *, started: float, now: int) -> None:
        """Fold records, in order, that follow those folded so far; `started` is the gate's clock and `now`
        the wall clock (ns) at the reading: a record counts for the rules' rates as of its `meta.ts`."""
        with self._lock:
            for record in records:
                if record.index != self.next_index:
                    raise ValueError(f"record {record.index} does not follow the history (at {self.next_index})")
                self._add(record, started, now)
                self.next_index = record.index + 1

    def _add(self, record: Record, started: float, now: int) -> None:
        if self.rules is not None:
            _remember_for_rules(record, self.policy, self.rules, self.rule_set, started, now)
        self.steps += 1
        if is_refusal(record.response):
            return
        # every answer that is no refusal counts, a repeat included: a record (format 1.0) does not
        # say which answers were cached, and counting too much stops early rather than late
        self.result_bytes += len(record.canonical_response)
        if record.tool not in self.writes:
            return
        identity = record.canonical_call
        if self._wanted is None or identity in self._wanted:  # a repeatable write's record settles its intent too
            self._landed.setdefault(identity, []).append(record.index)
        if record.tool in self.repeatable:
            return
        if self.redacting and holds_marks(record.response):
            self.store.keep_index(identity, record.index)  # its real answer is gone with the process that got it
            return
        self.store.keep_recorded(identity, record.response, len(record.canonical_response), record.index)

    def can_start(self, recorder: SessionRecorder) -> bool:
        """Whether a gate can start from this history with the recorder's intents: the history holds every
        record index they may be settled by (else a full read is needed), and the recorder is at its end."""
        with self._lock:
            return recorder.next_index == self.next_index and self._floor(recorder) >= self._landed_from

    def start(self, recorder: SessionRecorder, *, copy: bool = True) -> Resumed:
        """What a gate over `recorder` starts from: a copy of the history (or the history itself, `copy=False`,
        for a gate that is its only user), with the recorder's intents that no record settles marked as
        unknown outcomes, and the intent file cut down to them. ValueError unless `can_start`."""
        with self._lock:
            floor = self._floor(recorder)
            if recorder.next_index != self.next_index or floor < self._landed_from:
                raise ValueError("the history does not hold what the record's intents need: read the record again")
            if self._wanted is None:  # what no intent can need any more: every later intent starts at or after it
                self._landed = {call: kept for call, indexes in self._landed.items()
                                if (kept := [index for index in indexes if index >= floor])}
                self._landed_from = floor
            store = self.store.copy() if copy else self.store
            rules = None if self.rules is None else self.rules.copy() if copy else self.rules
            intents = list(recorder.previous_intents)
            unknown = unresolved(intents, self._landed)
        for intent in unknown:
            store.mark_unknown(intent.call, f"{intent.tool} {canonical_json(intent.args)}")
        if recorder.resumed_records or intents:  # a new record's gate leaves the intent file as it is
            recorder.keep_intents(unknown)
        return Resumed(self.steps, self.result_bytes, store, rules)

    @staticmethod
    def _floor(recorder: SessionRecorder) -> int:
        """The lowest record index the recorder's intents may be settled by (its next index when none is open)."""
        floor = recorder.next_index
        for intent in recorder.previous_intents:
            floor = min(floor, intent.start) if intent.done is None else min(floor, intent.start, intent.done)
        return floor


def resume(recorder: SessionRecorder, policy: Policy, store: IdempotencyStore, *, writes: frozenset[str],
           repeatable: frozenset[str], rules: RuleState | None, rule_set: RuleSet, started: float,
           now: int) -> Resumed:
    """Bring back into `store` the writes the record holds and the announced writes it does not hold, into
    `rules` the record's calls (`started` is the session's clock at its start, `now` the wall clock's ns),
    and count the budgets."""
    history = GateHistory(policy, writes=writes, repeatable=repeatable, redacting=recorder.redactor is not None,
                          store=store, rule_set=rule_set, rules=rules,
                          wanted=frozenset(intent.call for intent in recorder.previous_intents))
    history.add(recorder.history(), started=started, now=now)
    return history.start(recorder, copy=False)


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
