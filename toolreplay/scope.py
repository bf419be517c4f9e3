"""`scope` (SPEC.md §5): every call checked against the agent's declared tools, by exact name."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from toolreplay.findings import FindingList
from toolreplay.policy import Policy
from toolreplay.records import Record

__all__ = ["ScopeReport", "audit_scope"]


@dataclass(frozen=True, slots=True)
class ScopeReport:
    """What scope found: the agent, the number of calls and the overreaching ones."""

    agent: str
    calls: int
    findings: FindingList


def audit_scope(records: Iterable[Record], policy: Policy) -> ScopeReport:
    """Report each call whose tool is not in the policy's allowed tools."""
    findings = FindingList(context=policy.agent)
    allowed = policy.allowed_tools
    calls = 0
    for record in records:
        calls += 1
        if record.tool not in allowed:
            findings.append(record.index, "permission-overreach", record.tool)
    return ScopeReport(policy.agent, calls, findings)
