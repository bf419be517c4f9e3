"""OTLP JSON (the OpenTelemetry protocol's JSON encoding) of trace exports: read spans, write values.

An export is `{"resourceSpans": [{"resource", "scopeSpans": [{"scope", "spans": [SPAN, ...]}]}]}`; a
span has `traceId` and `spanId` (hex), `name`, `kind` (an integer, or the enum's name),
`startTimeUnixNano` (a decimal string), `attributes` (`[{"key", "value": ANYVALUE}]`) and `status`.
An AnyValue is one of `stringValue`, `boolValue`, `intValue` (a decimal string or a number),
`doubleValue`, `arrayValue: {"values": [...]}`, `kvlistValue: {"values": [{"key", "value"}]}` and
`bytesValue` (base64). `spans_of` flattens an export into `Span`s whose attributes are plain values.

The OpenTelemetry SDK's console and file exporters write another envelope of the same spans
(`ReadableSpan.to_json()` in Python): `{"name", "context": {"trace_id", "span_id"}, "kind",
"parent_id", "start_time", "end_time", "status": {"status_code"}, "attributes": {...}, ...}`, ids as
`0x` hex, times as ISO 8601 in UTC, attributes as plain values. `sdk_span` reads one as a `Span`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from toolreplay.errors import InputError

__all__ = ["Span", "spans_of", "any_value", "attribute", "is_sdk_span", "sdk_span"]


@dataclass(frozen=True)
class Span:
    """One span: ids, name, start time (ns), attributes as plain values, and where it was read."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start: int
    attributes: dict[str, Any]
    status_code: int
    status_message: str
    json_path: str
    line: int | None
    end: Any = None  # `endTimeUnixNano` as written (read where used: a bad end time loses a duration only)
    start_text: Any = None  # an SDK span's `start_time` as written (its times are ISO 8601, not nanoseconds)
    sdk: bool = False  # read from the SDK's span JSON (`sdk_span`), not from OTLP


def _fail(path: str, line: int | None, where: str, text: str) -> InputError:
    return InputError(path, line, f"{where}: {text}")


# A decimal as the OTLP JSON encoding writes 64-bit integers: ASCII digits only (`str.isdigit` also
# takes "①" and "٣", which `int` then refuses or reads), at most 20 of them, so `int` never meets a
# number too long to convert.
_DECIMAL = re.compile(r"(-?)[0-9]{1,20}")


def _decimal(text: str, *, signed: bool) -> int | None:
    """The integer `text` spells, or None when it is not a decimal of at most 20 digits."""
    match = _DECIMAL.fullmatch(text)
    if match is None or (match.group(1) and not signed):
        return None
    return int(text)


def _decode_value(value: Any, path: str, line: int | None, where: str) -> Any:
    if not isinstance(value, dict):
        raise _fail(path, line, where, "an attribute value must be an object (an OTLP AnyValue)")
    if not value:
        return None
    if len(value) != 1:
        raise _fail(path, line, where, "an attribute value must have exactly one field")
    kind, inner = next(iter(value.items()))
    if kind in ("stringValue", "bytesValue") and isinstance(inner, str):
        return inner
    if kind == "boolValue" and isinstance(inner, bool):
        return inner
    if kind == "intValue" and not isinstance(inner, bool):
        if isinstance(inner, int):
            return inner
        if isinstance(inner, str):
            number = _decimal(inner, signed=True)
            if number is None or not -2**63 <= number < 2**63:
                raise _fail(path, line, where, "an intValue string must be a decimal int64 (ASCII digits, "
                                               "an optional '-')")
            return number
    if kind == "doubleValue" and isinstance(inner, (int, float)) and not isinstance(inner, bool):
        return inner
    if kind == "arrayValue" and isinstance(inner, dict):
        values = inner.get("values", [])
        if isinstance(values, list):
            return [_decode_value(item, path, line, f"{where}.values[{i}]") for i, item in enumerate(values)]
    if kind == "kvlistValue" and isinstance(inner, dict):
        values = inner.get("values", [])
        if isinstance(values, list):
            return _decode_attributes(values, path, line, f"{where}.values")
    raise _fail(path, line, where, f"not an OTLP AnyValue ({kind!r} with this value)")


def _decode_attributes(items: Any, path: str, line: int | None, where: str) -> dict[str, Any]:
    if isinstance(items, dict):  # some exporters write attributes as a plain object
        return dict(items)
    if not isinstance(items, list):
        raise _fail(path, line, where, "attributes must be an array of {key, value}")
    found: dict[str, Any] = {}
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise _fail(path, line, f"{where}[{index}]", 'an attribute must be an object with a "key" string')
        found[item["key"]] = _decode_value(item.get("value", {}), path, line, f"{where}[{index}].value")
    return found


def any_value(value: Any) -> dict[str, Any]:
    """The OTLP AnyValue of a plain value (strings, booleans, integers, floats, lists, objects)."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [any_value(item) for item in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": [attribute(key, item) for key, item in value.items()]}}
    return {"stringValue": str(value)}


def attribute(key: str, value: Any) -> dict[str, Any]:
    """One OTLP attribute `{"key", "value": AnyValue}`."""
    return {"key": key, "value": any_value(value)}


def _list(container: dict[str, Any], key: str, path: str, line: int | None, where: str) -> list[Any]:
    value = container.get(key, [])
    if not isinstance(value, list):
        raise _fail(path, line, where, f'"{key}" must be an array')
    return value


def _time(value: Any, path: str, line: int | None, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    number = _decimal(value, signed=False) if isinstance(value, str) else None
    if number is not None and number < 2**64:
        return number
    raise _fail(path, line, where, '"startTimeUnixNano" must be a decimal string of nanoseconds')


def _span(span: Any, path: str, line: int | None, where: str) -> Span:
    if not isinstance(span, dict):
        raise _fail(path, line, where, "a span must be an object")
    trace_id, span_id = span.get("traceId", ""), span.get("spanId", "")
    if not isinstance(trace_id, str) or not isinstance(span_id, str):
        raise _fail(path, line, where, '"traceId" and "spanId" must be strings')
    parent = span.get("parentSpanId", "")
    name = span.get("name", "")
    if not isinstance(parent, str) or not isinstance(name, str):
        raise _fail(path, line, where, '"parentSpanId" and "name" must be strings')
    status = span.get("status", {})
    if not isinstance(status, dict):
        raise _fail(path, line, where, '"status" must be an object')
    code = status.get("code", 0)
    if code == "STATUS_CODE_ERROR":
        code = 2
    message = status.get("message", "")
    return Span(
        trace_id,
        span_id,
        parent,
        name,
        _time(span.get("startTimeUnixNano"), path, line, where),
        _decode_attributes(span.get("attributes", []), path, line, f"{where}.attributes"),
        code if isinstance(code, int) else 0,
        message if isinstance(message, str) else "",
        where,
        line,
        span.get("endTimeUnixNano"),
    )


def spans_of(document: dict[str, Any], path: str, line: int | None) -> list[Span]:
    """Every span of one OTLP JSON export, in file order; malformed parts name their JSON path."""
    found = []
    for r, resource in enumerate(_list(document, "resourceSpans", path, line, "$")):
        where = f"$.resourceSpans[{r}]"
        if not isinstance(resource, dict):
            raise _fail(path, line, where, "must be an object")
        for s, scope in enumerate(_list(resource, "scopeSpans", path, line, where)):
            scope_where = f"{where}.scopeSpans[{s}]"
            if not isinstance(scope, dict):
                raise _fail(path, line, scope_where, "must be an object")
            for n, span in enumerate(_list(scope, "spans", path, line, scope_where)):
                found.append(_span(span, path, line, f"{scope_where}.spans[{n}]"))
    return found


_SDK_STATUS = {"UNSET": 0, "OK": 1, "ERROR": 2}


def is_sdk_span(value: Any) -> bool:
    """Whether a value looks like a span of the SDK's JSON (a `context` with `trace_id` and `span_id`)."""
    context = value.get("context") if isinstance(value, dict) else None
    return isinstance(context, dict) and "trace_id" in context and "span_id" in context


def _sdk_id(value: str) -> str:
    """An id as the SDK writes it (`0x` and hex digits), without its `0x`, as OTLP writes ids."""
    return value[2:] if value[:2] in ("0x", "0X") else value


def sdk_span(value: Any, path: str, line: int | None, where: str) -> Span:
    """One span of the SDK's span JSON; a malformed one is an input error naming `where`."""
    from toolreplay.importers.pairing import TimeError, iso_time  # pairing reads conversations, which read this

    if not isinstance(value, dict):
        raise _fail(path, line, where, "a span must be an object")
    context = value.get("context")
    if not isinstance(context, dict):
        raise _fail(path, line, where, 'a span must have a "context" object')
    trace_id, span_id = context.get("trace_id"), context.get("span_id")
    if not isinstance(trace_id, str) or not isinstance(span_id, str):
        raise _fail(path, line, where, '"context.trace_id" and "context.span_id" must be strings')
    parent = value.get("parent_id")
    name = value.get("name", "")
    if not isinstance(parent, (str, type(None))) or not isinstance(name, str):
        raise _fail(path, line, where, '"parent_id" must be a string or null, and "name" a string')
    status = value.get("status")
    if not isinstance(status, (dict, type(None))):
        raise _fail(path, line, where, '"status" must be an object')
    attributes = value.get("attributes")
    if not isinstance(attributes, (dict, type(None))):
        raise _fail(path, line, where, '"attributes" must be an object')
    start = value.get("start_time")
    try:
        start_ns = iso_time(start).ns if start is not None else 0
    except TimeError:
        start_ns = 0  # said where the call's time is read: the span still counts, first
    code = status.get("status_code") if status else None
    message = status.get("description") if status else None
    return Span(
        _sdk_id(trace_id),
        _sdk_id(span_id),
        _sdk_id(parent) if parent is not None else "",
        name,
        start_ns,
        dict(attributes or {}),
        _SDK_STATUS.get(code, 0) if isinstance(code, str) else 0,
        message if isinstance(message, str) else "",
        where,
        line,
        value.get("end_time"),
        start,
        True,
    )
