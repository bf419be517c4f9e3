"""`replay` (SPEC.md §4): redundant calls and non-determinism, found from the record alone."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from hashlib import blake2b

from toolreplay.errors import ToolReplayError
from toolreplay.findings import FindingList
from toolreplay.records import Record

__all__ = ["DEFAULT_MUTATORS", "ReplayReport", "CallFact", "audit_replay", "audit_call_facts", "call_fact"]

DEFAULT_MUTATORS = frozenset({"write_file", "delete_file", "create_file", "move_file", "run_command"})

_SLOT = struct.Struct("<16sQII")  # call digest, first response digest, first index, latest index
_EMPTY = bytes(16)
_MAX_INDEX = (1 << 32) - 1
_FIRST_SLOTS = 128  # per part: 1 MB in all to start with, and no resizing below ~25,000 distinct calls


class _CallTable:
    """What replay remembers per distinct call, in 32 bytes: no Python object per call.

    Open addressing with linear probing over 256 bytearrays picked by the digest's first byte, each
    grown by half when 3/4 full (so between 1/2 and 3/4 full: 43 to 64 bytes a call), and a resize
    never holds more than 1/256 of the table twice.
    """

    def __init__(self) -> None:
        self._tables = [bytearray(_FIRST_SLOTS * _SLOT.size) for _ in range(256)]
        self._used = [0] * 256

    def visit(self, key: bytes, response: int, index: int) -> tuple[int, int, int] | None:
        """Record a call at `index`; for a call seen before, return (first response, first index, latest index)."""
        if index > _MAX_INDEX:
            raise ToolReplayError(f"replay supports sessions of up to {_MAX_INDEX + 1} calls")
        if key == _EMPTY:  # the empty-slot marker; a real digest is all zeros with probability 2**-128
            key = bytes(15) + b"\x01"
        part = key[0]
        table = self._tables[part]
        slots = len(table) // _SLOT.size
        position = hash(key) % slots
        while True:
            offset = position * _SLOT.size
            found, first_response, first, latest = _SLOT.unpack_from(table, offset)
            if found == key:
                _SLOT.pack_into(table, offset, key, first_response, first, index)
                return first_response, first, latest
            if found == _EMPTY:
                _SLOT.pack_into(table, offset, key, response, index, index)
                self._used[part] += 1
                if self._used[part] * 4 > slots * 3:
                    self._grow(part, slots + slots // 2)
                return None
            position = position + 1 if position + 1 < slots else 0

    def _grow(self, part: int, slots: int) -> None:
        old = self._tables[part]
        table = self._tables[part] = bytearray(slots * _SLOT.size)
        for entry in _SLOT.iter_unpack(old):
            if entry[0] != _EMPTY:
                position = hash(entry[0]) % slots
                while _SLOT.unpack_from(table, position * _SLOT.size)[0] != _EMPTY:
                    position = position + 1 if position + 1 < slots else 0
                _SLOT.pack_into(table, position * _SLOT.size, *entry)


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What replay found: the number of calls, the first divergence, and the findings in order."""

    calls: int
    divergence: int | None
    findings: FindingList


CallFact = tuple[int, str, bytes, int]


def call_fact(record: Record) -> CallFact:
    """What replay keeps of a record: index, tool, a 16-byte digest of the call, a 64-bit one of the response."""
    return (record.index, record.tool, blake2b(record.canonical_call, digest_size=16).digest(),
            int.from_bytes(blake2b(record.canonical_response, digest_size=8).digest(), "little"))


def audit_replay(records: Iterable[Record], mutators: Iterable[str] = DEFAULT_MUTATORS) -> ReplayReport:
    """Replay a session against its own responses and report every finding of SPEC.md §4."""
    return audit_call_facts(map(call_fact, records), mutators)


def audit_call_facts(facts: Iterable[CallFact], mutators: Iterable[str] = DEFAULT_MUTATORS) -> ReplayReport:
    """`audit_replay` over facts already extracted from the records (see `call_fact`)."""
    mutator_set = frozenset(mutators)
    visit = _CallTable().visit
    findings = FindingList()
    divergence: int | None = None
    last_mutation = -1
    calls = 0
    for index, tool, call_key, response_key in facts:
        calls += 1
        earlier = visit(call_key, response_key, index)
        if earlier is not None:
            first_response, first, previous = earlier
            if first_response != response_key:
                findings.append(index, "non-determinism", tool, first)
                if divergence is None:
                    divergence = index
            if last_mutation <= previous:
                findings.append(index, "redundant-call", tool, previous)
        if tool in mutator_set:
            last_mutation = index
    return ReplayReport(calls, divergence, findings)
