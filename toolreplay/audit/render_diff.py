"""Text and JSON renderings of a session diff or a folder diff: pure functions from the diff to text."""

from __future__ import annotations

import json
from typing import Any

from toolreplay.audit.diff import CallSide, FolderDiff, SessionDiff
from toolreplay.format.canonical import canonical_json
from toolreplay.format.text import escape_text

__all__ = ["diff_json", "diff_text"]


def _call(call: CallSide) -> str:
    return f"{call.tool} {canonical_json(call.args)}"


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
    lines += [f"  a index {pair.a.index}, b index {pair.b.index}: {_call(pair.a)}"
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
    return {"index": call.index, "tool": call.tool, "args": call.args}


def _session_object(diff: SessionDiff) -> dict[str, Any]:
    first = None if diff.first_divergence is None else {
        "a": diff.first_divergence[0] if diff.first_divergence[0] < diff.a_calls else None,
        "b": diff.first_divergence[1] if diff.first_divergence[1] < diff.b_calls else None}
    return {"a": diff.a, "b": diff.b, "equal": diff.equal,
            "calls": {"a": diff.a_calls, "b": diff.b_calls, "common": diff.common},
            "first_divergence": first,
            "only_in_a": [_side(call) for call in diff.only_in_a],
            "only_in_b": [_side(call) for call in diff.only_in_b],
            "different_responses": [{"a_index": pair.a.index, "b_index": pair.b.index, "tool": pair.a.tool,
                                     "args": pair.a.args, "a_response": pair.a_response,
                                     "b_response": pair.b_response} for pair in diff.different_responses]}


def diff_json(diff: SessionDiff | FolderDiff) -> str:
    """The same facts as `diff_text`, and both responses of each differing pair, as one JSON document."""
    if isinstance(diff, SessionDiff):
        document = {"command": "diff", **_session_object(diff)}
    else:
        document = {"command": "diff", "a": diff.a, "b": diff.b, "equal": diff.equal,
                    "sessions": [{"name": name, **_session_object(pair)} for name, pair in diff.pairs],
                    "only_in_a": list(diff.only_in_a), "only_in_b": list(diff.only_in_b)}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
