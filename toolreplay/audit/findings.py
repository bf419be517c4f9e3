"""Findings: the facts an audit reports, kept compact so a long session's report stays small."""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

__all__ = ["Finding", "FindingList", "KINDS", "NOTE_KINDS", "INFORMATION_KINDS", "SEVERITIES", "counts",
           "uncounted_kinds", "finding_fields"]

# Findings at one index are listed in the order of their kind's name. `changed-after-write` and
# `retry-after-error` come only from `replay --state-aware`; `approved`, `blocked`, `shadow` and
# `unknown-outcome` only from records whose `meta` says what the guard did (toolreplay.audit.outcomes).
# Several policy-violation findings at one index follow the order of the rules in the policy file. (New
# kinds go at the end of this tuple: its positions are stored.)
KINDS = ("changed-after-write", "non-determinism", "permission-overreach", "policy-violation", "redundant-call",
         "retry-after-error", "approved", "blocked", "shadow", "unknown-outcome")

# The kinds whose message is made from a note kept with the finding (`FindingList.append_note`).
NOTE_KINDS = frozenset({"approved", "blocked", "shadow", "unknown-outcome"})

# The one definition of what counts. A kind here is information (listed, never in a total, a ranking or an
# exit code unless the user asks: --count-changes for changed-after-write, --fail-on KIND for any); every
# other kind is a finding.
INFORMATION_KINDS = frozenset({"changed-after-write", "approved", "blocked", "shadow"})
SEVERITIES = ("finding", "information")


@dataclass(frozen=True, slots=True)
class Finding:
    """One finding: where, what kind, which tool, the related earlier call, the message, the rule (the id
    of the policy rule, for a policy-violation; None for every other kind) and its severity, `finding` or
    `information` (see `counts`)."""

    index: int
    kind: str
    tool: str
    related_index: int | None
    message: str
    rule: str | None = None

    @property
    def severity(self) -> str:
        """`information` for a kind in INFORMATION_KINDS, `finding` for every other."""
        return "information" if self.kind in INFORMATION_KINDS else "finding"


def counts(kind: str, count_changes: bool = False, fail_on: frozenset[str] = frozenset()) -> bool:
    """Whether a finding of this kind counts (in totals, rankings, charts and the exit code): a finding
    always, information only when asked for: changed-after-write by `count_changes`, any kind by `fail_on`."""
    return kind not in uncounted_kinds(count_changes, fail_on)


def uncounted_kinds(count_changes: bool = False, fail_on: frozenset[str] = frozenset()) -> frozenset[str]:
    """The kinds that do not count (`counts`): the information kinds the user did not ask to count."""
    asked = fail_on | {"changed-after-write"} if count_changes else fail_on
    return INFORMATION_KINDS - asked


def finding_fields(finding: Finding) -> dict[str, Any]:
    """A finding as every JSON report shows it, its fields always in this order (`rule` null but for a
    policy-violation, a shadow decision, and a blocked or approved call whose record names the rule)."""
    return {"index": finding.index, "kind": finding.kind, "severity": finding.severity, "tool": finding.tool,
            "rule": finding.rule, "related_index": finding.related_index, "message": finding.message}


def _message(kind: str, tool: str, related: int | None, context: str, verdict: tuple[str, str, str] | None,
             earlier: int | None = None) -> str:
    if kind in NOTE_KINDS:
        assert verdict is not None
        return _note_message(kind, tool, *verdict)
    if verdict is not None:
        rule_id, effect, reason = verdict
        action = "denied" if effect == "deny" else "needs confirmation"
        return f"tool '{tool}' {action} by rule {rule_id}: {reason}"
    if kind == "changed-after-write":
        return (f"tool '{tool}' returned a different response than the identical call at index {earlier} "
                f"after the state-changing call at index {related}")
    if kind == "retry-after-error":
        return (f"tool '{tool}' returned a different response than the identical call at index {related}, "
                "which returned an error (a retry)")
    if kind == "redundant-call":
        return f"tool '{tool}' repeats the identical call at index {related} with no state change between them"
    if kind == "non-determinism":
        return f"tool '{tool}' returned a different response than the identical call at index {related}"
    return f"tool '{tool}' is not in the declared scope for agent '{context}'"


def _note_message(kind: str, tool: str, rule: str, detail: str, text: str) -> str:
    if kind == "blocked":
        named = f" (rule {rule})" if rule and not text.startswith("denied by rule ") else ""
        return f"tool '{tool}' was refused by the guard{named}" + (f": {text}" if text else "")
    if kind == "approved":
        how = {"x-approval": f" (remembered approval {text})", "x-remembered": f" (remembered as approval {text})",
               "x-remember-error": f" (not remembered: {text})"}.get(detail, "")
        return f"tool '{tool}' ran after a person's yes{how}"
    if kind == "shadow":
        action = "deny" if detail == "deny" else "ask for confirmation" if detail == "ask" else detail
        return f"shadow rule {rule} would {action} tool '{tool}'" + (f": {text}" if text else "")
    ending = f": {text}" if text else ""
    return f"tool '{tool}' has an unknown outcome (it may have run){ending}"


class FindingList(Sequence[Finding]):
    """Findings appended in (index, kind) order, stored as arrays: a few dozen bytes each."""

    def __init__(self, context: str = "") -> None:
        self._context = context  # the agent name, for permission-overreach messages
        self._index = array("q")
        self._kind = array("b")
        self._related = array("q")
        self._tool = array("l")
        self._earlier: dict[int, int] = {}  # position -> earlier identical call, for changed-after-write
        self._tool_ids: dict[str, int] = {}
        self._tools: list[str] = []
        self._verdict = array("l")  # for policy-violation: position in _verdicts, else -1
        self._verdict_ids: dict[tuple[str, str, str], int] = {}
        self._verdicts: list[tuple[str, str, str]] = []

    def append_violation(self, index: int, tool: str, rule_id: str, effect: str, reason: str) -> None:
        """Record a policy-violation: the rule `rule_id` (effect deny or ask) fired for this reason."""
        verdict = (rule_id, effect, reason)
        verdict_id = self._verdict_ids.get(verdict)
        if verdict_id is None:
            verdict_id = self._verdict_ids[verdict] = len(self._verdicts)
            self._verdicts.append(verdict)
        self.append(index, "policy-violation", tool)
        self._verdict[-1] = verdict_id

    def append_note(self, index: int, kind: str, tool: str, rule: str | None, detail: str = "",
                    text: str = "") -> None:
        """Record a finding of a NOTE_KINDS kind: the rule it names (or None), and what its message says."""
        note = (rule or "", detail, text)
        note_id = self._verdict_ids.get(note)
        if note_id is None:
            note_id = self._verdict_ids[note] = len(self._verdicts)
            self._verdicts.append(note)
        self.append(index, kind, tool)
        self._verdict[-1] = note_id

    def append(self, index: int, kind: str, tool: str, related_index: int | None = None,
               earlier_index: int | None = None) -> None:
        """Record a finding; callers append in report order (index, then kind name). `earlier_index`:
        the identical call a changed-after-write compares with (`related_index` is the write)."""
        if earlier_index is not None:
            self._earlier[len(self._index)] = earlier_index
        tool_id = self._tool_ids.get(tool)
        if tool_id is None:
            tool_id = self._tool_ids[tool] = len(self._tools)
            self._tools.append(tool)
        self._index.append(index)
        self._kind.append(KINDS.index(kind))
        self._related.append(-1 if related_index is None else related_index)
        self._tool.append(tool_id)
        self._verdict.append(-1)

    def __len__(self) -> int:
        return len(self._index)

    def counted(self, count_changes: bool = False, fail_on: frozenset[str] = frozenset()) -> int:
        """How many of the findings count (`counts`), without making them."""
        uncounted = {KINDS.index(kind) for kind in uncounted_kinds(count_changes, fail_on)}
        return len(self._kind) - sum(self._kind.count(kind) for kind in uncounted)

    def _get(self, position: int) -> Finding:
        kind = KINDS[self._kind[position]]
        tool = self._tools[self._tool[position]]
        related = self._related[position]
        related_index = None if related < 0 else related
        verdict_id = self._verdict[position]
        verdict = None if verdict_id < 0 else self._verdicts[verdict_id]
        return Finding(self._index[position], kind, tool, related_index,
                       _message(kind, tool, related_index, self._context, verdict, self._earlier.get(position)),
                       None if verdict is None else verdict[0] or None)

    @overload
    def __getitem__(self, position: int) -> Finding: ...

    @overload
    def __getitem__(self, position: slice) -> list[Finding]: ...

    def __getitem__(self, position: int | slice) -> Finding | list[Finding]:
        if isinstance(position, slice):
            return [self._get(i) for i in range(*position.indices(len(self)))]
        if position < 0:
            position += len(self)
        if not 0 <= position < len(self):
            raise IndexError(position)
        return self._get(position)

    def __iter__(self) -> Iterator[Finding]:
        return (self._get(position) for position in range(len(self)))
