"""`replay`: redundant calls and non-determinism, found from the record alone.

The check has the shape of every check (`toolreplay.audit.checks.Check`, made by `replay_check`): a
fact per record (`call_fact`, or `state_fact` with `--state-aware`: a digest of the call and of the
response, the outcome, whether the record declares that the call changes state), then one pass over the
facts in order (`audit_call_facts`, `audit_state_facts`). A call is a mutator's when its tool is one of
the mutators or its record says so (`meta.mutates`, written by the guard).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from hashlib import sha256
from typing import Any

from toolreplay.audit.checks import Check
from toolreplay.audit.findings import FindingList
from toolreplay.errors import ToolReplayError
from toolreplay.format.records import PLAIN_FACTS, PlainParts, Record, canonical_call_text

__all__ = ["DEFAULT_MUTATORS", "ReplayReport", "CallFact", "StateFact", "audit_replay", "audit_call_facts",
           "call_fact", "state_fact", "audit_state_facts", "is_error_response", "counted_findings", "outcome_code",
           "RAN", "CACHED", "NOT_RUN", "UNKNOWN", "replay_check"]

DEFAULT_MUTATORS = frozenset({"write_file", "delete_file", "create_file", "move_file", "run_command"})

_SLOT = struct.Struct("<16sQII")  # call key, first response digest, first index, latest index
_VALUE = struct.Struct("<QII")  # the slot after its key
_LATEST = struct.Struct("<I")  # the slot's last field
_POSITION = struct.Struct("<Q")  # read from a key's bytes 1-8 (byte 0 picks the part)
_KEY_POSITION = struct.Struct("<xQ6xB16x")  # a whole slot: its key's bytes 1-8 and its marker byte (15)
_SIZE = _SLOT.size
_MAX_INDEX = (1 << 32) - 1
_HASH_MASK = (1 << 64) - 1
_FIRST_SLOTS = 4  # slots per part to start with: 32 KB in all, growing as the part fills
_EIGHTFOLD_LIMIT = 256  # a part grows eightfold while smaller (4, 32, 256 slots: half the rehashes of doubling)
_DOUBLING_LIMIT = 4096  # then doubles while smaller (fewer rehashes), then grows by half (less memory)


class _CallTable:
    """What replay remembers per distinct call, in 32 bytes: no Python object per call.

    Open addressing with linear probing over 256 bytearrays picked by the key's first byte. A part
    that is 3/4 full grows eightfold up to 256 slots and doubles up to 4096 (each rehash is a Python
    loop, so fewer of them: from 4 slots to 1024, four rehashes instead of eight) and grows by half
    from 4096 slots on (about 800,000 distinct calls in all), so a large table stays between 1/2 and
    3/4 full: 43 to 64 bytes a call. A resize never holds more than 1/256 of the table twice.
    A key is 16 bytes whose last byte is not zero (`call_fact` makes them so): a zero there marks an
    empty slot.
    """

    def __init__(self) -> None:
        self._tables = [bytearray(_FIRST_SLOTS * _SIZE) for _ in range(256)]
        self._used = [0] * 256

    def visit(self, key: bytes, response: int, index: int) -> tuple[int, int, int] | None:
        """Record a call at `index`; for a call seen before, return (first response, first index, latest index)."""
        if index > _MAX_INDEX:
            raise ToolReplayError(f"replay supports sessions of up to {_MAX_INDEX + 1} calls")
        part = key[0]
        table = self._tables[part]
        slots = len(table) // _SIZE
        position = _POSITION.unpack_from(key, 1)[0] % slots
        while True:
            offset = position * _SIZE
            if not table[offset + 15]:
                _SLOT.pack_into(table, offset, key, response, index, index)
                self._used[part] += 1
                if self._used[part] * 4 > slots * 3:
                    self._grow(part, _grown(slots))
                return None
            if table.startswith(key, offset):
                earlier: tuple[int, int, int] = _VALUE.unpack_from(table, offset + 16)
                _LATEST.pack_into(table, offset + 28, index)
                return earlier
            position = position + 1 if position + 1 < slots else 0

    def swap(self, key: bytes, response: int, flags: int, index: int) -> tuple[int, int, int] | None:
        """Record a call at `index` as the call's latest; return the latest before it (response, flags,
        index), or None for a first call. The same 32 bytes a call as `visit`, used the other way.

        The probe loop repeats `visit`'s on purpose: it runs once per record, and a shared helper
        would cost a Python call per record on replay's hottest path."""
        if index > _MAX_INDEX:
            raise ToolReplayError(f"replay supports sessions of up to {_MAX_INDEX + 1} calls")
        part = key[0]
        table = self._tables[part]
        slots = len(table) // _SIZE
        position = _POSITION.unpack_from(key, 1)[0] % slots
        while True:
            offset = position * _SIZE
            if not table[offset + 15]:
                _SLOT.pack_into(table, offset, key, response, flags, index)
                self._used[part] += 1
                if self._used[part] * 4 > slots * 3:
                    self._grow(part, _grown(slots))
                return None
            if table.startswith(key, offset):
                latest: tuple[int, int, int] = _VALUE.unpack_from(table, offset + 16)
                _VALUE.pack_into(table, offset + 16, response, flags, index)
                return latest
            position = position + 1 if position + 1 < slots else 0

    def _grow(self, part: int, slots: int) -> None:
        old = self._tables[part]
        table = self._tables[part] = bytearray(slots * _SIZE)
        offset = -_SIZE
        for position, marker in _KEY_POSITION.iter_unpack(old):  # every slot's probe start and marker at once
            offset += _SIZE
            if marker:
                position %= slots
                while table[position * _SIZE + 15]:
                    position = position + 1 if position + 1 < slots else 0
                start = position * _SIZE
                table[start:start + _SIZE] = old[offset:offset + _SIZE]


def _grown(slots: int) -> int:
    """A part's size after `slots`: eightfold, then double, then half as much again (see `_CallTable`)."""
    if slots < _EIGHTFOLD_LIMIT:
        return 8 * slots
    return 2 * slots if slots < _DOUBLING_LIMIT else slots + slots // 2


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What replay found: the number of calls, the first divergence, and the findings in order."""

    calls: int
    divergence: int | None
    findings: FindingList
    state_aware: bool = False
    information: int = 0  # changed-after-write findings, listed but not counted unless asked


def counted_findings(report: ReplayReport, count_changes: bool = False) -> int:
    """The findings that decide the exit code: all but changed-after-write, unless `count_changes`."""
    return len(report.findings) - (0 if count_changes else report.information)


CallFact = tuple[int, str, bytes, int, int, bool]

# What a record's `meta.outcome` means to replay (docs/format.md): the tool answered (0); the answer is
# an earlier one repeated, no new answer and no state change (CACHED); no answer and no state change
# (NOT_RUN: refused, cancelled); no answer, and a write may have taken effect (UNKNOWN).
RAN, CACHED, NOT_RUN, UNKNOWN = 0, 1, 2, 3
_OUTCOME_CODES = {"ran": RAN, "cached": CACHED, "refused": NOT_RUN, "cancelled": NOT_RUN, "unknown": UNKNOWN}


def outcome_code(record: Record) -> int:
    """The record's outcome as replay reads it: RAN, CACHED, NOT_RUN or UNKNOWN."""
    meta = record.meta
    return RAN if meta is None else _OUTCOME_CODES[meta.get("outcome", "ran")]


def call_fact(record: Record) -> CallFact:
    """What replay keeps of a record: index, tool, a 16-byte key of the call, a 64-bit digest of the
    response, the outcome code and whether the record declares that the call changes state.

    The key is 120 bits of the canonical call's SHA-256 and a marker byte. The response digest is
    Python's own 64-bit hash of the canonical text: it is only compared within one run, and the
    worker processes are forked, so they share the hash key of the process that merges their facts.
    """
    meta = record.meta
    if meta is None:
        return (record.index, record.tool, sha256(record.canonical_call).digest()[:15] + b"\x01",
                hash(record.canonical_response_text) & _HASH_MASK, RAN, False)
    return (record.index, record.tool, sha256(record.canonical_call).digest()[:15] + b"\x01",
            hash(record.canonical_response_text) & _HASH_MASK, outcome_code(record), meta.get("mutates") is True)


def _plain_call_fact(parts: PlainParts) -> CallFact:
    """`call_fact` of a plain record from its parts as the fast reading has them (`iter_facts`)."""
    index, tool, _, _, meta, args_text, response_text, _ = parts
    key = sha256(canonical_call_text(args_text, tool).encode("utf-8")).digest()[:15] + b"\x01"
    if meta is None:
        return index, tool, key, hash(response_text) & _HASH_MASK, RAN, False
    return (index, tool, key, hash(response_text) & _HASH_MASK, _OUTCOME_CODES[meta.get("outcome", "ran")],
            meta.get("mutates") is True)


PLAIN_FACTS[call_fact] = _plain_call_fact


def audit_replay(records: Iterable[Record], mutators: Iterable[str] = DEFAULT_MUTATORS) -> ReplayReport:
    """Replay a session against its own responses and report every finding it defines."""
    return replay_check(mutators).over(records)


def replay_check(mutators: Iterable[str] = DEFAULT_MUTATORS, state_aware: bool = False) -> Check[Any, ReplayReport]:
    """Replay as a check: `call_fact` and `audit_call_facts`, or with `state_aware` (`replay --state-aware`)
    `state_fact` and `audit_state_facts`."""
    mutator_set = frozenset(mutators)
    if state_aware:
        return Check(state_fact, partial(audit_state_facts, mutators=mutator_set), encodes=True)
    return Check(call_fact, partial(audit_call_facts, mutators=mutator_set), encodes=True)


def audit_call_facts(facts: Iterable[CallFact], mutators: Iterable[str] = DEFAULT_MUTATORS) -> ReplayReport:
    """`audit_replay` over facts already extracted from the records (see `call_fact`)."""
    mutator_set = frozenset(mutators)
    visit = _CallTable().visit
    findings = FindingList()
    divergence: int | None = None
    last_mutation = -1
    calls = 0
    for index, tool, call_key, response_key, outcome, mutates in facts:
        calls += 1
        if outcome:  # the record says the tool did not answer this request itself
            if outcome == CACHED:
                earlier = visit(call_key, response_key, index)
                if earlier is not None and last_mutation <= earlier[2]:
                    findings.append(index, "redundant-call", tool, earlier[2])
            elif outcome == UNKNOWN and (mutates or tool in mutator_set):
                last_mutation = index
            continue
        earlier = visit(call_key, response_key, index)
        if earlier is not None:
            first_response, first, previous = earlier
            if first_response != response_key:
                findings.append(index, "non-determinism", tool, first)
                if divergence is None:
                    divergence = index
            if last_mutation <= previous:
                findings.append(index, "redundant-call", tool, previous)
        if mutates or tool in mutator_set:
            last_mutation = index
    return ReplayReport(calls, divergence, findings)


StateFact = tuple[int, str, bytes, int, bool, int, bool]


def is_error_response(response: dict[str, Any]) -> bool:
    """Whether a response reports an error by the importers' conventions: an `error` field that is
    not null or false (`"error": true`, a message, an object), `"ok": false`, MCP's `"isError": true`,
    or a `text` field that starts with `Error:` (any case), as tau-bench tools answer."""
    error = response.get("error")
    if error is not None and error is not False:
        return True
    if response.get("ok") is False or response.get("isError") is True:
        return True
    text = response.get("text")
    return isinstance(text, str) and text[:6].lower() == "error:"


def state_fact(record: Record) -> StateFact:
    """`call_fact` with whether the response is an error: what `replay --state-aware` keeps of a record."""
    meta = record.meta
    if meta is None:
        return (record.index, record.tool, sha256(record.canonical_call).digest()[:15] + b"\x01",
                hash(record.canonical_response_text) & _HASH_MASK, is_error_response(record.response), RAN, False)
    return (record.index, record.tool, sha256(record.canonical_call).digest()[:15] + b"\x01",
            hash(record.canonical_response_text) & _HASH_MASK, is_error_response(record.response),
            outcome_code(record), meta.get("mutates") is True)


def audit_state_facts(facts: Iterable[StateFact], mutators: Iterable[str] = DEFAULT_MUTATORS) -> ReplayReport:
    """Replay with a model of state: each call is compared with the most recent identical call.

    A different response is `changed-after-write` when a mutator ran since that call (the mutator's
    index is the related index; a repeated mutator counts as the write before itself), else
    `retry-after-error` when that call's response was an error, else `non-determinism`. Redundant
    calls are found as in the default mode. Divergence is the first non-determinism.
    """
    mutator_set = frozenset(mutators)
    swap = _CallTable().swap
    findings = FindingList()
    divergence: int | None = None
    last_mutation = -1
    calls = 0
    information = 0
    for index, tool, call_key, response_key, error, outcome, mutates in facts:
        calls += 1
        if outcome:  # as in `audit_call_facts`: no new answer of the tool
            if outcome == CACHED:
                earlier = swap(call_key, response_key, 1 if error else 0, index)
                if earlier is not None and last_mutation <= earlier[2]:
                    findings.append(index, "redundant-call", tool, earlier[2])
            elif outcome == UNKNOWN and (mutates or tool in mutator_set):
                last_mutation = index
            continue
        earlier = swap(call_key, response_key, 1 if error else 0, index)
        if earlier is not None:
            previous_response, previous_error, previous = earlier
            changed = previous_response != response_key
            if changed and last_mutation >= previous:
                findings.append(index, "changed-after-write", tool, last_mutation, previous)
                information += 1
            elif changed and not previous_error:
                findings.append(index, "non-determinism", tool, previous)
                if divergence is None:
                    divergence = index
            if last_mutation <= previous and not previous_error:  # repeating a failed call is a retry, not waste
                findings.append(index, "redundant-call", tool, previous)
            if changed and previous_error and last_mutation < previous:
                findings.append(index, "retry-after-error", tool, previous)
        if mutates or tool in mutator_set:
            last_mutation = index
    return ReplayReport(calls, divergence, findings, True, information)
