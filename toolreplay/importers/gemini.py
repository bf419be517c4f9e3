"""Gemini `contents[].parts[]`: `functionCall` parts in model turns, `functionResponse` parts in replies.

A call is `{"functionCall": {"name", "args": object, "id"?}}`; a reply `{"functionResponse": {"name",
"response": object, "id"?}}`. Gemini usually writes no ids: a reply then pairs with the earliest
waiting call of the same name (by order and name); when both have an id, by id. The `response`
object is the record's response as it is (other values become `{"result": VALUE}`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import MISSING, Event, NameKey, ToolCall, ToolReply

__all__ = ["read_events"]


def _message(conversation: Conversation, position: int, message: Any) -> list[Any]:
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
    """The calls and replies of one conversation, in part order; each model content is a turn (its
    parallel functionCall parts share it)."""
    turn = -1
    for position, raw in enumerate(conversation.messages):
        parts = _message(conversation, position, raw)
        turn += raw.get("role") == "model"
        for part in parts:
            if not isinstance(part, dict):
                raise conversation.error(position, "a part must be an object")
            if "functionCall" in part:
                name, call_id = _pairing_id(conversation, position, part["functionCall"], "functionCall")
                yield ToolCall(call_id, name, part["functionCall"].get("args", MISSING), position,
                               turn=turn if raw.get("role") == "model" else None)
            elif "functionResponse" in part:
                body = part["functionResponse"]
                _, call_id = _pairing_id(conversation, position, body, "functionResponse")
                response = body.get("response", {})
                yield ToolReply(call_id, response if isinstance(response, dict) else {"result": response}, position)
