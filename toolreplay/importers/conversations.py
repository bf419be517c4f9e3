"""Where the conversations are in a log file: one, or many, in JSON or JSON Lines.

A file is first read as one JSON document; when that fails and its first line is a JSON value on its
own, it is read as JSON Lines. Then (README, "Where conversations are"):

- JSON array of conversation objects (each with a `messages` or `traj` array): many conversations;
- any other JSON array: one conversation, the array being its messages;
- JSON object with `simulations` (tau2-bench): many, one per simulation's `messages`;
- JSON object with `messages` (or `traj`): one conversation;
- JSON Lines whose first line is an array or a conversation object: one conversation per line;
- JSON Lines of other objects (a lone object counts too): one message per line, one conversation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolreplay.errors import InputError
from toolreplay.format.strictjson import JSONLineError, StrictLoader

__all__ = ["Conversation", "find_conversations", "parse_json", "JSONTextError"]

_CONVERSATION_KEYS = ("messages", "traj")


JSONTextError = JSONLineError  # the importers' name for it


def parse_json(text: str) -> Any:
    """Parse one JSON text strictly; floats stay floats, so re-encoding with `json.dumps` is faithful."""
    return StrictLoader(keep_floats=True).loads(text)


@dataclass(frozen=True)
class Conversation:
    """One conversation: its position in the file, its messages, and where each message came from."""

    path: str
    position: int
    messages: list[Any]
    lines: tuple[int, ...] | None = None  # per message, for JSON Lines with one message per line
    line: int | None = None  # for JSON Lines with one conversation per line
    container: str = "messages"  # where the messages were: simulations, messages, traj, array, lines

    def line_of(self, message: int) -> int | None:
        """The file line of a message, when the file is JSON Lines."""
        return self.lines[message] if self.lines is not None else self.line

    def where(self, message: int) -> str:
        """`conversation C, message M`: positions count from 0, as in the JSON arrays."""
        return f"conversation {self.position}, message {message}"

    def error(self, message: int, text: str) -> InputError:
        """An input error located at one message of this conversation."""
        return InputError(self.path, self.line_of(message), f"{self.where(message)}: {text}")


def _is_conversation_object(value: Any) -> bool:
    return isinstance(value, dict) and any(key in value for key in _CONVERSATION_KEYS)


def _conversation(value: dict[str, Any], path: str, position: int, line: int | None) -> Conversation:
    key = next(key for key in _CONVERSATION_KEYS if key in value)
    messages = value[key]
    if not isinstance(messages, list):
        raise InputError(path, line, f'conversation {position}: "{key}" must be an array of messages')
    return Conversation(path, position, messages, line=line, container=key)


def _from_document(document: Any, path: str) -> list[Conversation]:
    if isinstance(document, dict) and "simulations" in document:
        simulations = document["simulations"]
        if not isinstance(simulations, list):
            raise InputError(path, None, '"simulations" must be an array')
        found = []
        for position, simulation in enumerate(simulations):
            if not isinstance(simulation, dict) or not isinstance(simulation.get("messages"), list):
                raise InputError(path, None, f'simulation {position}: no "messages" array')
            found.append(Conversation(path, position, simulation["messages"], container="simulations"))
        return found
    if _is_conversation_object(document):
        return [_conversation(document, path, 0, None)]
    if isinstance(document, list) and document and _is_conversation_object(document[0]):
        found = []
        for position, item in enumerate(document):
            if not _is_conversation_object(item):
                raise InputError(
                    path,
                    None,
                    f'element {position}: not a conversation object (no "messages" or '
                    '"traj"), unlike element 0',
                )
            found.append(_conversation(item, path, position, None))
        return found
    if isinstance(document, list):
        return [Conversation(path, 0, document, container="array")]
    if isinstance(document, dict):  # a lone message: JSON Lines with a single line
        return [Conversation(path, 0, [document], lines=(1,), container="lines")]
    raise InputError(path, None, "expected an array or an object of messages or conversations")


def _from_lines(lines: list[tuple[int, Any]], path: str) -> list[Conversation]:
    first = lines[0][1]
    if isinstance(first, list) or _is_conversation_object(first):
        found = []
        for position, (lineno, value) in enumerate(lines):
            if isinstance(value, list):
                found.append(Conversation(path, position, value, line=lineno, container="array"))
            elif _is_conversation_object(value):
                found.append(_conversation(value, path, position, lineno))
            else:
                raise InputError(
                    path,
                    lineno,
                    "not a conversation (an array of messages or an object with "
                    '"messages"), unlike line ' + str(lines[0][0]),
                )
        return found
    for lineno, value in lines:
        if not isinstance(value, dict) or _is_conversation_object(value):
            raise InputError(path, lineno, "not a message object, unlike line " + str(lines[0][0]))
    return [
        Conversation(
            path,
            0,
            [value for _, value in lines],
            lines=tuple(lineno for lineno, _ in lines),
            container="lines",
        )
    ]


def _parse_lines(text: str, path: str, whole_error: JSONTextError) -> list[tuple[int, Any]] | None:
    parsed = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip(" \t\r"):
            continue
        try:
            parsed.append((lineno, parse_json(line)))
        except JSONTextError as exc:
            if not parsed:  # not JSON Lines either: the whole-document error says more
                raise InputError(path, whole_error.lineno, str(whole_error)) from None
            raise InputError(path, lineno, str(exc)) from None
    return parsed


def find_conversations(data: bytes, path: str) -> list[Conversation]:
    """Decode a log file (UTF-8 JSON or JSON Lines) and return its conversations, in file order."""
    if data.startswith(b"\xef\xbb\xbf"):
        raise InputError(path, 1, "byte-order mark at start of file (UTF-8 without BOM expected)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            path, data.count(b"\n", 0, exc.start) + 1, f"invalid UTF-8 (byte 0x{data[exc.start]:02x})"
        ) from None
    if not text.strip(" \t\r\n"):
        raise InputError(path, None, "empty file: no conversation")
    try:
        conversations = _from_document(parse_json(text), path)
    except JSONTextError as exc:
        lines = _parse_lines(text, path, exc)
        conversations = _from_lines(lines or [], path)
    if not conversations:
        raise InputError(path, None, "no conversation found")
    return conversations
