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
hold no turn). A response holds calls only: their replies are in the requests, so each call is
recorded without a response (a warning).
"""

from __future__ import annotations

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


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The calls and replies of one conversation, in part order."""
    for position, raw in enumerate(conversation.messages):
        notes: list[str] = []
        parts = _parts(conversation, position, raw, notes)
        yield from (Note(note, position) for note in notes)
        for part in parts:
            if not isinstance(part, dict):
                raise conversation.error(position, "a part must be an object")
            if "functionCall" in part:
                name, call_id = _pairing_id(conversation, position, part["functionCall"], "functionCall")
                yield ToolCall(call_id, name, part["functionCall"].get("args", MISSING), position)
            elif "functionResponse" in part:
                body = part["functionResponse"]
                _, call_id = _pairing_id(conversation, position, body, "functionResponse")
                response = body.get("response", {})
                yield ToolReply(call_id, response if isinstance(response, dict) else {"result": response}, position)
