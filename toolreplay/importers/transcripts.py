"""What a conversation asked and answered, beside its calls: the user's request, the final answer, the turns.

One reader for every format whose messages have roles (`openai-chat`, `openai-responses`, `anthropic`,
`tau2`, `inspect-ai`, `claude-code`, `gemini`, `swe-agent`, `openhands`, `atif`, `codex`, `gemini-cli`,
`mini-swe-agent`): a message's role is its `role` (Gemini's `model` is the assistant), or for Claude
Code lines the `role` of their `message`, for a Codex rollout its `user_message` events and assistant
`response_item`s, for a Gemini CLI chat message its `type` (`user`, `gemini`), or
for ATIF steps and OpenHands events their `source` (`user`, `agent`: the steps' `message`, the
`message` actions, the SDK's `MessageEvent`s, not tool calls or observations); its text is a string
content, or the text parts of its content (`text`, `input_text`, `output_text` blocks, Gemini `text`
parts that are not thoughts), or for a streamed response (`anthropic`, `openai-chat`,
`openai-responses`) the text its events stream, at its first event. Tool calls, tool results, images
and thinking are not text, nor are the lines a Claude Code transcript marks `isMeta` (notes of the
harness, not the user's words).

- the **request** is the text of the first user message that has text;
- the **answer** is the text of the last assistant message (or Claude Code `result` line) after the
  message of the last tool call or reply; a conversation whose last word is a tool call has none;
- the **turns**: calls asked for one after the other, with no reply between them, are one turn (the
  parallel calls of one model message, or of consecutive items or lines).

Formats without role messages (`mcp`, `otel`, `openai-agents`) have no request: their conversations
give none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from toolreplay.importers.conversations import Conversation, MessageStream
from toolreplay.importers.pairing import Event, ToolCall, ToolReply
from toolreplay.importers.streams import streamed_texts

__all__ = ["Transcript", "listed_messages", "message_role_text", "transcribe"]

_TEXT_TYPES = frozenset({"text", "input_text", "output_text"})
_ROLES = {"user": "user", "human": "user", "assistant": "assistant", "model": "assistant", "ai": "assistant"}


@dataclass(frozen=True)
class Transcript:
    """The request and final answer of one conversation (None when it has none), and each call's turn."""

    position: int
    request: str | None
    answer: str | None
    turns: tuple[int, ...]


def listed_messages(conversation: Conversation) -> Conversation:
    """The conversation with its messages as a list (a JSON Lines stream read whole, lines kept)."""
    stream = conversation.messages
    if not isinstance(stream, MessageStream):
        return conversation
    messages, lines = [], []
    for position, message in enumerate(stream):
        messages.append(message)
        lines.append(stream.line_of(position))
    return dataclasses.replace(conversation, messages=messages, lines=tuple(lines))


def _parts_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("thought") is True:
            continue
        kind = part.get("type")
        if (kind is None or kind in _TEXT_TYPES) and isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "\n".join(texts) if texts else None


def message_role_text(message: Any) -> tuple[str | None, str | None]:
    """A message's role (`user` or `assistant`, else None) and its text (None when it has none)."""
    if not isinstance(message, dict):
        return None, None
    if message.get("type") == "result" and isinstance(message.get("result"), str):  # Claude Code's last line
        return "assistant", message["result"]
    if isinstance(message.get("payload"), dict) and isinstance(message.get("timestamp"), str):
        return _rollout_role_text(message["type"], message["payload"])
    if message.get("type") in ("user", "gemini") and "role" not in message and "id" in message \
            and "message" not in message:  # a Gemini CLI chat message
        text = _parts_text(message.get("content"))
        return ("user" if message["type"] == "user" else "assistant"), text if text and text.strip() else None
    inner = message.get("message")
    if isinstance(inner, dict) and message.get("type") in ("user", "assistant"):  # Claude Code lines
        if message.get("isMeta") is True:  # a transcript's note from the harness, not the user's words
            return None, None
        message = inner
    if "role" not in message and "source" in message:
        return _source_role_text(message)
    role = message.get("role")
    if not isinstance(role, str) or role not in _ROLES:
        return None, None
    content = message["parts"] if "parts" in message and "content" not in message else message.get("content")
    text = _parts_text(content)
    if text is not None and not text.strip():
        text = None
    return _ROLES[role], text


def _rollout_role_text(kind: Any, payload: dict[str, Any]) -> tuple[str | None, str | None]:
    """A Codex rollout line: the user's words are its `user_message` events (its user `response_item`s
    also hold the harness's context and instructions), the assistant's its assistant messages."""
    if kind == "event_msg" and payload.get("type") == "user_message" and isinstance(payload.get("message"), str):
        return "user", payload["message"] if payload["message"].strip() else None
    if kind == "response_item" and payload.get("role") == "assistant":
        text = _parts_text(payload.get("content"))
        return "assistant", text if text is not None and text.strip() else None
    return None, None


def _source_role_text(message: dict[str, Any]) -> tuple[str | None, str | None]:
    """ATIF steps and OpenHands events say who spoke in `source` (`user`, `agent`): an ATIF step's text
    is its `message`, an OpenHands V0 `message` action's its `args.content`, and an SDK `MessageEvent`
    holds a chat message (`llm_message`)."""
    if message.get("kind") == "MessageEvent" and isinstance(message.get("llm_message"), dict):
        return message_role_text(message["llm_message"])
    source = message.get("source")
    role = {"user": "user", "agent": "assistant"}.get(source) if isinstance(source, str) else None
    if role is None:
        return None, None
    if "step_id" in message:
        content = message.get("message")
    elif message.get("action") == "message" and isinstance(message.get("args"), dict):
        content = message["args"].get("content")
    else:
        return None, None
    text = _parts_text(content)
    return role, text if text is not None and text.strip() else None


def _turns(events: Iterable[Event]) -> Iterator[tuple[int, int]]:
    """(turn, message) of each call, in call order."""
    turn = -1
    replied = True
    for event in events:
        if isinstance(event, ToolCall):
            if replied:
                turn, replied = turn + 1, False
            yield turn, event.message
        elif isinstance(event, ToolReply):
            replied = True


def transcribe(conversation: Conversation, events: list[Event]) -> Transcript:
    """The request, answer and turns of a conversation whose messages are a list, from its events."""
    messages = conversation.messages
    assert isinstance(messages, list), "transcribe needs the messages as a list"
    turns = list(_turns(events))
    last_tool = max((event.message for event in events if isinstance(event, (ToolCall, ToolReply))), default=-1)
    request = answer = None
    streamed = streamed_texts(messages)
    for position, message in enumerate(messages):
        role, text = ("assistant", streamed[position]) if position in streamed else message_role_text(message)
        if text is None:
            continue
        if role == "user" and request is None:
            request = text
        elif role == "assistant" and position > last_tool:
            answer = text
    return Transcript(conversation.position, request, answer, tuple(turn for turn, _ in turns))
