"""Gemini CLI chat recordings (`~/.gemini/tmp/PROJECT_HASH/chats/session-*.json[l]`).

The JSON layout is one `ConversationRecord`: `{"sessionId", "projectHash", "startTime", "lastUpdated",
"messages": [...]}`. The newer JSON Lines layout appends records as they change: a first line of
metadata (`sessionId`, `projectHash`), then each message whenever it changes (a message is written
again, whole, under the same `id`: the last one written counts, in the place of the first), `{"$set":
{...}}` lines (metadata, or `messages` written again) and `{"$rewindTo": ID}` lines, which take the messages from
that id on out of the conversation (Gemini CLI's `loadConversationRecord`): their calls ran, so they
are kept, with a warning.

A message is `{"id", "timestamp", "type": "user" | "gemini" | "info" | "error" | "warning", "content"}`;
a `gemini` message's `toolCalls` (`{"id", "name", "args", "result", "status", "timestamp"}`) are its
calls, each a model turn's. The reply is the call's `result` (Gemini parts: the `functionResponse`'s
`response` object; other parts' text as `{"text"}`), an error when its `status` is `error` or
`cancelled`; a call still `scheduled`, `validating`, `awaiting_approval` or `executing` has no reply.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import (
    MISSING,
    Event,
    Note,
    ToolCall,
    ToolReply,
    call_times,
    flag_error,
    iso_time,
    reply_response,
)

__all__ = ["read_events", "MESSAGE_TYPES", "is_chat_message", "is_chat_record"]

MESSAGE_TYPES = frozenset({"user", "gemini", "info", "error", "warning"})
_FAILED = frozenset({"error", "cancelled"})
_NO_CALLS: dict[str, Any] = {"type": "user"}  # what is kept of a message without calls
_DONE = frozenset({"success", "error", "cancelled"})


def is_chat_message(message: Any) -> bool:
    """Whether a value is a chat recording's message (`id`, `timestamp`, `type`, `content`, no `role`)."""
    return (isinstance(message, dict) and isinstance(message.get("id"), str) and isinstance(message.get("type"), str)
            and message["type"] in MESSAGE_TYPES
            and "timestamp" in message and "content" in message and "role" not in message)


def is_chat_record(message: Any) -> bool:
    """Whether a line is one of a JSON Lines recording's other records: metadata, `$set`, `$rewindTo`."""
    if not isinstance(message, dict):
        return False
    return (isinstance(message.get("$set"), dict) or isinstance(message.get("$rewindTo"), str)
            or (isinstance(message.get("sessionId"), str) and isinstance(message.get("projectHash"), str)
                and "type" not in message))


def _checked(conversation: Conversation, position: int, message: Any) -> dict[str, Any]:
    if not is_chat_message(message):
        raise conversation.error(position, 'not a Gemini CLI chat message (an object with "id", "timestamp", '
                                           '"type" and "content")')
    calls = message.get("toolCalls")
    if calls is not None and not isinstance(calls, list):
        raise conversation.error(position, '"toolCalls" must be an array')
    for call in calls or []:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
            raise conversation.error(position, 'a tool call has no "name" string')
    return dict(message)


def _messages(conversation: Conversation) -> tuple[list[tuple[int, dict[str, Any]]], list[Note]]:
    """The recording's messages, each once (its last writing, in the place of its first) with the position
    of that writing, those without calls as a stand-in (memory follows the calls, not the text); and a
    note per rewind that took away messages holding calls (they are kept)."""
    kept: dict[str, tuple[int, dict[str, Any]]] = {}
    notes: list[Note] = []
    for position, raw in enumerate(conversation.messages):
        if isinstance(raw, dict) and isinstance(raw.get("$rewindTo"), str):
            ids = list(kept)
            cut = ids.index(raw["$rewindTo"]) if raw["$rewindTo"] in ids else 0
            calls = sum(len(kept[key][1].get("toolCalls") or []) for key in ids[cut:])
            if calls:  # the calls ran: an audit keeps them, and says so
                notes.append(Note(f'"$rewindTo" takes back {len(ids) - cut} messages holding {calls} tool calls; '
                                  "the calls are kept (they ran)", position))
            continue
        if isinstance(raw, dict) and isinstance(raw.get("$set"), dict):
            messages = raw["$set"].get("messages")
        elif is_chat_record(raw):
            messages = raw.get("messages")
        else:
            messages = [raw]
        for message in messages if isinstance(messages, list) else []:
            checked = _checked(conversation, position, message)
            # written again: replaces, keeps its place; only a message with calls is kept whole
            kept[checked["id"]] = (position, checked if checked["type"] == "gemini" and checked.get("toolCalls")
                                   else _NO_CALLS)
    return list(kept.values()), notes


def _reply(result: Any, failed: bool) -> dict[str, Any]:
    parts = result if isinstance(result, list) else [result]
    for part in parts:
        body = part.get("functionResponse") if isinstance(part, dict) else None
        if isinstance(body, dict) and "response" in body:
            response = body["response"]
            kept = response if isinstance(response, dict) else {"result": response}
            return flag_error(kept, failed, {"result": response})
    return reply_response(result, failed)


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The calls and replies of one recording, in message order (each call followed by its reply)."""
    turn = -1
    messages, notes = _messages(conversation)
    yield from notes
    for position, message in messages:
        if message["type"] != "gemini" or not message.get("toolCalls"):
            continue
        turn += 1
        for call in message["toolCalls"]:
            call_id = call.get("id") if isinstance(call.get("id"), str) and call["id"] else None
            times = call_times(call.get("timestamp", message.get("timestamp")), None, iso_time)
            yield ToolCall(call_id, call["name"], call.get("args", MISSING), position, turn=turn, **times)
            status = call.get("status") if isinstance(call.get("status"), str) else None
            if status in _DONE and "result" in call:
                yield ToolReply(call_id, _reply(call["result"], status in _FAILED), position)
            elif status in _DONE:
                yield ToolReply(call_id, flag_error({"status": status}, status in _FAILED, {}), position)
