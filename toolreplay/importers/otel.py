"""OpenTelemetry GenAI traces (OTLP JSON): one session per trace, its tool calls by start time.

Read, in this order of preference within a trace:

1. tool spans: `execute_tool` spans (`gen_ai.operation.name`), MCP `tools/call` spans
   (`mcp.method.name`) and OpenInference `TOOL` spans (`openinference.span.kind`). The tool is
   `gen_ai.tool.name` (or `tool.name`, or the span name after `execute_tool `/`tools/call `); args are
   `gen_ai.tool.call.arguments` (or `input.value`), an object or a JSON string; the response is
   `gen_ai.tool.call.result` (or `output.value`): a JSON object (or its JSON text) as it is, other
   text as `{"text": TEXT}`, with `"error": true` in front when the span has `error.type`. A span
   without a result gives `{"error": ERROR_TYPE}` when it has `error.type`, else no recorded response
   (a warning). A tool span whose parent is a tool span of the same tool
   (an MCP client span around its `execute_tool`) is the same call, read once.
2. when a trace has no tool span: the `tool_call` and `tool_call_response` parts of chat spans'
   `gen_ai.input.messages` / `gen_ai.output.messages` (and OpenInference's flattened
   `llm.*_messages.N.message.tool_calls.M.tool_call.function.*`), each id read once, since every
   chat span repeats the history before it (a span's input messages beyond those already read are new).

What a record keeps besides (`meta`): a tool span's start time as `ts` and, with its end, `duration_ms`
(a time of 0 is unknown in OTLP, so not kept); its `gen_ai.tool.call.id` (or OpenInference's
`tool_call.id`, MCP's `jsonrpc.request.id`) as `call_id`; and as `turn` the ordinal of the model call
(a chat or LLM span, by start time) that asked for it, where the trace shows which: the model call
whose output holds the call's id, the tool span's parent, or the one model call under the tool
span's parent. Chat-span parts have no times; their ids are kept, and each assistant message is a turn.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from toolreplay.format.records import OUTCOMES, check_meta, ts_nanoseconds
from toolreplay.importers.conversations import Conversation, JSONTextError, parse_json
from toolreplay.importers.otlp import Span
from toolreplay.importers.pairing import (
    MISSING,
    Event,
    ToolCall,
    ToolReply,
    call_times,
    flag_error,
    iso_time,
    nano_time,
    reply_response,
)

__all__ = ["read_events"]

# Indexes are ASCII digits (`\d` would take any script's), leading zeros aside at most 9 of them: a key
# with a longer number is not one of these (it is ignored like any other attribute), never a number
# too long for `int`.
_FLAT = re.compile(r"llm\.(input|output)_messages\.0*([0-9]{1,9})\.message\.(.+)")
_FLAT_CALL = re.compile(r"tool_calls\.0*([0-9]{1,9})\.tool_call\.(.+)")


def _tool_name(span: Span) -> str | None:
    attributes = span.attributes
    if attributes.get("gen_ai.operation.name") == "execute_tool" or attributes.get("mcp.method.name") == "tools/call":
        prefix = "execute_tool " if attributes.get("gen_ai.operation.name") == "execute_tool" else "tools/call "
    elif attributes.get("openinference.span.kind") == "TOOL":
        prefix = ""
    else:
        return None
    for key in ("gen_ai.tool.name", "tool.name"):
        if isinstance(attributes.get(key), str) and attributes[key]:
            return str(attributes[key])
    if prefix and span.name.startswith(prefix) and span.name[len(prefix):]:
        return span.name[len(prefix):]
    return span.name or None


def _first(attributes: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in attributes:
            return attributes[key]
    return MISSING


def _response(span: Span) -> dict[str, Any] | None:
    result = _first(span.attributes, "gen_ai.tool.call.result", "output.value")
    error = span.attributes.get("error.type")
    if result is MISSING:
        return {"error": str(error)} if error is not None else None
    if isinstance(result, str):
        parsed = reply_response(result, False)
        if "text" in parsed and len(parsed) == 1:  # text: flagged as a failure when the span failed
            return flag_error(parsed, error is not None, parsed)
        return parsed
    if isinstance(result, dict):
        return result
    return {"result": result}


def _is_model_span(span: Span) -> bool:
    attributes = span.attributes
    return (attributes.get("gen_ai.operation.name") in ("chat", "text_completion", "generate_content")
            or attributes.get("openinference.span.kind") == "LLM")


def _output_call_ids(span: Span) -> Iterator[str]:
    """The ids of the tool calls a model span's output messages ask for."""
    attributes = span.attributes
    for message in [*_messages(attributes.get("gen_ai.output.messages")), *_flat_messages(attributes, "output")]:
        parts = message.get("parts") if isinstance(message, dict) else None
        for part in parts if isinstance(parts, list) else ():
            if isinstance(part, dict) and part.get("type") == "tool_call" and isinstance(part.get("id"), str):
                yield part["id"]


def _turns(spans: list[Any]) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """The model calls of a trace in start order: their turn by span id, by the id of each tool call
    their output asks for, and by the id of a parent span with exactly one model call under it."""
    by_span: dict[str, int] = {}
    by_call: dict[str, int] = {}
    children: dict[str, list[int]] = {}
    for span in spans:
        if isinstance(span, Span) and _is_model_span(span):
            turn = by_span.setdefault(span.span_id, len(by_span))
            for call_id in _output_call_ids(span):
                by_call.setdefault(call_id, turn)
            if span.parent_id:
                children.setdefault(span.parent_id, []).append(turn)
    return by_span, by_call, {parent: turns[0] for parent, turns in children.items() if len(turns) == 1}


def _kept_id(span: Span) -> str | None:
    """The call's id a tool span gives: the model's, else OpenInference's, else the MCP request's."""
    value = _first(span.attributes, "gen_ai.tool.call.id", "tool_call.id", "jsonrpc.request.id")
    return str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) and value != "" else None


def _tool_span_events(conversation: Conversation, named: list[tuple[int, Span, str]]) -> Iterator[Event]:
    by_id = {span.span_id: tool for _, span, tool in named}
    inner = {span.parent_id: span for _, span, tool in named if span.parent_id and by_id.get(span.parent_id) == tool}
    by_span, by_call, by_parent = _turns(list(conversation.messages))
    for position, span, tool in named:
        if span.parent_id and by_id.get(span.parent_id) == tool:
            continue  # the inner span of one call seen at two levels
        call_id = span.span_id or f"span {position}"
        kept = _kept_id(span)
        if kept is None and span.span_id in inner:  # the id the inner span (an MCP client's) has
            kept = _kept_id(inner[span.span_id])
        turn = by_call.get(kept) if kept is not None else None
        if turn is None:
            turn = by_span.get(span.parent_id, by_parent.get(span.parent_id))
        if span.sdk:  # the SDK's span JSON: ISO 8601 times
            times = call_times(span.start_text, span.end, iso_time)
        else:
            end = None if span.end in (None, 0, "0") else span.end  # 0 is "unknown" in OTLP
            times = call_times(span.start or None, end, nano_time)
        own = _exported_meta(span.attributes)
        if span.attributes.get("toolreplay.placed_time") is True:  # placed by `export otel`, not recorded
            times = {}
        elif "ts" in times:
            times = _exported_times(span, times)
        turn = own.pop("turn", turn)  # the export's own turn, when the spans came from `export otel`
        yield ToolCall(call_id, tool, _first(span.attributes, "gen_ai.tool.call.arguments", "input.value"), position,
                       id=kept, turn=turn, extra=tuple(own.items()), **times)
        response = _response(span)
        if response is not None:
            yield ToolReply(call_id, response, position)


def _exported_times(span: Span, times: dict[str, Any]) -> dict[str, Any]:
    """The times of a span `export otel` wrote: the record's own spelling of the same start instant, and
    no duration where the export placed the end."""
    spelled = span.attributes.get("toolreplay.ts")
    if isinstance(spelled, str):
        try:
            check_meta({"ts": spelled})
            same = ts_nanoseconds(spelled) == ts_nanoseconds(times["ts"])
        except ValueError:
            same = False
        if same:
            times = {**times, "ts": spelled}
    if span.attributes.get("toolreplay.placed_end") is True:
        times = {key: value for key, value in times.items() if key != "duration_ms"}
    return times


def _exported_meta(attributes: dict[str, Any]) -> dict[str, Any]:
    """The rest of a record's meta that `export otel` wrote as attributes (toolreplay.turn, .outcome,
    .mutates and .meta, the `x-` keys as JSON text); what does not read as the format allows is left out."""
    found: dict[str, Any] = {}
    turn = attributes.get("toolreplay.turn")
    if isinstance(turn, str) and turn.isascii() and turn.isdigit() and len(turn) < 19:
        turn = int(turn)
    if isinstance(turn, int) and not isinstance(turn, bool) and turn >= 0:
        found["turn"] = turn
    outcome = attributes.get("toolreplay.outcome")
    if outcome in OUTCOMES:
        found["outcome"] = outcome
    mutates = attributes.get("toolreplay.mutates")
    if isinstance(mutates, bool):
        found["mutates"] = mutates
    own = attributes.get("toolreplay.meta")
    if isinstance(own, str):
        try:
            value = parse_json(own)
        except JSONTextError:
            value = None
        if isinstance(value, dict) and all(isinstance(key, str) and key.startswith("x-") for key in value):
            found.update(value)
    return found


def _messages(value: Any) -> list[Any]:
    if isinstance(value, str):
        try:
            value = parse_json(value)
        except JSONTextError:
            return []
    return value if isinstance(value, list) else []


def _flat_messages(attributes: dict[str, Any], side: str) -> list[dict[str, Any]]:
    """OpenInference's flattened messages as GenAI messages with `tool_call`/`tool_call_response` parts."""
    messages: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        match = _FLAT.fullmatch(key)
        if match is None or match.group(1) != side:
            continue
        message = messages.setdefault(int(match.group(2)), {"calls": {}})
        call = _FLAT_CALL.fullmatch(match.group(3))
        if call is not None:
            message["calls"].setdefault(int(call.group(1)), {})[call.group(2)] = value
        else:
            message[match.group(3)] = value
    found = []
    for index in sorted(messages):
        message = messages[index]
        parts: list[dict[str, Any]] = [
            {"type": "tool_call", "id": call.get("id"), "name": call.get("function.name"),
             "arguments": call.get("function.arguments")}
            for _, call in sorted(message["calls"].items())
        ]
        if message.get("role") == "tool":
            parts.append({"type": "tool_call_response", "id": message.get("tool_call_id"),
                          "response": message.get("content", "")})
        found.append({"role": message.get("role"), "parts": parts})
    return found


def _chat_events(conversation: Conversation) -> Iterator[Event]:
    seen_calls: set[Any] = set()
    seen_replies: set[Any] = set()
    history = 0  # messages already read: each chat span's input repeats the ones before it
    turn = -1
    for position, span in enumerate(conversation.messages):
        attributes = span.attributes
        inputs = [*_messages(attributes.get("gen_ai.input.messages")), *_flat_messages(attributes, "input")]
        outputs = [*_messages(attributes.get("gen_ai.output.messages")), *_flat_messages(attributes, "output")]
        if not inputs and not outputs:
            continue  # not a chat span
        new = inputs[history:] if len(inputs) >= history else inputs
        history = len(inputs) + len(outputs)
        for message in [*new, *outputs]:
            assistant = isinstance(message, dict) and message.get("role") == "assistant"
            turn += assistant
            parts = message.get("parts") if isinstance(message, dict) else None
            for part in parts if isinstance(parts, list) else ():
                if not isinstance(part, dict):
                    continue
                call_id = part.get("id") if isinstance(part.get("id"), str) and part.get("id") else None
                if part.get("type") == "tool_call" and isinstance(part.get("name"), str) and part["name"]:
                    if call_id is not None and call_id in seen_calls:
                        continue
                    seen_calls.add(call_id)
                    yield ToolCall(call_id, part["name"], part.get("arguments", MISSING), position,
                                   turn=turn if assistant else None)
                elif part.get("type") == "tool_call_response":
                    if call_id is not None and call_id in seen_replies:
                        continue
                    seen_replies.add(call_id)
                    result = part.get("response", part.get("result", MISSING))
                    response = result if isinstance(result, dict) else reply_response(result, False)
                    yield ToolReply(call_id, response, position)


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The tool calls of one trace, in span start order."""
    named = []
    for position, span in enumerate(conversation.messages):
        if not isinstance(span, Span):
            raise conversation.error(position, "not an OTLP span")
        tool = _tool_name(span)
        if tool is not None:
            named.append((position, span, tool))
    if named:
        yield from _tool_span_events(conversation, named)
    else:
        yield from _chat_events(conversation)
