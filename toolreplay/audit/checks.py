"""The one shape of a check: what it keeps of each record, then one pass over what it kept.

A check of a session is a `Check`: `facts(record)` turns one record into a small picklable fact (a
digest of the call, the canonical bytes a link needs, what a call alone decides under the rules), and
`run(facts)` walks those facts in record order and returns the check's report. Only `facts` sees a
record, so it is the only part the parallel reader's worker processes compute
(`toolreplay.format.chunks.read_facts` hands `check.facts` to each worker and yields the facts in file
order); everything that depends on order (the first of identical calls, the rules' history, the hash
chain) is in `run`, in one process. The serial reader, the parallel one and the fleet audit's one pass
per session all use the same two parts, so a check cannot differ between them.

`facts` must pickle by reference: a module-level function, or a `functools.partial` of one with
picklable arguments. The checks: `toolreplay.audit.replay.replay_check`, `toolreplay.audit.scope.scope_check`,
`toolreplay.audit.chain.seal_check` and `verify_check`, `toolreplay.audit.mutators.evidence_check`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from toolreplay.format.records import Record

__all__ = ["Check"]

F = TypeVar("F")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Check(Generic[F, R]):
    """A check of one session: `facts` per record (in any process), then `run` over the facts in record order."""

    facts: Callable[[Record], F]
    run: Callable[[Iterable[F]], R]
    links: bool = False  # the check reads the links of a sealed file (`verify`), not a session's records
    encodes: bool = False  # `facts` encodes each record's parts (`toolreplay.format.records.iter_records`)

    def over(self, records: Iterable[Record]) -> R:
        """The check of records already read, in this process."""
        return self.run(map(self.facts, records))
