"""Read a large session on several cores: chunks parsed in worker processes, facts merged in order.

Parsing and canonical encoding are most of an audit's cost, and each line is independent; what is
not (the index sequence, plain versus sealed, line numbers, the findings) stays in the calling process.
A file is cut at line breaks into chunks of about `chunk_bytes`; each worker parses one chunk with the
same strict reader as the serial path and turns every record into a small picklable *fact* with an
`extract` function (a digest per call for replay, the canonical parts for seal). The caller receives
the facts in file order, and any input error exactly as the serial reader would report it: the first
one in the file, with its absolute line number (a chunk holding an error is read again in the calling
process, which knows what the lines before it established, so the wording is the serial reader's).

Every reader reads the one file the command opened: the workers are forked with its descriptor and
read their chunks with `os.pread`, never by name. A file that changes while it is read (replaced or
removed under its name, truncated, appended to, rewritten) is an input error, in both readers.
Workers ignore Ctrl-C (the caller stops them) and are killed by the kernel when the caller dies.

Standard input, small files and platforms without `fork` take the serial path; so does `jobs=1`, and
so does a run whose workers cannot be started. Workers are bounded by the number of chunks and the
cores; at most two chunks per worker are in flight, so memory stays bounded whatever the file size.
"""

from __future__ import annotations

import io
import os
import signal
import stat
import sys
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, TypeVar

from toolreplay.errors import InputError, ToolReplayError
from toolreplay.format.records import (
    MAX_LINE_BYTES,
    PLAIN_FACTS,
    STDIN_NAME,
    Record,
    TornLineError,
    iter_facts,
    iter_link_facts,
    iter_records,
    link_fact,
    open_input,
)

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = ["read_facts", "default_jobs", "usable_cores", "PARALLEL_MIN_BYTES", "CHUNK_BYTES", "CHANGED_MESSAGE"]

T = TypeVar("T")

PARALLEL_MIN_BYTES = 8 << 20  # below this, starting workers costs more than it saves
CHUNK_BYTES = 2 << 20
CHANGED_MESSAGE = "file changed while it was read (replaced, removed, truncated or written to); read it again"
_PR_SET_PDEATHSIG = 1


def usable_cores() -> int:
    """The number of cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_jobs() -> int:
    """Worker processes to use: one per core this process may run on, at most 8."""
    return min(usable_cores(), 8)


@dataclass(frozen=True, slots=True)
class _Chunk:
    """What a worker found in one chunk; line numbers count from the chunk's first line."""

    facts: list[object]
    lines: int
    first_line: int | None  # line of the first record, None when the chunk holds none
    first_index: int | None
    last_index: int | None
    sealed: bool | None
    error: bool  # the chunk holds an input error (the caller reads it again for the exact message)
    short: bool  # the file ended before the chunk did: it changed while it was read


def _pread(fd: int, start: int, end: int) -> bytes:
    parts = []
    while start < end:
        data = os.pread(fd, end - start, start)
        if not data:
            break
        parts.append(data)
        start += len(data)
    return b"".join(parts)


def _count_lines(data: bytes) -> int:
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def _read_chunk(fd: int, path: str, start: int, end: int, first_chunk: bool, links: bool,
                extract: Callable[[Record], object], max_line: int = MAX_LINE_BYTES, encodes: bool = False) -> _Chunk:
    data = _pread(fd, start, end)
    if len(data) != end - start:
        return _Chunk([], 0, None, None, None, None, False, True)
    facts: list[object] = []
    first: Record | None = None
    last_index: int | None = None
    error = False
    if links and extract is link_fact:  # a sealed file's facts without a Record a line: only links are checked
        try:
            facts.extend(iter_link_facts(io.BytesIO(data), path, first_chunk=first_chunk, max_line=max_line))
        except InputError:
            error = True
        found = 1 if facts else None
        return _Chunk(facts, _count_lines(data), found, None, None, True if facts else None, error, False)
    try:
        for record in iter_records(io.BytesIO(data), path, check_sequence=not links, require_sealed=links,
                                   first_chunk=first_chunk, max_line=max_line, encodes=encodes):
            if first is None:
                first = record
            last_index = record.index
            facts.append(extract(record))
    except InputError:
        error = True
    return _Chunk(facts, _count_lines(data), None if first is None else first.line,
                  None if first is None else first.index, last_index,
                  None if first is None else first.prev is not None, error, False)


def _boundaries(fd: int, size: int, chunk_bytes: int, max_line: int = MAX_LINE_BYTES) -> Iterator[tuple[int, int]]:
    """Byte ranges of about chunk_bytes that start and end at line breaks. A range ends early, without a
    line break, only where it holds a line longer than `max_line` (an input error its reader reports):
    no range is longer than chunk_bytes + max_line + 1, however long the line."""
    start = 0
    while start < size:
        end = min(start + chunk_bytes, size)
        cap = min(start + chunk_bytes + max_line + 1, size)
        while end < cap:
            window = os.pread(fd, 1 << 16, end)
            if not window:
                end = size
                break
            found = window.find(b"\n")
            if found >= 0:
                end += found + 1
                break
            end += len(window)
        end = min(max(end, start + 1), cap)
        yield start, end
        start = end


def _fork_context() -> Any:
    """The `fork` start method where it is safe and cheap (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    import multiprocessing  # only here: a small session should not pay for importing it

    if "fork" not in multiprocessing.get_all_start_methods():
        return None
    return multiprocessing.get_context("fork")


def _start_worker(parent: int) -> None:
    """In each worker: die with the parent (Linux's parent-death signal), leave Ctrl-C to the parent, and let
    SIGTERM end the worker at once. A forked worker inherits the command's SIGTERM handler, which raises
    SystemExit; the pool stops the other workers with SIGTERM when one dies, and a worker blocked sending a
    result turned that SystemExit into a result to send, and blocked again: the command waited for ever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)


def _serial(handle: IO[bytes], display: str, links: bool, extract: Callable[[Record], T],
            max_line: int = MAX_LINE_BYTES, encodes: bool = False) -> Iterator[T]:
    if links and extract is link_fact:
        facts: Iterator[T] = iter_link_facts(handle, display, max_line=max_line)  # type: ignore[assignment]
        return facts
    if encodes and not links and extract in PLAIN_FACTS:  # seal, replay: no Record a plain line
        made: Iterator[T] = iter_facts(handle, display, extract, check_sequence=True, max_line=max_line)
        return made
    # map, not a generator of our own: one Python frame less to resume a record
    return map(extract, iter_records(handle, display, check_sequence=not links, require_sealed=links,
                                     max_line=max_line, encodes=encodes))


class _ForkFailed(Exception):
    """The workers could not be started; nothing was read yet."""


def _unchanged(path: str, fd: int, before: os.stat_result) -> bool:
    """Whether the open file is still the file at `path`, with the size and modification time it had."""
    now = os.fstat(fd)
    try:
        named = os.stat(path)
    except OSError:
        return False
    return ((now.st_size, now.st_mtime_ns, now.st_dev, now.st_ino) ==
            (before.st_size, before.st_mtime_ns, named.st_dev, named.st_ino)
            and (before.st_dev, before.st_ino) == (named.st_dev, named.st_ino))


def read_facts(path: str, extract: Callable[[Record], T], *, links: bool = False, jobs: int | None = None,
               stdin: IO[bytes] | None = None, chunk_bytes: int = CHUNK_BYTES,
               min_parallel_bytes: int = PARALLEL_MIN_BYTES, max_line: int = MAX_LINE_BYTES,
               encodes: bool = False) -> Iterator[T]:
    """Yield extract(record) for each record of a session (`links`: of a sealed file), in file order.
    `encodes`: `extract` encodes the records' parts (see `iter_records`).

    `extract` must be a module-level function (workers receive it by name). Errors are those of
    `read_session` / `read_links`, raised once every fact before the bad line has been yielded; a
    regular file that changed while it was read is an InputError without a line. A line longer than
    `max_line` bytes is an input error in both readers, and neither holds more of it than that.
    """
    if path == "-":
        with open_input(path, stdin) as handle:
            yield from _serial(handle, STDIN_NAME, links, extract, max_line, encodes)
        return
    with open_input(path) as handle:
        fd = handle.fileno()
        before = os.fstat(fd)
        regular = stat.S_ISREG(before.st_mode)
        try:
            yield from _read_open_file(path, handle, before, extract, links, jobs, chunk_bytes, min_parallel_bytes,
                                       max_line, encodes)
        except InputError:
            if regular and not _unchanged(path, fd, before):
                raise InputError(path, None, CHANGED_MESSAGE) from None
            raise
        if regular and not _unchanged(path, fd, before):
            raise InputError(path, None, CHANGED_MESSAGE)


def _read_open_file(path: str, handle: IO[bytes], before: os.stat_result, extract: Callable[[Record], T],
                    links: bool, jobs: int | None, chunk_bytes: int, min_parallel_bytes: int,
                    max_line: int, encodes: bool = False) -> Iterator[T]:
    # Not a generator itself: the serial reader's facts reach the caller with one Python frame less each.
    size = before.st_size
    workers = default_jobs() if jobs is None else jobs
    # Bounded by the work (one worker a chunk) and the cores (at least two, so that a machine with
    # one core still runs, and tests, the parallel reader when asked to).
    workers = min(workers, -(-size // max(chunk_bytes, 1)), max(usable_cores(), 2))
    if workers > 1 and stat.S_ISREG(before.st_mode) and size >= min_parallel_bytes:
        context = _fork_context()
        if context is not None:
            return _parallel_or_serial(path, handle, size, extract, links, workers, chunk_bytes, context, max_line,
                                       encodes)
    return _serial(handle, path, links, extract, max_line, encodes)


def _parallel_or_serial(path: str, handle: IO[bytes], size: int, extract: Callable[[Record], T], links: bool,
                        workers: int, chunk_bytes: int, context: Any, max_line: int, encodes: bool) -> Iterator[T]:
    """The parallel reader, or the serial one when its workers cannot be started."""
    try:
        yield from _parallel(handle.fileno(), path, size, extract, links, workers, chunk_bytes, context, max_line,
                             encodes)
        return
    except _ForkFailed:
        pass
    yield from _serial(handle, path, links, extract, max_line, encodes)


def _reread(fd: int, path: str, start: int, end: int, first_chunk: bool, links: bool,
            extract: Callable[[Record], T], state: tuple[bool | None, int | None], line_offset: int,
            max_line: int, encodes: bool = False) -> Iterator[T]:
    """Read a chunk in this process, knowing what the lines before established: the serial reader's
    facts and first error, at its absolute line."""
    try:
        if links and extract is link_fact:
            yield from iter_link_facts(io.BytesIO(_pread(fd, start, end)), path,  # type: ignore[misc]
                                       first_chunk=first_chunk, resume=state, max_line=max_line)
            return
        if encodes and not links and extract in PLAIN_FACTS:
            yield from iter_facts(io.BytesIO(_pread(fd, start, end)), path, extract, check_sequence=True,
                                  first_chunk=first_chunk, resume=state, max_line=max_line)
            return
        for record in iter_records(io.BytesIO(_pread(fd, start, end)), path, check_sequence=not links,
                                   require_sealed=links, first_chunk=first_chunk, resume=state, max_line=max_line,
                                   encodes=encodes):
            yield extract(record)
    except TornLineError as exc:
        raise TornLineError(path, None if exc.line is None else line_offset + exc.line, exc.message, exc.size) from None
    except InputError as exc:
        raise InputError(path, None if exc.line is None else line_offset + exc.line, exc.message) from None


def _parallel(fd: int, path: str, size: int, extract: Callable[[Record], T], links: bool, jobs: int,
              chunk_bytes: int, context: Any, max_line: int, encodes: bool = False) -> Iterator[T]:
    from concurrent.futures import ProcessPoolExecutor

    executor = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_start_worker,
                                   initargs=(os.getpid(),))
    pending: deque[tuple[int, int, bool, Future[_Chunk]]] = deque()
    ranges = _boundaries(fd, size, chunk_bytes, max_line)
    first = True
    try:
        def submit() -> None:
            nonlocal first
            for start, end in ranges:
                future = executor.submit(_read_chunk, fd, path, start, end, first, links, extract, max_line, encodes)
                pending.append((start, end, first, future))
                first = False
                return

        try:
            submit()  # forks every worker
        except OSError:
            for process in list(getattr(executor, "_processes", {}).values()):
                process.terminate()
                process.join()
            raise _ForkFailed from None
        for _ in range(2 * jobs - 1):
            submit()
        line_offset = 0
        sealed: bool | None = True if links else None
        expected: int | None = None if links else 0
        while pending:
            start, end, first_chunk, future = pending.popleft()
            chunk = _result(future)
            submit()
            if chunk.short:
                raise InputError(path, None, CHANGED_MESSAGE)
            if chunk.error or (chunk.first_line is not None and (
                    (sealed is not None and chunk.sealed != sealed)
                    or (expected is not None and chunk.first_index != expected))):
                yield from _reread(fd, path, start, end, first_chunk, links, extract, (sealed, expected), line_offset,
                                   max_line, encodes)
                raise AssertionError("a chunk read again gave no error")  # pragma: no cover
            if chunk.first_line is not None:
                sealed = chunk.sealed
                if not links and chunk.last_index is not None:
                    expected = chunk.last_index + 1
            yield from chunk.facts  # type: ignore[misc]
            line_offset += chunk.lines
    finally:
        for *_, future in pending:
            future.cancel()
        executor.shutdown(wait=True, cancel_futures=True)


def _result(future: Future[_Chunk]) -> _Chunk:
    from concurrent.futures.process import BrokenProcessPool

    try:
        return future.result()
    except BrokenProcessPool:
        raise ToolReplayError("a worker process died while reading; try again, or with --jobs 1") from None
