"""The new formats beyond their fixtures: inspect_ai `.eval` archives, OpenInference's flattened LLM
messages, and where errors point inside OTLP JSON Lines."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import unittest

from toolreplay.cli import main
from toolreplay.cli._io import IO

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSPECT = os.path.join(ROOT, "tests", "fixtures", "import", "inspect-ai")
# The sample's tool events time the calls: `timestamp` is the start, `completed` the end.
SAMPLE_ONE = (
    '{"index": 0, "tool": "add", "args": {"x": 1, "y": 2}, "response": {"text": "3"}, "meta": {"ts": '
    '"2026-11-30T14:09:50.327057Z", "duration_ms": 240.321, "call_id": '
    '"for_tool_call_ea1c0d08-c275-41fc-a2a6-3af35249fabe", "turn": 0}}\n'
    '{"index": 1, "tool": "divide", "args": {"x": 1, "y": 0}, "response": {"error": true, "text": "division by zero"}, '
    '"meta": {"ts": "2026-11-30T14:09:50.618367Z", "duration_ms": 13.887, "call_id": '
    '"for_tool_call_5da002ea-9cef-4f26-b47a-406d69bd6976", "turn": 1}}\n'
)


def _run(args: list[str], data: bytes = b"") -> tuple[int, str, str]:
    io = IO.memory(stdin=data)
    code = main(args, io)
    return code, io.out(), io.err()


class InspectArchiveTest(unittest.TestCase):
    def test_eval_archive_gives_one_session_per_sample(self) -> None:
        # archive.eval: the real .eval log of inspect_ai's mock-model run, recompressed with deflate.
        with tempfile.TemporaryDirectory() as tmp:
            target = os.path.join(tmp, "out")
            code, _, err = _run(["import", "auto", os.path.join(INSPECT, "archive.eval"), "--split", target])
            self.assertEqual((code, err), (0, "detected format: inspect-ai\n"))
            self.assertEqual(sorted(os.listdir(target)), ["0000.jsonl", "0001.jsonl"])
            with open(os.path.join(target, "0000.jsonl"), encoding="utf-8") as handle:
                self.assertEqual(handle.read(), SAMPLE_ONE)

    def test_zstd_archive_needs_a_newer_python(self) -> None:
        path = os.path.join(INSPECT, "zstd.eval")  # as inspect_ai writes it today (zstd, zip method 93)
        with tempfile.TemporaryDirectory() as tmp:
            code, out, err = _run(["import", "inspect-ai", path, "--split", os.path.join(tmp, "out")])
        if sys.version_info >= (3, 14):  # zipfile reads zstd
            self.assertEqual((code, err), (0, ""))
        else:
            self.assertEqual(
                (code, out, err),
                (2, "", f"error: {path}: samples/one_epoch_1.json: compressed with zip method 93, which this "
                        "Python cannot read; convert the log first (inspect log convert --to json)\n"),
            )

    def test_not_a_zip(self) -> None:
        self.assertEqual(
            _run(["import", "auto", "-"], b"PK\x03\x04broken"),
            (2, "", "error: <stdin>: not a readable zip archive (File is not a zip file)\n"),
        )


def _span(span_id: str, start: int, attributes: dict[str, str]) -> dict[str, object]:
    return {"traceId": "ab" * 16, "spanId": span_id, "name": "ChatCompletion", "startTimeUnixNano": str(start),
            "attributes": [{"key": key, "value": {"stringValue": value}} for key, value in attributes.items()]}


class OpenTelemetryTest(unittest.TestCase):
    def test_openinference_llm_spans(self) -> None:
        # Phoenix's OpenAI instrumentation: flattened llm.input_messages / llm.output_messages.
        first = {
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Weather in Rome?",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_1",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "get_weather",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"city": "Rome"}',
        }
        second = {
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Weather in Rome?",
            "llm.input_messages.1.message.role": "assistant",
            "llm.input_messages.1.message.tool_calls.0.tool_call.id": "call_1",
            "llm.input_messages.1.message.tool_calls.0.tool_call.function.name": "get_weather",
            "llm.input_messages.1.message.tool_calls.0.tool_call.function.arguments": '{"city": "Rome"}',
            "llm.input_messages.2.message.role": "tool",
            "llm.input_messages.2.message.tool_call_id": "call_1",
            "llm.input_messages.2.message.content": '{"temp": 21}',
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "21 degrees.",
        }
        export = {"resourceSpans": [{"scopeSpans": [{"spans": [_span("01" * 8, 1, first), _span("02" * 8, 2, second)]}]}]}
        self.assertEqual(
            _run(["import", "auto", "-"], json.dumps(export).encode("utf-8")),
            (0, '{"index": 0, "tool": "get_weather", "args": {"city": "Rome"}, "response": {"temp": 21}, '
                '"meta": {"call_id": "call_1", "turn": 0}}\n',
             "detected format: otel\n"),
        )

    def test_errors_in_json_lines_name_the_line_and_the_path(self) -> None:
        good = {"resourceSpans": []}
        bad = {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": 7}]}]}]}
        data = (json.dumps(good) + "\n" + json.dumps(bad) + "\n").encode("utf-8")
        self.assertEqual(
            _run(["import", "otel", "-"], data),
            (2, "", 'error: <stdin>:2: $.resourceSpans[0].scopeSpans[0].spans[0]: "traceId" and "spanId" '
                    "must be strings\n"),
        )

    def test_an_export_without_spans_is_an_empty_session(self) -> None:
        self.assertEqual(_run(["import", "otel", "-"], b'{"resourceSpans": []}'), (0, "", ""))


if __name__ == "__main__":
    unittest.main()
