"""`scope`: every call checked against the agent's declared tools, by exact name."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from toolreplay.audit.findings import FindingList
from toolreplay.format.records import Record
from toolreplay.policy.model import Policy

__all__ = ["ScopeReport", "audit_scope", "audit_tool_facts", "tool_fact"]


@dataclass(frozen=True, slots=True)
class ScopeReport:
    """What scope found: the agent, the number of calls and the overreaching ones."""

    agent: str
    calls: int
    findings: FindingList


def tool_fact(record: Record) -> tuple[int, str]:
    """What scope keeps of a record: its index and tool name."""
    return record.index, record.tool


def audit_scope(records: Iterable[Record], policy: Policy) -> ScopeReport:
    """Report each call whose tool is not in the policy's allowed tools."""
    return audit_tool_facts(map(tool_fact, records), policy)


def audit_tool_facts(facts: Iterable[tuple[int, str]], policy: Policy) -> ScopeReport:
    """`audit_scope` over (index, tool) facts already extracted from the records."""
    findings = FindingList(context=policy.agent)
    allowed = policy.allowed_tools
    calls = 0
    for index, tool in facts:
        calls += 1
        if tool not in allowed:
            findings.append(index, "permission-overreach", tool)
    return ScopeReport(policy.agent, calls, findings)
