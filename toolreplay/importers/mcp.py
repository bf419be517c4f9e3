"""MCP JSON-RPC 2.0 messages: `tools/call` requests paired with their responses by `id`.

A call is `{"jsonrpc": "2.0", "id", "method": "tools/call", "params": {"name", "arguments"}}`; its
response `{"jsonrpc": "2.0", "id", "result": {"content", "structuredContent", "isError"}}` is kept as
it is (with `"error": true` added in front when `isError` is true), and an `{"error": {...}}`
response becomes `{"error": {...}}`. Other requests, their responses and notifications are skipped.

Both sides send requests (the server its `ping`, `sampling/createMessage`, `elicitation/create`), and
their ids are separate spaces that may collide: a response answers the most recent request still
waiting with its id, so the client's answer to a server request made during a tool call is never
taken for the tool's result. A `tools/call` the server rejected (malformed, answered with a JSON-RPC
error) is a warning, not a record. `params` fields other than `name`, `arguments` and `_meta` (request
state, input responses of multi-round-trip calls) are kept in args under `_mcp_params`, so calls that
differ only there stay different.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from toolreplay.errors import InputError
from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import MISSING, CallId, Event, Note, ToolCall, ToolReply, flag_error

__all__ = ["read_events"]

_PARAMS_READ = frozenset({"name", "arguments", "_meta"})


def _message(conversation: Conversation, position: int, message: Any) -> dict[str, Any]:
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise conversation.error(position, 'not a JSON-RPC 2.0 message (an object with "jsonrpc": "2.0")')
    return message


def _request_id(conversation: Conversation, position: int, message: dict[str, Any]) -> CallId:
    value = message.get("id")
    if value is None or isinstance(value, bool) or not isinstance(value, (str, int)):
        raise conversation.error(position, 'a request or response "id" must be a string or an integer')
    return value


def _is_call(message: dict[str, Any]) -> bool:
    params = message.get("params")
    return isinstance(params, dict) and isinstance(params.get("name"), str) and bool(params["name"])


def _call(message: dict[str, Any], position: int, call_id: CallId) -> ToolCall:
    params = message["params"]
    arguments = params.get("arguments", MISSING)
    extra = {key: value for key, value in params.items() if key not in _PARAMS_READ}
    if extra:
        if arguments is MISSING or arguments is None:
            arguments = {}
        if isinstance(arguments, dict):
            arguments = {**arguments, "_mcp_params": extra}
    return ToolCall(call_id, params["name"], arguments, position)


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
    waiting: dict[CallId, list[str]] = {}  # id -> kinds of the requests still waiting, oldest first
    malformed: dict[CallId, list[tuple[int, InputError]]] = {}  # unreadable tools/call requests, until answered
    for position, raw in enumerate(conversation.messages):
        message = _message(conversation, position, raw)
        if "method" in message:
            if "id" not in message:
                if message["method"] == "tools/call":
                    yield Note("tools/call sent as a notification (no id) not imported", position)
                continue  # a notification: no response will come
            call_id = _request_id(conversation, position, message)
            kind = "other"
            if message["method"] == "tools/call":
                if _is_call(message):
                    kind = "tool"
                    yield _call(message, position, call_id)
                else:  # an error unless the server rejects it
                    kind = "malformed"
                    malformed.setdefault(call_id, []).append(
                        (position, conversation.error(position, 'a tools/call request has no "params.name" string'))
                    )
            waiting.setdefault(call_id, []).append(kind)
            continue
        if message.get("id", MISSING) is None:
            yield Note("response with a null id (to a request that could not be read) not imported", position)
            continue
        call_id = _request_id(conversation, position, message)
        kinds = waiting.get(call_id)
        kind = kinds.pop() if kinds else "tool"  # the newest request with this id is answered first
        if kind == "malformed":
            request, error = malformed[call_id].pop()
            if "error" not in message:
                raise error
            yield Note(
                f"the server rejected the tools/call request of message {request} (id {json.dumps(call_id)}, "
                'no "params.name" string); not imported',
                position,
            )
        elif kind == "tool":
            yield ToolReply(call_id, _response(conversation, position, message), position)
        # else: the response to initialize, tools/list, a server's request
    for errors in malformed.values():
        if errors:
            raise errors[0][1]
