"""Text and JSON renderings of a fleet audit, streamed: a line (or JSON item) per session, then the summary.

Each renderer takes the results as they come and the `FleetSummary` they are folded into (see
`fold`); the summary is complete when the results are exhausted, so it is rendered last.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from toolreplay.audit.findings import Finding, finding_fields
from toolreplay.audit.fleet import CheckpointStatus, FleetSummary, SessionResult, fold, ranked_counts
from toolreplay.format.text import escape_text

__all__ = ["fold", "iter_fleet_text", "finding_text_lines", "listed", "RUN_LENGTH",
           "iter_fleet_json", "finding_json", "summary_json", "checkpoint_phrase"]


def _session_head(result: SessionResult) -> str:
    path = escape_text(result.path)
    if result.skipped is not None:
        return f"{path}: skipped: {escape_text(result.skipped)}\n"
    if result.error is not None:
        return f"{path}: unreadable: {escape_text(result.error)}\n"
    parts = [f"calls {result.calls}", f"findings {result.counted}"]
    if result.information:
        parts.append(f"information {result.information}")
    if result.divergence is not None:
        parts.append(f"divergence index {result.divergence}")
    if result.chain is not None:
        parts.append("chain intact" if result.chain.intact else f"chain broken at index {result.chain.broken_at}")
    if result.checkpoint is not None:
        parts.append(checkpoint_phrase(result.checkpoint))
    return f"{path}: {', '.join(parts)}\n"


def checkpoint_phrase(status: CheckpointStatus) -> str:
    """`checkpoint anchored (ORIGIN, size N[, K links not yet anchored])`, `checkpoint failed[ (...)]` or
    `checkpoint unverified`: the origin and size only when a trusted key signed it."""
    if status.origin is None:
        return f"checkpoint {status.status}"
    facts = [escape_text(status.origin), f"size {status.size}"]
    if status.unanchored:
        facts.append(f"{status.unanchored} link{'' if status.unanchored == 1 else 's'} not yet anchored")
    return f"checkpoint {status.status} ({', '.join(facts)})"


def render_session(result: SessionResult, form: str, all_sessions: bool = False) -> str:
    """One session's part of the `text` or `json` fleet report (text: "" for a session with nothing to
    report, unless `all_sessions`)."""
    if form == "json":
        return _indented(_session_json(result), 4)
    return "".join(_session_text(result, all_sessions))


def iter_fleet_text(results: Iterable[SessionResult], summary: FleetSummary,
                    all_sessions: bool = False) -> Iterator[str]:
    """One line per session with something to report (every session with `all_sessions`), its findings
    indented below it, a blank line, then the summary."""
    for result in results:
        if result.rendered is not None:
            yield result.rendered
        else:
            yield from _session_text(result, all_sessions)
    yield "\n"
    yield from _summary_text(summary, all_sessions)


def listed(result: SessionResult) -> bool:
    """Whether the text report lists a session by default: a finding that counts, a broken chain, an
    error, or a file skipped."""
    return result.found or result.error is not None or result.skipped is not None


RUN_LENGTH = 3  # this many identical findings or more are one line of the text report


def _same(run: list[Finding], f: Finding) -> bool:
    """Whether `f` continues a run of identical findings: the same kind, tool and rule, and the same message
    or (for the kinds that relate a call to an identical earlier one) a repeat of the same call."""
    first = run[0]
    if (f.kind, f.tool, f.rule) != (first.kind, first.tool, first.rule):
        return False
    if f.message == first.message:
        return True
    related = f.related_index
    return (f.kind in _REPEAT_KINDS and related is not None
            and (related == run[-1].index or related == first.related_index))


_REPEAT_KINDS = frozenset({"redundant-call", "non-determinism", "retry-after-error"})


def _indices(run: list[Finding]) -> str:
    first, last = run[0].index, run[-1].index
    return f"indices {first}-{last}" if last - first + 1 == len(run) else f"indices {first}..{last} (with gaps)"


def finding_text_lines(findings: Sequence[Finding]) -> Iterator[str]:
    """The findings as the fleet text report lists them: one line each, but a run of RUN_LENGTH or more
    identical findings as one line where its first would be (see `_same`):
    `indices 2-99: redundant-call: 98 repeats of index 1: MESSAGE OF THE FIRST` or
    `indices 1-99: policy-violation: 99 identical findings: MESSAGE`."""
    runs: list[list[Finding]] = []
    open_runs: dict[tuple[str, str, str | None], list[Finding]] = {}
    run_of: list[list[Finding]] = []
    for f in findings:
        key = (f.kind, f.tool, f.rule)
        run = open_runs.get(key)
        if run is None or not _same(run, f):
            run = open_runs[key] = []
            runs.append(run)
        run.append(f)
        run_of.append(run)
    for f, run in zip(findings, run_of, strict=True):
        if len(run) < RUN_LENGTH:
            yield f"  index {f.index}: {f.kind}: {escape_text(f.message)}\n"
        elif run[0] is f:
            if f.message == run[-1].message:
                what = f"{len(run)} identical findings"
            else:
                what = f"{len(run)} repeats of index {f.related_index}"
            yield f"  {_indices(run)}: {f.kind}: {what}: {escape_text(f.message)}\n"


def _session_text(result: SessionResult, all_sessions: bool = False) -> Iterator[str]:
    """One session's lines of the text report: its head, then its findings indented (nothing for a session
    with nothing to report, unless `all_sessions`)."""
    if not all_sessions and not listed(result):
        return
    yield _session_head(result)
    yield from finding_text_lines(result.findings)
    checkpoint_findings = result.checkpoint.findings if result.checkpoint is not None else ()
    for kind, message in checkpoint_findings:
        yield f"  checkpoint: {kind}: {escape_text(message)}\n"
    left = result.listed_total - len(result.findings) - len(checkpoint_findings)
    if left:
        yield f"  ... {left} more findings not listed\n"


def _summary_text(summary: FleetSummary, all_sessions: bool = False) -> Iterator[str]:
    yield f"sessions: {summary.sessions}\n"
    if not all_sessions and summary.quiet:
        yield f"not listed above: {_plural(summary.quiet, 'session')} without findings (--all-sessions lists them)\n"
    yield f"unreadable: {summary.unreadable}\n"
    if summary.skipped:  # only when there were any: files found that are not regular files
        yield f"skipped: {summary.skipped}\n"
    yield (f"calls: {summary.calls}\n"
           f"sessions with findings: {summary.sessions_with_findings}\n"
           f"findings: {summary.counted}\n")
    if summary.state_aware or summary.information:  # listed, not in the findings above: changed-after-write
        yield f"information: {summary.information}\n"  # (state-aware), calls the guard blocked, approved, shadowed
    yield f"sealed: {summary.sealed}\nbroken chains: {summary.broken}\n"
    if summary.checkpoints:
        yield (f"checkpoints: {summary.checkpoints}\nsessions anchored: {summary.anchored}\n"
               f"failed checkpoints: {summary.failed_checkpoints}\nunverified checkpoints: {summary.unverified}\n")
    for title, counter in (("findings by kind", summary.by_kind), ("findings by tool", summary.by_tool),
                           ("findings by rule", summary.by_rule), ("information by kind", summary.information_by_kind)):
        if counter:
            yield f"{title}:\n"
            for name, count in ranked_counts(counter):
                yield f"  {escape_text(name)}: {count}\n"
    if summary.unknown_outcomes:
        yield f"sessions with unknown outcomes: {summary.unknown_outcomes}\n"
    top = summary.top_sessions()
    if top:
        yield "most distinct calls with findings:\n"
        for ranked in top:
            yield (f"  {_plural(ranked.distinct_calls, 'distinct call')}, {_plural(ranked.findings, 'finding')}, "
                   f"{_plural(ranked.calls, 'call')}: {escape_text(ranked.path)}\n")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def finding_json(finding: Finding) -> dict[str, Any]:
    """A finding as every JSON report shows it (`toolreplay.audit.findings.finding_fields`)."""
    return finding_fields(finding)


def _session_json(result: SessionResult) -> dict[str, Any]:
    chain = None if result.chain is None else ("intact" if result.chain.intact else "broken")
    document: dict[str, Any] = {
        "path": result.path, "error": result.error, "calls": result.calls, "sealed": result.sealed, "chain": chain,
        "first_broken_index": None if result.chain is None else result.chain.broken_at,
        "divergence": result.divergence, "findings_total": result.finding_count,
        "distinct_calls_with_findings": result.distinct_calls,
        "findings": [finding_json(f) for f in result.findings]}
    if result.information is not None:  # state-aware, or what the guard did: listed, not in findings_total
        document["information"] = result.information
    if result.tree is not None:  # only with --cite: the tree of the records this verdict is about
        document["tree"] = {"size": result.tree[0], "root": result.tree[1]}
    status = result.checkpoint
    if status is not None:  # only for a session with a checkpoint beside it
        document["checkpoint"] = {"path": status.path, "status": status.status, "origin": status.origin,
                                  "size": status.size, "unanchored": status.unanchored,
                                  "signed_by": list(status.signed_by),
                                  "findings": [{"kind": kind, "message": message} for kind, message in status.findings]}
    return document


def summary_json(summary: FleetSummary) -> dict[str, Any]:
    """The summary's facts as one JSON object (the checkpoint totals only when a session had a checkpoint)."""
    document: dict[str, Any] = {
        "sessions": summary.sessions, "unreadable": summary.unreadable, "calls": summary.calls,
        "sessions_with_findings": summary.sessions_with_findings, "findings": summary.counted,
        "sealed": summary.sealed, "broken_chains": summary.broken,
        "findings_by_kind": dict(ranked_counts(summary.by_kind)),
        "findings_by_tool": dict(ranked_counts(summary.by_tool)),
        "findings_by_rule": dict(ranked_counts(summary.by_rule)),
        "most_findings": [{"path": ranked.path, "distinct_calls_with_findings": ranked.distinct_calls,
                           "findings": ranked.findings, "calls": ranked.calls} for ranked in summary.top_sessions()],
        "unreadable_files": summary.unreadable_listed,
        "broken_chain_files": [{"path": path, "first_broken_index": at} for path, at in summary.broken_listed],
    }
    if summary.state_aware or summary.information:
        document["information"] = summary.information
    if summary.information_by_kind:
        document["information_by_kind"] = dict(ranked_counts(summary.information_by_kind))
    if summary.unknown_outcomes:
        document["sessions_with_unknown_outcomes"] = summary.unknown_outcomes
        document["unknown_outcome_files"] = [{"path": path, "calls": calls} for path, calls in summary.unknown_listed]
    if summary.skipped:
        document["skipped"] = summary.skipped
        document["skipped_files"] = [{"path": path, "reason": why} for path, why in summary.skipped_listed]
    if summary.checkpoints:
        document.update({"checkpoints": summary.checkpoints, "sessions_anchored": summary.anchored,
                         "failed_checkpoints": summary.failed_checkpoints,
                         "unverified_checkpoints": summary.unverified,
                         "failed_checkpoint_files": [{"path": path, "first_finding": first}
                                                     for path, first in summary.failed_listed]})
    return document


def _indented(document: Any, depth: int) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False).replace("\n", "\n" + " " * depth)


def iter_fleet_json(results: Iterable[SessionResult], summary: FleetSummary) -> Iterator[str]:
    """One JSON document: `sessions` (one object per session, in path order), then `summary`."""
    yield '{\n  "command": "audit",\n  "sessions": ['
    first = True
    for result in results:
        if result.skipped is not None:  # not a session: listed in the summary's skipped_files
            continue
        part = result.rendered if result.rendered is not None else _indented(_session_json(result), 4)
        yield ("\n    " if first else ",\n    ") + part
        first = False
    yield ("]" if first else "\n  ]") + ',\n  "summary": ' + _indented(summary_json(summary), 2) + "\n}\n"
