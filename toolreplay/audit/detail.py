"""The calls behind the findings: what a detailed (HTML) view of one session shows, bounded whatever its size.

A session's detail keeps the first calls, the calls that have findings and the earlier calls they
point to (the first response of a non-deterministic call, the repeated call of a redundant one),
each as canonical JSON cut at a limit. Everything else is counted, not kept, so a detail of a
200,000-call session is as small as one of twenty calls. It takes a second read of the file, done
where the file is (a worker of the fleet's engine, or this process).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from toolreplay.audit.chain import ChainReport
from toolreplay.audit.findings import Finding, counts
from toolreplay.audit.fleet import CheckpointStatus, SessionJob, SessionOptions, audit_session, open_session
from toolreplay.errors import ToolReplayError
from toolreplay.format.records import read_session

__all__ = ["DetailLimits", "CallView", "SessionDetail", "build_detail", "detail_batch", "FLEET_LIMITS",
           "SESSION_LIMITS"]


@dataclass(frozen=True, slots=True)
class DetailLimits:
    """How much of a session a detail keeps."""

    findings: int  # findings shown (with their calls); the rest are counted
    head: int  # first calls always shown, findings or not
    text: int  # characters of canonical JSON kept per args or response


SESSION_LIMITS = DetailLimits(findings=1000, head=50, text=3000)  # one session's page
FLEET_LIMITS = DetailLimits(findings=40, head=10, text=1200)  # each detailed session of a fleet page


@dataclass(frozen=True, slots=True)
class CallView:
    """One call as shown: index, tool, and its canonical args and response (cut to a limit, sizes whole)."""

    index: int
    tool: str
    args: str
    response: str
    args_size: int
    response_size: int
    ts: str | None = None  # meta.ts and meta.duration_ms, where the record has them
    duration_ms: float | None = None
    outcome: str | None = None  # meta.outcome, where the record has one


@dataclass(frozen=True, slots=True)
class SessionDetail:
    """A session as its detailed view shows it: totals, the shown findings, and the calls they concern."""

    path: str
    calls: int
    divergence: int | None
    finding_count: int
    findings: tuple[Finding, ...]
    shown_calls: tuple[CallView, ...]
    chain: ChainReport | None = None
    sealed: bool = False
    error: str | None = None
    by_kind: tuple[tuple[str, int], ...] = ()  # every counted finding's kind, shown or not
    checkpoint: CheckpointStatus | None = None  # the checkpoint beside the session (fleet audit)
    information: int = 0  # findings listed that do not count (`toolreplay.audit.findings.counts`)


def _cut(data: bytes, limit: int) -> str:
    text = data.decode("utf-8")
    return text if len(text) <= limit else text[:limit]


def _wanted(findings: Sequence[Finding], limits: DetailLimits) -> set[int]:
    wanted = set(range(limits.head))
    for finding in findings[:limits.findings]:
        wanted.add(finding.index)
        if finding.related_index is not None:
            wanted.add(finding.related_index)
    return wanted


def collect_calls(job: SessionJob, wanted: set[int], text_limit: int) -> tuple[CallView, ...]:
    """The calls at the `wanted` indices, in file order; an unreadable rest of the file ends the list."""
    shown: list[CallView] = []
    try:
        with open_session(job) as handle:
            for record in read_session(handle, job.display):
                if record.index in wanted:
                    args, response = record.canonical_args, record.canonical_response
                    meta = record.meta or {}
                    shown.append(CallView(record.index, record.tool, _cut(args, text_limit),
                                          _cut(response, text_limit), len(args), len(response), meta.get("ts"),
                                          meta.get("duration_ms"), meta.get("outcome", "ran" if meta else None)))
    except (ToolReplayError, RecursionError):
        pass  # the audit itself reports why the file cannot be read
    return tuple(shown)


def build_detail(job: SessionJob, calls: int, divergence: int | None, findings: Sequence[Finding],
                 limits: DetailLimits, chain: ChainReport | None = None, sealed: bool = False,
                 finding_count: int | None = None, error: str | None = None,
                 by_kind: tuple[tuple[str, int], ...] | None = None,
                 checkpoint: CheckpointStatus | None = None, information: int | None = None,
                 count_changes: bool = False, fail_on: frozenset[str] = frozenset()) -> SessionDetail:
    """The detail of a session already audited: its findings (the first `limits.findings`) and their calls.

    `findings` is every finding (those that count counted by kind here, as `toolreplay.audit.findings.counts`
    with `count_changes`) unless `finding_count`, `information` and `by_kind` say otherwise."""
    shown = collect_calls(job, _wanted(findings, limits), limits.text) if calls else ()
    if finding_count is None or by_kind is None or information is None:
        kinds = Counter(finding.kind for finding in findings if counts(finding.kind, count_changes, fail_on))
        counted = sum(kinds.values())
        finding_count = counted if finding_count is None else finding_count
        information = len(findings) - counted if information is None else information
        by_kind = tuple(sorted(kinds.items())) if by_kind is None else by_kind
    return SessionDetail(job.display, calls, divergence, finding_count, tuple(findings[:limits.findings]), shown,
                         chain, sealed, error, by_kind, checkpoint, information)


def detail_batch(jobs: Sequence[SessionJob], argument: tuple[SessionOptions, DetailLimits]) -> list[SessionDetail]:
    """Audit and detail each session of a batch (the fleet page's second pass, for its worst sessions)."""
    options, limits = argument
    details = []
    for job in jobs:
        result = audit_session(job, options)
        details.append(build_detail(job, result.calls, result.divergence, result.findings, limits, result.chain,
                                    result.sealed, result.finding_count, result.error, result.by_kind,
                                    result.checkpoint, result.information or 0))
    return details
