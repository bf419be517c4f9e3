"""A session as OpenTelemetry: one OTLP JSON trace, an `invoke_agent` span, an `execute_tool` span per record.

Each tool span is INTERNAL, a child of the session's `invoke_agent` span, named `execute_tool TOOL`,
with the GenAI attributes `gen_ai.operation.name` (`execute_tool`), `gen_ai.tool.name`,
`gen_ai.tool.type` (`function`) and, where the record's `meta` has one, `gen_ai.tool.call.id`. The rest
of `meta` travels as `toolreplay.turn`, `toolreplay.outcome`, `toolreplay.mutates` and `toolreplay.meta`
(the `x-` keys as JSON text), and `toolreplay.ts` (the record's own spelling of its start), so the import gives the
record back. Arguments and results may hold sensitive data, so
`gen_ai.tool.call.arguments` and `gen_ai.tool.call.result` (JSON text) are written only when asked
for. A response with an `error` (a refused guard request: `{"ok": false, "error": "tool not allowed:
X"}`, a failed tool) sets `error.type` and an error status.

Times: a record with `meta.ts` starts then and lasts its `duration_ms` (1 ms when it has none). A record
without `meta.ts` starts where the span before it ended (the first at `start`, by default the Unix
epoch) and is marked `toolreplay.placed_time`, so a reader (and the import) knows the time is not a
recorded one; a record with a time and no duration is marked `toolreplay.placed_end`. The
`invoke_agent` span runs from the first start to the last end.

Everything is derived from the session, so the same session exports the same bytes: the trace id is
the first 16 bytes of SHA-256 over the records' canonical bytes, each span id the first 8 bytes of
SHA-256 over the trace id and the record's index (the session's span: over the trace id and `session`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import IO, Any

from toolreplay.format.records import read_session, ts_nanoseconds
from toolreplay.importers.conversations import parse_json
from toolreplay.importers.otlp import attribute

__all__ = ["export_otel", "error_type"]

_SPAN_KIND_INTERNAL = 1
_STATUS_ERROR = 2
_REFUSALS = ("tool not allowed: ", "budget exceeded: ", "confirmation required", "confirmation declined",
             "confirmation timed out")
_MS = 1_000_000
# index, tool, args, response, meta, start and end (ns), whether the times were placed (no meta.ts)
_Exported = tuple[int, str, Any, Any, "dict[str, Any] | None", int, int, bool]


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


def _span(trace_id: str, parent: str, record: _Exported, content: bool) -> dict[str, Any]:
    index, tool, args, response, meta, start, end, placed = record
    span_id = hashlib.sha256(bytes.fromhex(trace_id) + index.to_bytes(8, "big")).hexdigest()[:16]
    attributes = [
        attribute("gen_ai.operation.name", "execute_tool"),
        attribute("gen_ai.tool.name", tool),
        attribute("gen_ai.tool.type", "function"),
    ]
    if meta is not None and "call_id" in meta:
        attributes.append(attribute("gen_ai.tool.call.id", meta["call_id"]))
    if content:
        attributes.append(attribute("gen_ai.tool.call.arguments", json.dumps(args, ensure_ascii=False)))
        attributes.append(attribute("gen_ai.tool.call.result", json.dumps(response, ensure_ascii=False)))
    if meta is not None:
        if "turn" in meta:
            attributes.append(attribute("toolreplay.turn", meta["turn"]))
        if "outcome" in meta:
            attributes.append(attribute("toolreplay.outcome", meta["outcome"]))
        if "mutates" in meta:
            attributes.append(attribute("toolreplay.mutates", meta["mutates"]))
        own = {key: value for key, value in meta.items() if key.startswith("x-")}
        if own:
            attributes.append(attribute("toolreplay.meta", json.dumps(own, ensure_ascii=False, allow_nan=False)))
    if placed:
        attributes.append(attribute("toolreplay.placed_time", True))
    elif meta is not None:
        # the record's own spelling of its time (the span's start is the same instant, in ns), and whether
        # its end was placed (a record with a time but no duration)
        attributes.append(attribute("toolreplay.ts", meta["ts"]))
        if "duration_ms" not in meta:
            attributes.append(attribute("toolreplay.placed_end", True))
    span: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": f"execute_tool {tool}",
        "kind": _SPAN_KIND_INTERNAL,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": attributes,
    }
    kind = error_type(response)
    if kind is not None:
        attributes.append(attribute("error.type", kind))
        error = response.get("error")
        span["status"] = {"code": _STATUS_ERROR, **({"message": error} if isinstance(error, str) else {})}
    return span


def _times(meta: dict[str, Any] | None, previous_end: int) -> tuple[int, int, bool]:
    """A span's start and end (ns) and whether they were placed rather than recorded (module docstring)."""
    duration = None if meta is None else meta.get("duration_ms")
    length = _MS if duration is None else round(duration * _MS)
    if meta is not None and "ts" in meta:
        start = ts_nanoseconds(meta["ts"])
        return start, start + length, False
    return previous_end, previous_end + length, True


def _root(trace_id: str, span_id: str, records: list[_Exported]) -> dict[str, Any]:
    """The session's `invoke_agent` span, the parent of every tool span, from the first start to the last end."""
    return {
        "traceId": trace_id,
        "spanId": span_id,
        "name": "invoke_agent",
        "kind": _SPAN_KIND_INTERNAL,
        "startTimeUnixNano": str(min((record[5] for record in records), default=0)),
        "endTimeUnixNano": str(max((record[6] for record in records), default=0)),
        "attributes": [attribute("gen_ai.operation.name", "invoke_agent")],
    }


def export_otel(handle: IO[bytes], path: str, content: bool, start: int = 0) -> bytes:
    """The OTLP JSON export of one session file (plain or sealed): one line, ending in a newline.

    `start` (nanoseconds since the Unix epoch) places the first record without `meta.ts`."""
    lines = _Lines(handle)
    digest = hashlib.sha256(b"toolreplay session\n")
    records: list[_Exported] = []
    previous_end = start
    for record in read_session(lines, path):  # type: ignore[arg-type]
        digest.update(record.canonical_record + b"\n")
        value = parse_json(lines.last.decode("utf-8"))  # floats as written: 100.0 stays 100.0
        begin, end, placed = _times(record.meta, previous_end)
        previous_end = end
        records.append((record.index, record.tool, value["args"], value["response"], record.meta, begin, end, placed))
    trace_id = digest.hexdigest()[:32]
    root_id = hashlib.sha256(bytes.fromhex(trace_id) + b"session").hexdigest()[:16]
    spans = [_span(trace_id, root_id, record, content) for record in records]
    document = {
        "resourceSpans": [
            {
                "resource": {"attributes": [attribute("service.name", "toolreplay")]},
                "scopeSpans": [
                    {
                        "scope": {"name": "toolreplay"},
                        "spans": [_root(trace_id, root_id, records), *spans],
                    }
                ],
            }
        ]
    }
    return (json.dumps(document, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
