"""Text and JSON renderings of the audit reports: pure functions from a report to text.

Each `iter_*` function yields the rendering piece by piece, so a report with hundreds of thousands of
findings is written without ever being held as one string; the plain functions join the pieces.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from toolreplay.audit.chain import ChainReport
from toolreplay.audit.findings import finding_fields
from toolreplay.format.text import escape_text

if TYPE_CHECKING:  # modules load when their command runs: `seal` and `verify` need none of these
    from toolreplay.audit.checkpoint import CheckpointReport, CheckpointVerification
    from toolreplay.audit.findings import Finding
    from toolreplay.audit.mutators import Candidate
    from toolreplay.audit.replay import ReplayReport
    from toolreplay.audit.scope import ScopeReport

__all__ = ["replay_text", "replay_json", "scope_text", "scope_json", "chain_text", "chain_json", "torn_text",
           "torn_json", "checkpoint_text", "checkpoint_json",
           "iter_replay_text", "iter_replay_json", "iter_scope_text", "iter_scope_json", "mutators_text"]


def _finding_lines(findings: Iterable[Finding]) -> Iterator[str]:
    for f in findings:
        yield f"index {f.index}: {f.kind}: {escape_text(f.message)}\n"


def _json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _json_with_findings(head: dict[str, Any], findings: Sequence[Finding]) -> Iterator[str]:
    """Exactly `_json({**head, "findings": [...]})`, one finding at a time."""
    if not findings:
        yield _json({**head, "findings": []})
        return
    opening = _json({**head, "findings": [0]})
    yield opening[:opening.rindex("0")].rstrip(" ")
    for position, f in enumerate(findings):
        item = json.dumps(finding_fields(f), indent=2, ensure_ascii=False)
        yield ("" if position == 0 else ",\n") + "    " + item.replace("\n", "\n    ")
    yield "\n  ]\n}\n"


def iter_replay_text(report: ReplayReport) -> Iterator[str]:
    """The exact documented text (docs/commands.md), in pieces."""
    divergence = "none" if report.divergence is None else f"index {report.divergence}"
    if report.state_aware:  # changed-after-write is listed as information, not counted as a finding
        from toolreplay.audit.replay import counted_findings

        yield (f"calls: {report.calls}\ndivergence: {divergence}\nfindings: {counted_findings(report)}\n"
               f"information: {report.information}\n")
    else:
        yield f"calls: {report.calls}\ndivergence: {divergence}\nfindings: {len(report.findings)}\n"
    yield from _finding_lines(report.findings)


def iter_replay_json(report: ReplayReport) -> Iterator[str]:
    """The same facts as the replay text, as one JSON document, in pieces."""
    head: dict[str, Any] = {"command": "replay", "calls": report.calls, "divergence": report.divergence}
    if report.state_aware:
        from toolreplay.audit.replay import counted_findings

        head.update({"state_aware": True, "counted_findings": counted_findings(report),
                     "information": report.information})
    yield from _json_with_findings(head, report.findings)


def iter_scope_text(report: ScopeReport, fail_on: frozenset[str] = frozenset()) -> Iterator[str]:
    """The exact documented text (docs/commands.md), in pieces: `information: N` only when there is any
    (calls the guard refused, approved or shadowed, which do not count unless `fail_on` names them)."""
    counted = report.counted(fail_on)
    yield f"calls: {report.calls}\nfindings: {counted}\n"
    if counted != len(report.findings):
        yield f"information: {len(report.findings) - counted}\n"
    yield from _finding_lines(report.findings)
    for rule_id in report.unchecked_rules:
        yield (f"not checked: rule {rule_id}: a rate needs the time of each call (meta.ts), "
               "which this record does not carry\n")


def iter_scope_json(report: ScopeReport, fail_on: frozenset[str] = frozenset()) -> Iterator[str]:
    """The same facts as the scope text, as one JSON document, in pieces (`counted_findings` and
    `information` only when some findings do not count)."""
    head: dict[str, Any] = {"command": "scope", "agent": report.agent, "calls": report.calls}
    if report.has_rules:
        head["unchecked_rules"] = list(report.unchecked_rules)
    counted = report.counted(fail_on)
    if counted != len(report.findings):
        head.update({"counted_findings": counted, "information": len(report.findings) - counted})
    yield from _json_with_findings(head, report.findings)


def replay_text(report: ReplayReport) -> str:
    """The exact documented text (docs/commands.md)."""
    return "".join(iter_replay_text(report))


def replay_json(report: ReplayReport) -> str:
    """The same facts as `replay_text`, as one JSON document."""
    return "".join(iter_replay_json(report))


def scope_text(report: ScopeReport) -> str:
    """The exact documented text (docs/commands.md)."""
    return "".join(iter_scope_text(report))


def scope_json(report: ScopeReport) -> str:
    """The same facts as `scope_text`, as one JSON document."""
    return "".join(iter_scope_json(report))


def chain_text(report: ChainReport) -> str:
    """The chain's verdict (docs/commands.md): intact, empty (0 links: nothing verified), or where it breaks."""
    if report.intact:
        return "chain: intact\n" if report.links else "chain: empty (0 links)\n"
    return (f"chain: broken\nfirst broken link: index {report.broken_at}\n"
            f"expected: {report.expected}\nfound: {report.found}\n")


def _chain_document(report: ChainReport) -> dict[str, Any]:
    verdict = "broken" if not report.intact else "intact" if report.links else "empty"
    return {"command": "verify", "chain": verdict, "links_checked": report.links,
            "first_broken_index": report.broken_at, "field": report.field, "expected": report.expected,
            "found": report.found}


def chain_json(report: ChainReport) -> str:
    """The same facts as `chain_text`, as one JSON document (`links` counts the links checked)."""
    return _json(_chain_document(report))


def torn_text(size: int) -> str:
    """The line `verify` adds when the file's last line is incomplete (a write cut short)."""
    return f"last line incomplete ({size} bytes)\n"


def torn_json(document: str, size: int) -> str:
    """A `verify` JSON document with `last_line_incomplete`: the bytes of the incomplete last line."""
    parsed = json.loads(document)
    parsed["last_line_incomplete"] = size
    return _json(parsed)


def _checkpoint_lines(report: CheckpointReport, label: str, newest: bool = True) -> Iterator[str]:
    yield f"{label}: {'verified' if report.verified else 'failed'}\n"
    if report.checkpoint.kind == "tlog":
        yield "kind: tlog-checkpoint (the root of the Merkle tree over the links)\n"
    signatures = report.signatures
    if signatures.valid:
        yield f"signed by: {escape_text(', '.join(signatures.valid))}\n"
    for name in signatures.unknown:
        yield f"ignored signature: {escape_text(name)} (unknown key)\n"
    if not report.trusted:
        return
    checkpoint = report.checkpoint
    yield f"origin: {escape_text(checkpoint.origin)}\n"
    if report.found_head == checkpoint.head:
        yield f"anchored: {checkpoint.size} of {report.links} links\n"
        if report.unanchored and newest:
            yield f"not yet anchored: {report.unanchored} links after the checkpoint\n"


def checkpoint_text(result: CheckpointVerification) -> str:
    """The chain's verdict, then the checkpoint's (and the previous one's), then one line per finding."""
    lines = [chain_text(result.chain), *_checkpoint_lines(result.checkpoint, "checkpoint")]
    if result.previous is not None:
        lines += _checkpoint_lines(result.previous, "previous checkpoint", newest=False)
    lines += [f"{finding.kind}: {escape_text(finding.message)}\n" for finding in result.findings]
    return "".join(lines)


def _checkpoint_document(report: CheckpointReport) -> dict[str, Any]:
    checkpoint, trusted = report.checkpoint, report.trusted
    document: dict[str, Any] = {"path": report.path, "status": "verified" if report.verified else "failed",
            "signed_by": list(report.signatures.valid), "invalid_signatures": list(report.signatures.invalid),
            "ignored_signatures": list(report.signatures.unknown),
            "origin": checkpoint.origin if trusted else None, "size": checkpoint.size if trusted else None,
            "head": checkpoint.head if trusted else None, "links": report.links, "found_head": report.found_head,
            "unanchored": report.unanchored if trusted else None,
            "findings": [{"kind": f.kind, "message": f.message} for f in report.findings]}
    if checkpoint.kind == "tlog":  # a hash-chain checkpoint's document is as it always was
        document = {"path": document.pop("path"), "kind": "tlog", **document}
    return document


def checkpoint_json(result: CheckpointVerification) -> str:
    """The same facts as `checkpoint_text`, as one JSON document."""
    document = _chain_document(result.chain)
    document["checkpoint"] = _checkpoint_document(result.checkpoint)
    if result.previous is not None:
        document["previous"] = _checkpoint_document(result.previous)
    document["findings"] = [{"kind": f.kind, "message": f.message} for f in result.findings]
    return _json(document)


def mutators_text(candidates: Sequence[Candidate], sessions: int) -> str:
    """Proposed mutators as a mutators file to review: one tool a line, the evidence in a comment."""
    lines = [f"# {len(candidates)} candidate mutators from {sessions} session{'s' if sessions != 1 else ''}. "
             "Review: keep the tools that change state,\n",
             "# delete the others, save the file and pass it to `toolreplay replay --state-aware --mutators FILE`.\n",
             "# name: the write verb in the tool's name; after it: identical calls that returned a different\n",
             "# response / the same response when this tool ran between them.\n"]
    for c in candidates:
        shown = escape_text(c.tool)
        usable = shown == c.tool and "#" not in c.tool and not any(ch.isspace() for ch in c.tool)
        evidence = (f"name: {c.verb or '-'}; after it: {c.changed} different, {c.unchanged} same; "
                    f"calls: {c.calls}")
        lines.append(f"{shown}  # {evidence}\n" if usable else f"# (not a valid name line) {shown}  # {evidence}\n")
    return "".join(lines)
