"""The JSON-RPC side of the MCP proxy: reading, writing and keying messages of the stdio transport."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from typing import IO, Any

from toolreplay.format.canonical import CanonicalError, canonical_bytes

__all__ = ["INVALID_PARAMS", "INVALID_REQUEST", "PARSE_ERROR", "PROTOCOL_VERSION_META", "Batch", "Waiter",
           "call_key", "declares_form_elicitation", "dump_message", "error_message", "id_key", "parse_message",
           "read_lines", "refusal_result"]

PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_message(line: bytes) -> Any:
    """One message line as JSON (NaN and Infinity refused); ValueError when it is not JSON."""
    return json.loads(line, parse_constant=_reject_constant)


def dump_message(message: Any) -> bytes:
    """One message as a line of compact UTF-8 JSON."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def id_key(value: Any) -> str:
    """A table key for a JSON-RPC id of any JSON type: 1, 1.0 and "1" stay distinct."""
    return type(value).__name__ + ":" + json.dumps(value, sort_keys=True)


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
    """One reply awaited by a worker thread."""

    __slots__ = ("done", "reply")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.reply: dict[str, Any] | None = None


class Batch:
    """The replies of one client batch, sent as one array once every request in it is answered."""

    def __init__(self, expected: set[str]) -> None:
        self.expected = expected
        self.replies: list[Any] = []
