"""The public audit API: one call per command (`replay_session`, `scope_session`, `seal_session`,
`verify_session`, `audit_many`; `toolreplay.audit` exports them).

Each function reads its session(s) as the command line does (the parallel reader for a large file,
standard input for `-`, the same line limit, the same errors) and returns a report object; the
renderers of `toolreplay.audit.render`, `toolreplay.audit.fleet_render` and `toolreplay.report`
turn those into text, JSON or HTML. Nothing here prints or exits: input problems are raised as
`toolreplay.errors.InputError` (`PATH:LINE: message`) or `UsageError`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, TypeVar

from toolreplay.audit.chain import GENESIS, ChainReport, LinkFact, line_digest, seal_check, verify_check
from toolreplay.audit.checks import Check
from toolreplay.audit.replay import DEFAULT_MUTATORS, ReplayReport
from toolreplay.errors import InputError, UsageError
from toolreplay.format.chunks import read_facts
from toolreplay.format.records import MAX_LINE_BYTES, STDIN_NAME, TornLineError, line_too_long

if TYPE_CHECKING:  # loaded by the functions that need them: `seal` and `verify` start faster without
    from toolreplay.audit.checkpoint import Signer
    from toolreplay.audit.engines import Engine
    from toolreplay.audit.fleet import FleetSummary, SessionJob, SessionOptions, SessionResult
    from toolreplay.audit.scope import ScopeReport
    from toolreplay.policy.model import Policy

__all__ = ["read_mutators_file", "mutator_set", "session_facts", "check_session", "replay_session", "scope_session",
           "seal_session", "SealedChain", "session_tree", "verify_session", "VerifyResult", "LinkReading", "audit_many",
           "FleetRun", "session_file"]

T = TypeVar("T")


def read_mutators_file(path: str) -> list[str]:
    """Tool names from a mutators file: one per line, `#` comments and blank lines ignored."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().split("\n")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(path, None, "not valid UTF-8") from None
    names = []
    for lineno, line in enumerate(lines, 1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        if any(ch.isspace() for ch in name):
            raise InputError(path, lineno, f"a tool name has no white space: {name!r}")
        names.append(name)
    return names


def mutator_set(names: Iterable[str] = (), files: Iterable[str] = ()) -> frozenset[str]:
    """The tools that change state: the default mutators, `names`, and the names in each mutators file."""
    mutators = set(DEFAULT_MUTATORS) | set(names)
    for path in files:
        mutators.update(read_mutators_file(path))
    return frozenset(mutators)


_END = object()


def session_facts(path: str, extract: Callable[[Any], T], *, links: bool = False, jobs: int | None = None,
           stdin: IO[bytes] | None = None, max_line: int = MAX_LINE_BYTES, hint: bool = True,
           encodes: bool = False) -> Iterator[T]:
    """`read_facts` with the commands' options. An input error before the first record, in a file that looks
    like a log `import` reads, ends with a hint to import it (unless `hint` is False)."""
    facts = read_facts(path, extract, links=links, jobs=jobs, stdin=stdin, max_line=max_line, encodes=encodes)
    try:
        first = next(facts, _END)
    except InputError as exc:
        if not hint:
            raise
        raise _with_import_hint(exc, path, max_line) from None
    if first is _END:
        return
    yield first  # type: ignore[misc]
    yield from facts


def _with_import_hint(exc: InputError, path: str, max_line: int) -> InputError:
    if path == "-" or exc.line is None or exc.message == line_too_long(max_line):
        return exc
    from toolreplay.importers.sniff import sniff_log_format

    fmt = sniff_log_format(path)
    if fmt is None:
        return exc
    what = "chat messages" if fmt == "auto" else f"a log in the {fmt} format"
    message = (f"{exc.message} (this looks like {what}, not a session: convert it with "
               f"'toolreplay import {fmt} {shlex.quote(path)} -o SESSION.jsonl')")
    if isinstance(exc, TornLineError):
        return TornLineError(exc.path, exc.line, message, exc.size)
    return InputError(exc.path, exc.line, message)


def check_session(path: str, check: Check[Any, T], *, jobs: int | None = None, stdin: IO[bytes] | None = None,
                  max_line: int = MAX_LINE_BYTES, hint: bool = True) -> T:
    """Run one check (`toolreplay.audit.checks.Check`) over one session: its facts read by `session_facts`
    (by the parallel reader's workers for a large file), then its pass over them in order."""
    return check.run(session_facts(path, check.facts, links=check.links, jobs=jobs, stdin=stdin, max_line=max_line,
                                   hint=hint, encodes=check.encodes))


def replay_session(path: str, *, mutators: Iterable[str] = DEFAULT_MUTATORS, state_aware: bool = False,
           jobs: int | None = None, stdin: IO[bytes] | None = None, max_line: int = MAX_LINE_BYTES,
           hint: bool = True) -> ReplayReport:
    """Replay one session (`-`: standard input): redundant calls, non-determinism, the divergence point;
    with `state_aware`, each call against the most recent identical one (`replay --state-aware`)."""
    from toolreplay.audit.replay import replay_check

    return check_session(path, replay_check(mutators, state_aware), jobs=jobs, stdin=stdin, max_line=max_line,
                         hint=hint)


def scope_session(path: str, policy: Policy, *, jobs: int | None = None, stdin: IO[bytes] | None = None,
          max_line: int = MAX_LINE_BYTES, hint: bool = True) -> ScopeReport:
    """Check one session's calls against a policy: the tools in scope, and its rules when it has any."""
    from toolreplay.audit.scope import scope_check

    return check_session(path, scope_check(policy), jobs=jobs, stdin=stdin, max_line=max_line, hint=hint)


class SealedChain:
    """The link lines of a sealed session, made as they are iterated; then its length and head.

    With `origin` and `signers`, `checkpoint()` is the signed checkpoint of the chain once iterated; with
    `tlog` too, a C2SP tlog-checkpoint of the Merkle tree over the links (`root`, built as they are made)."""

    def __init__(self, lines: Iterable[bytes], origin: str | None = None, signers: Sequence[Signer] = (),
                 tlog: bool = False) -> None:
        self._lines = lines
        self._origin = origin
        self._signers = list(signers)
        self._tlog = tlog
        self.count = 0
        self.head = GENESIS
        self.root: str | None = None

    def __iter__(self) -> Iterator[bytes]:
        if self._tlog:
            yield from self._with_tree()
            return
        line = b""
        for line in self._lines:  # noqa: B007 - the last line is the head
            self.count += 1
            yield line
        if self.count:
            self.head = line_digest(line)

    def _with_tree(self) -> Iterator[bytes]:
        from toolreplay.audit.merkle import MerkleBuilder

        tree = MerkleBuilder()
        line = b""
        for line in tree.through_lines(self._lines):
            self.count += 1
            yield line
        if self.count:
            self.head = line_digest(line)
        self.root = tree.root().hex()

    def checkpoint(self) -> bytes | None:
        """The signed checkpoint of the lines iterated so far (None without signers)."""
        if not self._signers or self._origin is None:
            return None
        from toolreplay.audit.checkpoint import TLOG, format_checkpoint

        if self._tlog:
            assert self.root is not None, "the chain is not iterated yet"
            tlog: bytes = format_checkpoint(self._origin, self.count, self.root, self._signers, TLOG)
            return tlog
        data: bytes = format_checkpoint(self._origin, self.count, self.head, self._signers)
        return data


def seal_session(path: str, *, origin: str | None = None, signers: Sequence[Signer] = (), tlog: bool = False,
                 jobs: int | None = None, stdin: IO[bytes] | None = None,
                 max_line: int = MAX_LINE_BYTES) -> SealedChain:
    """Seal one session: a `SealedChain` whose lines are the hash-chained records, made as they are read
    (an input error is raised while iterating: write the lines somewhere that can be discarded); with
    `tlog`, its checkpoint is a tlog-checkpoint of their Merkle tree."""
    lines = check_session(path, seal_check(), jobs=jobs, stdin=stdin, max_line=max_line)
    return SealedChain(lines, origin, signers, tlog)


def session_tree(path: str, *, jobs: int | None = None, stdin: IO[bytes] | None = None,
                 max_line: int = MAX_LINE_BYTES) -> tuple[int, str]:
    """The size and root (hex) of a session's Merkle tree, as `seal --tlog` would make it (the same for the
    plain session and its sealed file): what a report cites as the records it read."""
    from toolreplay.audit.merkle import SessionTree

    tree = SessionTree()
    for canonical in session_facts(path, _canonical_record, jobs=jobs, stdin=stdin, max_line=max_line):
        tree.add_record(canonical)
    return tree.size, tree.root().hex()


def _canonical_record(record: Any) -> bytes:
    canonical: bytes = record.canonical_record
    return canonical


class LinkReading:
    """The link facts of a sealed file, read once; a last line torn by a crash ends them, kept in `torn`."""

    def __init__(self, path: str, *, jobs: int | None = None, stdin: IO[bytes] | None = None,
                 max_line: int = MAX_LINE_BYTES) -> None:
        check = verify_check()
        self._facts = session_facts(path, check.facts, links=check.links, jobs=jobs, stdin=stdin, max_line=max_line)
        self.torn: TornLineError | None = None

    def __iter__(self) -> Iterator[LinkFact]:
        try:
            yield from self._facts
        except TornLineError as exc:  # a write cut short by a crash: the links before it still count
            self.torn = exc


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """The chain of a sealed file, and the size of a torn last line when a crash cut one short."""

    chain: ChainReport
    torn: int | None = None

    @property
    def ok(self) -> bool:
        """Whether the chain is intact and complete."""
        return self.chain.intact and self.torn is None


def verify_session(path: str, *, jobs: int | None = None, stdin: IO[bytes] | None = None,
           max_line: int = MAX_LINE_BYTES) -> VerifyResult:
    """Verify the hash chain of a sealed file (its checkpoints: `toolreplay.audit.checkpoint.verify_checkpoints`
    over a `LinkReading`)."""
    reading = LinkReading(path, jobs=jobs, stdin=stdin, max_line=max_line)
    chain = verify_check().run(reading)
    return VerifyResult(chain, None if reading.torn is None else reading.torn.size)


@dataclass
class FleetRun:
    """A fleet audit under way: `results` (one per file found, in path order) fold into `summary` as they are
    read, so the summary is complete once they are exhausted. `jobs`, `options` and `engine` are those it
    runs with (the HTML page reads its worst sessions again with them)."""

    jobs: list[SessionJob]
    options: SessionOptions
    engine: Engine
    summary: FleetSummary
    results: Iterator[SessionResult] = field(repr=False)


def audit_many(paths: Iterable[str], options: SessionOptions | None = None, engine: Engine | None = None, *,
               top: int | None = None) -> FleetRun:
    """Audit every session under `paths` (files, folders, globs) with `options`, on `engine` (default: this
    machine's cores); `top` sessions are ranked (default `TOP_SESSIONS`)."""
    from toolreplay.audit.engines import LocalEngine
    from toolreplay.audit.fleet import TOP_SESSIONS, FleetSummary, SessionOptions, audit_batch, find_sessions, fold

    options = options or SessionOptions()
    engine = engine or LocalEngine(None)
    jobs = find_sessions(paths)
    summary = FleetSummary(TOP_SESSIONS if top is None else top, options.state_aware, options.count_changes)
    return FleetRun(jobs, options, engine, summary, fold(engine.map_batches(audit_batch, jobs, options), summary))


@contextmanager
def session_file(path: str, stdin: IO[bytes] | None = None) -> Iterator[SessionJob]:
    """The session as a file that can be read twice (an HTML page needs the calls behind the findings).

    Standard input (`-`) is copied to a temporary file first, and errors still name `<stdin>`."""
    from toolreplay.audit.fleet import SessionJob

    if path != "-":
        yield SessionJob(path, path)
        return
    if stdin is None:
        raise UsageError("reading standard input needs its stream")
    with tempfile.TemporaryDirectory(prefix="toolreplay-") as folder:
        copy = os.path.join(folder, "stdin.jsonl")
        with open(copy, "wb") as handle:
            shutil.copyfileobj(stdin, handle, 1 << 20)
        try:
            yield SessionJob(copy, STDIN_NAME)
        except InputError as exc:
            raise InputError(STDIN_NAME, exc.line, exc.message) from None
