"""Where a fleet audit runs: an engine maps a module-level function over batches of jobs, results in order.

Every engine gives the same results in the same order, so the report's bytes do not depend on the
engine or on the number of workers. Jobs go out in batches (one task per batch, not per session) with
a bounded number of batches in flight, and results come back as they complete but are handed on in
submission order, so the caller can stream them into a report without holding the fleet.

`LocalEngine` uses this machine's cores (forked worker processes; `jobs=1` runs in this process).
`toolreplay.audit.dask_engine.DaskEngine` runs the same batches on a Dask distributed cluster.
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from toolreplay.errors import ToolReplayError
from toolreplay.format.chunks import _fork_context, _start_worker, default_jobs

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = ["Engine", "LocalEngine", "batch_size", "batched", "map_in_order"]

J = TypeVar("J")
R = TypeVar("R")

LARGEST_BATCH = 256  # jobs a task at most: a 2-20 call session takes about 0.7 ms, so a full batch ~0.2 s
BATCHES_PER_WORKER = 8  # at least this many batches a worker when there are jobs enough, so all end together


class Engine(Protocol):
    """Runs `function(batch, argument)` for each batch, somewhere; yields each batch's results in order."""

    def map_batches(self, function: Callable[[Sequence[J], Any], list[R]], jobs: Sequence[J],
                    argument: Any) -> Iterator[R]:
        """Results of every job, in the order of `jobs`."""
        ...


def batch_size(jobs: int, workers: int, largest: int = LARGEST_BATCH) -> int:
    """Jobs a batch: about BATCHES_PER_WORKER batches for each worker, so the last ones end close together
    (a big fleet's per-task overhead is then paid once for `largest` sessions), and never more than `largest`."""
    return max(1, min(largest, -(-jobs // (BATCHES_PER_WORKER * max(workers, 1)))))


def batched(items: Iterable[J], size: int) -> Iterator[list[J]]:
    """Consecutive lists of `size` items (the last may be shorter)."""
    batch: list[J] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def map_in_order(submit: Callable[[list[J]], Any], result: Callable[[Any], Iterable[R]], batches: Iterator[list[J]],
                 in_flight: int) -> Iterator[R]:
    """Keep `in_flight` batches submitted; yield their results in submission order.

    `submit(batch)` returns a handle (a future), `result(handle)` waits for that batch's list.
    """
    pending: deque[Any] = deque()
    for batch in batches:
        pending.append(submit(batch))
        if len(pending) >= in_flight:
            yield from result(pending.popleft())
    while pending:
        yield from result(pending.popleft())


class LocalEngine:
    """This machine: `jobs` forked worker processes, or this process alone when `jobs` is 1.

    `batch_size` fixes the jobs a task; None (the default) sizes batches from the number of jobs (`batch_size()`).
    """

    def __init__(self, jobs: int | None = None, batch_size: int | None = None) -> None:
        self.jobs = default_jobs() if jobs is None else jobs
        self.batch_size = batch_size

    def map_batches(self, function: Callable[[Sequence[J], Any], list[R]], jobs: Sequence[J],
                    argument: Any) -> Iterator[R]:
        """Results of every job, in the order of `jobs`."""
        batches = batched(jobs, self.batch_size or batch_size(len(jobs), self.jobs))
        first = list(itertools.islice(batches, 2))
        batches = itertools.chain(first, batches)
        context = _fork_context() if self.jobs > 1 and len(first) > 1 else None
        if context is None:  # one worker asked for, no fork, or a single batch: not worth starting workers
            for batch in batches:
                yield from function(batch, argument)
            return
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        # Workers die with this process (and leave Ctrl-C to it), as the session reader's do.
        executor = ProcessPoolExecutor(max_workers=self.jobs, mp_context=context, initializer=_start_worker,
                                       initargs=(os.getpid(),))
        pending: list[Future[list[R]]] = []
        try:
            def submit(batch: list[J]) -> Future[list[R]]:
                future = executor.submit(function, batch, argument)
                pending.append(future)
                return future

            def result(future: Future[list[R]]) -> list[R]:
                try:
                    done = future.result()
                except BrokenProcessPool:
                    raise ToolReplayError("a worker process died while auditing; try again, or with --jobs 1") from None
                pending.remove(future)
                return done

            yield from map_in_order(submit, result, batches, 2 * self.jobs)
        finally:
            for future in pending:
                future.cancel()
            executor.shutdown(wait=True, cancel_futures=True)
