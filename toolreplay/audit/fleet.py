"""Fleet audit: many sessions in one run, each audited by a pure function whose small result is merged in order.

`audit_session` reads one session file and returns a `SessionResult`: counts, the first findings, the
chain status of a sealed file, the status of the signed checkpoint beside it, or the `PATH:LINE`
message of a session that cannot be read. It needs
nothing but a path and the options, and its result pickles small, so any engine (this machine's
cores, a Dask cluster) can run it anywhere the path can be read. `FleetSummary` folds the results, in
path order, into the totals of the report; it keeps bounded tables, so its memory does not grow with
the number of sessions.
"""

from __future__ import annotations

import glob
import heapq
import os
import stat
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import IO, Any, NamedTuple

from toolreplay.audit.call_rows import CallRow, ChainHead, follow
from toolreplay.audit.chain import ChainReport, ChainWalk, ChainWalker, link_fact, walk_link_facts
from toolreplay.audit.checkpoint import TLOG, Checkpoint, Keys, SignatureCheck, check_checkpoint, read_checkpoint
from toolreplay.audit.findings import Finding, FindingList, counts, uncounted_kinds
from toolreplay.audit.merkle import SessionTree
from toolreplay.audit.outcomes import append_outcome_findings, outcome_note
from toolreplay.audit.replay import DEFAULT_MUTATORS, replay_check
from toolreplay.audit.scope import scope_check
from toolreplay.errors import InputError, ToolReplayError, UsageError
from toolreplay.format.chunks import CHANGED_MESSAGE, _unchanged
from toolreplay.format.records import MAX_LINE_BYTES, READ_BUFFER, Record, index_out_of_order, iter_records
from toolreplay.policy.model import Policy

__all__ = ["SessionOptions", "SessionJob", "SessionResult", "CheckpointStatus", "checkpoint_path", "FleetSummary",
           "audit_session", "audit_batch", "distinct_calls_with_findings", "RankedSession", "fold",
           "find_sessions", "finding_rule", "open_session", "ranked_counts", "FINDINGS_LISTED", "TOP_SESSIONS",
           "LISTED_PROBLEMS", "CALL_BUCKETS"]

FINDINGS_LISTED = 1000  # findings carried per session; the counts are always exact
TOP_SESSIONS = 10  # the "most findings" table
LISTED_PROBLEMS = 1000  # unreadable files and broken chains named in the summary; the counts are exact
# Upper bounds of the calls-per-session histogram's buckets (the last is open-ended).
CALL_BUCKETS = (0, 5, 10, 20, 50, 100, 1000)


@dataclass(frozen=True, slots=True)
class SessionOptions:
    """What every session is audited with: replay's mutators, and the policy for scope (None: no scope)."""

    mutators: frozenset[str] = DEFAULT_MUTATORS
    policy: Policy | None = None
    keys: Keys | None = None  # the keys checkpoints are verified with (None: checkpoints are not verified)
    render: str | None = None  # "text" or "json": each session's part of the report is rendered by its worker
    state_aware: bool = False  # replay as `replay --state-aware` does (changed-after-write is information)
    max_line: int = MAX_LINE_BYTES  # a longer line is an input error
    tables: bool = False  # keep what the database output needs: every finding, each call's row, the chain head
    count_changes: bool = False  # state-aware: information counts as findings (`toolreplay.audit.findings.counts`)
    all_sessions: bool = False  # the text report lists every session, not only those with something found
    cite: bool = False  # each session's Merkle tree (size and root) in the JSON report: what the verdict is about
    fail_on: frozenset[str] = frozenset()  # information kinds that count as findings (`--fail-on KIND`)

    @property
    def uncounted(self) -> frozenset[str]:
        """The kinds listed as information, not counted (`toolreplay.audit.findings.uncounted_kinds`)."""
        return uncounted_kinds(self.count_changes, self.fail_on)


@dataclass(frozen=True, slots=True)
class SessionJob:
    """One session to audit: the path a worker opens, and the path the report shows.

    A job found but not to be opened carries why: `skipped` (not a regular file: a named pipe, a device,
    a socket) or `unreadable` (a folder that could not be listed)."""

    path: str
    display: str
    skipped: str | None = None
    unreadable: str | None = None


@dataclass(frozen=True, slots=True)
class CheckpointStatus:
    """The checkpoint beside a session: anchored, failed (with its findings) or unverified (no keys given).

    `origin`, `size` and `unanchored` are known only when a trusted key signed it (a note whose
    signatures are not trusted is not read further).
    """

    path: str
    status: str  # "anchored", "failed" or "unverified"
    origin: str | None = None
    size: int | None = None
    unanchored: int | None = None
    signed_by: tuple[str, ...] = ()
    findings: tuple[tuple[str, str], ...] = ()  # (kind, message), in the order `verify --checkpoint` reports them


def checkpoint_path(session: str) -> str:
    """Where a session's checkpoint is: its path with `.jsonl` replaced by `.checkpoint` (appended otherwise)."""
    return (session[:-len(".jsonl")] if session.endswith(".jsonl") else session) + ".checkpoint"


@dataclass(frozen=True, slots=True)
class SessionResult:
    """What the audit of one session found; small, picklable, and the same wherever it was computed."""

    path: str
    calls: int = 0
    sealed: bool = False
    divergence: int | None = None
    finding_count: int = 0  # the findings that count (a checkpoint's too), as `toolreplay.audit.findings.counts`
    findings: tuple[Finding, ...] = ()  # the first FINDINGS_LISTED, in report order; () when `rendered` has them
    by_kind: tuple[tuple[str, int], ...] = ()  # by_kind, by_tool, by_rule: of the findings that count
    by_tool: tuple[tuple[str, int], ...] = ()
    by_rule: tuple[tuple[str, int], ...] = ()
    chain: ChainReport | None = None  # for a sealed file
    error: str | None = None  # `PATH:LINE: message` when the session could not be read
    checkpoint: CheckpointStatus | None = None  # when a checkpoint is beside the session
    rendered: str | None = None  # this session's part of the report, when the options asked for one
    information: int | None = None  # state-aware: the findings listed that do not count
    skipped: str | None = None  # why a file found in a folder or by a glob was not opened (not a session)
    call_rows: tuple[CallRow, ...] = ()  # with `SessionOptions.tables`: each call's row, in index order
    head: str | None = None  # with `SessionOptions.tables`: the chain head (`toolreplay.audit.call_rows.ChainHead`)
    has_meta: bool = False  # with `SessionOptions.tables`: a record carries `meta` (format 1.1)
    distinct_calls: int = 0  # distinct calls with a finding that counts (`distinct_calls_with_findings`)
    tree: tuple[int, str] | None = None  # with `SessionOptions.cite`: the size and root (hex) of the session's tree
    information_by_kind: tuple[tuple[str, int], ...] = ()  # the findings listed that do not count, by kind

    @property
    def counted(self) -> int:
        """The findings that count (a checkpoint's too): `finding_count`."""
        return self.finding_count

    @property
    def listed_total(self) -> int:
        """Every finding of the session, information included: what its full list would hold."""
        return self.finding_count + (self.information or 0)

    @property
    def found(self) -> bool:
        """Whether this session has anything to report: a counted finding or a broken chain."""
        return self.counted > 0 or (self.chain is not None and not self.chain.intact)

    def __reduce__(self) -> tuple[type[SessionResult], tuple[Any, ...]]:
        # A call of the class with the fields in order: half the time of a frozen dataclass's default pickling,
        # which counts when every session's result crosses a pipe or the network.
        return SessionResult, tuple(getattr(self, name) for name in self.__slots__)


def finding_rule(finding: Finding) -> str | None:
    """The id of the policy rule a finding came from, when its kind carries one."""
    return finding.rule


# Kinds whose related index is an identical earlier call: the two calls are one distinct call.
_SAME_CALL_KINDS = frozenset({"redundant-call", "non-determinism", "retry-after-error"})


def distinct_calls_with_findings(findings: Sequence[Finding], count_changes: bool = False,
                                 fail_on: frozenset[str] = frozenset()) -> int:
    """How many distinct calls have a finding that counts: a call and its identical repeats (joined by a
    redundant-call, non-determinism or retry-after-error) are one, whatever their number of findings.

    This is what ranks sessions, so a looping agent's hundred repeats of one call (each a redundant-call
    and perhaps a policy-violation too) weigh as one call, not as two hundred findings."""
    first: dict[int, int] = {}  # index -> the earliest identical call (findings come in index order)
    for finding in findings:
        related = finding.related_index
        if related is not None and finding.kind in _SAME_CALL_KINDS:
            first[finding.index] = first.get(related, related)
    return len({first.get(f.index, f.index) for f in findings if counts(f.kind, count_changes, fail_on)})


def _counted(counter: Counter[str]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(counter.items()))


def _merge_findings(*groups: Sequence[Finding]) -> list[Finding]:
    """Findings of several checks in report order: by index, then kind name (stable within a kind)."""
    merged = [finding for group in groups for finding in group]
    if len(groups) > 1:
        merged.sort(key=lambda f: (f.index, f.kind))
    return merged


def audit_session(job: SessionJob, options: SessionOptions) -> SessionResult:
    """Audit one session file: replay, scope when a policy is given, and the chain of a sealed file."""
    if job.skipped is not None:
        return SessionResult(job.display, skipped=job.skipped)
    if job.unreadable is not None:
        return SessionResult(job.display, error=f"{job.display}: {job.unreadable}")
    shown = checkpoint_path(job.display)
    checkpoint: Checkpoint | None = None
    checkpoint_error: str | None = None
    try:
        checkpoint = _beside(job.path, shown)
    except ToolReplayError as exc:  # reported only when the session itself reads well
        checkpoint_error = _located(exc, shown if str(exc).startswith(shown) else job.display)
    keys = options.keys
    signatures = keys.check(checkpoint) if checkpoint is not None and keys is not None else None
    trusted = checkpoint is not None and signatures is not None and signatures.trusted
    policy = options.policy
    replay_pass = replay_check(options.mutators, options.state_aware)
    scope_pass = scope_check(policy) if policy is not None else None  # the same check as `scope`
    anchored = {checkpoint.size} if checkpoint is not None and trusted else set()
    tlog = checkpoint is not None and checkpoint.kind == TLOG
    reading = _SessionPass(job, options, set() if tlog else anchored, None if scope_pass is None else scope_pass.facts,
                           anchored if tlog else set())
    if scope_pass is None:  # without a policy, what the guard did is read alone (with one, scope reads it)
        reading.outcomes = FindingList()
    error: str | None = None
    groups: list[Sequence[Finding]] = []
    divergence: int | None = None
    information: int | None = None
    try:
        replay = replay_pass.run(reading.facts(replay_pass.facts))
        divergence = replay.divergence
        information = replay.information if options.state_aware else None
        groups.append(replay.findings)
        if scope_pass is not None:
            groups.append(scope_pass.run(reading.scope_facts).findings)
        elif reading.outcomes:
            groups.append(reading.outcomes)
    except ToolReplayError as exc:
        error = _located(exc, job.display)
    except RecursionError:
        error = f"{job.display}: input nested too deeply"
    walk = reading.walker.walk() if reading.sealed and reading.chain_read else None
    chain = None if walk is None else walk.report
    error = error or checkpoint_error
    if error is not None:
        return SessionResult(job.display, reading.calls, reading.sealed, chain=chain, error=error)
    status: CheckpointStatus | None = None
    if checkpoint is not None:
        status = _checkpoint_status(checkpoint, shown, signatures, walk)
    findings = _merge_findings(*groups)
    kinds: Counter[str] = Counter(kind for kind, _ in status.findings) if status is not None else Counter()
    tools_found: Counter[str] = Counter()
    rules: Counter[str] = Counter()
    uncounted = 0
    not_counted = options.uncounted  # `counts`, without a call each
    information_kinds: Counter[str] = Counter()
    first: dict[int, int] = {}  # as `distinct_calls_with_findings`, in the same loop
    found_at: set[int] = set()
    for finding in findings:
        kind, index, related = finding.kind, finding.index, finding.related_index
        if related is not None and kind in _SAME_CALL_KINDS:
            first[index] = first.get(related, related)
        if kind in not_counted:
            uncounted += 1
            if kind != "changed-after-write":  # what the guard did; state-aware's changes are counted apart
                information_kinds[kind] += 1
            continue
        found_at.add(index)
        kinds[kind] += 1
        tools_found[finding.tool] += 1
        rule = finding.rule
        if rule is not None:
            rules[rule] += 1
    extra = len(status.findings) if status is not None else 0
    listed = tuple(findings) if options.tables else tuple(findings[:FINDINGS_LISTED])
    return SessionResult(job.display, reading.calls, reading.sealed, divergence, len(findings) - uncounted + extra,
                         listed, _counted(kinds), _counted(tools_found), _counted(rules), chain, checkpoint=status,
                         information=uncounted if information is not None or uncounted else None,
                         call_rows=tuple(reading.rows or ()),
                         head=None if reading.head is None else reading.head.head, has_meta=reading.has_meta,
                         distinct_calls=len({first.get(index, index) for index in found_at}) + extra,
                         information_by_kind=_counted(information_kinds), tree=reading.tree())


class _SessionPass:
    """One pass over one open file descriptor of a session, for every check of it: the replay facts it yields,
    the scope facts and tools it keeps, and each link of a sealed file fed to the chain walker. Each check's
    facts come from its own `Check.facts` (`toolreplay.audit.checks`), as in the single-session commands.

    A record out of index order stops the replay and scope facts (the error is raised once the file is
    read) but not the chain, which is walked to the end as `verify` walks it. A file replaced, truncated
    or written to while it is read is an input error (`toolreplay.format.chunks.CHANGED_MESSAGE`)."""

    def __init__(self, job: SessionJob, options: SessionOptions, sizes: set[int],
                 scope_fact: Callable[[Record], Any] | None = None, roots: set[int] | None = None) -> None:
        self.job = job
        self.options = options
        self.calls = 0
        self.sealed = False
        self.chain_read = False  # every link reached the walker
        self.walker = ChainWalker(sizes, roots or ())
        self.scope_facts: list[Any] = []
        self.outcomes: FindingList | None = None  # when given, the outcome findings are appended here
        self.rows: list[CallRow] | None = [] if options.tables else None
        self.head: ChainHead | None = ChainHead() if options.tables else None
        self.has_meta = False
        self._scope_fact = scope_fact
        self._cited = SessionTree() if options.cite else None

    def tree(self) -> tuple[int, str] | None:
        """With `cite`: the size and root of the Merkle tree of the records read (None without)."""
        return None if self._cited is None else (self._cited.size, self._cited.root().hex())

    def facts(self, extract: Callable[[Record], Any]) -> Iterator[Any]:
        """Yield extract(record) for each record in index order; check the rest of the pass as it goes."""
        job, scope_fact, rows, add_link, outcomes = (self.job, self._scope_fact, self.rows, self.walker.add,
                                                     self.outcomes)
        cite = None if self._cited is None else self._cited.add_record
        out_of_order: InputError | None = None
        with open_session(job) as handle:
            fd = handle.fileno()
            before = os.fstat(fd)
            regular = stat.S_ISREG(before.st_mode)
            try:
                records = iter_records(handle, job.display, check_sequence=False, require_sealed=False,
                                       max_line=self.options.max_line)
                for record in records:
                    if cite is not None:
                        cite(record.canonical_record)
                    if record.prev is not None:  # a sealed file (the reader refuses a mix of links and records)
                        self.sealed = True
                        add_link(link_fact(record))
                    if out_of_order is not None:
                        continue  # only the chain reads on
                    if record.index != self.calls:
                        out_of_order = InputError(job.display, record.line, index_out_of_order(record.index,
                                                                                                  self.calls))
                        continue
                    self.calls += 1
                    if rows is not None:
                        rows.append(follow(record, self.head))  # type: ignore[arg-type]  # kept with the rows
                        self.has_meta = self.has_meta or record.meta is not None
                    if scope_fact is not None:
                        self.scope_facts.append(scope_fact(record))
                    elif outcomes is not None and record.meta is not None:
                        note = outcome_note(record)
                        if note is not None:
                            append_outcome_findings(outcomes, record.index, record.tool, note)
                    yield extract(record)
            except InputError:
                if regular and not _unchanged(job.path, fd, before):
                    raise InputError(job.display, None, CHANGED_MESSAGE) from None
                if out_of_order is not None:  # the first error in the file; the chain is not walked to the end
                    raise out_of_order from None
                raise
            if regular and not _unchanged(job.path, fd, before):
                raise InputError(job.display, None, CHANGED_MESSAGE)
        self.chain_read = True
        if out_of_order is not None:
            raise out_of_order


def _beside(path: str, shown: str) -> Checkpoint | None:
    """The checkpoint beside a session file, when there is one (a malformed one is an InputError)."""
    where = checkpoint_path(path)
    return read_checkpoint(where, shown) if os.path.isfile(where) else None


def _checkpoint_status(checkpoint: Checkpoint, shown: str, signatures: SignatureCheck | None,
                       walk: ChainWalk | None) -> CheckpointStatus:
    """The checkpoint beside a session checked against the links of its one pass (none for an unsealed file)."""
    if signatures is None:  # no keys given
        return CheckpointStatus(shown, "unverified")
    sizes = {checkpoint.size} if signatures.trusted else set()
    tlog = checkpoint.kind == TLOG
    report = check_checkpoint(checkpoint, signatures,
                              walk or walk_link_facts((), set() if tlog else sizes, sizes if tlog else ()))
    trusted = report.trusted
    return CheckpointStatus(shown, "anchored" if report.verified else "failed",
                            checkpoint.origin if trusted else None, checkpoint.size if trusted else None,
                            report.unanchored if trusted else None, signatures.valid,
                            tuple((f.kind, f.message) for f in report.findings))


@contextmanager
def open_session(job: SessionJob) -> Iterator[IO[bytes]]:
    """Open a session file for reading; a file that cannot be opened is an InputError naming its display path."""
    try:
        handle = open(job.path, "rb", buffering=READ_BUFFER)
    except OSError as exc:
        raise InputError(job.display, None, f"cannot read: {exc.strerror or exc}") from None
    with handle:
        yield handle


def _located(exc: ToolReplayError, display: str) -> str:
    """The error as the report shows it: `PATH:LINE: message` already names the file; a bare message gets it."""
    text = str(exc)
    return text if text.startswith(display) else f"{display}: {text}"


def audit_batch(jobs: Sequence[SessionJob], options: SessionOptions) -> list[SessionResult]:
    """`audit_session` over a batch, so an engine pays its per-task overhead once per batch.

    With `options.render`, each session's part of the text or JSON report is rendered here, by the
    worker, so the process that writes the report only joins the parts (rendering is pure: the bytes
    are those the writer would make); the results then carry the parts instead of their findings.
    """
    results = [audit_session(job, options) for job in jobs]
    if options.render is None:
        return results
    from toolreplay.audit.fleet_render import render_session  # the renderer imports this module

    # The rendered part carries the findings: the result sent back keeps only the counts the summary needs.
    return [replace(result, rendered=render_session(result, options.render, options.all_sessions), findings=())
            for result in results]


def find_sessions(patterns: Iterable[str]) -> list[SessionJob]:
    """Session files named by files, folders (every `*.jsonl` below, recursively) and globs; sorted, unique.

    A pattern that names nothing is a UsageError. The display path is the path as found from the
    pattern (relative stays relative); workers open the absolute path. A file named by a pattern of
    its own is read whatever it is; one found in a folder or by a glob is read only when it is a
    regular file (a named pipe would hang the run, a device such as /dev/zero never end): any other is
    a job marked `skipped`, never opened. A folder that cannot be listed is a job marked `unreadable`.
    """
    found: dict[str, tuple[str | None, str | None]] = {}  # path -> (skipped, unreadable)
    for pattern in patterns:
        named = os.path.exists(pattern)
        matches = [pattern] if named else sorted(glob.glob(pattern, recursive=True))
        hidden = dict(_unlistable(_literal_root(pattern))) if not named and "**" in pattern else {}
        found.update(hidden)  # the glob passes over a folder it cannot list without a word
        if not matches and not hidden:
            raise UsageError(f"no such file, folder or match: {pattern}")
        for match in matches:
            if os.path.isdir(match):
                found.update(_walk(os.path.normpath(match)))
            else:
                found[os.path.normpath(match)] = (None if named else _not_regular(match), None)
    return [SessionJob(os.path.abspath(path), path, *found[path]) for path in sorted(found)]


def _literal_root(pattern: str) -> str:
    """The folder a glob pattern starts from: its components up to the first with a wildcard."""
    parts = pattern.split(os.sep)
    literal = []
    for part in parts[:-1]:
        if glob.has_magic(part):
            break
        literal.append(part)
    return os.sep.join(literal) or ("/" if pattern.startswith(os.sep) else ".")


def _unlistable(folder: str) -> Iterator[tuple[str, tuple[str | None, str | None]]]:
    """Every folder below `folder` (itself included; links not followed) that cannot be listed, as an
    unreadable entry."""
    try:
        with os.scandir(folder) as listing:
            below = [entry.path for entry in listing if entry.is_dir(follow_symlinks=False)]
    except OSError as exc:
        yield os.path.normpath(folder), (None, f"cannot read folder: {exc.strerror or exc}")
        return
    for path in below:
        yield from _unlistable(path)


_KINDS = ((stat.S_ISFIFO, "named pipe"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
          (stat.S_ISSOCK, "socket"), (stat.S_ISDIR, "folder"))


def _not_regular(path: str) -> str | None:
    """Why a file found by a folder or a glob is not read (None: it is a regular file, or it cannot be
    looked at, which its reading reports)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "special file")
    return f"not a regular file ({kind})"


def _walk(folder: str) -> Iterator[tuple[str, tuple[str | None, str | None]]]:
    """Every `*.jsonl` below `folder` (symbolic links to folders are not followed), and every folder that
    cannot be listed, with (skipped, unreadable) as `find_sessions` keeps them."""
    try:
        with os.scandir(folder) as listing:
            entries = list(listing)
    except OSError as exc:
        yield folder, (None, f"cannot read folder: {exc.strerror or exc}")
        return
    for entry in entries:
        path = os.path.normpath(os.path.join(folder, entry.name))
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(path)
        elif entry.name.endswith(".jsonl") and not entry.is_dir():
            yield path, (None if entry.is_file() else _not_regular(path), None)


@dataclass(order=True, frozen=True, slots=True)
class _Ranked:
    """A session in the ranking: the heap keeps the most distinct calls with findings, then the most
    findings, ties by the earlier path."""

    distinct_calls: int
    findings: int
    reverse_path: tuple[int, ...]  # a later path ranks lower
    path: str = field(compare=False)
    calls: int = field(compare=False)
    by_kind: tuple[tuple[str, int], ...] = field(compare=False)


class RankedSession(NamedTuple):
    """A session of the ranking every report shows (text, JSON, HTML), best first."""

    path: str
    findings: int
    calls: int
    by_kind: tuple[tuple[str, int], ...]
    distinct_calls: int


def _reverse_key(path: str) -> tuple[int, ...]:
    return tuple(-ord(ch) for ch in path) + (1,)


class FleetSummary:
    """The totals of a fleet audit, folded from results in path order; bounded memory.

    `top` is how many of the sessions with the most findings it remembers. With `state_aware`, the
    changed-after-write findings are information: listed and added up apart, and they make `found`
    true only with `count_changes`.
    """

    def __init__(self, top: int = TOP_SESSIONS, state_aware: bool = False, count_changes: bool = False) -> None:
        self.state_aware = state_aware
        self.count_changes = count_changes
        self.information = 0
        self.sessions = 0
        self.calls = 0
        self.sessions_with_findings = 0
        self.quiet = 0  # sessions read whole with nothing found (no finding that counts, no broken chain)
        self.findings = 0
        self.sealed = 0
        self.by_kind: Counter[str] = Counter()
        self.by_tool: Counter[str] = Counter()
        self.by_rule: Counter[str] = Counter()
        self.information_by_kind: Counter[str] = Counter()  # blocked, approved, shadow
        self.unknown_outcomes = 0  # sessions with a call whose outcome is unknown
        self.unknown_listed: list[tuple[str, int]] = []  # (path, unknown calls), the first LISTED_PROBLEMS
        self.unreadable = 0
        self.unreadable_listed: list[str] = []  # messages, the first LISTED_PROBLEMS
        self.unreadable_paths: list[str] = []  # the paths of those messages, in the same order
        self.skipped = 0  # files found that are not regular files: not sessions, never opened
        self.skipped_listed: list[tuple[str, str]] = []  # (path, why), the first LISTED_PROBLEMS
        self.broken = 0
        self.broken_listed: list[tuple[str, int]] = []  # (path, first broken link)
        self.checkpoints = 0
        self.anchored = 0
        self.failed_checkpoints = 0
        self.unverified = 0
        self.failed_listed: list[tuple[str, str]] = []  # (session path, its checkpoint's first finding)
        self.histogram = [0] * (len(CALL_BUCKETS) + 1)
        self._top: list[_Ranked] = []
        self._top_size = top

    def add(self, result: SessionResult) -> None:
        """Fold one session's result into the totals."""
        if result.skipped is not None:
            self.skipped += 1
            if len(self.skipped_listed) < LISTED_PROBLEMS:
                self.skipped_listed.append((result.path, result.skipped))
            return
        self.sessions += 1
        self.sealed += result.sealed
        if result.chain is not None and not result.chain.intact:
            self.broken += 1
            if len(self.broken_listed) < LISTED_PROBLEMS:
                self.broken_listed.append((result.path, result.chain.broken_at or 0))
        if result.checkpoint is not None:
            self._add_checkpoint(result.path, result.checkpoint)
        if result.error is not None:
            self.unreadable += 1
            if len(self.unreadable_listed) < LISTED_PROBLEMS:
                self.unreadable_listed.append(result.error)
                self.unreadable_paths.append(result.path)
            return
        self.calls += result.calls
        self.histogram[_bucket(result.calls)] += 1
        if not result.found:
            self.quiet += 1
        self.information += result.information or 0
        for name, count in result.information_by_kind:
            self.information_by_kind[name] += count
        if not result.finding_count:
            return
        unknown = dict(result.by_kind).get("unknown-outcome")
        if unknown:
            self.unknown_outcomes += 1
            if len(self.unknown_listed) < LISTED_PROBLEMS:
                self.unknown_listed.append((result.path, unknown))
        self.sessions_with_findings += 1
        self.findings += result.finding_count
        for counter, pairs in ((self.by_kind, result.by_kind), (self.by_tool, result.by_tool),
                                (self.by_rule, result.by_rule)):
            for name, count in pairs:  # a loop: Counter.update's checks cost more than the adding, per session
                counter[name] += count
        full = len(self._top) >= self._top_size
        if full and (not self._top or (result.distinct_calls, result.finding_count)
                     < (self._top[0].distinct_calls, self._top[0].findings)):
            return  # ranks below every session kept: no need for the (costly) tie-break key
        ranked = _Ranked(result.distinct_calls, result.finding_count, _reverse_key(result.path), result.path,
                         result.calls, result.by_kind)
        if not full:
            heapq.heappush(self._top, ranked)
        elif ranked > self._top[0]:
            heapq.heapreplace(self._top, ranked)

    def _add_checkpoint(self, path: str, status: CheckpointStatus) -> None:
        self.checkpoints += 1
        if status.status == "anchored":
            self.anchored += 1
        elif status.status == "unverified":
            self.unverified += 1
        else:
            self.failed_checkpoints += 1
            if len(self.failed_listed) < LISTED_PROBLEMS:
                kind, message = status.findings[0]
                self.failed_listed.append((path, f"{kind}: {message}"))

    def top_sessions(self) -> list[RankedSession]:
        """The sessions with the most distinct calls with findings (then the most findings), first first."""
        return [RankedSession(r.path, r.findings, r.calls, r.by_kind, r.distinct_calls)
                for r in sorted(self._top, reverse=True)]

    @property
    def counted(self) -> int:
        """The findings that count (the reports' `findings`): `findings`, folded from each `SessionResult.counted`."""
        return self.findings

    @property
    def found(self) -> bool:
        """Whether anything was found: a finding that counts or a broken chain (the exit code 1)."""
        return self.findings > 0 or self.broken > 0


def fold(results: Iterable[SessionResult], summary: FleetSummary) -> Iterator[SessionResult]:
    """Pass the results on, folding each into `summary` first."""
    for result in results:
        summary.add(result)
        yield result


def _bucket(calls: int) -> int:
    for position, bound in enumerate(CALL_BUCKETS):
        if calls <= bound:
            return position
    return len(CALL_BUCKETS)


def ranked_counts(counter: Counter[str]) -> list[tuple[str, int]]:
    """A counter's items, most first, ties by name: the order every report lists them in."""
    return sorted(counter.items(), key=lambda item: (-item[1], item[0]))
