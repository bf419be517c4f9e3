"""`scope`: every call checked against the agent's declared tools and the policy's rules.

With rules, scope is a backtest: it evaluates them over the recorded calls in order, as the guard
would have (`toolreplay.policy.rules`). A call the rules deny, or that the record shows the guard
refused, did not execute: it does not count for later `after` and `count` conditions. A record's
`meta` (docs/format.md) says more: its outcome says what ran, and its `ts` lets `rate` rules be checked;
without times they are listed as not checked. See docs/policy.md.

The check has the shape of every check (`toolreplay.audit.checks.Check`, made by `scope_check`): a fact
per record (`tool_fact`; with rules, the extractor of `rule_fact_extractor`, which runs the argument
tests), then one pass over the facts in order (`audit_tool_facts`, `audit_rule_facts`: the history).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from toolreplay.audit.checks import Check
from toolreplay.audit.findings import FindingList
from toolreplay.format.records import Record, ts_seconds
from toolreplay.policy.model import Policy
from toolreplay.policy.refusals import is_refusal
from toolreplay.policy.rules import COUNTED_OUTCOMES, RuleSet, RuleState

__all__ = ["ScopeReport", "audit_scope", "audit_tool_facts", "tool_fact", "rule_fact_extractor",
           "audit_rule_facts", "ToolFact", "RuleFact", "scope_check"]

@dataclass(frozen=True, slots=True)
class ScopeReport:
    """What scope found: the agent, the number of calls, the findings, and the rules it could not check."""

    agent: str
    calls: int
    findings: FindingList
    has_rules: bool = False
    unchecked_rules: tuple[str, ...] = ()


ToolFact = tuple[int, str]
RuleFact = tuple[int, str, Any, bool, "float | None"]


def tool_fact(record: Record) -> ToolFact:
    """What scope keeps of a record: its index and tool name."""
    return record.index, record.tool


# A backtest (docs/policy.md) checks every call as the guard checked it; only the calls whose outcome
# says they ran, or may have (COUNTED_OUTCOMES), count for later `count`, `after`, `rate` and `identical`.
def _rule_fact(rules: RuleSet, record: Record) -> RuleFact:
    meta = record.meta
    if meta is None:
        return (record.index, record.tool, rules.prepare(record.tool, record.args), not is_refusal(record.response),
                None)
    ts = meta.get("ts")
    return (record.index, record.tool, rules.prepare(record.tool, record.args),
            meta.get("outcome", "ran") in COUNTED_OUTCOMES, None if ts is None else ts_seconds(ts))


def rule_fact_extractor(policy: Policy) -> Callable[[Record], RuleFact]:
    """What a rules backtest keeps of a record: index, tool, what the call alone decides, whether it
    counts as run, and its time.

    The argument tests run here, in the reader's worker processes; only the history is left to the
    caller."""
    return partial(_rule_fact, RuleSet(policy.rules))


def audit_scope(records: Iterable[Record], policy: Policy) -> ScopeReport:
    """Report each call whose tool is not in the policy's allowed tools, or which breaks a rule."""
    return scope_check(policy).over(records)


def scope_check(policy: Policy) -> Check[Any, ScopeReport]:
    """Scope as a check: by names only (`tool_fact`, `audit_tool_facts`), or with the policy's rules
    (`rule_fact_extractor`, `audit_rule_facts`) when it has any."""
    if policy.rules:
        return Check(rule_fact_extractor(policy), partial(audit_rule_facts, policy=policy))
    return Check(tool_fact, partial(audit_tool_facts, policy=policy))


def audit_tool_facts(facts: Iterable[ToolFact], policy: Policy) -> ScopeReport:
    """`audit_scope` by names only, over the facts of `tool_fact`."""
    findings = FindingList(context=policy.agent)
    allowed = policy.allowed_tools
    calls = 0
    for index, tool in facts:
        calls += 1
        if tool not in allowed:
            findings.append(index, "permission-overreach", tool)
    return ScopeReport(policy.agent, calls, findings)


def audit_rule_facts(facts: Iterable[RuleFact], policy: Policy) -> ScopeReport:
    """`audit_scope` with the rules, over the facts of `rule_fact_extractor`, in record order.

    Every call is checked; one the record shows refused, cached or cancelled does not count for later
    conditions; `rate` rules are checked on calls with a time, and listed as not checked when a call
    has none."""
    findings = FindingList(context=policy.agent)
    allowed = policy.allowed_tools
    rules = RuleSet(policy.rules)
    state = RuleState(rules, offline=True)
    calls = 0
    untimed = False
    for index, tool, prepared, counted, now in facts:
        calls += 1
        if tool not in allowed:  # the guard refuses it before the rules
            findings.append(index, "permission-overreach", tool)
            continue
        if now is None:
            untimed = True
        if prepared is None:  # no rule has anything to say about this call
            if counted:
                state.note(tool, now)
            continue
        ruling = state.check(tool, prepared, now)
        for rule_id, reason in ruling.denials or ruling.asks:
            findings.append_violation(index, tool, rule_id, "deny" if ruling.denials else "ask", reason)
        if not counted:
            state.withdraw(ruling)
    unchecked = rules.unchecked_offline if untimed or not calls else ()
    return ScopeReport(policy.agent, calls, findings, True, unchecked)
