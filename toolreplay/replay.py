"""`replay` (SPEC.md §4): redundant calls and non-determinism, found from the record alone."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from toolreplay.findings import FindingList
from toolreplay.records import Record

__all__ = ["DEFAULT_MUTATORS", "ReplayReport", "audit_replay"]

DEFAULT_MUTATORS = frozenset({"write_file", "delete_file", "create_file", "move_file", "run_command"})

# Per distinct call (keyed by a 16-byte BLAKE2b digest of its canonical form), one int packs the
# first response's 64-bit hash, the first index and the most recent index (40 bits each). Memory then
# grows with distinct calls, never with response sizes. The response hash only has to tell apart the
# responses of one call within one run, so Python's own 64-bit hash of the canonical bytes is enough.
_INDEX_BITS = 40
_INDEX_MASK = (1 << _INDEX_BITS) - 1
_HASH_MASK = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What replay found: the number of calls, the first divergence, and the findings in order."""

    calls: int
    divergence: int | None
    findings: FindingList


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def audit_replay(records: Iterable[Record], mutators: Iterable[str] = DEFAULT_MUTATORS) -> ReplayReport:
    """Replay a session against its own responses and report every finding of SPEC.md §4."""
    mutator_set = frozenset(mutators)
    seen: dict[bytes, int] = {}
    findings = FindingList()
    divergence: int | None = None
    last_mutation = -1
    calls = 0
    for record in records:
        calls += 1
        index = record.index
        call_key = _digest(record.canonical_call)
        response_key = hash(record.canonical_response) & _HASH_MASK
        state = seen.get(call_key)
        if state is None:
            seen[call_key] = (response_key << (2 * _INDEX_BITS)) | (index << _INDEX_BITS) | index
        else:
            first = (state >> _INDEX_BITS) & _INDEX_MASK
            previous = state & _INDEX_MASK
            if state >> (2 * _INDEX_BITS) != response_key:
                findings.append(index, "non-determinism", record.tool, first)
                if divergence is None:
                    divergence = index
            if last_mutation <= previous:
                findings.append(index, "redundant-call", record.tool, previous)
            seen[call_key] = (state & ~_INDEX_MASK) | index
        if record.tool in mutator_set:
            last_mutation = index
    return ReplayReport(calls, divergence, findings)
