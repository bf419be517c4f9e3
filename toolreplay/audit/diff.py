"""Compare two recorded sessions of the same task: which calls only one made, which answered differently.

The calls of A and B are aligned on their canonical form (tool and arguments) by a longest common
subsequence, the alignment of least edit distance when a call can only be kept, dropped or added:
calls paired by it are "in common"; the others are only in A or only in B. A pair whose responses
differ canonically is reported too. Ties go to the alignment that pairs earlier calls and lists a
call only in A before one only in B at the same place, so the result is deterministic.

Memory: each session's canonical calls and a digest per response (the responses of the pairs that
differ are read back from the files at the end). The alignment table grows with the product of the
lengths of the differing middles of the two sessions (equal leading and trailing calls are paired
first, without it); above `MAX_CELLS` cells, the matching blocks of `difflib.SequenceMatcher` are
used instead, which is close to minimal, not always.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from toolreplay.errors import UsageError
from toolreplay.format.records import open_input, read_session

__all__ = ["MAX_CELLS", "CallSide", "FolderDiff", "ResponsePair", "SessionDiff", "diff_folders",
           "diff_paths", "diff_sessions", "read_side"]

MAX_CELLS = 25_000_000


@dataclass(frozen=True, slots=True)
class CallSide:
    """One call of one session: its index and tool, its canonical call, and a digest of its response.

    Responses are not kept (a session's memory is its canonical calls); `diff_paths` reads back the
    two responses of each pair that differs.
    """

    index: int
    tool: str
    call_key: bytes
    response_digest: bytes
    ts: str | None = None  # meta.ts, when the record has it
    duration_ms: float | None = None  # meta.duration_ms, when the record has it

    @property
    def args(self) -> dict[str, Any]:
        """The call's arguments, from its canonical form."""
        args: dict[str, Any] = json.loads(self.call_key)["args"]
        return args


@dataclass(frozen=True, slots=True)
class ResponsePair:
    """The same call in both sessions, answered differently (the responses, once read back)."""

    a: CallSide
    b: CallSide
    a_response: dict[str, Any] | None = None
    b_response: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class SessionDiff:
    """The alignment of two sessions: counts, the first divergence, and each kind of difference.

    `first_divergence` is (position in A, position in B) of the first call that is not a common call
    with an equal response; a position equal to a session's length means "after its last call".
    """

    a: str
    b: str
    a_calls: int
    b_calls: int
    common: int
    first_divergence: tuple[int, int] | None
    only_in_a: tuple[CallSide, ...]
    only_in_b: tuple[CallSide, ...]
    different_responses: tuple[ResponsePair, ...]

    @property
    def equal(self) -> bool:
        """Same calls in the same order, with the same responses."""
        return self.first_divergence is None


@dataclass(frozen=True, slots=True)
class FolderDiff:
    """Two folders of sessions compared file by file (same relative path), e.g. two `eval --record` runs."""

    a: str
    b: str
    pairs: tuple[tuple[str, SessionDiff], ...]
    only_in_a: tuple[str, ...]
    only_in_b: tuple[str, ...]

    @property
    def equal(self) -> bool:
        """The same session files on both sides, each pair equal."""
        return not self.only_in_a and not self.only_in_b and all(diff.equal for _, diff in self.pairs)


def read_side(path: str) -> list[CallSide]:
    """The calls of a session file (plain or sealed), strictly read."""
    calls = []
    with open_input(path) as handle:
        for record in read_session(handle, path):
            meta = record.meta or {}
            calls.append(CallSide(record.index, record.tool, record.canonical_call,
                                  hashlib.sha256(record.canonical_response).digest(), meta.get("ts"),
                                  meta.get("duration_ms")))
    return calls


def _responses(path: str, indexes: set[int]) -> dict[int, dict[str, Any]]:
    """The responses of the calls at these indexes, read again from the session file."""
    found: dict[int, dict[str, Any]] = {}
    if indexes:
        with open_input(path) as handle:
            for record in read_session(handle, path):
                if record.index in indexes:
                    found[record.index] = record.response
    return found


def _with_responses(diff: SessionDiff) -> SessionDiff:
    """The diff with both responses of each differing pair, read back from the two files."""
    if not diff.different_responses:
        return diff
    a = _responses(diff.a, {pair.a.index for pair in diff.different_responses})
    b = _responses(diff.b, {pair.b.index for pair in diff.different_responses})
    pairs = tuple(ResponsePair(pair.a, pair.b, a.get(pair.a.index), b.get(pair.b.index))
                  for pair in diff.different_responses)
    return dataclasses.replace(diff, different_responses=pairs)


def _lcs_pairs(a: Sequence[bytes], b: Sequence[bytes]) -> list[tuple[int, int]]:
    """Index pairs of a longest common subsequence of a and b (earliest pairs preferred)."""
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return []
    if n * m > MAX_CELLS:
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        return [(block.a + k, block.b + k) for block in matcher.get_matching_blocks() for k in range(block.size)]
    # suffix table: length[i][j] = LCS of a[i:] and b[j:], so walking forward picks the earliest pairs
    length = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        row, below = length[i], length[i + 1]
        for j in range(m - 1, -1, -1):
            row[j] = below[j + 1] + 1 if a[i] == b[j] else max(below[j], row[j + 1])
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if a[i] == b[j]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif length[i + 1][j] >= length[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def _align(a: Sequence[bytes], b: Sequence[bytes]) -> list[tuple[int, int]]:
    """Pairs of common calls: equal leading and trailing calls first, then the middle by LCS."""
    head = 0
    while head < len(a) and head < len(b) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < len(a) - head and tail < len(b) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    middle = _lcs_pairs(a[head:len(a) - tail], b[head:len(b) - tail])
    return ([(k, k) for k in range(head)] + [(i + head, j + head) for i, j in middle]
            + [(len(a) - tail + k, len(b) - tail + k) for k in range(tail)])


def _steps(pairs: list[tuple[int, int]], n: int, m: int) -> Iterator[tuple[int | None, int | None, int, int]]:
    """The alignment in order: (A position or None, B position or None, A cursor, B cursor)."""
    i = j = 0
    for pa, pb in [*pairs, (n, m)]:
        while i < pa:
            yield i, None, i, j
            i += 1
        while j < pb:
            yield None, j, i, j
            j += 1
        if pa < n:
            yield pa, pb, i, j
            i, j = pa + 1, pb + 1


def diff_sessions(a: Sequence[CallSide], b: Sequence[CallSide], a_name: str = "a", b_name: str = "b") -> SessionDiff:
    """Align two sessions' calls and list what differs."""
    pairs = _align([call.call_key for call in a], [call.call_key for call in b])
    only_a: list[CallSide] = []
    only_b: list[CallSide] = []
    different: list[ResponsePair] = []
    first: tuple[int, int] | None = None
    for pa, pb, i, j in _steps(pairs, len(a), len(b)):
        if pa is not None and pb is not None:
            if a[pa].response_digest == b[pb].response_digest:
                continue
            different.append(ResponsePair(a[pa], b[pb]))
        elif pa is not None:
            only_a.append(a[pa])
        elif pb is not None:
            only_b.append(b[pb])
        if first is None:
            first = (i, j)
    return SessionDiff(a_name, b_name, len(a), len(b), len(pairs), first, tuple(only_a), tuple(only_b),
                       tuple(different))


def _session_files(root: str) -> list[str]:
    found: list[str] = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories.sort()
        found.extend(os.path.relpath(os.path.join(directory, name), root) for name in files
                     if name.endswith(".jsonl") and not name.startswith("."))
    return sorted(found)


def diff_folders(a: str, b: str) -> FolderDiff:
    """Compare every session (`*.jsonl`, recursively) of folder A with the one at the same path in B."""
    left, right = _session_files(a), _session_files(b)
    common = sorted(set(left) & set(right))
    pairs = tuple((name, _with_responses(diff_sessions(read_side(os.path.join(a, name)),
                                                       read_side(os.path.join(b, name)),
                                                       os.path.join(a, name), os.path.join(b, name))))
                  for name in common)
    return FolderDiff(a, b, pairs, tuple(name for name in left if name not in right),
                      tuple(name for name in right if name not in left))


def diff_paths(a: str, b: str) -> SessionDiff | FolderDiff:
    """Two session files, or two folders of sessions; one of each is a UsageError."""
    folders = os.path.isdir(a), os.path.isdir(b)
    if folders == (True, True):
        return diff_folders(a, b)
    if any(folders):
        raise UsageError(f"cannot compare a folder with a file: {a if folders[0] else b} is a folder")
    return _with_responses(diff_sessions(read_side(a), read_side(b), a, b))
