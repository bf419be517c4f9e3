"""The JSON-RPC side of the MCP proxy: reading, writing and keying messages of the stdio transport."""

from __future__ import annotations

import json
import math
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any

from toolreplay.format.canonical import CanonicalError, canonical_bytes

__all__ = ["INVALID_PARAMS", "INVALID_REQUEST", "NO_ANSWER", "PARSE_ERROR", "PROTOCOL_VERSION_META", "Batch",
           "BigNumber", "Waiter", "call_key", "declares_form_elicitation", "dump_message", "error_message", "id_key",
           "key_id", "no_answer_error", "no_answer_reason", "not_sent_error", "not_sent_reason", "parse_message",
           "read_lines", "recordable", "refusal_result", "refused_unrun"]

PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
# The error a transport gives a request whose answer will never come (the connection dropped, an HTTP
# error): an implementation-defined server error, marked in `data` so the router knows it is the proxy's.
NO_ANSWER = -32000
_NO_ANSWER_MARK = {"toolreplay": "no answer"}
# The error the proxy gives a request it did not send, its server being down (restarts): marked likewise.
_INTERNAL_ERROR = -32603
_NOT_SENT_MARK = {"toolreplay": "not sent"}
# ... and of one the server refused before acting on it (HTTP 401 or 403): it did not run.
_REFUSED_MARK = {"toolreplay": "refused"}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class BigNumber(float):
    """A JSON number beyond a double (`1e400`): infinite as a float, written back as the text it came as."""

    text: str

    def __new__(cls, text: str) -> BigNumber:
        number = super().__new__(cls, float(text))
        number.text = text
        return number


def _number(text: str) -> float:
    value = float(text)
    return value if math.isfinite(value) else BigNumber(text)


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_number)


def parse_message(line: bytes) -> Any:
    """One message line as JSON (NaN and Infinity refused; a number beyond a double kept as a
    BigNumber); ValueError when it is not JSON. Lone surrogate escapes are valid JSON and kept."""
    # json.loads with these hooks, without building a decoder for every message (a few calls a message)
    if isinstance(line, str):
        if line.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", line, 0)
        return _DECODER.decode(line)
    if not isinstance(line, (bytes, bytearray)):
        raise TypeError(f"the JSON object must be str, bytes or bytearray, not {type(line).__name__}")
    return _DECODER.decode(line.decode(json.detect_encoding(line), "surrogatepass"))


def dump_message(message: Any) -> bytes:
    """One message as a line of compact UTF-8 JSON; lone surrogates and BigNumbers go out as they came
    (escaped; the number's own text)."""
    try:
        return json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8") + b"\n"
    except ValueError:  # a BigNumber, or a lone surrogate that UTF-8 cannot hold
        return _dump_carefully(message)


def _dump_carefully(message: Any) -> bytes:
    """ASCII JSON (lone surrogates escaped), each BigNumber put back in place of a unique placeholder."""
    nonce = secrets.token_hex(8)
    numbers: list[str] = []

    def swap(value: Any) -> Any:
        if isinstance(value, BigNumber):
            numbers.append(value.text)
            return f"toolreplay-number-{nonce}-{len(numbers) - 1}"
        if isinstance(value, dict):
            return {key: swap(item) for key, item in value.items()}
        if isinstance(value, list):
            return [swap(item) for item in value]
        return value

    text = json.dumps(swap(message), ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    for number, original in enumerate(numbers):
        text = text.replace(f'"toolreplay-number-{nonce}-{number}"', original, 1)
    return text.encode("ascii") + b"\n"


def recordable(value: Any) -> Any:
    """`value` with what the record format cannot hold replaced: a BigNumber by its text (a string),
    a lone surrogate by U+FFFD. Everything else is kept."""
    if isinstance(value, BigNumber):
        return value.text
    if isinstance(value, str):
        if not _has_lone_surrogate(value):
            return value
        return "".join("\ufffd" if 0xD800 <= ord(char) <= 0xDFFF else char for char in value)
    if isinstance(value, dict):
        return {recordable(key): recordable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [recordable(item) for item in value]
    return value


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def id_key(value: Any) -> str:
    """A table key for a JSON-RPC id of any JSON type: 1, 1.0 and "1" stay distinct."""
    kind = type(value)
    if kind is int:  # the usual ids, keyed as json.dumps would write them, without an encoder built each time
        return "int:" + int.__repr__(value)
    if kind is str:
        return "str:" + json.dumps(value)
    return kind.__name__ + ":" + json.dumps(value, sort_keys=True)


def key_id(key: str) -> Any:
    """The JSON-RPC id an `id_key` was made of."""
    return json.loads(key.split(":", 1)[1])


def declares_form_elicitation(message: dict[str, Any]) -> bool:
    """Whether a request of protocol 2026-07-28 declares, in its own `_meta`, that the client can show a form."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    capabilities = meta.get("io.modelcontextprotocol/clientCapabilities") if isinstance(meta, dict) else None
    elicitation = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
    return isinstance(elicitation, dict) and ("form" in elicitation or "url" not in elicitation)


def call_key(tool: str, args: dict[str, Any]) -> bytes | None:
    """The canonical key of a call (as the gate computes it), or None when the args have no JSON form."""
    try:
        return canonical_bytes({"tool": tool, "args": args})
    except (CanonicalError, RecursionError):
        return None


def error_message(message_id: Any, code: int, text: str) -> dict[str, Any]:
    """A JSON-RPC error response."""
    return {"jsonrpc": "2.0", "id": message_id, "error": {"code": code, "message": text}}


def no_answer_error(message_id: Any, reason: str, *, refused: bool = False) -> dict[str, Any]:
    """The error the proxy answers a request with when the server's answer will never come; `refused`: the
    server refused the request before acting on it (HTTP 401 or 403), so it did not run."""
    mark = _REFUSED_MARK if refused else _NO_ANSWER_MARK
    return {"jsonrpc": "2.0", "id": message_id,
            "error": {"code": NO_ANSWER, "message": "toolreplay: " + reason, "data": dict(mark)}}


def no_answer_reason(reply: dict[str, Any]) -> str | None:
    """Why no answer came, when `reply` is the proxy's `no_answer_error`; else None. A server that sent
    one itself only makes the proxy more careful: a write it answered so counts as of unknown outcome."""
    return _marked_reason(reply, NO_ANSWER, (_NO_ANSWER_MARK, _REFUSED_MARK), "toolreplay: ", "no answer")


def not_sent_error(message_id: Any, reason: str) -> dict[str, Any]:
    """The error the proxy answers a request with when it did not send it: its server ended (`reason`)."""
    return {"jsonrpc": "2.0", "id": message_id,
            "error": {"code": _INTERNAL_ERROR, "message": "Internal error: " + reason, "data": dict(_NOT_SENT_MARK)}}


def not_sent_reason(reply: dict[str, Any]) -> str | None:
    """Why the request was not sent, when `reply` is the proxy's `not_sent_error`; else None."""
    return _marked_reason(reply, _INTERNAL_ERROR, (_NOT_SENT_MARK,), "Internal error: ", "not sent")


def _marked_reason(reply: dict[str, Any], code: int, marks: tuple[dict[str, str], ...], prefix: str,
                   default: str) -> str | None:
    """The reason in one of the proxy's own errors (its `code` and one of its `marks` in `data`), without the
    message's `prefix`; None when `reply` is not such an error."""
    error = reply.get("error")
    if not isinstance(error, dict) or error.get("data") not in marks or error.get("code") != code:
        return None
    message = error.get("message")
    return message.removeprefix(prefix) if isinstance(message, str) else default


def refused_unrun(reply: dict[str, Any]) -> bool:
    """Whether `reply` is the proxy's `no_answer_error` for a request the server refused before running it. A
    server that sent one itself says it did not run the call, as it could in an error of its own."""
    error = reply.get("error")
    return isinstance(error, dict) and error.get("data") == _REFUSED_MARK and no_answer_reason(reply) is not None


def refusal_result(text: str, message: dict[str, Any]) -> dict[str, Any]:
    """The tool result a refused `tools/call` gets: the refusal as text, with `isError: true`."""
    result: dict[str, Any] = {"content": [{"type": "text", "text": "toolreplay: " + text}], "isError": True}
    meta = message["params"].get("_meta")
    if isinstance(meta, dict) and PROTOCOL_VERSION_META in meta:  # 2026-07-28: every result says its type
        result["resultType"] = "complete"
    return result


def read_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """The lines of the client's input. A real file is read with os.read: a thread blocked in a
    buffered reader would hold its lock when the interpreter exits, which aborts the process."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        yield from iter(stream.readline, b"")
        return
    parts: list[bytes] = []  # of a line longer than one read: joined once, when its end arrives
    while chunk := os.read(fd, 1 << 16):
        if b"\n" not in chunk:
            parts.append(chunk)
            continue
        *lines, rest = chunk.split(b"\n")
        lines[0] = b"".join(parts) + lines[0]
        for line in lines:
            yield line + b"\n"
        parts = [rest] if rest else []
    if parts:
        yield b"".join(parts)


class Waiter:
    """One reply awaited by a worker thread (`done`), or by a task in an event loop (`wake`)."""

    __slots__ = ("done", "line", "pending", "reply", "wake")

    def __init__(self, wake: Callable[[], None] | None = None) -> None:
        self.done = threading.Event()
        self.reply: dict[str, Any] | None = None
        self.line: bytes | None = None  # the reply's line as it came, when it came alone (not in a batch)
        self.pending: Any = None  # the transport's PendingAnswer, when the worker itself reads the reply
        self.wake = wake  # called, from any thread, once `done` is set

    def set(self) -> None:
        """The reply came, or none will: whoever waits goes on."""
        self.done.set()
        if self.wake is not None:
            self.wake()


class Batch:
    """The replies of one client batch, sent as one array once every request in it is answered."""

    def __init__(self, expected: set[str]) -> None:
        self.expected = expected
        self.replies: list[Any] = []
