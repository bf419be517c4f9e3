"""Read a large session on several cores: chunks parsed in worker processes, facts merged in order.

Parsing and canonical encoding are most of an audit's cost, and each line is independent; what is
not (the index sequence, plain versus sealed, line numbers, the findings) stays in the calling process.
A file is cut at line breaks into chunks of about `chunk_bytes`; each worker parses one chunk with the
same strict reader as the serial path and turns every record into a small picklable *fact* with an
`extract` function (a digest per call for replay, the canonical parts for seal). The caller receives
the facts in file order, and any input error exactly as the serial reader would report it: the first
one in the file, with its absolute line number.

Standard input, small files and platforms without `fork` take the serial path; so does `jobs=1`.
At most two chunks per worker are in flight, so memory stays bounded whatever the file size.
"""

from __future__ import annotations

import io
import os
import sys
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, TypeVar

from toolreplay.errors import InputError
from toolreplay.format.records import LINK_IN_PLAIN, PLAIN_IN_SEALED, STDIN_NAME, Record, iter_records, open_input

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = ["read_facts", "default_jobs", "PARALLEL_MIN_BYTES", "CHUNK_BYTES"]

T = TypeVar("T")

PARALLEL_MIN_BYTES = 8 << 20  # below this, starting workers costs more than it saves
CHUNK_BYTES = 2 << 20


def default_jobs() -> int:
    """Worker processes to use: one per core this process may run on, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


@dataclass(frozen=True, slots=True)
class _Chunk:
    """What a worker found in one chunk; line numbers count from the chunk's first line."""

    facts: list[object]
    lines: int
    first_line: int | None  # line of the first record, None when the chunk holds none
    first_index: int | None
    last_index: int | None
    sealed: bool | None
    error: tuple[int, str] | None  # (line, message) of the first input error in the chunk


def _read_chunk(path: str, start: int, end: int, first_chunk: bool, links: bool,
                extract: Callable[[Record], object]) -> _Chunk:
    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read(end - start)
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    facts: list[object] = []
    first: Record | None = None
    last_index: int | None = None
    error: tuple[int, str] | None = None
    try:
        for record in iter_records(io.BytesIO(data), path, check_sequence=not links, require_sealed=links,
                                   first_chunk=first_chunk):
            if first is None:
                first = record
            last_index = record.index
            facts.append(extract(record))
    except InputError as exc:
        error = (exc.line or 0, exc.message)
    return _Chunk(facts, lines, None if first is None else first.line, None if first is None else first.index,
                  last_index, None if first is None else first.prev is not None, error)


def _boundaries(path: str, chunk_bytes: int) -> Iterator[tuple[int, int]]:
    """Byte ranges of about chunk_bytes that start and end at line breaks."""
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        start = 0
        while start < size:
            handle.seek(min(start + chunk_bytes, size))
            if handle.tell() < size:
                handle.readline()
            end = max(handle.tell(), start + 1)
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


def _serial(handle: IO[bytes], display: str, links: bool, extract: Callable[[Record], T]) -> Iterator[T]:
    for record in iter_records(handle, display, check_sequence=not links, require_sealed=links):
        yield extract(record)


def read_facts(path: str, extract: Callable[[Record], T], *, links: bool = False, jobs: int | None = None,
               stdin: IO[bytes] | None = None, chunk_bytes: int = CHUNK_BYTES,
               min_parallel_bytes: int = PARALLEL_MIN_BYTES) -> Iterator[T]:
    """Yield extract(record) for each record of a session (`links`: of a sealed file), in file order.

    `extract` must be a module-level function (workers receive it by name). Errors are those of
    `read_session` / `read_links`, raised once every fact before the bad line has been yielded.
    """
    jobs = default_jobs() if jobs is None else jobs
    parallel = (path != "-" and jobs > 1 and os.path.isfile(path) and os.path.getsize(path) >= min_parallel_bytes)
    context = _fork_context() if parallel else None
    parallel = parallel and context is not None
    if not parallel:
        with open_input(path, stdin) as handle:
            yield from _serial(handle, STDIN_NAME if path == "-" else path, links, extract)
        return
    with open_input(path) as _:  # the same error as the serial path for an unreadable file
        pass
    yield from _parallel(path, extract, links, jobs, chunk_bytes, context)


def _parallel(path: str, extract: Callable[[Record], T], links: bool, jobs: int, chunk_bytes: int,
              context: Any) -> Iterator[T]:
    from concurrent.futures import ProcessPoolExecutor

    executor = ProcessPoolExecutor(max_workers=jobs, mp_context=context)
    pending: deque[Future[_Chunk]] = deque()
    ranges = _boundaries(path, chunk_bytes)
    first = True
    try:
        def submit() -> None:
            nonlocal first
            for start, end in ranges:
                pending.append(executor.submit(_read_chunk, path, start, end, first, links, extract))
                first = False
                return

        for _ in range(2 * jobs):
            submit()
        line_offset = 0
        sealed: bool | None = True if links else None
        expected: int | None = 0
        while pending:
            chunk = pending.popleft().result()
            submit()
            if chunk.first_line is not None:
                where = line_offset + chunk.first_line
                if sealed is not None and chunk.sealed != sealed:
                    raise InputError(path, where, PLAIN_IN_SEALED if sealed else LINK_IN_PLAIN)
                sealed = chunk.sealed
                if not links and expected is not None and chunk.first_index != expected:
                    raise InputError(path, where, f"index {chunk.first_index} out of order: expected {expected}")
                expected = None if chunk.last_index is None else chunk.last_index + 1
            yield from chunk.facts  # type: ignore[misc]
            if chunk.error is not None:
                raise InputError(path, line_offset + chunk.error[0], chunk.error[1])
            line_offset += chunk.lines
    finally:
        for future in pending:
            future.cancel()
        executor.shutdown(wait=True, cancel_futures=True)
