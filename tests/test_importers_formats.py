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


FIXTURES = os.path.join(ROOT, "tests", "fixtures", "import")
NO_REPLY = '{"index": %d, "tool": "%s", "args": %s, "response": {"error": "no recorded response"}}\n'


def _fixture(fmt: str, name: str) -> bytes:
    with open(os.path.join(FIXTURES, fmt, name), "rb") as handle:
        return handle.read()


def _lines(*items: object) -> bytes:
    return "".join(json.dumps(item) + "\n" for item in items).encode("utf-8")


class ClaudeCodeTranscriptTest(unittest.TestCase):
    """`~/.claude/projects/*.jsonl`: `auto` used to say "no message holds a tool call or reply"."""

    def test_auto_reads_a_transcript_as_claude_code_does(self) -> None:
        data = _fixture("claude-code", "transcript.jsonl")
        named = _run(["import", "claude-code", "-"], data)
        self.assertEqual(named[0::2], (0, ""))
        self.assertEqual(named[1].count("\n"), 3)
        self.assertEqual(_run(["import", "auto", "-"], data), (0, named[1], "detected format: claude-code\n"))

    def test_a_transcript_without_tool_calls_is_still_claude_code(self) -> None:
        line = {"parentUuid": None, "isSidechain": False, "sessionId": "s-1", "type": "user",
                "message": {"role": "user", "content": "hi"}, "uuid": "u1", "timestamp": "2026-03-02T09:14:05Z"}
        data = _lines({"type": "summary", "summary": "Greeting", "leafUuid": "u1"}, line)
        self.assertEqual(_run(["import", "auto", "-"], data), (0, "", "detected format: claude-code\n"))

    def test_another_named_format_is_refused(self) -> None:
        self.assertEqual(
            _run(["import", "anthropic", "-"], _fixture("claude-code", "transcript.jsonl")),
            (2, "", 'error: <stdin>: conversation 0, message 1: a Claude Code transcript line ("sessionId") '
                    "belongs to the claude-code format, not anthropic\n"))


def _response(*parts: object, candidates: int = 1) -> dict[str, object]:
    candidate = {"content": {"role": "model", "parts": list(parts)}, "finishReason": "STOP", "index": 0}
    return {"candidates": [candidate] * candidates, "usageMetadata": {"promptTokenCount": 5}}


CALL_A = {"functionCall": {"name": "a", "args": {"x": 1}}}
CALL_B = {"functionCall": {"name": "b", "args": {}}}


class GeminiResponsesTest(unittest.TestCase):
    """Gemini model responses: one used to be refused as "nothing looked like the gemini format"."""

    def test_a_single_response_with_parallel_calls(self) -> None:
        data = _fixture("gemini", "response.json")
        expected = (NO_REPLY % (0, "get_weather", '{"city": "Paris"}')
                    + NO_REPLY % (1, "get_weather", '{"city": "Lyon"}'))
        for fmt in ("gemini", "auto"):
            with self.subTest(fmt=fmt):
                code, out, err = _run(["import", fmt, "-"], data)
                self.assertEqual((code, out), (0, expected))
                self.assertEqual(err.startswith("detected format: gemini\n"), fmt == "auto")

    def test_a_responses_file_reads_every_chunk_in_order(self) -> None:
        code, out, err = _run(["import", "auto", "-"], _fixture("gemini", "cli-responses.jsonl"))
        self.assertEqual((code, out), (0, NO_REPLY % (0, "read_file", '{"file_path": "notes.txt"}')
                                       + NO_REPLY % (1, "read_file", '{"file_path": "todo.txt"}')
                                       + NO_REPLY % (2, "list_directory", '{"dir_path": "."}')))
        self.assertEqual(err.splitlines()[0], "detected format: gemini")

    def test_layout_tells_without_a_call_and_streamed_chunks_too(self) -> None:
        text = _response({"text": "Hello."})
        self.assertEqual(_run(["import", "auto", "-"], json.dumps(text).encode()),
                         (0, "", "detected format: gemini\n"))
        self.assertEqual(_run(["import", "auto", "-"], _lines({"method": "countTokens", "response": {"totalTokens": 3}},
                                                              {"method": "generateContent", "response": text})),
                         (0, "", "detected format: gemini\n"))
        # A stream saved as JSON Lines of chunks, and as a JSON array of chunks.
        for data in (_lines(_response({"text": "Let me"}), _response(CALL_A), _response(CALL_B)),
                     json.dumps([_response({"text": "Let me"}), _response(CALL_A, CALL_B)]).encode()):
            with self.subTest(data=data[:30]):
                code, out, _ = _run(["import", "auto", "-"], data)
                self.assertEqual((code, out), (0, NO_REPLY % (0, "a", '{"x": 1}') + NO_REPLY % (1, "b", "{}")))

    def test_only_candidate_0_is_read_and_said_so(self) -> None:
        code, out, err = _run(["import", "gemini", "-"], json.dumps(_response(CALL_A, candidates=2)).encode())
        self.assertEqual((code, out), (0, NO_REPLY % (0, "a", '{"x": 1}')))
        self.assertEqual(err.splitlines()[0],
                         "warning: <stdin>:1: conversation 0, message 0: a response has 2 candidates; only "
                         "candidate 0 is read")

    def test_streamed_arguments_are_put_together(self) -> None:
        def piece(*pieces: object, more: bool = True, **fields: object) -> dict[str, object]:
            return _response({"functionCall": {**fields, "partialArgs": list(pieces), "willContinue": more}})

        # As public proxies' tests send them: name and id repeated in every piece.
        pieces = [piece({"jsonPath": "$.location", "stringValue": "San "}, name="get_weather", id="t1"),
                  piece({"jsonPath": "$.location", "stringValue": "Francisco"}, name="get_weather", id="t1",
                        more=False)]
        code, out, _ = _run(["import", "gemini", "-"], _lines(*pieces))
        self.assertEqual((code, out), (0, (NO_REPLY % (0, "get_weather", '{"location": "Francisco"}')).replace(
            "}}\n", '}, "meta": {"call_id": "t1"}}\n')))
        # A string goes on only while its own piece says willContinue; quoted keys and indexes.
        pieces = [piece({"jsonPath": "$.q", "stringValue": "San ", "willContinue": True},
                        {"jsonPath": "$['a.b'][1]", "nullValue": "NULL_VALUE"}, name="s"),
                  piece({"jsonPath": "$.q", "stringValue": "Jose"}, {"jsonPath": '$["c"]', "boolValue": False},
                        more=False)]
        code, out, _ = _run(["import", "gemini", "-"], json.dumps(pieces).encode())
        self.assertEqual((code, out), (0, NO_REPLY % (0, "s", '{"q": "San Jose", "a.b": [null, null], "c": false}')))

    def test_streamed_arguments_that_never_end(self) -> None:
        start = _response({"functionCall": {"name": "a", "willContinue": True, "partialArgs": [
            {"jsonPath": "$.x", "numberValue": 1}]}})
        for data, calls in ((_lines(start), NO_REPLY % (0, "a", '{"x": 1}')),
                            (_lines(start, _response(CALL_B)), NO_REPLY % (0, "a", '{"x": 1}')
                             + NO_REPLY % (1, "b", "{}"))):
            with self.subTest(lines=data.count(b"\n")):
                code, out, err = _run(["import", "gemini", "-"], data)
                self.assertEqual((code, out), (0, calls))
                self.assertIn('call a: its streamed arguments did not end (no piece without "willContinue": '
                              "true); read as they were", err)

    def test_malformed_streamed_arguments(self) -> None:
        for pieces, message in (
                ([{"jsonPath": "location", "stringValue": "x"}], 'a partialArgs entry needs a "jsonPath" like '
                                                                 '"$.a.b[0]"'),
                ([{"jsonPath": "$.a[", "stringValue": "x"}], 'a partialArgs entry needs a "jsonPath" like "$.a.b[0]"'),
                ({"jsonPath": "$.a"}, '"partialArgs" must be an array'),
                ([{"jsonPath": "$.a", "numberValue": 1}, {"jsonPath": "$.a.b", "numberValue": 2}],
                 "a partialArgs path goes through a value that is not an object or array"),
                ([{"jsonPath": "$[0]", "numberValue": 1}],
                 "a partialArgs path goes through a value that is not an object or array")):
            with self.subTest(message=message, pieces=pieces):
                data = _lines(_response({"functionCall": {"name": "f", "partialArgs": pieces}}))
                self.assertEqual(_run(["import", "gemini", "-"], data),
                                 (2, "", f"error: <stdin>:1: conversation 0, message 0: {message}\n"))

    def test_malformed_responses_are_one_error_line(self) -> None:
        for item, message in (
                ({"method": "streamGenerate", "response": {}},
                 '"method" must be one of generateContent, generateContentStream, countTokens, embedContent'),
                ({"method": "generateContentStream", "response": _response(CALL_A)},
                 'a generateContentStream "response" must be an array of chunks'),
                ({"method": "generateContent", "response": {"candidates": 3}},
                 'not a Gemini response (an object with a "candidates" array)'),
                ({"candidates": [{"content": {"parts": {}}}]},
                 'a candidate must be an object whose "content" has a "parts" array')):
            with self.subTest(message=message):
                data = _lines({"method": "generateContent", "response": _response(CALL_B)}, item)
                self.assertEqual(_run(["import", "gemini", "-"], data),
                                 (2, "", f"error: <stdin>:2: conversation 0, message 1: {message}\n"))


# `ReadableSpan.to_json(indent=None)` of opentelemetry-sdk 1.45.2 (what its console and file exporters
# write), for an `execute_tool` span.
SDK_SPAN = {"name": "execute_tool get_weather", "context": {"trace_id": "0x4eefaa7eb396d0a0c2e9a8162b6f0b8f",
            "span_id": "0x272cec1a2c3423f8", "trace_state": "[]"}, "kind": "SpanKind.INTERNAL", "parent_id": None,
            "start_time": "2026-12-01T17:12:45.683875Z", "end_time": "2026-12-01T17:12:45.683898Z",
            "status": {"status_code": "UNSET"}, "attributes": {"gen_ai.operation.name": "execute_tool",
                                                                "gen_ai.tool.name": "get_weather"},
            "events": [], "links": [], "resource": {"attributes": {"telemetry.sdk.language": "python",
                                                                   "service.name": "unknown_service:python3"},
                                                    "schema_url": ""}}
# An ATIF v1.4 trajectory (Harbor's RFC 0001), OpenHands' V0 events and its agent SDK's typed events.
ATIF = {"schema_version": "ATIF-v1.4", "session_id": "s-1", "agent": {"name": "terminus", "version": "1.0"},
        "steps": [{"step_id": 1, "source": "agent", "message": "Listing.", "tool_calls": [
            {"tool_call_id": "c1", "function_name": "bash", "arguments": {"command": "ls"}}],
            "observation": {"results": [{"source_call_id": "c1", "content": "a.txt"}]}}]}
OPENHANDS_V0 = [{"id": 0, "timestamp": "2025-01-01T00:00:00", "source": "user", "message": "List files",
                 "action": "message", "args": {"content": "List files"}},
                {"id": 1, "timestamp": "2025-01-01T00:00:01", "source": "agent", "message": "Running ls",
                 "action": "run", "args": {"command": "ls"}},
                {"id": 2, "timestamp": "2025-01-01T00:00:02", "source": "agent", "message": "", "cause": 1,
                 "observation": "run", "content": "a.txt", "extras": {"command": "ls", "exit_code": 0}}]
OPENHANDS_V1 = [{"kind": "ActionEvent", "id": "e1", "source": "agent", "tool_name": "terminal",
                 "tool_call_id": "c1", "action": {"command": "ls"}},
                {"kind": "ObservationEvent", "id": "e2", "source": "environment", "tool_call_id": "c1",
                 "observation": {"content": [{"type": "text", "text": "a.txt"}]}}]


class OnceUnreadLayoutTest(unittest.TestCase):
    """Layouts `auto` once named as unread (ATIF, OpenHands events, the SDK's span JSON) are detected and
    read now; a named format that does not fit them is refused, as for any other format."""

    def test_each_layout_is_detected_and_read(self) -> None:
        call = '{"index": 0, "tool": "%s", "args": %s, "response": %s, "meta": %s}\n'
        ls_atif = call % ("bash", '{"command": "ls"}', '{"text": "a.txt"}', '{"call_id": "c1", "turn": 0}')
        ls_sdk = call % ("terminal", '{"command": "ls"}', '{"text": "a.txt"}', '{"call_id": "c1", "turn": 0}')
        v0_note = ('warning: <stdin>%s: conversation 0, message 1: an agent action without "tool_call_metadata" (not a '
                   'function call) is not imported: "run" (and any later ones)\n')
        span = call % ("get_weather", "{}", '{"error": "no recorded response"}',
                       '{"ts": "2026-12-01T17:12:45.683875Z", "duration_ms": 0.023}')
        span_note = ('warning: <stdin>%s: conversation 0, %s: call 0 (get_weather): no reply; response set to '
                     '{"error": "no recorded response"}\n')
        for name, data, fmt, out, warnings in (
                ("ATIF", json.dumps(ATIF, indent=2).encode(), "atif", ls_atif, ""),
                ("OpenHands V0 lines", _lines(*OPENHANDS_V0), "openhands", "", v0_note % ":2"),
                ("OpenHands V0 array", json.dumps(OPENHANDS_V0).encode(), "openhands", "", v0_note % ""),
                ("OpenHands V1 lines", _lines(*OPENHANDS_V1), "openhands", ls_sdk, ""),
                ("OpenHands eval output", _lines({"instance_id": "x", "history": OPENHANDS_V0}), "openhands", "",
                 v0_note % ""),
                ("SDK spans, an array", json.dumps([SDK_SPAN]).encode(), "otel", span, span_note % ("", "$[0]")),
                ("SDK spans, one per line", _lines(SDK_SPAN), "otel", span, span_note % ("", "$")),
                ("SDK spans, as the console exporter prints them",
                 (json.dumps(SDK_SPAN, indent=4) + "\n") .encode() * 2, "otel", span + span.replace(
                     '"index": 0', '"index": 1'), span_note % (":1", "message 0") + span_note.replace(
                         "call 0", "call 1") % (":29", "message 1"))):
            with self.subTest(name=name):
                self.assertEqual(_run(["import", "auto", "-"], data),
                                 (0, out, f"detected format: {fmt}\n{warnings}"))
                code, out, err = _run(["import", "gemini", "-"], data)
                self.assertEqual((code, out, err.count("\n")), (2, "", 1))
                self.assertTrue(err.startswith("error: <stdin>") and f"the {fmt} format, not gemini" in err
                                or f"a {fmt} file" in err, err)

    def test_other_files_keep_the_generic_message(self) -> None:
        self.assertEqual(_run(["import", "auto", "-"], b'[{"role": "user", "content": "hi"}]'),
                         (2, "", "error: <stdin>: cannot detect the format: no message is one that only a known "
                                 'format writes (the first message has keys "role", "content"; the closest known '
                                 "format is openai-chat; name the format instead of auto)\n"))

    def test_swe_agent_history_is_still_swe_agent(self) -> None:
        history = {"history": [{"role": "assistant", "content": "ls", "action": "ls", "agent": "main",
                                "message_type": "action"}]}
        self.assertEqual(_run(["import", "auto", "-"], json.dumps(history).encode())[2].splitlines()[0],
                         "detected format: swe-agent")


if __name__ == "__main__":
    unittest.main()
