"""Gemini `contents[].parts[]`: `functionCall` parts in model turns, `functionResponse` parts in replies.

A call is `{"functionCall": {"name", "args": object, "id"?}}`; a reply `{"functionResponse": {"name",
"response": object, "id"?}}`. Gemini usually writes no ids: a reply then pairs with the earliest
waiting call of the same name (by order and name); when both have an id, by id. The `response`
object is the record's response as it is (other values become `{"result": VALUE}`).

Model responses read too, each as the model turn it holds: a `GenerateContentResponse`
(`{"candidates": [{"content": {"role": "model", "parts": [...]}}]}`, candidate 0; one line of a
saved stream is one too), and a line of a Gemini CLI responses file (`--fake-responses`:
`{"method": "generateContent", "response": RESPONSE}` or `{"method": "generateContentStream",
"response": [CHUNK, ...]}`, the chunks' parts read in order; `countTokens` and `embedContent` lines
hold no turn). Arguments streamed in pieces (`partialArgs`, `willContinue`) are put together into one
call. A response holds calls only: their replies are in the requests, so each call is recorded
without a response (a warning).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import MISSING, Event, NameKey, Note, ToolCall, ToolReply

__all__ = ["read_events", "RESPONSE_METHODS"]

# The `method`s of a Gemini CLI responses file line, and whether its response holds a model turn.
RESPONSE_METHODS = {"generateContent": True, "generateContentStream": True, "countTokens": False,
                    "embedContent": False}


def _candidate_parts(conversation: Conversation, position: int, response: Any, notes: list[str]) -> list[Any]:
    """The parts of candidate 0 of a GenerateContentResponse (a response may have no candidate)."""
    if not isinstance(response, dict) or not isinstance(response.get("candidates", []), list):
        raise conversation.error(position, 'not a Gemini response (an object with a "candidates" array)')
    candidates: list[Any] = response.get("candidates", [])
    if not candidates:
        return []
    if len(candidates) > 1:
        notes.append(f'a response has {len(candidates)} candidates; only candidate 0 is read')
    candidate = candidates[0]
    content = candidate.get("content", {}) if isinstance(candidate, dict) else None
    if not isinstance(content, dict) or not isinstance(content.get("parts", []), list):
        raise conversation.error(position, 'a candidate must be an object whose "content" has a "parts" array')
    parts: list[Any] = content.get("parts", [])
    return parts


def _parts(conversation: Conversation, position: int, message: Any, notes: list[str]) -> list[Any]:
    if isinstance(message, dict) and "method" in message and "response" in message and "parts" not in message:
        method = message["method"]
        if not isinstance(method, str) or method not in RESPONSE_METHODS:
            raise conversation.error(position, f'"method" must be one of {", ".join(RESPONSE_METHODS)}')
        if not RESPONSE_METHODS[method]:
            return []
        response = message["response"]
        if method == "generateContentStream":
            if not isinstance(response, list):
                raise conversation.error(position, 'a generateContentStream "response" must be an array of chunks')
            return [part for chunk in response for part in _candidate_parts(conversation, position, chunk, notes)]
        return _candidate_parts(conversation, position, response, notes)
    if isinstance(message, dict) and "candidates" in message and "parts" not in message:
        return _candidate_parts(conversation, position, message, notes)
    if not isinstance(message, dict) or not isinstance(message.get("parts", []), list):
        raise conversation.error(position, 'not a Gemini content (an object with a "parts" array)')
    parts: list[Any] = message.get("parts", [])
    return parts


def _pairing_id(conversation: Conversation, position: int, body: Any, key: str) -> tuple[str, str]:
    if not isinstance(body, dict) or not isinstance(body.get("name"), str) or not body["name"]:
        raise conversation.error(position, f'a "{key}" part has no "name" string')
    call_id = body.get("id")
    # Without ids, the name pairs a reply with the earliest waiting call of that tool.
    return body["name"], call_id if isinstance(call_id, str) and call_id else NameKey(body["name"])


# One step of an RFC 9535 JSON path as Vertex AI writes them in `partialArgs`: `.name`, `['name']`, `[N]`.
_PATH_STEP = re.compile(r"\.([^.\[\]'\"]+)|\['((?:[^'\\]|\\.)*)'\]|\[\"((?:[^\"\\]|\\.)*)\"\]|\[(0|[1-9][0-9]{0,5})\]")


def _json_path(text: Any) -> list[str | int] | None:
    """The steps of a `jsonPath` (`$.a.b[0]`), or None when it is not one this reader follows."""
    if not isinstance(text, str) or not text.startswith("$") or text == "$":
        return None
    steps: list[str | int] = []
    position = 1
    while position < len(text):
        match = _PATH_STEP.match(text, position)
        if match is None:
            return None
        name, single, double, index = match.groups()
        quoted = single if single is not None else double
        steps.append(int(index) if index is not None else name if name is not None
                     else re.sub(r"\\(.)", r"\1", quoted))
        position = match.end()
    return steps


class _StreamedCall:
    """A function call whose arguments come in pieces (Vertex AI's `streamFunctionCallArguments`):
    `partialArgs` of `{jsonPath, stringValue | numberValue | boolValue | nullValue, willContinue}`, a
    string continuing in the next piece for the same path while its `willContinue` is true; the call
    is whole when a piece's own `willContinue` is not true."""

    def __init__(self, name: str, call_id: str, position: int) -> None:
        self.name, self.call_id, self.position = name, call_id, position
        self.args: dict[str, Any] = {}
        self.open: set[str] = set()  # paths whose string continues

    def add(self, conversation: Conversation, position: int, pieces: Any) -> None:
        if not isinstance(pieces, list):
            raise conversation.error(position, '"partialArgs" must be an array')
        for piece in pieces:
            steps = _json_path(piece.get("jsonPath")) if isinstance(piece, dict) else None
            if steps is None:
                raise conversation.error(position, 'a partialArgs entry needs a "jsonPath" like "$.a.b[0]"')
            value: Any = None
            for key in ("stringValue", "numberValue", "boolValue"):
                if key in piece:
                    value = piece[key]
            path = piece["jsonPath"]
            if isinstance(value, str) and path in self.open:
                value = self._get(steps) + value
            self.open.discard(path)
            if isinstance(value, str) and piece.get("willContinue") is True:
                self.open.add(path)
            self._set(conversation, position, steps, value)

    def _get(self, steps: list[str | int]) -> str:
        current: Any = self.args
        try:
            for step in steps:
                current = current[step]
        except (KeyError, IndexError, TypeError):  # a later piece replaced what held the string
            return ""
        return current if isinstance(current, str) else ""

    def unfinished(self) -> list[Event]:
        """The call as far as it came, and a note that its pieces never ended."""
        return [Note(f"call {self.name}: its streamed arguments did not end (no piece without "
                     '"willContinue": true); read as they were', self.position),
                ToolCall(self.call_id, self.name, self.args, self.position)]

    def _set(self, conversation: Conversation, position: int, steps: list[str | int], value: Any) -> None:
        holder: Any = self.args
        for step, following in zip(steps, [*steps[1:], None], strict=True):
            if isinstance(step, int) and isinstance(holder, list):
                holder.extend([None] * (step + 1 - len(holder)))
            elif not (isinstance(step, str) and isinstance(holder, dict)):
                raise conversation.error(position, "a partialArgs path goes through a value that is not an "
                                                   "object or array")
            if following is None:
                holder[step] = value
            elif isinstance(holder, dict) and step not in holder or holder[step] is None:
                holder[step] = [] if isinstance(following, int) else {}
            holder = holder[step]


def _function_call(conversation: Conversation, position: int, body: Any, streamed: _StreamedCall | None,
                   turn: int | None) -> tuple[list[Event], _StreamedCall | None]:
    """The events of one `functionCall` part (asked for in model turn `turn`), and the streamed call still
    waiting for pieces."""
    events: list[Event] = []
    pieces = isinstance(body, dict) and ("partialArgs" in body or body.get("willContinue") is True)
    if streamed is not None and isinstance(body, dict) and body.get("name") in (None, streamed.name) \
            and body.get("id") in (None, streamed.call_id) and "args" not in body:
        current = streamed  # the next piece of the call being streamed
    else:
        if streamed is not None:
            events += streamed.unfinished()
        name, call_id = _pairing_id(conversation, position, body, "functionCall")
        if not pieces:
            return [*events, ToolCall(call_id, name, body.get("args", MISSING), position, turn=turn)], None
        current = _StreamedCall(name, call_id, position)
    current.add(conversation, position, body.get("partialArgs", []))
    if body.get("willContinue") is True:
        return events, current
    return [*events, ToolCall(current.call_id, current.name, current.args, current.position, turn=turn)], None


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The calls and replies of one conversation, in part order; each model content is a turn (its
    parallel functionCall parts share it)."""
    streamed: _StreamedCall | None = None
    turn = -1
    for position, raw in enumerate(conversation.messages):
        notes: list[str] = []
        parts = _parts(conversation, position, raw, notes)
        yield from (Note(note, position) for note in notes)
        model = isinstance(raw, dict) and raw.get("role") == "model"
        turn += model
        for part in parts:
            if not isinstance(part, dict):
                raise conversation.error(position, "a part must be an object")
            if "functionCall" in part:
                events, streamed = _function_call(conversation, position, part["functionCall"], streamed,
                                                  turn if model else None)
                yield from events
            elif "functionResponse" in part:
                body = part["functionResponse"]
                _, call_id = _pairing_id(conversation, position, body, "functionResponse")
                response = body.get("response", {})
                yield ToolReply(call_id, response if isinstance(response, dict) else {"result": response}, position)
    if streamed is not None:
        yield from streamed.unfinished()
