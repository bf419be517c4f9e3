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

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from toolreplay.audit.checks import Check
from toolreplay.audit.findings import FindingList
from toolreplay.audit.outcomes import Note, append_outcome_findings, approval_of, outcome_note, ran
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

    def counted(self, fail_on: frozenset[str] = frozenset()) -> int:
        """The findings that count (`toolreplay.audit.findings.counts`): all but blocked, approved and shadow
        calls, unless `fail_on` names their kind."""
        return self.findings.counted(False, fail_on)


ToolFact = tuple[int, str, "Note | None"]
RuleFact = tuple[int, str, Any, bool, "float | None", "Note | None"]


def tool_fact(record: Record) -> ToolFact:
    """What scope keeps of a record: its index, tool name and what its `meta` says the guard did."""
    return record.index, record.tool, outcome_note(record)


# A backtest (docs/policy.md) checks every call as the guard checked it; only the calls whose outcome
# says they ran, or may have (COUNTED_OUTCOMES), count for later `count`, `after`, `rate` and `identical`.
def _rule_fact(rules: RuleSet, record: Record) -> RuleFact:
    meta = record.meta
    if meta is None:
        return (record.index, record.tool, rules.prepare(record.tool, record.args), not is_refusal(record.response),
                None, None)
    ts = meta.get("ts")
    return (record.index, record.tool, rules.prepare(record.tool, record.args),
            meta.get("outcome", "ran") in COUNTED_OUTCOMES, None if ts is None else ts_seconds(ts),
            outcome_note(record))


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
    for index, tool, note in facts:
        calls += 1
        if note is None:  # format 1.0: judged by its tool alone
            if tool not in allowed:
                findings.append(index, "permission-overreach", tool)
            continue
        before = [] if tool in allowed or not ran(note) else [("permission-overreach", partial(
            findings.append, index, "permission-overreach", tool))]
        append_outcome_findings(findings, index, tool, note, before=before)
    return ScopeReport(policy.agent, calls, findings)


def _append_judged(findings: FindingList, index: int, tool: str, note: Note, effect: str,
                   verdicts: Sequence[tuple[str, str]]) -> None:
    """The findings of a call whose record says what the guard did: a violation only for a call that ran (or
    may have) against the policy; an ask a person approved is `approved`, a refused call `blocked`.

    `effect` is `permission-overreach` for a tool out of scope, else the effect of the `verdicts`."""
    first_rule = verdicts[0][0] if verdicts else None
    before: list[tuple[str, Any]] = []
    if ran(note):
        if effect == "permission-overreach":
            before.append((effect, partial(findings.append, index, effect, tool)))
        elif effect == "deny" or (verdicts and approval_of(note) is None):
            before += [("policy-violation", partial(findings.append_violation, index, tool, rule_id, effect, reason))
                       for rule_id, reason in verdicts]
    append_outcome_findings(findings, index, tool, note, rule=first_rule,
                            approved_rule=first_rule if effect == "ask" else None, before=before)


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
    for index, tool, prepared, counted, now, note in facts:
        calls += 1
        if tool not in allowed:  # the guard refuses it before the rules
            if note is None:
                findings.append(index, "permission-overreach", tool)
            else:
                _append_judged(findings, index, tool, note, "permission-overreach", ())
            continue
        if now is None:
            untimed = True
        if prepared is None:  # no rule has anything to say about this call
            if counted:
                state.note(tool, now)
            if note is not None:
                append_outcome_findings(findings, index, tool, note)
            continue
        ruling = state.check(tool, prepared, now)
        verdicts = ruling.denials or ruling.asks
        effect = "deny" if ruling.denials else "ask"
        if note is None:  # format 1.0: every call as the guard saw it
            for rule_id, reason in verdicts:
                findings.append_violation(index, tool, rule_id, effect, reason)
        else:
            _append_judged(findings, index, tool, note, effect, verdicts)
        if not counted:
            state.withdraw(ruling)
    unchecked = rules.unchecked_offline if untimed or not calls else ()
    return ScopeReport(policy.agent, calls, findings, True, unchecked)
