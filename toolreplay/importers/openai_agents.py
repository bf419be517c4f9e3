"""OpenAI Agents SDK traces: `function` spans, one session per trace, by start time.

The SDK's exported objects (`{"object": "trace.span", "trace_id", "started_at", "span_data", "error"}`,
as JSON Lines, a JSON array, or the `{"data": [...]}` batch its exporter sends) are read; a span whose
`span_data.type` is `"function"` is one call: `name`, `input` (the arguments as a JSON string) and
`output` (the result's text). A span with an `error` gets `"error": true` in front of its response
(whose text is the error's `message` when there is no output); a span that never ended (`ended_at`
null) without output has no recorded response. An `mcp_tools` or other span is skipped.

A span's `started_at` is the call's time, and with `ended_at` its duration. The spans carry no id of
the model's tool call (the span's own id only pairs it) and do not say which model response asked for
the call, so records of this format have no `call_id` and no `turn`.
"""

from __future__ import annotations

from collections.abc import Iterator

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import (
    MISSING,
    Event,
    ToolCall,
    ToolReply,
    call_times,
    flag_error,
    iso_time,
    reply_response,
)

__all__ = ["read_events"]


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The function calls of one trace, in start order."""
    for position, span in enumerate(conversation.messages):
        data = span.get("span_data") if isinstance(span, dict) else None
        if not isinstance(data, dict):
            raise conversation.error(position, 'not an Agents SDK span (an object with a "span_data" object)')
        if data.get("type") != "function":
            continue
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise conversation.error(position, 'a function span has no "span_data.name" string')
        error = span.get("error")
        if error is not None and not isinstance(error, dict):
            raise conversation.error(position, 'a span\'s "error" must be an object or null')
        output = data.get("output")
        if output is None and error is not None:
            output = error.get("message") if isinstance(error.get("message"), str) else ""
        if output is None or isinstance(output, str):
            response = reply_response(MISSING if output is None else output, error is not None)
        else:  # an object or another value the exporter kept as JSON
            kept = output if isinstance(output, dict) else {"result": output}
            response = flag_error(kept, error is not None, {"result": output})
        call_id = span.get("id") if isinstance(span.get("id"), str) else f"span {position}"
        yield ToolCall(call_id, name, data.get("input", MISSING), position, id=None,
                       **call_times(span.get("started_at"), span.get("ended_at"), iso_time))
        if span.get("ended_at") is None and data.get("output") is None and error is None:
            continue  # the span never ended: the call has no recorded result
        yield ToolReply(call_id, response, position)
