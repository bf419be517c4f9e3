"""What the guard did, read from a record's `meta` (docs/format.md): refused, approved, shadow, unknown.

A record written by the guard says what happened to each call (`meta.outcome`) and, for a call a
person approved, how (`x-confirmed`, `x-approval`, `x-remembered`, `x-remember-error`); a shadow rule's
would-be decisions are in `x-shadow`. Each becomes a finding of its own kind:

- `blocked` (information): the guard refused the call, with the rule or reason the refusal gives;
- `approved` (information): a call that ran after a person's yes, naming the remembered approval;
- `shadow` (information): what a shadow rule would have decided, one finding per decision;
- `unknown-outcome` (a finding): whether the call ran is not on record.

A record without `meta` (format 1.0, an import without outcomes) gives none of them. `outcome_note`
keeps what a record says in a small tuple (None without `meta`); `append_outcome_findings` turns it into
findings; `audit_outcome_facts` is the check over a whole session when there is no policy (with one,
`toolreplay.audit.scope` reads the same notes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from toolreplay.audit.checks import Check
from toolreplay.audit.findings import FindingList
from toolreplay.format.records import Record

__all__ = ["Note", "OutcomeFact", "APPROVAL_KEYS", "outcome_note", "outcome_fact", "ran", "approval_of",
           "blocked_rule", "append_outcome_findings", "audit_outcome_facts", "outcome_check"]

# (outcome, the refusal's or the failure's text, (approval key, its value) or None, the shadow decisions)
Note = tuple[str, str, "tuple[str, str] | None", "tuple[tuple[str, str, str], ...]"]
OutcomeFact = tuple[int, str, "Note | None"]

# How the guard records a person's yes, first found first: an approval that answered it, the approval the
# person's answer made, why it could not be remembered, and a plain yes (its scope, `once`).
APPROVAL_KEYS = ("x-approval", "x-remembered", "x-remember-error", "x-confirmed")
_RAN_OR_MAY_HAVE = frozenset({"ran", "unknown"})
_DENIED_BY_RULE = "denied by rule "
_NOTED = frozenset({"refused", "unknown"})


def outcome_note(record: Record) -> Note | None:
    """What a record's `meta` says the guard did (None for a record without `meta`)."""
    meta = record.meta
    if meta is None:
        return None
    outcome = meta.get("outcome", "ran")
    approval = None
    for key in APPROVAL_KEYS:
        value = meta.get(key)
        if isinstance(value, str):
            approval = (key, value)
            break
    text = _refusal_text(record.response) if outcome in ("refused", "unknown") else ""
    return outcome, text, approval, _shadows(meta.get("x-shadow"))


def outcome_fact(record: Record) -> OutcomeFact:
    """What the outcome check keeps of a record: index, tool, and its `outcome_note`."""
    return record.index, record.tool, outcome_note(record)


def ran(note: Note | None) -> bool:
    """Whether the call ran, or may have: a record without `meta` is taken as it reads (see scope)."""
    return note is None or note[0] in _RAN_OR_MAY_HAVE


def approval_of(note: Note) -> tuple[str, str] | None:
    """The person's yes a call that ran was given (its meta key and value), else None."""
    return note[2] if note[0] == "ran" else None


def blocked_rule(note: Note) -> str | None:
    """The rule a refusal names (`denied by rule ID: REASON`), else None."""
    text = note[1]
    if not text.startswith(_DENIED_BY_RULE):
        return None
    rule = text[len(_DENIED_BY_RULE):].split(":", 1)[0]
    return rule or None


def _refusal_text(response: Mapping[str, Any]) -> str:
    """The text of the guard's refusal (`{"ok": false, "error": TEXT}`, or an MCP error result's one text)."""
    error = response.get("error")
    if isinstance(error, str):
        return error
    content = response.get("content")
    if response.get("isError") is True and isinstance(content, list) and len(content) == 1 \
            and isinstance(content[0], dict) and isinstance(content[0].get("text"), str):
        text: str = content[0]["text"]
        return text.removeprefix("toolreplay: ")
    return ""


def _shadows(value: Any) -> tuple[tuple[str, str, str], ...]:
    """The decisions of `x-shadow` (a list of {"rule", "effect", "reason"?}); an entry of another shape is not read."""
    if not isinstance(value, list):
        return ()
    decisions = []
    for entry in value:
        if not isinstance(entry, dict):
            continue
        rule, effect, reason = entry.get("rule"), entry.get("effect"), entry.get("reason", "")
        if isinstance(rule, str) and rule and isinstance(effect, str) and effect and isinstance(reason, str):
            decisions.append((rule, effect, reason))
    return tuple(decisions)


def append_outcome_findings(findings: FindingList, index: int, tool: str, note: Note, *,
                            rule: str | None = None, approved_rule: str | None = None,
                            before: Iterable[tuple[str, Any]] = ()) -> None:
    """Append the findings of one call, in kind order: its note's, and `before` (kind, append-thunk) pairs.

    `rule` is the rule the policy gives a refused call when the refusal names none; `approved_rule` the
    rule that asked for the approval."""
    outcome, text, _, shadows = note
    if not before and not shadows and outcome not in _NOTED and approval_of(note) is None:
        return  # a call that simply ran: most records, nothing to say
    entries: list[tuple[str, Any]] = list(before)
    approval = approval_of(note)
    if approval is not None:
        key, value = approval
        entries.append(("approved", lambda: findings.append_note(index, "approved", tool, approved_rule, key, value)))
    if outcome == "refused":
        named = blocked_rule(note) or rule
        entries.append(("blocked", lambda: findings.append_note(index, "blocked", tool, named, "", text)))
    elif outcome == "unknown":
        entries.append(("unknown-outcome", lambda: findings.append_note(index, "unknown-outcome", tool, None, "",
                                                                          text)))
    for shadow_rule, effect, reason in shadows:
        entries.append(("shadow", lambda r=shadow_rule, e=effect, why=reason:
                        findings.append_note(index, "shadow", tool, r, e, why)))
    entries.sort(key=lambda entry: entry[0])  # stable: several of one kind keep their order
    for _, append in entries:
        append()


def audit_outcome_facts(facts: Iterable[OutcomeFact]) -> FindingList:
    """The outcome findings of a session, over the facts of `outcome_fact`, in record order."""
    findings = FindingList()
    for index, tool, note in facts:
        if note is not None:
            append_outcome_findings(findings, index, tool, note)
    return findings


def outcome_check() -> Check[OutcomeFact, FindingList]:
    """The outcome findings as a check (`toolreplay.audit.checks.Check`)."""
    return Check(outcome_fact, audit_outcome_facts)
