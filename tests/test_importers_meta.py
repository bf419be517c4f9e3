"""Import keeps what a log says of each call as the record's `meta` (docs/import.md, "What each format
keeps"): `ts` and `duration_ms` where the log times the call, `call_id` where it has the model's or
the protocol's id, `turn` where it shows the model turn that asked for the call; it invents none.

The inputs take their shapes from real logs: Claude Code transcript lines as `~/.claude/projects/*.jsonl`
holds them (fields as in yongkangc/claude-ui knowledge/example-cc-config-folder.md and DRMacIver/
claude-reliability notes/transcript-format.md); an OTel GenAI trace with `chat` and `execute_tool`
spans (the GenAI semantic conventions' `gen_ai.output.messages` parts and `gen_ai.tool.call.id`) and
an OpenInference step span holding one LLM span and a TOOL span (smolagents' layout); Agents SDK span
objects as its exporter writes them (`started_at`/`ended_at` with `+00:00`); an inspect_ai sample
with the `tool` events of inspect_ai/event/_tool.py (`timestamp`, `completed`); tau2-bench messages
with its `timestamp` (`datetime.now().isoformat()`: local time without an offset); a Responses input
list with two model responses; Gemini contents with parallel `functionCall` parts; MCP JSON-RPC.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import unittest
from typing import Any

from tests.support import require
from tests.test_export_otel import _have, otlp_json
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.format.records import read_session
from toolreplay.importers.pairing import TimeError, call_times, duration_ms, iso_time, nano_time


def _run(fmt: str, data: bytes) -> tuple[int, str, str]:
    streams = IO.memory(stdin=data)
    code = main(["import", fmt, "-"], streams)
    out = streams.out()
    list(read_session(io.BytesIO(out.encode("utf-8")), "out.jsonl"))  # a valid session, meta and all
    return code, out, streams.err()


def _run_split(fmt: str, data: bytes) -> tuple[int, list[str], str]:
    with tempfile.TemporaryDirectory() as tmp:
        target = os.path.join(tmp, "out")
        streams = IO.memory(stdin=data)
        code = main(["import", fmt, "-", "--split", target], streams)
        sessions = []
        for name in sorted(os.listdir(target)):
            with open(os.path.join(target, name), encoding="utf-8") as handle:
                sessions.append(handle.read())
        return code, sessions, streams.err()


def _lines(*items: Any) -> bytes:
    return "".join(json.dumps(item) + "\n" for item in items).encode("utf-8")


class TimeTest(unittest.TestCase):
    def test_iso_times_convert_to_utc_keeping_their_digits(self) -> None:
        cases = [
            ("2025-05-26T07:27:40.079Z", "2025-05-26T07:27:40.079Z", 1748244460079000000),
            ("2026-11-30T14:50:37.108573+00:00", "2026-11-30T14:50:37.108573Z", 1796050237108573000),
            ("2026-01-01T00:30:00-05:00", "2026-01-01T05:30:00Z", 1767245400000000000),
            ("2026-03-01T00:30:00+01:00", "2026-02-28T23:30:00Z", 1772321400000000000),  # across a month
            ("2024-02-29t23:59:59.123456789123z", "2024-02-29T23:59:59.123456789Z", 1709251199123456789),
            ("2025-05-26 07:27:40Z", "2025-05-26T07:27:40Z", 1748244460000000000),
        ]
        for value, text, ns in cases:
            with self.subTest(value=value):
                time = iso_time(value)
                self.assertEqual((time.text, time.ns), (text, ns))

    def test_what_is_not_an_instant_is_a_time_error(self) -> None:
        cases = [
            ("2025-08-01T16:20:43.824977", 'time "2025-08-01T16:20:43.824977" has no UTC offset (a local time '
                                           "of an unknown zone)", True),
            ("2026-13-01T00:00:00Z", 'time "2026-13-01T00:00:00Z" is not a valid date and time', False),
            ("2026-13-01T00:00:00", 'time "2026-13-01T00:00:00" is not a valid date and time', False),
            ("2025-02-29T00:00:00Z", 'time "2025-02-29T00:00:00Z" is not a valid date and time', False),
            ("2026-01-01T00:00:60Z", 'time "2026-01-01T00:00:60Z" is not a valid date and time', False),
            ("2026-01-01T00:00:00+24:00", 'time "2026-01-01T00:00:00+24:00" is not a valid date and time', False),
            ("9999-12-31T23:00:00-05:00", 'time "9999-12-31T23:00:00-05:00" is not a valid date and time', False),
            ("2026-01-01T\u0661\u0662:00:00Z", 'time "2026-01-01T\\u0661\\u0662:00:00Z" is not an ISO 8601 date and '
                                               "time", False),
            ("yesterday", 'time "yesterday" is not an ISO 8601 date and time', False),
            (1748244460, "time 1748244460 is not a string", False),
        ]
        for value, message, local in cases:
            with self.subTest(value=value), self.assertRaises(TimeError) as caught:
                iso_time(value)
            self.assertEqual((str(caught.exception), caught.exception.local), (message, local))

    def test_nanoseconds(self) -> None:
        self.assertEqual(nano_time("1764600000302100000").text, "2025-12-01T14:40:00.3021Z")
        self.assertEqual(nano_time(1_000_000).text, "1970-01-01T00:00:00.001Z")
        self.assertEqual(nano_time(0).text, "1970-01-01T00:00:00Z")
        for value, message in [
            ("12a", 'time "12a" is not a count of nanoseconds since 1970'),
            ("\u0661", 'time "\\u0661" is not a count of nanoseconds since 1970'),
            (True, "time true is not a count of nanoseconds since 1970"),
            (-1, "time -1 is not a count of nanoseconds since 1970"),
            (10**30, "time 1000000000000000000000000000000 is after the year 9999"),
            ("9" * 5000, f'time "{"9" * 55}..." is after the year 9999'),
        ]:
            with self.subTest(value=value), self.assertRaises(TimeError) as caught:
                nano_time(value)
            self.assertEqual(str(caught.exception), message)

    def test_durations_and_call_times(self) -> None:
        self.assertEqual(duration_ms(nano_time(0), nano_time(5_000_000)), 5)
        self.assertEqual(duration_ms(nano_time(0), nano_time(16_000)), 0.016)
        self.assertEqual(call_times(None, "2026-01-01T00:00:00Z", iso_time), {})
        self.assertEqual(call_times("2026-01-01T00:00:00Z", None, iso_time), {"ts": "2026-01-01T00:00:00Z"})
        self.assertEqual(
            call_times("2026-01-01T00:00:00Z", "2026-01-01T00:00:01.5Z", iso_time),
            {"ts": "2026-01-01T00:00:00Z", "duration_ms": 1500},
        )
        self.assertEqual(
            call_times("2026-01-01T00:00:01Z", "2026-01-01T00:00:00Z", iso_time),
            {"ts": "2026-01-01T00:00:01Z", "time_note": "end time 2026-01-01T00:00:00Z comes before the start "
                                                        "2026-01-01T00:00:01Z; no duration kept"},
        )
        self.assertEqual(call_times("2026-01-01T00:00:00", None, iso_time, quiet_local=True), {})
        self.assertEqual(
            call_times("2026-01-01T00:00:00", None, iso_time),
            {"time_note": 'time "2026-01-01T00:00:00" has no UTC offset (a local time of an unknown zone); '
                          "no ts kept"},
        )


CLAUDE_LINE = {"isSidechain": False, "userType": "external", "cwd": "/repo",
               "sessionId": "4f35e220-c435-4cf7-b9b9-f40426042847", "version": "1.0.3"}
MODEL = "claude-sonnet-4-20250514"


def _assistant(uuid: str, message_id: str, block: dict[str, Any], timestamp: str) -> dict[str, Any]:
    message = {"id": message_id, "type": "message", "role": "assistant", "model": MODEL, "content": [block]}
    return {**CLAUDE_LINE, "message": message, "type": "assistant", "uuid": uuid, "timestamp": timestamp}


def _user(uuid: str, content: Any, timestamp: str) -> dict[str, Any]:
    return {**CLAUDE_LINE, "type": "user", "message": {"role": "user", "content": content}, "uuid": uuid,
            "timestamp": timestamp}


class ClaudeCodeTest(unittest.TestCase):
    def test_transcript_lines_give_times_ids_and_turns(self) -> None:
        # Claude Code writes one line per content block: the two lines of msg_01A are one turn.
        data = _lines(
            _user("u1", "What is in a.txt and b.txt?", "2025-05-26T07:27:40.079Z"),
            _assistant("a1", "msg_01A", {"type": "tool_use", "id": "toolu_01A", "name": "Read",
                                         "input": {"file_path": "/repo/a.txt"}}, "2025-05-26T07:27:43.112Z"),
            _assistant("a2", "msg_01A", {"type": "tool_use", "id": "toolu_01B", "name": "Read",
                                         "input": {"file_path": "/repo/b.txt"}}, "2025-05-26T07:27:43.380Z"),
            _user("u2", [{"tool_use_id": "toolu_01A", "type": "tool_result", "content": "ay"}],
                  "2025-05-26T07:27:43.502Z"),
            _user("u3", [{"tool_use_id": "toolu_01B", "type": "tool_result", "content": "no such file",
                          "is_error": True}], "2025-05-26T07:27:43.655Z"),
            _assistant("a3", "msg_01B", {"type": "text", "text": "Let me count."}, "2025-05-26T07:27:44.001Z"),
            _assistant("a4", "msg_01B", {"type": "tool_use", "id": "toolu_01C", "name": "Bash",
                                         "input": {"command": "wc -c a.txt"}}, "2025-05-26 07:27:45"),
            _user("u4", [{"tool_use_id": "toolu_01C", "type": "tool_result", "content": "2 a.txt"}],
                  "2025-05-26T07:27:45.500Z"),
        )
        self.assertEqual(
            _run("claude-code", data),
            (
                0,
                '{"index": 0, "tool": "Read", "args": {"file_path": "/repo/a.txt"}, "response": {"text": "ay"}, '
                '"meta": {"ts": "2025-05-26T07:27:43.112Z", "call_id": "toolu_01A", "turn": 0}}\n'
                '{"index": 1, "tool": "Read", "args": {"file_path": "/repo/b.txt"}, "response": {"error": true, '
                '"text": "no such file"}, "meta": {"ts": "2025-05-26T07:27:43.380Z", "call_id": "toolu_01B", '
                '"turn": 0}}\n'
                '{"index": 2, "tool": "Bash", "args": {"command": "wc -c a.txt"}, "response": {"text": "2 a.txt"}, '
                '"meta": {"call_id": "toolu_01C", "turn": 1}}\n',
                'warning: <stdin>:7: conversation 0, message 6: call 2 (Bash): time "2025-05-26 07:27:45" has no '
                "UTC offset (a local time of an unknown zone); no ts kept\n",
            ),
        )

    def test_stream_json_has_ids_and_turns_but_no_times(self) -> None:
        line = {"parent_tool_use_id": None, "session_id": "s1"}
        data = _lines(
            {"type": "assistant", "message": {"id": "msg_1", "role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "a"}}]}, **line},
            {"type": "assistant", "message": {"id": "msg_1", "role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {"file_path": "b"}}]}, **line},
            {"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "A"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "B"}]}, **line},
            {"type": "assistant", "message": {"id": "msg_2", "role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_3", "name": "Read", "input": {"file_path": "c"}}]}, **line},
            {"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_3", "content": "C"}]}, **line},
        )
        code, out, err = _run("claude-code", data)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(
            [json.loads(line)["meta"] for line in out.splitlines()],
            [{"call_id": "toolu_1", "turn": 0}, {"call_id": "toolu_2", "turn": 0}, {"call_id": "toolu_3", "turn": 1}],
        )


def _attribute(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def _span(trace: str, span_id: str, parent: str, name: str, start: int, end: Any,
          attributes: dict[str, str]) -> dict[str, Any]:
    return {"traceId": trace, "spanId": span_id, "parentSpanId": parent, "name": name, "kind": 1,
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(end),
            "attributes": [_attribute(key, value) for key, value in attributes.items()], "status": {}}


def _asks(*calls: tuple[str, str, dict[str, Any]]) -> str:
    return json.dumps([{"role": "assistant", "parts": [{"type": "tool_call", "id": call_id, "name": name,
                                                        "arguments": args} for call_id, name, args in calls],
                        "finish_reason": "tool_call"}])


def _tool(trace: str, span_id: str, parent: str, tool: str, call_id: str, start: int, end: Any,
          args: str, **more: str) -> dict[str, Any]:
    return _span(trace, span_id, parent, f"execute_tool {tool}", start, end, {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.call.arguments": args, **more})


T = 1764600000000000000  # 2025-12-01T14:40:00Z
GENAI = "5b8aa5a2d2c872e8321cf37308d69df2"
STEPS = "6c8aa5a2d2c872e8321cf37308d69df3"
OTEL_TRACE = {"resourceSpans": [{"resource": {"attributes": [_attribute("service.name", "agent")]}, "scopeSpans": [
    {"scope": {"name": "agent"}, "spans": [
        _span(GENAI, "a000000000000001", "", "invoke_agent weather", T, T + 900_000_000,
              {"gen_ai.operation.name": "invoke_agent"}),
        _span(GENAI, "c000000000000001", "a000000000000001", "chat gpt-4o", T + 1_000_000, T + 301_000_000,
              {"gen_ai.operation.name": "chat", "gen_ai.output.messages": _asks(
                  ("call_a", "get_weather", {"city": "Paris"}), ("call_b", "get_weather", {"city": "Oslo"}))}),
        _tool(GENAI, "e000000000000001", "a000000000000001", "get_weather", "call_a", T + 302_000_000,
              T + 352_500_000, '{"city": "Paris"}', **{"gen_ai.tool.call.result": '{"temp": 14}'}),
        _tool(GENAI, "e000000000000002", "a000000000000001", "get_weather", "call_b", T + 302_100_000, "soon",
              '{"city": "Oslo"}', **{"gen_ai.tool.call.result": '{"temp": -3}'}),
        _span(GENAI, "c000000000000002", "a000000000000001", "chat gpt-4o", T + 400_000_000, T + 600_000_000,
              {"gen_ai.operation.name": "chat", "gen_ai.output.messages": _asks(("call_c", "book", {"seats": 2}))}),
        _tool(GENAI, "e000000000000003", "a000000000000001", "book", "call_c", T + 601_000_000, T + 602_000_000,
              '{"seats": 2}', **{"error.type": "TimeoutError"}),
        _span(STEPS, "5000000000000001", "", "Step 1", T + 700_000_000, T + 800_000_000,
              {"openinference.span.kind": "CHAIN"}),
        _span(STEPS, "1000000000000001", "5000000000000001", "LiteLLMModel.__call__", T + 700_000_000,
              T + 750_000_000, {"openinference.span.kind": "LLM"}),
        _span(STEPS, "7000000000000001", "5000000000000001", "web_search", 0, 0, {
            "openinference.span.kind": "TOOL", "tool.name": "web_search", "input.value": '{"query": "otel"}',
            "output.value": "3 results"}),
    ]}]}]}


def _weather_agent(provider: Any) -> None:
    """The spans of an agent asking for two calls at once and running them, traced with the real SDK."""
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("invoke_agent", attributes={"gen_ai.operation.name": "invoke_agent"}):
        with tracer.start_as_current_span("chat gpt-4o", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.output.messages": _asks(
                    ("call_p", "get_weather", {"city": "Paris"}), ("call_o", "get_weather", {"city": "Oslo"}))}):
            pass
        for call_id, city in (("call_p", "Paris"), ("call_o", "Oslo")):
            with tracer.start_as_current_span("execute_tool get_weather", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                    "gen_ai.tool.call.id": call_id, "gen_ai.tool.call.arguments": json.dumps({"city": city}),
                    "gen_ai.tool.call.result": "cold"}):
                pass


class OpenTelemetryTest(unittest.TestCase):
    def test_tool_spans_give_times_ids_and_the_model_call_that_asked(self) -> None:
        # Trace 1: each tool call's id is in a chat span's output (turn 0: two calls, turn 1: one);
        # call_b's end time is unreadable. Trace 2: no ids, but the step span holds one LLM span,
        # and the tool span's times are 0 (unknown in OTLP).
        self.assertEqual(
            _run_split("otel", json.dumps(OTEL_TRACE).encode("utf-8")),
            (
                0,
                [
                    '{"index": 0, "tool": "get_weather", "args": {"city": "Paris"}, "response": {"temp": 14}, '
                    '"meta": {"ts": "2025-12-01T14:40:00.302Z", "duration_ms": 50.5, "call_id": "call_a", '
                    '"turn": 0}}\n'
                    '{"index": 1, "tool": "get_weather", "args": {"city": "Oslo"}, "response": {"temp": -3}, '
                    '"meta": {"ts": "2025-12-01T14:40:00.3021Z", "call_id": "call_b", "turn": 0}}\n'
                    '{"index": 2, "tool": "book", "args": {"seats": 2}, "response": {"error": "TimeoutError"}, '
                    '"meta": {"ts": "2025-12-01T14:40:00.601Z", "duration_ms": 1, "call_id": "call_c", "turn": 1}}\n',
                    '{"index": 0, "tool": "web_search", "args": {"query": "otel"}, "response": {"text": "3 results"}, '
                    '"meta": {"turn": 0}}\n',
                ],
                "warning: <stdin>: conversation 0, $.resourceSpans[0].scopeSpans[0].spans[3]: call 1 (get_weather): "
                'end time "soon" is not a count of nanoseconds since 1970; no duration kept\n',
            ),
        )


    def test_one_call_at_two_levels_keeps_the_id_either_span_has(self) -> None:
        # An execute_tool span without an id around the MCP client span of the same call (request id 5).
        trace = "7d8aa5a2d2c872e8321cf37308d69df4"
        spans = [
            _span(trace, "8000000000000001", "", "execute_tool read_file", T, T + 4_000_000, {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file",
                "gen_ai.tool.call.arguments": '{"path": "a.md"}', "gen_ai.tool.call.result": "hello"}),
            _span(trace, "8000000000000002", "8000000000000001", "tools/call read_file", T + 1_000_000,
                  T + 3_000_000, {"mcp.method.name": "tools/call", "gen_ai.tool.name": "read_file",
                                  "jsonrpc.request.id": "5"}),
        ]
        document = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
        self.assertEqual(
            _run("otel", json.dumps(document).encode("utf-8")),
            (
                0,
                '{"index": 0, "tool": "read_file", "args": {"path": "a.md"}, "response": {"text": "hello"}, '
                '"meta": {"ts": "2025-12-01T14:40:00Z", "duration_ms": 4, "call_id": "5"}}\n',
                "",
            ),
        )


    def test_spans_of_the_opentelemetry_sdk(self) -> None:
        # The real SDK: a chat span whose output asks for two calls, then their execute_tool spans.
        require(_have("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.common"),
                "opentelemetry-sdk and opentelemetry-exporter-otlp-proto-common are not installed")
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        _weather_agent(provider)
        document = otlp_json(exporter.get_finished_spans())
        code, out, err = _run("otel", json.dumps(document).encode("utf-8"))
        self.assertEqual((code, err), (0, ""))
        tools = [span for span in exporter.get_finished_spans() if span.name.startswith("execute_tool")]
        metas = [json.loads(line)["meta"] for line in out.splitlines()]
        self.assertEqual([(meta["call_id"], meta["turn"]) for meta in metas], [("call_p", 0), ("call_o", 0)])
        for meta, span in zip(metas, tools, strict=True):  # the SDK's own clock, to the nanosecond
            start = iso_time(meta["ts"])
            self.assertEqual(start.ns, span.start_time)
            self.assertEqual(round(meta["duration_ms"] * 10**6), span.end_time - span.start_time)


class OpenTelemetrySdkJsonTest(unittest.TestCase):
    """The SDK's own span JSON (`ReadableSpan.to_json()`, what its console and file exporters write): the
    same spans as OTLP in another envelope, read by `otel` with the same rules."""

    def test_the_console_exporters_output_as_printed_and_one_span_a_line(self) -> None:
        require(_have("opentelemetry.sdk"), "opentelemetry-sdk is not installed")
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        for formatter in (None, lambda span: span.to_json(indent=None) + "\n"):
            printed = io.StringIO()
            memory = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(
                ConsoleSpanExporter(out=printed) if formatter is None else ConsoleSpanExporter(
                    out=printed, formatter=formatter)))
            provider.add_span_processor(SimpleSpanProcessor(memory))
            _weather_agent(provider)
            code, out, err = _run("auto", printed.getvalue().encode("utf-8"))
            self.assertEqual((code, err), (0, "detected format: otel\n"))
            records = [json.loads(line) for line in out.splitlines()]
            self.assertEqual([(r["tool"], r["args"], r["response"]) for r in records],
                             [("get_weather", {"city": "Paris"}, {"text": "cold"}),
                              ("get_weather", {"city": "Oslo"}, {"text": "cold"})])
            self.assertEqual([(r["meta"]["call_id"], r["meta"]["turn"]) for r in records], [("call_p", 0), ("call_o", 0)])
            tools = [span for span in memory.get_finished_spans() if span.name.startswith("execute_tool")]
            for record, span in zip(records, tools, strict=True):  # the SDK's clock, written in microseconds
                self.assertLessEqual(abs(iso_time(record["meta"]["ts"]).ns - span.start_time), 1000)
                duration = round(record["meta"]["duration_ms"] * 10**6)
                self.assertLessEqual(abs(duration - (span.end_time - span.start_time)), 2000)

    def test_malformed_spans_are_one_error_line_and_bad_times_a_warning(self) -> None:
        span = {"name": "execute_tool f", "context": {"trace_id": "0x1", "span_id": "0x2"}, "parent_id": None,
                "start_time": "2026-12-01T17:12:45.5Z", "end_time": "2026-12-01T17:12:46Z",
                "attributes": {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "f"}}
        printed = (json.dumps(span, indent=4) + "\n").encode()  # as the console exporter prints a span
        height = printed.count(b"\n")
        for broken, message in (
                ({"context": {"trace_id": 1, "span_id": "0x3"}}, '"context.trace_id" and "context.span_id" must be strings'),
                ({"attributes": ["x"]}, '"attributes" must be an object'),
                ({"status": "ERROR"}, '"status" must be an object'),
                ({"parent_id": 7}, '"parent_id" must be a string or null, and "name" a string')):
            with self.subTest(message=message):
                bad = {**span, **broken}
                self.assertEqual(_run("otel", json.dumps([span, bad]).encode()),
                                 (2, "", f"error: <stdin>: $[1]: {message}\n"))
                self.assertEqual(_run("otel", _lines(span, bad)), (2, "", f"error: <stdin>:2: $: {message}\n"))
                self.assertEqual(_run("otel", printed * 2 + json.dumps(bad, indent=4).encode()),
                                 (2, "", f"error: <stdin>:{2 * height + 1}: $: {message}\n"))
        self.assertEqual(_run("otel", printed * 2 + b'{\n  "name": "x",\n  "kind": nope\n}\n'),
                         (2, "", f"error: <stdin>:{2 * height + 3}: invalid JSON: Expecting value (column 11)\n"))
        late = {**span, "start_time": "2026-12-01 17:12:45", "context": {"trace_id": "0x1", "span_id": "0x9"}}
        # A start time that is no instant loses its `ts` (one warning) and sorts first; the span is still read.
        self.assertEqual(_run("otel", json.dumps([span, late]).encode()), (
            0,
            '{"index": 0, "tool": "f", "args": {}, "response": {"error": "no recorded response"}}\n'
            '{"index": 1, "tool": "f", "args": {}, "response": {"error": "no recorded response"}, "meta": '
            '{"ts": "2026-12-01T17:12:45.5Z", "duration_ms": 500}}\n',
            'warning: <stdin>: conversation 0, $[1]: call 0 (f): time "2026-12-01 17:12:45" has no UTC offset (a '
            "local time of an unknown zone); no ts kept\n"
            'warning: <stdin>: conversation 0, $[1]: call 0 (f): no reply; response set to {"error": "no recorded '
            'response"}\n'
            'warning: <stdin>: conversation 0, $[0]: call 1 (f): no reply; response set to {"error": "no recorded '
            'response"}\n'))


class AgentsSdkTest(unittest.TestCase):
    def test_function_spans_give_times_but_no_ids_or_turns(self) -> None:
        data = _lines(
            {"object": "trace", "id": "trace_1", "workflow_name": "Agent workflow"},
            {"object": "trace.span", "id": "span_a", "trace_id": "trace_1", "parent_id": "span_agent",
             "started_at": "2026-11-30T14:50:37.108573+00:00", "ended_at": "2026-11-30T14:50:37.308589+00:00",
             "span_data": {"type": "function", "name": "get_weather", "input": '{"city":"Tokyo"}',
                           "output": "sunny", "mcp_data": None}, "error": None},
            {"object": "trace.span", "id": "span_b", "trace_id": "trace_1", "parent_id": "span_agent",
             "started_at": "2026-11-30T14:50:38.000000+00:00", "ended_at": "2026-11-30T14:50:37.000000+00:00",
             "span_data": {"type": "function", "name": "get_time", "input": "{}", "output": None, "mcp_data": None},
             "error": {"message": "Error running tool", "data": {"error": "clock is gone"}}},
        )
        self.assertEqual(
            _run("openai-agents", data),
            (
                0,
                '{"index": 0, "tool": "get_weather", "args": {"city": "Tokyo"}, "response": {"text": "sunny"}, '
                '"meta": {"ts": "2026-11-30T14:50:37.108573Z", "duration_ms": 200.016}}\n'
                '{"index": 1, "tool": "get_time", "args": {}, "response": {"error": true, "text": "Error running '
                'tool"}, "meta": {"ts": "2026-11-30T14:50:38.000000Z"}}\n',
                "warning: <stdin>:3: conversation 0, message 1: call 1 (get_time): end time "
                "2026-11-30T14:50:37.000000Z comes before the start 2026-11-30T14:50:38.000000Z; no duration kept\n",
            ),
        )


class InspectTest(unittest.TestCase):
    def test_tool_events_time_the_calls_of_one_turn(self) -> None:
        sample = {"id": "one", "epoch": 1, "messages": [
            {"id": "m0", "content": "Add 1 and 2, and 3 and 4.", "source": "input", "role": "user"},
            {"id": "m1", "content": "", "source": "generate", "role": "assistant", "model": "mockllm/model",
             "tool_calls": [{"id": "call_x", "function": "add", "arguments": {"x": 1, "y": 2}, "type": "function"},
                            {"id": "call_y", "function": "add", "arguments": {"x": 3, "y": 4}, "type": "function"}]},
            {"id": "m2", "content": "3", "role": "tool", "tool_call_id": "call_x", "function": "add"},
            {"id": "m3", "content": "", "role": "tool", "tool_call_id": "call_y", "function": "add",
             "error": {"type": "timeout", "message": "timed out"}}],
            "events": [
                {"uuid": "e1", "span_id": "s1", "timestamp": "2026-11-30T16:09:50.327057+02:00", "working_start": 1.27,
                 "event": "tool", "type": "function", "id": "call_x", "function": "add", "arguments": {"x": 1, "y": 2},
                 "result": "3", "events": [], "completed": "2026-11-30T16:09:50.567378+02:00", "working_time": 0.24},
                {"uuid": "e2", "span_id": "s1", "timestamp": "2026-11-30T14:09:50.330000+00:00", "working_start": 1.28,
                 "event": "tool", "type": "function", "id": "call_y", "function": "add", "arguments": {"x": 3, "y": 4},
                 "result": "", "error": {"type": "timeout", "message": "timed out"}, "events": [], "completed": None}]}
        data = json.dumps({"version": 2, "status": "success", "eval": {"task": "t", "model": "mockllm/model"},
                           "samples": [sample]}, indent=1).encode("utf-8")
        self.assertEqual(
            _run("inspect-ai", data),
            (
                0,
                '{"index": 0, "tool": "add", "args": {"x": 1, "y": 2}, "response": {"text": "3"}, "meta": {"ts": '
                '"2026-11-30T14:09:50.327057Z", "duration_ms": 240.321, "call_id": "call_x", "turn": 0}}\n'
                '{"index": 1, "tool": "add", "args": {"x": 3, "y": 4}, "response": {"error": true, "text": '
                '"timed out"}, "meta": {"ts": "2026-11-30T14:09:50.330000Z", "call_id": "call_y", "turn": 0}}\n',
                "",
            ),
        )


class Tau2Test(unittest.TestCase):
    def test_local_times_are_not_kept_and_say_nothing(self) -> None:
        def message(role: str, turn: int, timestamp: str | None, **more: Any) -> dict[str, Any]:
            return {"role": role, "content": more.pop("content", None), "tool_calls": more.pop("tool_calls", None),
                    "turn_idx": turn, "timestamp": timestamp, **more}

        def call(call_id: str, name: str, requestor: str = "assistant") -> list[dict[str, Any]]:
            return [{"id": call_id, "name": name, "arguments": {}, "requestor": requestor}]

        def reply(call_id: str, turn: int, content: str) -> dict[str, Any]:
            return message("tool", turn, None, id=call_id, content=content, requestor="assistant", error=False)

        data = json.dumps({"timestamp": "2025-08-01T16:20:43.824977", "simulations": [
            {"id": "s1", "task_id": "1", "messages": [
                message("assistant", 0, "2025-08-01T16:20:44.335657", content="Hi! How can I help you today?"),
                message("user", 1, "2025-08-01T16:20:45.582555", content="Check 8JX2WO."),
                message("assistant", 2, "2025-08-01T16:20:46.100000", tool_calls=call("call_1", "get_reservation")),
                reply("call_1", 3, "active")]},
            {"id": "s2", "task_id": "2", "messages": [
                message("assistant", 0, "2025-08-01T14:20:46.100000+00:00", tool_calls=call("call_2", "get_user")),
                reply("call_2", 1, "u1"),
                message("user", 2, "yesterday", tool_calls=call("call_u", "toggle_data", "user")),
                reply("call_u", 3, "Data is ON."),
                message("assistant", 4, "2025-08-01T25:00:00+00:00", tool_calls=call("call_3", "calculate")),
                reply("call_3", 5, "2")]}]}).encode("utf-8")
        self.assertEqual(
            _run_split("tau2", data),
            (
                0,
                [
                    '{"index": 0, "tool": "get_reservation", "args": {}, "response": {"text": "active"}, '
                    '"meta": {"call_id": "call_1", "turn": 1}}\n',
                    '{"index": 0, "tool": "get_user", "args": {}, "response": {"text": "u1"}, "meta": {"ts": '
                    '"2025-08-01T14:20:46.100000Z", "call_id": "call_2", "turn": 0}}\n'
                    '{"index": 1, "tool": "user:toggle_data", "args": {}, "response": {"text": "Data is ON."}, '
                    '"meta": {"call_id": "call_u"}}\n'
                    '{"index": 2, "tool": "calculate", "args": {}, "response": {"text": "2"}, "meta": {"call_id": '
                    '"call_3", "turn": 1}}\n',
                ],
                'warning: <stdin>: conversation 1, message 2: call 1 (user:toggle_data): time "yesterday" is not an '
                "ISO 8601 date and time; no ts kept (and 1 more call)\n",
            ),
        )


    def test_a_call_on_another_role_has_no_turn(self) -> None:
        # The agent's call written on a user message, before any assistant message: no model turn.
        data = json.dumps({"simulations": [{"id": "s", "task_id": "1", "messages": [
            {"role": "user", "content": None, "tool_calls": [{"id": "c1", "name": "f", "arguments": {},
                                                              "requestor": "assistant"}]},
            {"role": "tool", "id": "c1", "content": "ok", "requestor": "assistant", "error": False}]}]}).encode()
        self.assertEqual(
            _run("tau2", data),
            (0, '{"index": 0, "tool": "f", "args": {}, "response": {"text": "ok"}, "meta": {"call_id": "c1"}}\n', ""),
        )


class TurnTest(unittest.TestCase):
    def test_responses_items_of_one_response_are_one_turn(self) -> None:
        data = json.dumps({"model": "gpt-4.1", "input": [
            {"role": "user", "content": "Weather in Paris and Bogota, then mail it."},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "id": "fc_1", "call_id": "call_paris", "name": "get_weather",
             "arguments": '{"city": "Paris"}'},
            {"type": "function_call", "id": "fc_2", "call_id": "call_bogota", "name": "get_weather",
             "arguments": '{"city": "Bogota"}'},
            {"type": "function_call_output", "call_id": "call_paris", "output": "14 C"},
            {"type": "function_call_output", "call_id": "call_bogota", "output": "19 C"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Mailing it."}]},
            {"type": "function_call", "id": "fc_3", "call_id": "call_mail", "name": "send_email", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_mail", "output": "sent"}]}).encode("utf-8")
        code, out, err = _run("openai-responses", data)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(
            [json.loads(line)["meta"] for line in out.splitlines()],
            [{"call_id": "call_paris", "turn": 0}, {"call_id": "call_bogota", "turn": 0},
             {"call_id": "call_mail", "turn": 1}],
        )

    def test_gemini_parallel_parts_share_a_turn_and_a_name_is_no_id(self) -> None:
        data = json.dumps({"contents": [
            {"role": "user", "parts": [{"text": "Lights and music."}]},
            {"role": "model", "parts": [{"functionCall": {"id": "fc-1", "name": "dim_lights", "args": {"level": 1}}},
                                        {"functionCall": {"id": "fc-2", "name": "start_music", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"id": "fc-2", "name": "start_music", "response": {}}},
                                       {"functionResponse": {"id": "fc-1", "name": "dim_lights", "response": {}}}]},
            {"role": "model", "parts": [{"text": "Done. Anything else?"}]},
            {"role": "user", "parts": [{"text": "Off."}]},
            {"role": "model", "parts": [{"functionCall": {"name": "dim_lights", "args": {"level": 0}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "dim_lights", "response": {}}}]}]}).encode()
        code, out, err = _run("gemini", data)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(
            [json.loads(line)["meta"] for line in out.splitlines()],
            [{"call_id": "fc-1", "turn": 0}, {"call_id": "fc-2", "turn": 0}, {"turn": 2}],
        )

    def test_chat_formats_count_every_assistant_message(self) -> None:
        chat = json.dumps([
            {"role": "user", "content": "Cancel my order."},
            {"role": "assistant", "content": "Which order?"},
            {"role": "user", "content": "W1."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_order", "arguments": "{}"}},
                {"id": "call_2", "type": "function", "function": {"name": "get_user", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_2", "content": "u"},
            {"role": "tool", "tool_call_id": "call_1", "content": "o"},
            {"role": "assistant", "content": None, "function_call": {"name": "cancel", "arguments": "{}"}},
            {"role": "function", "name": "cancel", "content": "ok"}]).encode()
        code, out, err = _run("openai-chat", chat)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(
            [json.loads(line)["meta"] for line in out.splitlines()],
            [{"call_id": "call_1", "turn": 1}, {"call_id": "call_2", "turn": 1}, {"turn": 2}],
        )
        anthropic = json.dumps([
            {"role": "user", "content": "Read a and b."},
            {"role": "assistant", "content": [{"type": "text", "text": "Reading."},
                                              {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}},
                                              {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "A"},
                                         {"type": "tool_result", "tool_use_id": "toolu_2", "content": "B"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_3", "name": "read", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_3", "content": "C"}]}]).encode()
        code, out, err = _run("anthropic", anthropic)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(
            [json.loads(line)["meta"] for line in out.splitlines()],
            [{"call_id": "toolu_1", "turn": 0}, {"call_id": "toolu_2", "turn": 0}, {"call_id": "toolu_3", "turn": 1}],
        )

    def test_mcp_request_ids_are_kept_as_strings_without_turns(self) -> None:
        data = _lines(
            {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "search", "arguments": {"q": "a"}}},
            {"jsonrpc": "2.0", "id": "req-8", "method": "tools/call", "params": {"name": "search",
                                                                                 "arguments": {"q": "b"}}},
            {"jsonrpc": "2.0", "id": "req-8", "result": {"content": [], "isError": True}},
            {"jsonrpc": "2.0", "id": 7, "result": {"content": []}},
        )
        self.assertEqual(
            _run("mcp", data),
            (
                0,
                '{"index": 0, "tool": "search", "args": {"q": "a"}, "response": {"content": []}, '
                '"meta": {"call_id": "7"}}\n'
                '{"index": 1, "tool": "search", "args": {"q": "b"}, "response": {"error": true, "content": [], '
                '"isError": true}, "meta": {"call_id": "req-8"}}\n',
                "",
            ),
        )


if __name__ == "__main__":
    unittest.main()
