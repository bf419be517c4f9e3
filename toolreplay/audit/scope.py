"""`scope`: every call checked against the agent's declared tools and the policy's rules.

With rules, scope is a backtest: it evaluates them over the recorded calls in order, as the guard
would have (`toolreplay.policy.rules`). A call the rules deny, or that the record shows the guard
refused, did not execute: it does not count for later `after` and `count` conditions. `rate` rules
are listed as not checked, since a record carries no time. See docs/policy.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from toolreplay.audit.findings import FindingList
from toolreplay.format.records import Record
from toolreplay.policy.model import Policy
from toolreplay.policy.refusals import is_refusal
from toolreplay.policy.rules import RuleSet, RuleState

__all__ = ["ScopeReport", "audit_scope", "audit_tool_facts", "tool_fact", "rule_fact_extractor",
           "audit_rule_facts"]

@dataclass(frozen=True, slots=True)
class ScopeReport:
    """What scope found: the agent, the number of calls, the findings, and the rules it could not check."""

    agent: str
    calls: int
    findings: FindingList
    has_rules: bool = False
    unchecked_rules: tuple[str, ...] = ()


def tool_fact(record: Record) -> tuple[int, str]:
    """What scope keeps of a record: its index and tool name."""
    return record.index, record.tool


def _rule_fact(rules: RuleSet, record: Record) -> tuple[int, str, Any, bool]:
    return record.index, record.tool, rules.prepare(record.tool, record.args), is_refusal(record.response)


def rule_fact_extractor(policy: Policy) -> Callable[[Record], tuple[int, str, Any, bool]]:
    """What a rules backtest keeps of a record: index, tool, what the call alone decides, refused.

    The argument tests run here, in the reader's worker processes; only the history is left to the
    caller."""
    return partial(_rule_fact, RuleSet(policy.rules))


def audit_scope(records: Iterable[Record], policy: Policy) -> ScopeReport:
    """Report each call whose tool is not in the policy's allowed tools, or which breaks a rule."""
    if policy.rules:
        return audit_rule_facts(map(rule_fact_extractor(policy), records), policy)
    return audit_tool_facts(map(tool_fact, records), policy)


def audit_tool_facts(facts: Iterable[tuple[int, str]], policy: Policy) -> ScopeReport:
    """`audit_scope` by names only, over (index, tool) facts already extracted from the records."""
    findings = FindingList(context=policy.agent)
    allowed = policy.allowed_tools
    calls = 0
    for index, tool in facts:
        calls += 1
        if tool not in allowed:
            findings.append(index, "permission-overreach", tool)
    return ScopeReport(policy.agent, calls, findings)


def audit_rule_facts(facts: Iterable[tuple[int, str, Any, bool]], policy: Policy) -> ScopeReport:
    """`audit_scope` with the rules, over the facts of `rule_fact_extractor`, in record order."""
    findings = FindingList(context=policy.agent)
    allowed = policy.allowed_tools
    rules = RuleSet(policy.rules)
    state = RuleState(rules, offline=True)
    calls = 0
    for index, tool, prepared, refused in facts:
        calls += 1
        if tool not in allowed:  # the guard refuses it before the rules
            findings.append(index, "permission-overreach", tool)
            continue
        if prepared is None:  # no rule has anything to say about this call
            if not refused:
                state.note(tool)
            continue
        ruling = state.check(tool, prepared)
        for rule_id, reason in ruling.denials or ruling.asks:
            findings.append_violation(index, tool, rule_id, "deny" if ruling.denials else "ask", reason)
        if refused:
            state.withdraw(ruling)
    return ScopeReport(policy.agent, calls, findings, True, rules.unchecked_offline)
