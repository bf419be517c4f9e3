"""MCP JSON-RPC 2.0 messages: `tools/call` requests paired with their responses by `id`.

A call is `{"jsonrpc": "2.0", "id", "method": "tools/call", "params": {"name", "arguments"}}`; its
response `{"jsonrpc": "2.0", "id", "result": {"content", "structuredContent", "isError"}}` is kept as
it is (with `"error": true` added in front when `isError` is true), and an `{"error": {...}}`
response becomes `{"error": {...}}`. Other requests, their responses and notifications are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import MISSING, CallId, Event, Note, ToolCall, ToolReply, flag_error

__all__ = ["read_events"]


def _message(conversation: Conversation, position: int, message: Any) -> dict[str, Any]:
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise conversation.error(position, 'not a JSON-RPC 2.0 message (an object with "jsonrpc": "2.0")')
    return message


def _request_id(conversation: Conversation, position: int, message: dict[str, Any]) -> CallId:
    value = message.get("id")
    if value is None or isinstance(value, bool) or not isinstance(value, (str, int)):
        raise conversation.error(position, 'a request or response "id" must be a string or an integer')
    return value


def _call(conversation: Conversation, position: int, message: dict[str, Any], call_id: CallId) -> ToolCall:
    params = message.get("params")
    if not isinstance(params, dict) or not isinstance(params.get("name"), str) or not params["name"]:
        raise conversation.error(position, 'a tools/call request has no "params.name" string')
    return ToolCall(call_id, params["name"], params.get("arguments", MISSING), position)


def _response(conversation: Conversation, position: int, message: dict[str, Any]) -> dict[str, Any]:
    if ("result" in message) == ("error" in message):
        raise conversation.error(position, 'a response must have exactly one of "result" and "error"')
    if "error" in message:
        if not isinstance(message["error"], dict):
            raise conversation.error(position, 'a response\'s "error" must be an object')
        return {"error": message["error"]}
    result = message["result"]
    if not isinstance(result, dict):
        raise conversation.error(position, 'a tools/call response\'s "result" must be an object')
    is_error = result.get("isError", False)
    if not isinstance(is_error, bool):
        raise conversation.error(position, '"result.isError" must be true or false')
    return flag_error(result, is_error, {"result": result})


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The tools/call requests and their responses, in message order."""
    tool_ids: set[CallId] = set()
    other_ids: set[CallId] = set()
    for position, raw in enumerate(conversation.messages):
        message = _message(conversation, position, raw)
        if "method" in message:
            if "id" not in message:
                if message["method"] == "tools/call":
                    yield Note("tools/call sent as a notification (no id) not imported", position)
                continue  # a notification: no response will come
            call_id = _request_id(conversation, position, message)
            if message["method"] == "tools/call":
                tool_ids.add(call_id)
                yield _call(conversation, position, message, call_id)
            else:
                other_ids.add(call_id)
            continue
        if message.get("id", MISSING) is None:
            yield Note("response with a null id (to a request that could not be read) not imported", position)
            continue
        call_id = _request_id(conversation, position, message)
        if call_id in other_ids and call_id not in tool_ids:
            other_ids.discard(call_id)
            continue  # the response to initialize, tools/list, ...
        yield ToolReply(call_id, _response(conversation, position, message), position)
