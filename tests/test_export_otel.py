"""`export otel`: a session as an OTLP JSON trace, deterministic, content only on request, and the
round trip (export, then `import otel`, gives the same session). A real OTLP consumer (the
`opentelemetry-proto` package) parses the export, and real OpenTelemetry SDK output imports."""

from __future__ import annotations

import base64
import datetime
import glob
import importlib.util
import json
import os
import re
import tempfile
import unittest
from typing import Any

from tests.support import integration, require
from toolreplay.cli import main
from toolreplay.cli._io import IO

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SESSION = (
    b'{"index": 0, "tool": "get_order", "args": {"order_id": "1042"}, "response": {"status": "shipped"}}\n'
    b'{"index": 1, "tool": "refund", "args": {"order_id": "1042", "amount": 20.0}, "response": {"ok": false, '
    b'"error": "tool not allowed: refund"}}\n'
)
ROOT_SPAN = (
    '{"traceId": "94f7c075090550cd48dac3128cd1e9bd", "spanId": "77dbb006651d70f1", "name": "invoke_agent", '
    '"kind": 1, "startTimeUnixNano": "0", "endTimeUnixNano": "2000000", "attributes": [{"key": '
    '"gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}}]}'
)
SPAN_0 = (
    '{"traceId": "94f7c075090550cd48dac3128cd1e9bd", "spanId": "b65bd6684bd2effb", "parentSpanId": '
    '"77dbb006651d70f1", "name": "execute_tool get_order", "kind": 1, "startTimeUnixNano": "0", '
    '"endTimeUnixNano": "1000000", "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": '
    '"execute_tool"}}, {"key": "gen_ai.tool.name", "value": {"stringValue": "get_order"}}, {"key": '
    '"gen_ai.tool.type", "value": {"stringValue": "function"}}, {"key": "toolreplay.placed_time", "value": '
    '{"boolValue": true}}]}'
)
SPAN_1 = (
    '{"traceId": "94f7c075090550cd48dac3128cd1e9bd", "spanId": "276ac52faf5cb499", "parentSpanId": '
    '"77dbb006651d70f1", "name": "execute_tool refund", "kind": 1, "startTimeUnixNano": "1000000", '
    '"endTimeUnixNano": "2000000", "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": '
    '"execute_tool"}}, {"key": "gen_ai.tool.name", "value": {"stringValue": "refund"}}, {"key": '
    '"gen_ai.tool.type", "value": {"stringValue": "function"}}, {"key": "toolreplay.placed_time", "value": '
    '{"boolValue": true}}, {"key": "error.type", "value": {"stringValue": "tool not allowed: refund"}}], '
    '"status": {"code": 2, "message": "tool not allowed: refund"}}'
)
HEAD = (
    '{"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": '
    '"toolreplay"}}]}, "scopeSpans": [{"scope": {"name": "toolreplay"}, "spans": ['
)


def _export(data: bytes, *flags: str) -> tuple[int, str, str]:
    io = IO.memory(stdin=data)
    code = main(["export", "otel", "-", *flags], io)
    return code, io.out(), io.err()


def _import(data: bytes) -> tuple[int, str, str]:
    io = IO.memory(stdin=data)
    code = main(["import", "otel", "-"], io)
    return code, io.out(), io.err()


def _without_meta(session: str) -> list[dict[str, object]]:
    records = [json.loads(line) for line in session.splitlines()]
    return [{key: value for key, value in record.items() if key != "meta"} for record in records]


def _sessions() -> list[bytes]:
    """Every session the repository holds: samples and the importers' expected outputs."""
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "samples", "session-*.jsonl"))):
        with open(path, "rb") as handle:
            found.append(handle.read())
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "import", "*", "*.out"))):
        with open(path, "rb") as handle:
            text = handle.read()
        found.extend(re.split(rb"^# \d{4}\.jsonl\n", text, flags=re.MULTILINE)[1:])
    return found


class ExportTest(unittest.TestCase):
    def test_exact_export_without_content(self) -> None:
        self.assertEqual(_export(SESSION), (0, HEAD + ROOT_SPAN + ", " + SPAN_0 + ", " + SPAN_1 + "]}]}]}\n", ""))

    def test_content_only_with_the_flag(self) -> None:
        code, out, _ = _export(SESSION, "--with-content")
        attributes = {
            item["key"]: next(iter(item["value"].values()))
            for item in json.loads(out)["resourceSpans"][0]["scopeSpans"][0]["spans"][2]["attributes"]
        }
        self.assertEqual(
            (attributes["gen_ai.tool.call.arguments"], attributes["gen_ai.tool.call.result"]),
            ('{"order_id": "1042", "amount": 20.0}', '{"ok": false, "error": "tool not allowed: refund"}'),
        )
        self.assertNotIn("gen_ai.tool.call.arguments", _export(SESSION)[1])

    def test_same_session_same_bytes_and_ids_follow_the_session(self) -> None:
        self.assertEqual(_export(SESSION), _export(SESSION))
        other = json.loads(_export(SESSION.replace(b"1042", b"1043"))[1])
        self.assertNotEqual(other["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"],
                            "94f7c075090550cd48dac3128cd1e9bd")

    def test_error_types(self) -> None:
        session = (
            b'{"index": 0, "tool": "a", "args": {}, "response": {"ok": false, "error": "ValueError: bad"}}\n'
            b'{"index": 1, "tool": "b", "args": {}, "response": {"error": true, "text": "x"}}\n'
            b'{"index": 2, "tool": "c", "args": {}, "response": {"ok": false, "error": "budget exceeded: max_steps"}}\n'
        )
        spans = json.loads(_export(session)[1])["resourceSpans"][0]["scopeSpans"][0]["spans"][1:]
        found = [[a["value"]["stringValue"] for a in span["attributes"] if a["key"] == "error.type"] for span in spans]
        self.assertEqual(found, [["ValueError"], ["tool_error"], ["budget exceeded: max_steps"]])

    def test_round_trip_gives_the_same_session(self) -> None:
        # Byte for byte, meta included: times and call ids come back from the spans, turn, outcome and
        # the x- keys from the toolreplay.* attributes, and a time the export placed is not taken for one.
        sessions = _sessions()
        self.assertGreater(len(sessions), 40)
        self.assertGreater(sum(b'"meta": {"ts"' in session for session in sessions), 3)
        for session in sessions:
            with self.subTest(session=session[:80]):
                code, exported, _ = _export(session, "--with-content")
                self.assertEqual(code, 0)
                self.assertEqual(_import(exported.encode("utf-8")), (0, session.decode("utf-8"), ""))

    def test_round_trip_of_every_meta_key(self) -> None:
        session = (b'{"index": 0, "tool": "a", "args": {}, "response": {}, "meta": {"ts": "2026-12-01T16:00:00.123Z", '
                   b'"duration_ms": 2.5, "call_id": "toolu_01", "turn": 3, "outcome": "cached", "x-host": ["h", 1]}}\n'
                   b'{"index": 1, "tool": "b", "args": {}, "response": {}, "meta": {"turn": 4, "outcome": "refused", '
                   b'"mutates": true}}\n')
        code, exported, _ = _export(session, "--with-content")
        self.assertEqual(_import(exported.encode("utf-8")), (0, session.decode("utf-8"), ""))

    def test_without_content_the_import_keeps_tools_and_errors(self) -> None:
        self.assertEqual(
            _import(_export(SESSION)[1].encode("utf-8")),
            (
                0,
                '{"index": 0, "tool": "get_order", "args": {}, "response": {"error": "no recorded response"}}\n'
                '{"index": 1, "tool": "refund", "args": {}, "response": {"error": "tool not allowed: refund"}}\n',
                "warning: <stdin>: conversation 0, $.resourceSpans[0].scopeSpans[0].spans[1]: call 0 (get_order): "
                'no reply; response set to {"error": "no recorded response"}\n',
            ),
        )

    def test_times_and_ids_come_from_meta(self) -> None:
        session = (
            b'{"index": 0, "tool": "a", "args": {}, "response": {}, "meta": {"ts": "2026-12-01T16:00:00.123456789Z", '
            b'"duration_ms": 2.5, "call_id": "toolu_01", "turn": 0, "outcome": "ran", "x-host": "h1"}}\n'
            b'{"index": 1, "tool": "b", "args": {}, "response": {}}\n'
            b'{"index": 2, "tool": "c", "args": {}, "response": {}, "meta": {"ts": "2026-12-01T16:00:01Z"}}\n'
        )
        code, out, err = _export(session)
        self.assertEqual((code, err), (0, ""))
        root, first, second, third = json.loads(out)["resourceSpans"][0]["scopeSpans"][0]["spans"]
        start = 1796140800_123456789
        self.assertEqual((first["startTimeUnixNano"], first["endTimeUnixNano"]), (str(start), str(start + 2_500_000)))
        # Without ts: where the span before ended, 1 ms long, marked as placed.
        self.assertEqual((second["startTimeUnixNano"], second["endTimeUnixNano"]),
                         (str(start + 2_500_000), str(start + 3_500_000)))
        self.assertEqual((third["startTimeUnixNano"], third["endTimeUnixNano"]),
                         (str(1796140801_000000000), str(1796140801_001000000)))
        self.assertEqual((root["startTimeUnixNano"], root["endTimeUnixNano"]),
                         (str(start), str(1796140801_001000000)))
        attributes = {item["key"]: next(iter(item["value"].values())) for item in first["attributes"]}
        self.assertEqual((attributes["gen_ai.tool.call.id"], attributes["toolreplay.turn"],
                          attributes["toolreplay.outcome"], attributes["toolreplay.meta"]),
                         ("toolu_01", "0", "ran", '{"x-host": "h1"}'))
        self.assertNotIn("toolreplay.placed_time", attributes)
        self.assertEqual([item["key"] for item in second["attributes"]],
                         ["gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.type", "toolreplay.placed_time"])

    def test_start_places_records_without_ts(self) -> None:
        code, out, _ = _export(SESSION, "--start", "2026-12-01T16:00:00Z")
        spans = json.loads(out)["resourceSpans"][0]["scopeSpans"][0]["spans"]
        self.assertEqual([span["startTimeUnixNano"] for span in spans],
                         ["1796140800000000000", "1796140800000000000", "1796140800001000000"])
        self.assertEqual(_export(SESSION, "--start", "2026-12-01T16:00:00"),
                         (2, "", "error: --start must be an RFC 3339 time in UTC ending in Z (2026-12-01T16:00:00Z), "
                                 "got '2026-12-01T16:00:00'\n"))

    def test_output_file_and_bad_session(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            target = os.path.join(tmp, "trace.json")
            io = IO.memory(stdin=SESSION)
            self.assertEqual(main(["export", "otel", "-", "-o", target], io), 0)
            with open(target, encoding="utf-8") as handle:
                self.assertEqual(handle.read(), _export(SESSION)[1])
        self.assertEqual(
            _export(b'{"index": 0, "tool": "a"}\n'), (2, "", 'error: <stdin>:1: missing field "args"\n')
        )


def _have(*modules: str) -> bool:
    try:
        return all(importlib.util.find_spec(name) is not None for name in modules)
    except ModuleNotFoundError:
        return False


def otlp_json(spans: Any) -> Any:
    """Finished SDK spans as OTLP/JSON, as the OTLP exporter encodes them (its protobuf's JSON mapping has
    base64 ids; OTLP/JSON writes them in hex)."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    document: Any = MessageToDict(encode_spans(spans))
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return document


def _otlp_to_proto3_json(document: Any) -> Any:
    """OTLP/JSON writes ids as hex; the protobuf JSON mapping wants base64 (what OTLP receivers convert)."""
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode("ascii")
    return document


@integration
class OpenTelemetryPackagesTest(unittest.TestCase):
    def test_the_export_parses_as_an_export_trace_service_request(self) -> None:
        require(_have("opentelemetry.proto", "google.protobuf"), "opentelemetry-proto is not installed")
        from google.protobuf import json_format
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
        from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

        exported = json.loads(_export(SESSION, "--with-content")[1])
        request = json_format.Parse(json.dumps(_otlp_to_proto3_json(exported)), ExportTraceServiceRequest())
        spans = request.resource_spans[0].scope_spans[0].spans
        self.assertEqual([span.name for span in spans], ["invoke_agent", "execute_tool get_order", "execute_tool refund"])
        self.assertEqual(spans[0].trace_id, bytes.fromhex("94f7c075090550cd48dac3128cd1e9bd"))
        self.assertEqual(spans[2].span_id, bytes.fromhex("276ac52faf5cb499"))
        self.assertEqual((spans[1].parent_span_id, spans[2].parent_span_id), (spans[0].span_id, spans[0].span_id))
        self.assertEqual({span.kind for span in spans}, {Span.SpanKind.SPAN_KIND_INTERNAL})
        self.assertEqual((spans[2].status.code, spans[2].status.message),
                         (Status.StatusCode.STATUS_CODE_ERROR, "tool not allowed: refund"))
        self.assertEqual(
            {kv.key: kv.value.string_value for kv in spans[2].attributes}["gen_ai.tool.call.arguments"],
            '{"order_id": "1042", "amount": 20.0}',
        )
        self.assertEqual(spans[2].start_time_unix_nano, 1_000_000)

    def test_sdk_spans_import(self) -> None:
        require(
            _have("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.common"),
            "opentelemetry-sdk and opentelemetry-exporter-otlp-proto-common are not installed",
        )
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("test")
        with tracer.start_as_current_span("invoke_agent", attributes={"gen_ai.operation.name": "invoke_agent"}):
            for city, result in (("Paris", '{"temp": 14}'), ("Oslo", "cold")):
                attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                              "gen_ai.tool.call.arguments": json.dumps({"city": city}),
                              "gen_ai.tool.call.result": result}
                with tracer.start_as_current_span("execute_tool get_weather", attributes=attributes):
                    pass
        document = otlp_json(exporter.get_finished_spans())
        # Each record's meta is its span's start and duration (the SDK's clock, in nanoseconds).
        tools = [span for span in exporter.get_finished_spans() if span.name.startswith("execute_tool")]
        metas = [
            {"ts": datetime.datetime.fromtimestamp(span.start_time // 10**9, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
             + (f".{span.start_time % 10**9:09d}".rstrip("0") if span.start_time % 10**9 else "") + "Z",
             "duration_ms": (lambda ns: ns // 10**6 if ns % 10**6 == 0 else ns / 10**6)(span.end_time - span.start_time)}
            for span in tools
        ]
        self.assertEqual(
            _import(json.dumps(document).encode("utf-8")),
            (
                0,
                '{"index": 0, "tool": "get_weather", "args": {"city": "Paris"}, "response": {"temp": 14}, '
                f'"meta": {json.dumps(metas[0])}}}\n'
                '{"index": 1, "tool": "get_weather", "args": {"city": "Oslo"}, "response": {"text": "cold"}, '
                f'"meta": {json.dumps(metas[1])}}}\n',
                "",
            ),
        )


if __name__ == "__main__":
    unittest.main()
