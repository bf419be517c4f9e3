"""Text and JSON renderings of the audit reports: pure functions from a report to a string."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from toolreplay.chain import ChainReport
from toolreplay.findings import Finding
from toolreplay.replay import ReplayReport
from toolreplay.scope import ScopeReport

__all__ = ["replay_text", "replay_json", "scope_text", "scope_json", "chain_text", "chain_json"]


def _finding_lines(findings: Iterable[Finding]) -> str:
    return "".join(f"index {f.index}: {f.kind}: {f.message}\n" for f in findings)


def _finding_objects(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    return [{"index": f.index, "kind": f.kind, "tool": f.tool, "related_index": f.related_index,
             "message": f.message} for f in findings]


def _json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def replay_text(report: ReplayReport) -> str:
    """The exact text of SPEC.md §4."""
    divergence = "none" if report.divergence is None else f"index {report.divergence}"
    return (f"calls: {report.calls}\ndivergence: {divergence}\nfindings: {len(report.findings)}\n"
            + _finding_lines(report.findings))


def replay_json(report: ReplayReport) -> str:
    """The same facts as `replay_text`, as one JSON document."""
    return _json({"command": "replay", "calls": report.calls, "divergence": report.divergence,
                  "findings": _finding_objects(report.findings)})


def scope_text(report: ScopeReport) -> str:
    """The exact text of SPEC.md §5."""
    return f"calls: {report.calls}\nfindings: {len(report.findings)}\n" + _finding_lines(report.findings)


def scope_json(report: ScopeReport) -> str:
    """The same facts as `scope_text`, as one JSON document."""
    return _json({"command": "scope", "agent": report.agent, "calls": report.calls,
                  "findings": _finding_objects(report.findings)})


def chain_text(report: ChainReport) -> str:
    """The exact text of SPEC.md §6."""
    if report.intact:
        return "chain: intact\n"
    return (f"chain: broken\nfirst broken link: index {report.broken_at}\n"
            f"expected: {report.expected}\nfound: {report.found}\n")


def chain_json(report: ChainReport) -> str:
    """The same facts as `chain_text`, as one JSON document (`links` counts the links checked)."""
    return _json({"command": "verify", "chain": "intact" if report.intact else "broken",
                  "links_checked": report.links, "first_broken_index": report.broken_at,
                  "field": report.field, "expected": report.expected, "found": report.found})
