"""mini-swe-agent trajectories (`*.traj.json`): `{"info", "messages", "trajectory_format":
"mini-swe-agent-1.1"}`, or the bare array of messages of earlier versions.

The messages are chat messages (`system`, `user`, `assistant`, `tool`, `exit`). An assistant message's
actions are its calls, each of `bash` with args `{"command"}`: those its `extra.actions` lists (each
`{"command", "tool_call_id"?}`, as mini-swe-agent 2 writes them), else its `tool_calls` (function
calling), else the one command of its text, fenced as mini-swe-agent's regex reads it
(```` ```mswea_bash_command ```` or ```` ```bash ````; a message with none or several holds no action:
the agent refused it as a format error). The observation messages that follow (`tool` messages by
`tool_call_id`, else `user` messages in order) are the replies: `{"returncode", "output"}` from the
message's `extra` (`returncode`, `raw_output`) or from its `<returncode>`/`<output>` text, else the
text itself; an observation with `exception_info` is an error. Each assistant message is a turn. With
the Responses API models, the model's message is the whole response (`"object": "response"`, its
`extra.actions` the calls) and a reply a `function_call_output` by `call_id`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import MISSING, Event, ToolCall, ToolReply, flag_error
from toolreplay.importers.pairing import call_id as _call_id

__all__ = ["read_events", "is_trajectory", "fenced_actions", "is_observation_text"]

_FENCES = (re.compile(r"```mswea_bash_command\s*\n(.*?)\n```", re.DOTALL),
           re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL))
_OBSERVATION = re.compile(r"<returncode>(-?[0-9]+)</returncode>\s*<output>\n?(.*?)</output>\s*\Z", re.DOTALL)


def is_trajectory(value: Any) -> bool:
    """Whether a JSON object is a mini-swe-agent trajectory (`"trajectory_format": "mini-swe-agent-..."`)."""
    kind = value.get("trajectory_format") if isinstance(value, dict) else None
    return isinstance(kind, str) and kind.startswith("mini-swe-agent")


def fenced_actions(content: Any) -> list[str] | None:
    """The commands fenced in an assistant text, by the first fence kind present; None when none is."""
    if not isinstance(content, str):
        return None
    for fence in _FENCES:
        found = [action.strip() for action in fence.findall(content)]
        if found:
            return found
    return None


def is_observation_text(content: Any) -> bool:
    """Whether a user message's text is an observation of mini-swe-agent (`<returncode>N</returncode>`)."""
    return isinstance(content, str) and content.startswith("<returncode>")


def _actions(conversation: Conversation, position: int, message: dict[str, Any], turn: int) -> list[ToolCall]:
    extra = message.get("extra")
    actions = extra.get("actions") if isinstance(extra, dict) else None
    if actions is not None:
        if not isinstance(actions, list) or not all(isinstance(a, dict) and isinstance(a.get("command"), str)
                                                    for a in actions):
            raise conversation.error(position, '"extra.actions" must be an array of objects with a "command" string')
        return [ToolCall(_call_id(action.get("tool_call_id")), "bash", {"command": action["command"]}, position,
                         turn=turn) for action in actions]
    tool_calls = message.get("tool_calls")
    if tool_calls:
        if not isinstance(tool_calls, list):
            raise conversation.error(position, '"tool_calls" must be an array or null')
        calls = []
        for call in tool_calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
                raise conversation.error(position, 'a tool call has no "function.name" string')
            calls.append(ToolCall(_call_id(call.get("id")), function["name"], function.get("arguments", MISSING),
                                  position, turn=turn))
        return calls
    found = fenced_actions(message.get("content"))
    if found is None or len(found) != 1:
        return []
    return [ToolCall(None, "bash", {"command": found[0]}, position, turn=turn)]


def _response(message: dict[str, Any]) -> dict[str, Any]:
    extra = message.get("extra")
    content = message.get("content")
    if isinstance(extra, dict) and ("raw_output" in extra or "returncode" in extra):
        response: dict[str, Any] = {"returncode": extra.get("returncode"), "output": extra.get("raw_output")}
        failed = extra.get("exception_info") not in (None, "")
        if failed:
            response["exception_info"] = extra["exception_info"]
        return flag_error(response, failed, response)
    match = _OBSERVATION.match(content) if isinstance(content, str) else None
    if match is not None:
        return {"returncode": int(match.group(1)), "output": match.group(2)}
    return {"text": content} if isinstance(content, str) else {"content": content}


def _role(message: Any) -> str | None:
    """Who wrote a message: its `role`; `assistant` for a Responses API response (the Responses models of
    mini-swe-agent keep the model's whole response), `output` for a `function_call_output`."""
    if not isinstance(message, dict):
        return None
    if isinstance(message.get("role"), str):
        return str(message["role"])
    if message.get("object") == "response":
        return "assistant"
    return "output" if message.get("type") == "function_call_output" else None


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The calls and replies of one trajectory, in message order."""
    turn = -1
    waiting = 0  # actions still waiting for a user observation
    for position, raw in enumerate(conversation.messages):
        role = _role(raw)
        if role is None:
            raise conversation.error(position, 'not a mini-swe-agent message (an object with a "role" string, a '
                                               'Responses "response" or a "function_call_output")')
        if role == "output":
            yield ToolReply(_call_id(raw.get("call_id")), _response(raw), position)
        elif role == "assistant":
            turn += 1
            calls = _actions(conversation, position, raw, turn)
            waiting = sum(1 for call in calls if call.call_id is None)
            yield from calls
        elif role == "tool":
            yield ToolReply(_call_id(raw.get("tool_call_id")), _response(raw), position)
        elif role == "user" and waiting:
            waiting -= 1
            yield ToolReply(None, _response(raw), position)
