"""Propose candidate mutators from what sessions show, for a person to review; nothing is applied.

Two kinds of evidence, reported side by side:

- the name: a tool whose name holds a write verb (`set`, `update`, `create`, `delete`, `toggle`,
  `edit`, `bash`, ...) as one of its words (`user:toggle_roaming`, `str_replace_editor`);
- the effect: a tool that ran between two identical calls whose responses differ (the earlier one
  not an error), counted against the times it ran between two identical calls whose responses are
  the same. A change is credited to the tools with a write verb that ran between, when there are
  some, else to every tool that ran between.

A tool that a record already declares as changing state (`meta.mutates`, the guard's records) is not
proposed: replay counts its calls as a mutator's without being told. It counts as a tool named for
writing when a change is credited.

Memory per session grows with the distinct calls (the replay table) and the distinct tools. The
evidence of one session is a check of the one shape (`evidence_check`): replay's `state_fact` per
record, then `collect_evidence` over the facts in order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial

from toolreplay.audit.checks import Check
from toolreplay.audit.replay import StateFact, _CallTable, state_fact

__all__ = ["WRITE_VERBS", "READ_VERBS", "Candidate", "MutatorEvidence", "write_verb", "collect_evidence",
           "propose_mutators", "evidence_check"]

# Words that name a change of state. A verb of four letters or more also matches as a prefix
# (`editor`, `created`); shorter ones only as a whole word (`set`, not `settings`).
WRITE_VERBS = (
    "add", "append", "apply", "assign", "bash", "book", "cancel", "change", "charge", "commit", "connect",
    "create", "delete", "deploy", "disable", "disconnect", "drop", "edit", "enable", "exchange", "exec",
    "execute", "grant", "insert", "install", "kill", "make", "modify", "move", "patch", "pay", "post", "push",
    "put", "reboot", "refuel", "refund", "remove", "rename", "replace", "reseat", "reset", "restart", "resume",
    "return", "revoke", "run", "save", "send", "set", "shell", "submit", "suspend", "terminal", "toggle",
    "transfer", "update", "upload", "upsert", "write",
)
# A name that starts with one of these reads, whatever follows (`check_installed_apps`, `can_send_mms`).
READ_VERBS = frozenset({
    "can", "check", "count", "describe", "fetch", "find", "get", "has", "is", "list", "lookup", "open", "query",
    "read", "search", "show", "verify", "view",
})
_SHORT = frozenset(verb for verb in WRITE_VERBS if len(verb) < 4)
_LONG = tuple(verb for verb in WRITE_VERBS if len(verb) >= 4)
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def write_verb(tool: str) -> str | None:
    """The first write verb among the words of a tool name (after any `namespace:`), or None when
    there is none or the name starts with a read verb."""
    words: list[str] = [word.lower() for word in _WORD.findall(tool.rsplit(":", 1)[-1])]
    if words and words[0] in READ_VERBS:
        return None
    for word in words:
        if word in _SHORT:
            return word
        for verb in _LONG:
            if word.startswith(verb):
                return verb
    return None


@dataclass
class MutatorEvidence:
    """Per tool: calls, and the identical-call pairs it ran between, whose responses changed or not; and
    the tools some record declares as changing state (`meta.mutates`)."""

    calls: dict[str, int] = field(default_factory=dict)
    changed: dict[str, int] = field(default_factory=dict)
    unchanged: dict[str, int] = field(default_factory=dict)
    declared: set[str] = field(default_factory=set)


def collect_evidence(facts: Iterable[StateFact], evidence: MutatorEvidence) -> None:
    """Add one session's calls to `evidence` (facts from `state_fact`, in order)."""
    swap = _CallTable().swap
    last_call: dict[str, int] = {}
    verbs: dict[str, str | None] = {}
    declared = evidence.declared
    for index, tool, call_key, response_key, error, outcome, mutates in facts:
        if mutates:
            declared.add(tool)
        if outcome:  # no new answer of the tool (docs/format.md): no evidence either way
            continue
        earlier = swap(call_key, response_key, 1 if error else 0, index)
        if earlier is not None:
            previous_response, previous_error, previous = earlier
            if previous_response != response_key and not previous_error:
                tally = evidence.changed
            elif previous_response == response_key:
                tally = evidence.unchanged
            else:
                tally = {}
            between = [name for name, last in last_call.items() if last > previous]
            if tally is evidence.changed:
                # A change is credited to the tools named for writing that ran between, when there
                # are some: the reads that ran too are not its explanation.
                between = [name for name in between if verbs[name] is not None or name in declared] or between
            for name in between:
                tally[name] = tally.get(name, 0) + 1
        if tool not in verbs:
            verbs[tool] = write_verb(tool)
        last_call[tool] = index
        evidence.calls[tool] = evidence.calls.get(tool, 0) + 1


def evidence_check(evidence: MutatorEvidence) -> Check[StateFact, None]:
    """The evidence of one session as a check: `state_fact` per record, `collect_evidence` into `evidence`."""
    return Check(state_fact, partial(collect_evidence, evidence=evidence), encodes=True)


@dataclass(frozen=True)
class Candidate:
    """A proposed mutator and why: its write verb, and the reads that changed or not after it."""

    tool: str
    verb: str | None
    changed: int
    unchanged: int
    calls: int


def propose_mutators(evidence: MutatorEvidence, known: Iterable[str] = ()) -> list[Candidate]:
    """Tools with a write verb, or that identical reads changed after at least twice and more often
    than they stayed the same, sorted by name; `known` (already declared mutators) and the tools the
    records declare are left out."""
    skip = frozenset(known) | evidence.declared
    proposed = []
    for tool in sorted(evidence.calls):
        verb = write_verb(tool)
        changed = evidence.changed.get(tool, 0)
        unchanged = evidence.unchanged.get(tool, 0)
        if tool not in skip and (verb is not None or changed > max(unchanged, 1)):
            proposed.append(Candidate(tool, verb, changed, unchanged, evidence.calls[tool]))
    return proposed
