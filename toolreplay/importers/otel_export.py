"""A session as OpenTelemetry: one OTLP JSON trace with one `execute_tool {tool}` span per record.

Each span is INTERNAL, named `execute_tool TOOL`, with the GenAI attributes `gen_ai.operation.name`
(`execute_tool`), `gen_ai.tool.name`, `gen_ai.tool.type` (`function`) and `gen_ai.tool.call.id`
(`call_INDEX`). Arguments and results may hold sensitive data, so `gen_ai.tool.call.arguments` and
`gen_ai.tool.call.result` (JSON text) are written only when asked for. A response with an `error`
(a refused guard request: `{"ok": false, "error": "tool not allowed: X"}`, a failed tool) sets
`error.type` and an error status.

Everything is derived from the session, so the same session exports the same bytes: the trace id is
the first 16 bytes of SHA-256 over the records' canonical bytes, each span id the first 8 bytes of
SHA-256 over the trace id and the record's index. A session has no clock: span N starts N ms after the
Unix epoch and lasts 1 ms, which keeps the record order for any reader that sorts by start time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import IO, Any

from toolreplay.format.records import read_session
from toolreplay.importers.conversations import parse_json
from toolreplay.importers.otlp import attribute

__all__ = ["export_otel", "error_type"]

_SPAN_KIND_INTERNAL = 1
_STATUS_ERROR = 2
_REFUSALS = ("tool not allowed: ", "budget exceeded: ", "confirmation required")
_MS = 1_000_000


class _Lines:
    """The lines of a file, remembering the last one handed out."""

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self.last = b""

    def __iter__(self) -> Iterator[bytes]:
        for line in self._handle:
            self.last = line
            yield line

    def readline(self, size: int = -1) -> bytes:
        """The next line (at most `size` bytes), as the session reader reads it."""
        self.last = self._handle.readline(size)
        return self.last


def error_type(response: dict[str, Any]) -> str | None:
    """The `error.type` of a response: a guard's refusal as it is, an exception's class name, or
    `tool_error`; None when the response has no error."""
    error = response.get("error")
    if error is None or error is False:
        return None
    if isinstance(error, str):
        if error.startswith(_REFUSALS):
            return error
        head = error.split(":", 1)[0]
        return head if ":" in error and head.isidentifier() else error
    return "tool_error"


def _span(trace_id: str, index: int, tool: str, args: Any, response: Any, content: bool) -> dict[str, Any]:
    span_id = hashlib.sha256(bytes.fromhex(trace_id) + index.to_bytes(8, "big")).hexdigest()[:16]
    attributes = [
        attribute("gen_ai.operation.name", "execute_tool"),
        attribute("gen_ai.tool.name", tool),
        attribute("gen_ai.tool.type", "function"),
        attribute("gen_ai.tool.call.id", f"call_{index}"),
    ]
    if content:
        attributes.append(attribute("gen_ai.tool.call.arguments", json.dumps(args, ensure_ascii=False)))
        attributes.append(attribute("gen_ai.tool.call.result", json.dumps(response, ensure_ascii=False)))
    span: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": span_id,
        "name": f"execute_tool {tool}",
        "kind": _SPAN_KIND_INTERNAL,
        "startTimeUnixNano": str(index * _MS),
        "endTimeUnixNano": str((index + 1) * _MS),
        "attributes": attributes,
    }
    kind = error_type(response)
    if kind is not None:
        attributes.append(attribute("error.type", kind))
        error = response.get("error")
        span["status"] = {"code": _STATUS_ERROR, **({"message": error} if isinstance(error, str) else {})}
    return span


def export_otel(handle: IO[bytes], path: str, content: bool) -> bytes:
    """The OTLP JSON export of one session file (plain or sealed): one line, ending in a newline."""
    lines = _Lines(handle)
    digest = hashlib.sha256(b"toolreplay session\n")
    records = []
    for record in read_session(lines, path):  # type: ignore[arg-type]
        digest.update(record.canonical_record + b"\n")
        value = parse_json(lines.last.decode("utf-8"))  # floats as written: 100.0 stays 100.0
        records.append((record.index, record.tool, value["args"], value["response"]))
    trace_id = digest.hexdigest()[:32]
    document = {
        "resourceSpans": [
            {
                "resource": {"attributes": [attribute("service.name", "toolreplay")]},
                "scopeSpans": [
                    {
                        "scope": {"name": "toolreplay"},
                        "spans": [_span(trace_id, *record, content) for record in records],
                    }
                ],
            }
        ]
    }
    return (json.dumps(document, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
