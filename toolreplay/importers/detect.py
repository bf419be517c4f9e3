"""`auto`: which format a log is, from the first message that only one format would write.

The same evidence guards a named format: a file whose first telling message belongs to another
format is an input error naming that message, instead of an import that silently finds no calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolreplay.errors import InputError
from toolreplay.importers.codex import is_bare_meta, is_exec_event, is_rollout_line
from toolreplay.importers.conversations import Conversation, Peekable, messages_of
from toolreplay.importers.gemini import RESPONSE_METHODS
from toolreplay.importers.gemini_cli import is_chat_message, is_chat_record
from toolreplay.importers.mini_swe_agent import fenced_actions, is_observation_text
from toolreplay.importers.openai_chat import is_placeholder
from toolreplay.importers.openhands import is_openhands_event
from toolreplay.importers.sse import is_stream_event

__all__ = ["Evidence", "find_evidence", "detect_format", "check_format", "closest_format", "describe", "is_known_to",
           "told_by_layout"]

_RESPONSES_TYPES = frozenset(
    {"function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output"}
)


@dataclass(frozen=True)
class Evidence:
    """The first message that tells the format: which format, where, and what gave it away."""

    format: str
    conversation: Conversation
    message: int | None
    reason: str


def _block_marker(content: Any) -> tuple[str, str] | None:
    if isinstance(content, list):
        for block in content:
            kind = block.get("type") if isinstance(block, dict) else None
            if isinstance(kind, str) and (kind.endswith("tool_use") or kind.endswith("tool_result")):
                return "anthropic", f"a {kind} content block"
    return None


def _parts_marker(parts: Any) -> tuple[str, str] | None:
    if isinstance(parts, list):
        for part in parts:
            for key in ("functionCall", "functionResponse"):
                if isinstance(part, dict) and key in part:
                    return "gemini", f'a "{key}" part'
    return None


def _agent_marker(message: Any) -> tuple[str, str] | None:
    """A line or message of a coding agent's own log (Codex, Gemini CLI, mini-swe-agent)."""
    if is_rollout_line(message):
        return "codex", f'a Codex rollout line ("type": "{message["type"]}", "payload")'
    if is_exec_event(message):
        return "codex", f'a codex exec --json event ("type": "{message["type"]}")'
    if is_bare_meta(message):
        return "codex", 'an older Codex rollout\'s session line ("id", "timestamp", "instructions")'
    if is_chat_message(message):
        return "gemini-cli", f'a Gemini CLI chat message ("id", "timestamp", "type": "{message["type"]}")'
    if is_chat_record(message):
        return "gemini-cli", 'a Gemini CLI chat recording line ("sessionId" and "projectHash", "$set" or "$rewindTo")'
    role = message.get("role")
    extra = message.get("extra")
    if role == "assistant" and isinstance(extra, dict) and isinstance(extra.get("actions"), list):
        return "mini-swe-agent", 'a mini-swe-agent message ("extra": {"actions"})'
    if role == "assistant" and "```mswea_bash_command" in str(message.get("content")) and fenced_actions(
            message.get("content")):
        return "mini-swe-agent", "a mini-swe-agent action (a mswea_bash_command block)"
    if role == "user" and is_observation_text(message.get("content")):
        return "mini-swe-agent", "a mini-swe-agent observation (<returncode>)"
    return None


def _layout_marker(message: Any) -> tuple[str, str] | None:
    """A message whose own layout tells the format, tool call or not."""
    agent = _agent_marker(message)
    if agent is not None:
        return agent
    if isinstance(message.get("sessionId"), str) and isinstance(message.get("type"), str):
        # `~/.claude/projects/*.jsonl`; stream-json writes `session_id` (a layout of its own)
        return "claude-code", 'a Claude Code transcript line ("sessionId")'
    if "parts" not in message and "role" not in message:
        if isinstance(message.get("candidates"), list):
            return "gemini", 'a Gemini response ("candidates")'
        method = message.get("method")
        if isinstance(method, str) and method in RESPONSE_METHODS and "response" in message:
            return "gemini", 'a Gemini CLI responses line ("method", "response")'
    return None


def _message_marker(message: Any) -> tuple[str, str] | None:
    """The format this message can only belong to, and why; None when it says nothing decisive."""
    if not isinstance(message, dict):
        return None
    if "jsonrpc" in message:
        return "mcp", "a JSON-RPC message"
    if is_openhands_event(message):
        return "openhands", "an OpenHands event"
    layout = _layout_marker(message)
    if layout is not None:
        return layout
    streamed = is_stream_event(message)
    if streamed is not None:  # a streamed response's event: its layout tells, tool call or not
        return streamed, _STREAM_EVENTS[streamed]
    kind = message.get("type")
    if isinstance(kind, str) and (kind in _RESPONSES_TYPES or kind.endswith("_call")):
        return "openai-responses", f"a {kind} item"
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls and isinstance(calls[0], dict):
        if isinstance(calls[0].get("function"), str):
            return "inspect-ai", 'a "tool_calls" entry whose "function" is a name'
        if "function" in calls[0]:
            return "openai-chat", 'a "tool_calls" entry with "function"'
        return "tau2", 'a "tool_calls" entry without "function"'
    if message.get("role") == "tool":
        if "tool_call_id" in message:
            return "openai-chat", 'a tool message with "tool_call_id"'
        if "requestor" in message:
            return "tau2", 'a tool message with "requestor"'
        if "tool_call_ids" in message:
            return "swe-agent", 'a tool message with "tool_call_ids"'
    if isinstance(message.get("function_call"), dict) and not is_placeholder(message["function_call"]):
        return "openai-chat", 'a "function_call"'
    return _parts_marker(message.get("parts")) or _block_marker(message.get("content"))


_STREAM_EVENTS = {"anthropic": "an Anthropic stream event", "openai-chat": 'a "chat.completion.chunk"',
                  "openai-responses": "a Responses stream event"}


# Layouts that tell the format by themselves.
_CONTAINERS = {
    "simulations": ("tau2", '"simulations"'),
    "resourceSpans": ("otel", 'an OTLP export ("resourceSpans")'),
    "samples": ("inspect-ai", 'an inspect_ai log ("samples")'),
    "agents-spans": ("openai-agents", 'Agents SDK spans ("span_data")'),
    "stream-json": ("claude-code", 'stream-json messages ("session_id")'),
    "history": ("swe-agent", 'a SWE-agent trajectory ("history")'),
    "contents": ("gemini", 'a Gemini request ("contents")'),
    "sdk-spans": ("otel", 'OpenTelemetry SDK span JSON ("context": {"trace_id", "span_id"})'),
    "steps": ("atif", 'an ATIF trajectory ("schema_version" and "steps")'),
    "mini-swe-agent": ("mini-swe-agent", 'a mini-swe-agent trajectory ("trajectory_format")'),
    "gemini-cli": ("gemini-cli", 'a Gemini CLI chat recording ("sessionId", "projectHash", "messages")'),
}


def find_evidence(conversations: Peekable[Conversation], limit: int | None = None) -> Evidence | None:
    """The first telling message of a log (a layout such as tau2's `simulations` tells at once), or None.
    `limit`: look at no more than this many messages (of a streamed file: they are kept for the pass)."""
    budget = limit
    for conversation in conversations.peek():
        if conversation.position == 0 and conversation.container in _CONTAINERS:
            first = next(messages_of(conversation, 1), None)
            fmt, reason = _CONTAINERS[conversation.container]
            if conversation.container == "history" and isinstance(first, dict) and is_openhands_event(first):
                fmt, reason = "openhands", 'an OpenHands evaluation output (events under "history")'

            return Evidence(fmt, conversation, None, reason)
        for position, message in enumerate(messages_of(conversation, budget)):
            found = _message_marker(message)
            if found is not None:
                return Evidence(found[0], conversation, position, found[1])
            if budget is not None:
                budget -= 1
                if budget <= 0:
                    return None
    return None


def detect_format(conversations: Peekable[Conversation], path: str) -> str:
    """The format of a log, for `auto`; an input error when no message tells."""
    evidence = find_evidence(conversations)
    if evidence is None:
        first = next((message for conversation in conversations.peek(1) for message in messages_of(conversation, 1)),
                     None)
        closest = closest_format(first)
        seen = f"the first message has {describe(first)}" if first is not None else "no message"
        hint = f"; the closest known format is {closest}" if closest is not None else ""
        raise InputError(
            path,
            None,
            f"cannot detect the format: no message is one that only a known format writes ({seen}{hint}; "
            "name the format instead of auto)",
        )
    return evidence.format


# How far a named format's check looks into a streamed file (what it reads is kept for the import).
CHECK_LIMIT = 10_000


def check_format(conversations: Peekable[Conversation], fmt: str) -> None:
    """Refuse a log whose first telling message (among the first CHECK_LIMIT) belongs to another format
    than the named one."""
    evidence = find_evidence(conversations, CHECK_LIMIT if conversations.streamed else None)
    if evidence is None or evidence.format == fmt:
        return
    if evidence.message is None:
        raise InputError(
            evidence.conversation.path,
            None,
            f"this is a {evidence.format} file ({evidence.reason}), not {fmt}",
        )
    raise evidence.conversation.error(
        evidence.message, f"{evidence.reason} belongs to the {evidence.format} format, not {fmt}"
    )


# Keys that messages of each format have: how close an unknown message is to a format (`closest_format`).
_FORMAT_KEYS = {
    "openai-chat": {"role", "content", "tool_calls", "tool_call_id", "name", "function_call"},
    "openai-responses": {"type", "id", "call_id", "name", "arguments", "output", "role", "content", "status"},
    "anthropic": {"role", "content", "type", "id", "name", "input", "tool_use_id", "stop_reason"},
    "mcp": {"jsonrpc", "id", "method", "params", "result", "error"},
    "gemini": {"role", "parts", "candidates", "contents"},
    "claude-code": {"type", "message", "sessionId", "uuid", "parentUuid", "session_id", "timestamp"},
    "swe-agent": {"role", "content", "action", "thought", "message_type", "tool_call_ids", "agent"},
    "openhands": {"id", "timestamp", "source", "action", "observation", "args", "message", "kind"},
    "codex": {"timestamp", "type", "payload", "thread_id", "item", "usage"},
    "gemini-cli": {"id", "timestamp", "type", "content", "toolCalls", "sessionId", "projectHash", "$set"},
    "mini-swe-agent": {"role", "content", "extra"},
}


def closest_format(message: Any) -> str | None:
    """The format whose messages share the most keys with this object (ties: the first listed), or None."""
    if not isinstance(message, dict) or not message:
        return None
    keys = set(message)
    best, score = None, 0
    for fmt, known in _FORMAT_KEYS.items():
        overlap = len(keys & known)
        if overlap > score:
            best, score = fmt, overlap
    return best


def describe(message: Any) -> str:
    """What a message is, in a few words: its `type`, else its first keys, else its JSON kind."""
    if isinstance(message, dict):
        if isinstance(message.get("type"), str):
            return f'"type": "{message["type"][:40]}"'
        keys = ", ".join(f'"{key[:40]}"' for key in list(message)[:3])
        return f"keys {keys}" if keys else "an empty object"
    if isinstance(message, list):
        return "an array"
    return "a string" if isinstance(message, str) else "a JSON value"


def is_known_to(fmt: str, message: Any) -> bool:
    """Whether a message is one the format reads (a chat message, or one the format's own layout
    tells), so that a file of them without a call is truly a session without calls."""
    if not isinstance(message, dict):
        return False
    marker = _message_marker(message)
    if marker is not None:
        return marker[0] == fmt
    if isinstance(message.get("role"), str):
        return True
    if fmt == "openai-responses":
        return message.get("type") in ("message", "reasoning")
    if fmt == "gemini":
        return isinstance(message.get("parts"), list)
    return fmt == "claude-code" and isinstance(message.get("type"), str)


def told_by_layout(conversation: Conversation) -> bool:
    """Whether a conversation's layout tells its format by itself (tau2's simulations, OTLP, ...)."""
    return conversation.container in _CONTAINERS
