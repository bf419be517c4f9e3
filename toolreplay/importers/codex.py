"""Codex CLI: session rollouts (`~/.codex/sessions/**/rollout-*.jsonl`) and `codex exec --json` streams.

A rollout is JSON Lines of `{"timestamp", "type", "payload"}` (a `RolloutLine`: `session_meta`,
`response_item`, `event_msg`, `turn_context`, `compacted`, ...). The payload of a `response_item` is a
Responses API item and is read as the `openai-responses` format reads it (`function_call`,
`custom_tool_call` and their outputs, paired by `call_id`), the line's `timestamp` being its call's
`ts`; a `local_shell_call` is a call of `local_shell` whose args are its `action` (`command`,
`working_directory`, `timeout_ms`, ...), answered by the `function_call_output` of its `call_id`. The
other lines say nothing of a call and are skipped. Older rollouts hold the items bare, one a line,
after a first line of session metadata (`{"id", "timestamp", "instructions"}`) and between
`{"record_type": "state"}` lines, a function call's output being `{"content", "success"}` (an error when
`success` is false).

`codex exec --json` writes `ThreadEvent`s (`thread.started`, `turn.started`, `item.started`,
`item.completed`, `turn.completed`, ...). Each completed tool item is a call and its reply:
`command_execution` (`{"command"}`; `{"output", "exit_code"}`, an error when it failed or was declined),
`file_change` (`{"changes"}`; `{"status"}`), `mcp_tool_call` (tool `mcp__SERVER__TOOL`, its `arguments`;
its `result`, or its `error`) and `web_search` (`{"query"}`; `{"action"}`). An item that started and
never completed is a call without a reply. Each `turn.started` begins a turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.openai_responses import is_model_item, item_events
from toolreplay.importers.pairing import (
    Event,
    Note,
    ToolCall,
    ToolReply,
    call_times,
    flag_error,
    iso_time,
    reply_response,
)
from toolreplay.importers.pairing import call_id as _call_id

__all__ = ["read_events", "ROLLOUT_TYPES", "EXEC_EVENTS", "is_rollout_line", "is_exec_event", "is_bare_meta"]

ROLLOUT_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted",
                           "inter_agent_communication", "inter_agent_communication_metadata", "world_state"})
EXEC_EVENTS = frozenset({"thread.started", "turn.started", "turn.completed", "turn.failed", "item.started",
                         "item.updated", "item.completed", "item.plan.delta", "request_user_input"})
_EXEC_TOOLS = frozenset({"command_execution", "file_change", "mcp_tool_call", "web_search"})
_EXEC_SKIPPED = frozenset({"agent_message", "reasoning", "plan", "todo_list", "error"})


def is_rollout_line(message: Any) -> bool:
    """Whether a line is a rollout line (`{"timestamp", "type", "payload"}` of a known type)."""
    return isinstance(message, dict) and isinstance(message.get("type"), str) and message["type"] in ROLLOUT_TYPES \
        and isinstance(message.get("payload"), dict)


def is_exec_event(message: Any) -> bool:
    """Whether a line is an event of `codex exec --json` (`"type": "thread.started"`, ...)."""
    return isinstance(message, dict) and isinstance(message.get("type"), str) and message["type"] in EXEC_EVENTS \
        and "role" not in message


def is_bare_meta(message: Any) -> bool:
    """Whether a line is the session metadata or a state line of an older rollout (bare items)."""
    if not isinstance(message, dict) or "type" in message or "role" in message:
        return False
    return message.get("record_type") == "state" or (
        isinstance(message.get("id"), str) and "timestamp" in message and "instructions" in message)


def _local_shell(conversation: Conversation, position: int, item: dict[str, Any], turn: int,
                 times: dict[str, Any]) -> ToolCall:
    action = item.get("action")
    if not isinstance(action, dict):
        raise conversation.error(position, 'a local_shell_call has no "action" object')
    args = {key: value for key, value in action.items() if key != "type"}
    return ToolCall(_call_id(item.get("call_id")), "local_shell", args, position, turn=turn, **times)


def _rollout_item(conversation: Conversation, position: int, raw: dict[str, Any]) -> dict[str, Any] | None:
    """The Responses item a line holds (a rollout's `response_item` payload, or a bare item), or None."""
    if is_rollout_line(raw):
        return raw["payload"] if raw["type"] == "response_item" else None
    if is_bare_meta(raw):
        return None
    if not (isinstance(raw.get("type"), str) or isinstance(raw.get("role"), str)):
        raise conversation.error(position, 'not a Codex rollout line ({"timestamp", "type", "payload"}), '
                                           "Responses item or exec event")
    return raw


def _item_id(item: dict[str, Any]) -> str | None:
    found = item.get("id")
    return found if isinstance(found, str) and found else None


def _item_key(item: dict[str, Any]) -> str:
    """What pairs an item's started and completed events: its id; without one (some versions write
    none), its type and what it runs."""
    found = _item_id(item)
    if found is not None:
        return "id:" + found
    what = item.get("command") if item["type"] == "command_execution" else [item.get("server"), item.get("tool"),
                                                                             item.get("query")]
    return f"{item['type']}:{what!r}"


class _ExecItems:
    """The tool items of a `codex exec --json` stream: a call and its reply when an item completes."""

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self.turn = -1
        self.started: dict[str, tuple[int, dict[str, Any], int]] = {}  # item key -> (position, item, turn)

    def add(self, position: int, event: dict[str, Any]) -> list[Event]:
        kind = event["type"]
        if kind == "turn.started":
            self.turn += 1
            return []
        if kind == "turn.failed":
            error = event.get("error")
            said = error.get("message") if isinstance(error, dict) else None
            return [Note("a turn failed" + (f": {said}" if isinstance(said, str) else ""), position)]
        if kind not in ("item.started", "item.updated", "item.completed"):
            return []
        item = event.get("item")
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise self.conversation.error(position, f'a {kind} event has no "item" object with a "type" string')
        if item["type"] not in _EXEC_TOOLS:
            if item["type"] not in _EXEC_SKIPPED and kind == "item.completed":
                return [Note(f"{item['type']} item not imported", position)]
            return []
        key = _item_key(item)
        if kind != "item.completed":
            first = self.started.get(key)
            self.started[key] = (first[0] if first else position, item, first[2] if first else self.turn)
            return []
        first = self.started.pop(key, None)
        start, turn = (first[0], first[2]) if first else (position, self.turn)
        return [self._call(start, item, turn), ToolReply(_item_id(item), self._response(position, item), position)]

    def _call(self, position: int, item: dict[str, Any], turn: int) -> ToolCall:
        kind, call_id = item["type"], _item_id(item)
        turn_kept = turn if turn >= 0 else None
        if kind == "command_execution":
            return ToolCall(call_id, "command_execution", {"command": item.get("command")}, position, turn=turn_kept)
        if kind == "file_change":
            return ToolCall(call_id, "file_change", {"changes": item.get("changes")}, position, turn=turn_kept)
        if kind == "web_search":
            return ToolCall(call_id, "web_search", {"query": item.get("query")}, position, turn=turn_kept)
        server, tool = item.get("server"), item.get("tool")
        if not isinstance(server, str) or not isinstance(tool, str) or not tool:
            raise self.conversation.error(position, 'an mcp_tool_call item has no "server" and "tool" strings')
        arguments = item.get("arguments")
        return ToolCall(call_id, f"mcp__{server}__{tool}", {} if arguments is None else arguments, position,
                        turn=turn_kept)

    def _response(self, position: int, item: dict[str, Any]) -> dict[str, Any]:
        kind, status = item["type"], item.get("status")
        failed = status in ("failed", "declined")
        if kind == "command_execution":
            response = {"output": item.get("aggregated_output"), "exit_code": item.get("exit_code")}
            if status == "declined":
                response = {"status": "declined", **response}
            return flag_error(response, failed, response)
        if kind == "file_change":
            return flag_error({"status": status}, failed, {"status": status})
        if kind == "web_search":
            return {"action": item.get("action")}
        error = item.get("error")
        if isinstance(error, dict):
            return {"error": True, "message": error.get("message")}
        result = item.get("result")
        if isinstance(result, dict):
            return flag_error(dict(result), failed, dict(result))
        return reply_response(result, failed) if result is not None else flag_error({}, failed, {})

    def end(self) -> list[Event]:
        events: list[Event] = []
        for position, item, turn in self.started.values():
            events.append(Note(f"{item['type']} {_item_id(item) or ''}".rstrip() + ": started and never completed "
                               "(no item.completed)", position))
            events.append(self._call(position, item, turn))
        self.started = {}
        return events


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The calls and replies of one rollout or exec stream, in line order."""
    exec_items = _ExecItems(conversation)
    turn, in_turn = -1, False
    for position, raw in enumerate(conversation.messages):
        if not isinstance(raw, dict):
            raise conversation.error(position, "not a Codex rollout line or exec event (a JSON object)")
        if is_exec_event(raw):
            yield from exec_items.add(position, raw)
            continue
        item = _rollout_item(conversation, position, raw)
        if item is None:
            continue
        if not isinstance(item.get("type"), str) and not isinstance(item.get("role"), str):
            raise conversation.error(position, 'a response_item\'s "payload" is not a Responses item (an object with '
                                               'a "type" or "role" string)')
        times = call_times(raw.get("timestamp"), None, iso_time) if is_rollout_line(raw) else {}
        model = is_model_item(item)
        if model is not None:
            turn += model and not in_turn
            in_turn = model
        kind = item.get("type")
        if kind == "local_shell_call":
            yield _local_shell(conversation, position, item, turn, times)
        elif kind == "function_call_output" and isinstance(item.get("output"), dict) and "content" in item["output"]:
            output = item["output"]  # older rollouts: {"content", "success"}
            failed = output.get("success") is False
            yield ToolReply(_call_id(item.get("call_id")), reply_response(output["content"], failed), position)
        elif kind == "local_shell_call_output":
            yield ToolReply(_call_id(item.get("call_id")), reply_response(item.get("output"), False), position)
        else:
            yield from item_events(conversation, position, item, turn, times)
    yield from exec_items.end()
