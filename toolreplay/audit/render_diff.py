"""Text and JSON renderings of a session diff or a folder diff: pure functions from the diff to text."""

from __future__ import annotations

import json
from typing import Any

from toolreplay.audit.diff import CallSide, FolderDiff, ResponsePair, SessionDiff
from toolreplay.format.canonical import canonical_json
from toolreplay.format.text import escape_text

__all__ = ["diff_json", "diff_text"]


def _call(call: CallSide) -> str:
    when = _when(call)
    return f"{call.tool} {canonical_json(call.args)}" + (f" ({when})" if when else "")


def _when(call: CallSide) -> str:
    """When the call ran and for how long, where the record says (format 1.1 `meta`)."""
    parts = [] if call.ts is None else [f"at {call.ts}"]
    if call.duration_ms is not None:
        parts.append(f"{call.duration_ms:g} ms")
    return ", ".join(parts)


def _pair(a: CallSide, b: CallSide) -> str:
    when_a, when_b = _when(a), _when(b)
    times = f" (a: {when_a or 'no time'}; b: {when_b or 'no time'})" if when_a or when_b else ""
    return f"{a.tool} {canonical_json(a.args)}{times}"


def _position(position: int, length: int) -> str:
    return "end" if position >= length else f"index {position}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _details(diff: SessionDiff) -> list[str]:
    """The lines every session diff has, from the count of common calls to the different responses."""
    if diff.first_divergence is None:
        divergence = "none"
    else:
        at_a, at_b = diff.first_divergence
        divergence = f"a {_position(at_a, diff.a_calls)}, b {_position(at_b, diff.b_calls)}"
    lines = [f"common calls: {diff.common}", f"first divergence: {divergence}",
             f"only in a: {len(diff.only_in_a)}"]
    lines += [f"  index {call.index}: {_call(call)}" for call in diff.only_in_a]
    lines.append(f"only in b: {len(diff.only_in_b)}")
    lines += [f"  index {call.index}: {_call(call)}" for call in diff.only_in_b]
    lines.append(f"different responses: {len(diff.different_responses)}")
    lines += [f"  a index {pair.a.index}, b index {pair.b.index}: {_pair(pair.a, pair.b)}"
              for pair in diff.different_responses]
    return lines


def _result(equal: bool) -> str:
    return "result: " + ("equal" if equal else "differ")


def diff_text(diff: SessionDiff | FolderDiff) -> str:
    """The diff for a reader; every name and argument from the sessions escaped."""
    if isinstance(diff, SessionDiff):
        lines = [f"a: {diff.a} ({_plural(diff.a_calls, 'call')})", f"b: {diff.b} ({_plural(diff.b_calls, 'call')})",
                 *_details(diff), _result(diff.equal)]
    else:
        lines = [f"a: {diff.a}", f"b: {diff.b}"]
        for name, pair in diff.pairs:
            lines.append(f"{name}: {'equal' if pair.equal else 'differ'}")
            if not pair.equal:
                lines += ["  " + line for line in _details(pair)]
        lines += [f"only in a: {name}" for name in diff.only_in_a]
        lines += [f"only in b: {name}" for name in diff.only_in_b]
        differing = sum(not pair.equal for _, pair in diff.pairs)
        lines.append(f"sessions: {len(diff.pairs)} compared, {differing} differ, {len(diff.only_in_a)} only in a, "
                     f"{len(diff.only_in_b)} only in b")
        lines.append(_result(diff.equal))
    return "".join(escape_text(line) + "\n" for line in lines)


def _side(call: CallSide) -> dict[str, Any]:
    side: dict[str, Any] = {"index": call.index, "tool": call.tool, "args": call.args}
    if call.ts is not None:
        side["ts"] = call.ts
    if call.duration_ms is not None:
        side["duration_ms"] = call.duration_ms
    return side


def _session_object(diff: SessionDiff) -> dict[str, Any]:
    first = None if diff.first_divergence is None else {
        "a": diff.first_divergence[0] if diff.first_divergence[0] < diff.a_calls else None,
        "b": diff.first_divergence[1] if diff.first_divergence[1] < diff.b_calls else None}
    return {"a": diff.a, "b": diff.b, "equal": diff.equal,
            "calls": {"a": diff.a_calls, "b": diff.b_calls, "common": diff.common},
            "first_divergence": first,
            "only_in_a": [_side(call) for call in diff.only_in_a],
            "only_in_b": [_side(call) for call in diff.only_in_b],
            "different_responses": [_different(pair) for pair in diff.different_responses]}


def _different(pair: ResponsePair) -> dict[str, Any]:
    item = {"a_index": pair.a.index, "b_index": pair.b.index, "tool": pair.a.tool, "args": pair.a.args,
            "a_response": pair.a_response, "b_response": pair.b_response}
    for side, call in (("a", pair.a), ("b", pair.b)):
        if call.ts is not None:
            item[f"{side}_ts"] = call.ts
        if call.duration_ms is not None:
            item[f"{side}_duration_ms"] = call.duration_ms
    return item


def diff_json(diff: SessionDiff | FolderDiff) -> str:
    """The same facts as `diff_text`, and both responses of each differing pair, as one JSON document."""
    if isinstance(diff, SessionDiff):
        document = {"command": "diff", **_session_object(diff)}
    else:
        document = {"command": "diff", "a": diff.a, "b": diff.b, "equal": diff.equal,
                    "sessions": [{"name": name, **_session_object(pair)} for name, pair in diff.pairs],
                    "only_in_a": list(diff.only_in_a), "only_in_b": list(diff.only_in_b)}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
