"""Import on the shapes real public logs take: each case is a minimal input of one shape seen in the wild.

Also: no input makes `import` raise anything but an input error (a non-string `"type"` field used to be
a TypeError), whatever the format named.
"""

from __future__ import annotations

import json
import os
import unittest
from typing import Any

from tests.support import integration
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.importers import FORMATS
from toolreplay.importers.sse import sse_events

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "import")


def _run(fmt: str, data: bytes) -> tuple[int, str, str]:
    io = IO.memory(stdin=data)
    code = main(["import", fmt, "-"], io)
    return code, io.out(), io.err()


class RealLogShapesTest(unittest.TestCase):
    def test_blank_function_call_placeholder_is_not_a_call(self) -> None:
        data = (
            b'[{"role": "assistant", "content": "Hi!", "function_call": {"name": "", "arguments": ""}},\n'
            b' {"role": "assistant", "content": null, "function_call": {"name": "", "arguments": ""}, '
            b'"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},\n'
            b' {"role": "tool", "tool_call_id": "c1", "content": "12:00"}]'
        )
        # The first assistant message asked for nothing (a placeholder): the call is of turn 1.
        expected = ('{"index": 0, "tool": "get_time", "args": {}, "response": {"text": "12:00"}, '
                    '"meta": {"call_id": "c1", "turn": 1}}\n')
        self.assertEqual(_run("openai-chat", data), (0, expected, ""))
        self.assertEqual(_run("auto", data), (0, expected, "detected format: openai-chat\n"))

    def test_mcp_server_requests_have_their_own_id_space(self) -> None:
        # The server asks the client for a sampling while tool call 1 runs, with its own id 1.
        data = (
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "summarise", '
            b'"arguments": {"doc": "a.md"}}}\n'
            b'{"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": {"messages": [], '
            b'"maxTokens": 50}}\n'
            b'{"jsonrpc": "2.0", "id": 1, "result": {"role": "assistant", "content": {"type": "text", '
            b'"text": "short"}, "model": "m"}}\n'
            b'{"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "summary: short"}]}}\n'
            b'{"jsonrpc": "2.0", "id": 0, "method": "ping"}\n'
            b'{"jsonrpc": "2.0", "id": 0, "result": {}}\n'
        )
        self.assertEqual(
            _run("mcp", data),
            (
                0,
                '{"index": 0, "tool": "summarise", "args": {"doc": "a.md"}, "response": {"content": '
                '[{"type": "text", "text": "summary: short"}]}, "meta": {"call_id": "1"}}\n',
                "",
            ),
        )

    def test_a_tools_call_the_server_rejected_is_a_warning(self) -> None:
        data = (
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call"}\n'
            b'{"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "Invalid params"}}\n'
            b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "search", '
            b'"arguments": {"q": "x"}}}\n'
            b'{"jsonrpc": "2.0", "id": 2, "result": {"content": []}}\n'
        )
        self.assertEqual(
            _run("mcp", data),
            (
                0,
                '{"index": 0, "tool": "search", "args": {"q": "x"}, "response": {"content": []}, '
                '"meta": {"call_id": "2"}}\n',
                'warning: <stdin>:2: conversation 0, message 1: the server rejected the tools/call request of '
                'message 0 (id 1, no "params.name" string); not imported\n',
            ),
        )
        # Not rejected by the server: still an input error.
        self.assertEqual(
            _run("mcp", data.split(b"\n", 2)[0] + b"\n")[0::2],
            (2, 'error: <stdin>:1: conversation 0, message 0: a tools/call request has no "params.name" string\n'),
        )

    def test_mcp_calls_differing_in_other_params_stay_different(self) -> None:
        data = (
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "deploy", '
            b'"arguments": {"env": "prod"}, "_meta": {"progressToken": 1}}}\n'
            b'{"jsonrpc": "2.0", "id": 1, "result": {"content": [], "inputRequests": {"confirm": {}}, '
            b'"requestState": "s1"}}\n'
            b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "deploy", '
            b'"arguments": {"env": "prod"}, "inputResponses": {"confirm": {"action": "accept"}}, '
            b'"requestState": "s1", "_meta": {"progressToken": 2}}}\n'
            b'{"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "deployed"}]}}\n'
        )
        code, out, err = _run("mcp", data)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(
            out.splitlines()[1],
            '{"index": 1, "tool": "deploy", "args": {"env": "prod", "_mcp_params": {"inputResponses": '
            '{"confirm": {"action": "accept"}}, "requestState": "s1"}}, "response": {"content": '
            '[{"type": "text", "text": "deployed"}]}, "meta": {"call_id": "2"}}',
        )
        replay = IO.memory(stdin=out.encode("utf-8"))
        self.assertEqual(main(["replay", "-"], replay), 0, replay.out())  # no duplicate-call finding

    def test_server_tool_result_error_is_an_error(self) -> None:
        data = (
            b'[{"role": "assistant", "content": [{"type": "server_tool_use", "id": "srvtoolu_1", "name": '
            b'"web_search", "input": {"query": "x"}}, {"type": "web_search_tool_result", "tool_use_id": '
            b'"srvtoolu_1", "content": {"type": "web_search_tool_result_error", "error_code": '
            b'"max_uses_exceeded"}}]}]'
        )
        self.assertEqual(
            _run("anthropic", data),
            (
                0,
                '{"index": 0, "tool": "web_search", "args": {"query": "x"}, "response": {"error": true, '
                '"content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}}, '
                '"meta": {"call_id": "srvtoolu_1", "turn": 0}}\n',
                "",
            ),
        )

    def test_proxy_log_response_is_read_or_warned_about(self) -> None:
        data = (
            b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "time?"}],\n "response": {"id": '
            b'"chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": '
            b'"assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": '
            b'{"name": "get_time", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}]}}'
        )
        self.assertEqual(
            _run("openai-chat", data),
            (
                0,
                '{"index": 0, "tool": "get_time", "args": {}, "response": {"error": "no recorded response"}, '
                '"meta": {"call_id": "c1", "turn": 0}}\n',
                'warning: <stdin>: conversation 0, message 1: call 0 (get_time): no reply; response set to '
                '{"error": "no recorded response"}\n',
            ),
        )
        unknown = (
            b'{"messages": [{"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", '
            b'"arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "ok"}], '
            b'"response": "streamed"}'
        )
        self.assertEqual(
            _run("openai-chat", unknown)[2],
            'warning: <stdin>: conversation 0: "response" is not a chat completion, Responses or Messages '
            "response; not read\n",
        )

    def test_responses_request_body_and_chat_completion_object(self) -> None:
        body = (
            b'{\n  "model": "gpt-4.1",\n  "input": [\n    {"role": "user", "content": "Weather in Paris?"},\n'
            b'    {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '
            b'"{\\"city\\": \\"Paris\\"}"},\n    {"type": "function_call_output", "call_id": "c1", '
            b'"output": "rain"}\n  ]\n}'
        )
        self.assertEqual(
            _run("auto", body),
            (
                0,
                '{"index": 0, "tool": "get_weather", "args": {"city": "Paris"}, "response": {"text": "rain"}, '
                '"meta": {"call_id": "c1", "turn": 0}}\n',
                "detected format: openai-responses\n",
            ),
        )
        completion = (
            b'{"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o",\n "choices": [{"index": 0, '
            b'"message": {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": '
            b'"function", "function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}}]}, '
            b'"finish_reason": "tool_calls"}]}'
        )
        self.assertEqual(
            _run("auto", completion)[1],
            '{"index": 0, "tool": "get_weather", "args": {"city": "Oslo"}, "response": {"error": '
            '"no recorded response"}, "meta": {"call_id": "c1", "turn": 0}}\n',
        )

    def test_responses_log_with_only_hosted_calls_is_detected(self) -> None:
        data = (
            b'[{"type": "web_search_call", "id": "ws_1", "status": "completed"}, {"type": "message", '
            b'"role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}]'
        )
        self.assertEqual(
            _run("auto", data),
            (
                0,
                "",
                "detected format: openai-responses\nwarning: <stdin>: conversation 0, message 0: "
                "web_search_call item not imported (a tool the API runs itself, not a function call)\n",
            ),
        )

    def test_errors_in_a_multi_line_document_name_the_json_path(self) -> None:
        data = b'{\n  "role": "assistant",\n  "tool_calls": {"id": "x"}\n}'
        self.assertEqual(
            _run("openai-chat", data),
            (2, "", 'error: <stdin>: conversation 0, $: "tool_calls" must be an array\n'),
        )
        otlp = b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "t", "spanId": "s", "attributes": 5}]}]}]}'
        self.assertEqual(
            _run("otel", otlp)[2],
            "error: <stdin>: $.resourceSpans[0].scopeSpans[0].spans[0].attributes: attributes must be an "
            "array of {key, value}\n",
        )

    def test_a_named_format_that_does_not_fit_is_an_error(self) -> None:
        gemini = b'[{"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]}]'
        self.assertEqual(
            _run("openai-chat", gemini),
            (2, "", 'error: <stdin>: conversation 0, message 0: a "functionCall" part belongs to the gemini '
                    "format, not openai-chat\n"),
        )
        other = b'[{"role": "model", "parts": [{"text": "hi"}]}, {"role": "model", "function_call": {"name": "f"}}]'
        self.assertEqual(
            _run("anthropic", other.replace(b'"parts": [{"text": "hi"}]', b'"content": "hi"'))[0::2],
            (2, 'error: <stdin>: conversation 0, message 1: a "function_call" belongs to the openai-chat '
                "format, not anthropic\n"),
        )
        odd = b'[{"role": "assistant", "content": "x", "tool_call_id": "c9"}]'
        self.assertEqual(
            _run("anthropic", odd),
            (2, "", "error: <stdin>: conversation 0, message 0: this message holds tool_call_id, but not where "
                    "the anthropic format reads a tool call: nothing was imported (name the right format, or "
                    "auto)\n"),
        )
        # A file that really holds no tool call is an empty session, as before.
        self.assertEqual(_run("openai-chat", b'[{"role": "user", "content": "hi"}]'), (0, "", ""))


def _replaced(value: Any, path: tuple[Any, ...], replacement: Any) -> Any:
    """A copy of `value` with the member at `path` (keys and indices) set to `replacement`."""
    copy = json.loads(json.dumps(value))
    target = copy
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = replacement
    return copy


def _mutations(value: Any) -> list[Any]:
    """Copies of a parsed document with one `type`, `role` or `id` field (anywhere) made non-string."""
    found: list[Any] = []
    paths: list[tuple[Any, ...]] = []
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            for key, member in item.items():
                if key in ("type", "role", "id", "name", "function", "content", "tool_call_ids", "parts"):
                    paths.append((*path, key))
                stack.append((member, (*path, key)))
        elif isinstance(item, list):
            stack.extend((member, (*path, index)) for index, member in enumerate(item))
    for path in paths[:40]:
        for replacement in ([], {}, 1, None, True):
            found.append(_replaced(value, path, replacement))
    return found


@integration  # a fuzz over every fixture: seconds, not the unit tier's milliseconds
class NoTracebackTest(unittest.TestCase):
    def test_non_string_type_fields(self) -> None:
        inputs = [
            b'[{"role": "assistant", "type": []}]',
            b'[{"role": "tool", "tool_call_id": "c", "content": [{"type": []}]}]',
            b'[{"role": "user", "content": [{"type": []}]}]',
            b'[{"role": "model", "parts": [{"type": []}]}]',
            b'{"role": "assistant", "type": {}}',
        ]
        for fmt in (*FORMATS, "auto"):
            for data in inputs:
                with self.subTest(fmt=fmt, data=data):
                    code, out, err = _run(fmt, data)
                    self.assertIn(code, (0, 2))
                    if code == 2:
                        self.assertEqual((out, err.count("\n"), err[:7]), ("", 1, "error: "))
        self.assertEqual(
            _run("openai-responses", inputs[0]),
            (2, "", "error: <stdin>: conversation 0, message 0: an item's \"type\" must be a string\n"),
        )
        self.assertEqual(
            _run("anthropic", inputs[2]),
            (2, "", 'error: <stdin>: conversation 0, message 0: a content block must be an object with a '
                    '"type" string\n'),
        )
        self.assertEqual(
            _run("openai-chat", inputs[1]),
            (0, "", 'warning: <stdin>: conversation 0, message 0: reply to call id "c" matches no earlier '
                    "call; dropped\n"),
        )

    def test_mutated_fixtures_never_raise(self) -> None:
        for fmt in FORMATS:
            for name in sorted(os.listdir(os.path.join(FIXTURES, fmt))):
                if not name.endswith(".json"):
                    continue
                with open(os.path.join(FIXTURES, fmt, name), "rb") as handle:
                    document, concatenated = _load(handle.read())
                for mutated in _mutations(document)[:20]:
                    data = _dump(mutated, concatenated)
                    for named in (fmt, "auto"):
                        code, _, err = _run(named, data)
                        self.assertIn(code, (0, 2), (fmt, name, err))


def _load(text: str | bytes) -> tuple[Any, bool]:
    """A `.json` fixture's document, or the list of its values when it is JSON values one after the other
    (the OpenTelemetry SDK's console output), and whether it was that."""
    text = text.decode("utf-8") if isinstance(text, bytes) else text
    decoder = json.JSONDecoder()
    values, position = [], 0
    while position < len(text.rstrip()):
        value, position = decoder.raw_decode(text, position)
        values.append(value)
        position = len(text) - len(text[position:].lstrip())
    return (values, True) if len(values) > 1 else (values[0], False)


def _dump(document: Any, concatenated: bool) -> bytes:
    """A mutated document written as its fixture was (values one after the other, pretty, when it was so)."""
    if concatenated and isinstance(document, list):
        return "".join(json.dumps(value, indent=4) + "\n" for value in document).encode("utf-8")
    return json.dumps(document).encode("utf-8")


def _field_mutations(lines: list[Any], limit: int) -> list[list[Any]]:
    """Copies of a fixture's values (its lines, or its one document) with one field, spread over the
    file, set to a value of another JSON type."""
    paths: list[tuple[Any, ...]] = []
    stack: list[tuple[Any, tuple[Any, ...]]] = [(lines, ())]
    while stack:
        item, path = stack.pop()
        members = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        for key, member in members:
            if path or isinstance(item, dict):
                paths.append((*path, key))
            stack.append((member, (*path, key)))
    step = max(1, len(paths) // limit)
    found = []
    for path in sorted(paths, key=str)[::step][:limit]:
        for replacement in ([], {}, None, "x", [{}]):
            found.append(_replaced(lines, path, replacement))
    return found


@integration  # a fuzz over every fixture: seconds, not the unit tier's milliseconds
class FieldFuzzTest(unittest.TestCase):
    def test_any_field_of_any_fixture_as_another_type_never_raises(self) -> None:
        # JSON Lines fixtures too (Gemini CLI responses lines, Claude Code transcripts, stream-json).
        for fmt in FORMATS:
            for name in sorted(os.listdir(os.path.join(FIXTURES, fmt))):
                if not name.endswith((".json", ".jsonl", ".sse")):
                    continue
                with open(os.path.join(FIXTURES, fmt, name), "rb") as handle:
                    text = handle.read().decode("utf-8")
                if name.endswith(".sse"):
                    lines, concatenated = [value for _, value in sse_events(text, name)], False
                elif name.endswith(".jsonl"):
                    lines, concatenated = [json.loads(line) for line in text.splitlines() if line.strip()], False
                else:
                    document, concatenated = _load(text)
                    lines = [document]
                for mutated in _field_mutations(lines, 8):
                    data = ("".join(json.dumps(line) + "\n" for line in mutated).encode("utf-8")
                            if name.endswith(".jsonl")
                            else "".join(f"data: {json.dumps(line)}\n\n" for line in mutated).encode("utf-8")
                            if name.endswith(".sse") else _dump(mutated[0], concatenated))
                    for named in (fmt, "auto"):
                        code, out, err = _run(named, data)
                        self.assertIn(code, (0, 2), (fmt, name, err))
                        if code == 2:
                            self.assertEqual((out, err.count("\n"), err[:7]), ("", 1, "error: "), (fmt, name))

    def test_streams_cut_anywhere_never_raise(self) -> None:
        # A streamed response saved while it came: cut at any byte, it imports or is one error line.
        for fmt in ("anthropic", "openai-chat", "openai-responses"):
            for name in sorted(os.listdir(os.path.join(FIXTURES, fmt))):
                if not name.startswith("stream") or not name.endswith((".sse", ".jsonl")):
                    continue
                with open(os.path.join(FIXTURES, fmt, name), "rb") as handle:
                    data = handle.read()
                for end in range(1, len(data), max(1, len(data) // 40)):
                    for named in (fmt, "auto"):
                        code, out, err = _run(named, data[:end])
                        self.assertIn(code, (0, 2), (fmt, name, end, err))
                        if code == 2:
                            self.assertEqual((out, err.count("\n"), err[:7]), ("", 1, "error: "), (name, end))

    def test_what_the_fuzz_found(self) -> None:
        # An empty list of conversations on one line, and unhashable values where a name is looked up.
        for data, fmt, error in (
                (b'{"simulations": []}', "tau2", "error: <stdin>: no conversation found\n"),
                (b'{"eval": {}, "samples": []}', "inspect-ai", "error: <stdin>: no conversation found\n"),
                (b'{"method": [], "response": {}}\n{"method": {}, "response": 1}\n', "auto",
                 "error: <stdin>: cannot detect the format: no message is one that only a known format writes "
                 '(the first message has keys "method", "response"; the closest known format is mcp; name the '
                 "format instead of auto)\n"),
                (b'[{"kind": {}, "source": "agent"}, {"kind": ["ActionEvent"]}]', "auto",
                 "error: <stdin>: cannot detect the format: no message is one that only a known format writes "
                 '(the first message has keys "kind", "source"; the closest known format is openhands; name the '
                 "format instead of auto)\n")):
            with self.subTest(data=data):
                self.assertEqual(_run(fmt, data), (2, "", error))
                self.assertEqual(_run("auto", data)[0], 2)


# Odd spellings of a number: a digit of another script that str.isdigit takes and int refuses ("①") or
# reads ("٣"), a doubled sign, and more digits than int converts from text (4,300).
ODD_NUMBERS: tuple[Any, ...] = ("\u2460", "--5", "9" * 5000, "\u0663", "-", "")


def _number_mutations(value: Any, limit: int = 12) -> list[Any]:
    """Copies of a parsed document with one number, or string of digits, spelled each odd way."""
    paths: list[tuple[Any, ...]] = []
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            stack.extend((member, (*path, key)) for key, member in item.items())
        elif isinstance(item, list):
            stack.extend((member, (*path, index)) for index, member in enumerate(item))
        elif path and ((isinstance(item, (int, float)) and not isinstance(item, bool))
                       or (isinstance(item, str) and item.lstrip("-").isdigit())):
            paths.append(path)
    found = []
    for path in sorted(paths, key=str)[:limit]:
        for replacement in ODD_NUMBERS:
            found.append(_replaced(value, path, replacement))
    return found


OTLP_TOOL_SPAN = (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "t", "spanId": "s", '
                  b'"name": "execute_tool f", "startTimeUnixNano": START, "attributes": [{"key": '
                  b'"gen_ai.operation.name", "value": {"stringValue": "execute_tool"}}, {"key": "n", '
                  b'"value": {"intValue": INT}}]}]}]}]}')


def _otlp(start: bytes = b'"1"', number: bytes = b'"5"') -> bytes:
    return OTLP_TOOL_SPAN.replace(b"START", start).replace(b"INT", number)


@integration  # a fuzz over every fixture: seconds, not the unit tier's milliseconds
class NumberSpellingTest(unittest.TestCase):
    """`import otel` used to end in a traceback on "①", "--5" and a 5,000-digit number."""

    def test_otlp_integers_are_ascii_decimals_or_an_error_with_the_json_path(self) -> None:
        where = "error: <stdin>: $.resourceSpans[0].scopeSpans[0].spans[0]"
        int_error = (f"{where}.attributes[1].value: an intValue string must be a decimal int64 (ASCII digits, "
                     "an optional '-')\n")
        time_error = f'{where}: "startTimeUnixNano" must be a decimal string of nanoseconds\n'
        for spelling in ("\u2460", "--5", "9" * 5000, "\u0663", "-", "", "+5", " 5", "5_0", "9223372036854775808"):
            text = json.dumps(spelling).encode("utf-8")
            with self.subTest(spelling=spelling[:20]):
                self.assertEqual(_run("otel", _otlp(number=text)), (2, "", int_error))
                self.assertEqual(_run("auto", _otlp(number=text)), (2, "", int_error))
                if spelling != "9223372036854775808":
                    self.assertEqual(_run("otel", _otlp(start=text)), (2, "", time_error))
        self.assertEqual(_run("otel", _otlp(start=b'"18446744073709551616"')), (2, "", time_error))
        # The spellings OTLP JSON uses still read: int64 bounds, a JSON number, uint64 nanoseconds.
        for number in (b'"-9223372036854775808"', b'"9223372036854775807"', b"12", b'"007"'):
            for start in (b'"18446744073709551615"', b"5", b'"0"'):
                with self.subTest(number=number, start=start):
                    code, out, _ = _run("otel", _otlp(start, number))
                    # The start reads as a time (0 means none in OTLP): 2^64-1 ns is in the year 2554.
                    when = {b'"18446744073709551615"': ', "meta": {"ts": "2554-07-21T23:34:33.709551615Z"}',
                            b"5": ', "meta": {"ts": "1970-01-01T00:00:00.000000005Z"}', b'"0"': ""}[start]
                    self.assertEqual((code, out), (0, '{"index": 0, "tool": "f", "args": {}, "response": '
                                                      f'{{"error": "no recorded response"}}{when}}}\n'))

    def test_an_integer_too_long_to_convert_is_placed_by_line_and_column(self) -> None:
        document = json.loads(_otlp())
        text = json.dumps(document, indent=1).replace('"intValue": "5"', '"intValue": ' + "9" * 5000)
        line = text[:text.index("9" * 5000)].count("\n") + 1
        for fmt in ("otel", "auto"):
            with self.subTest(fmt=fmt):
                self.assertEqual(_run(fmt, text.encode()),
                                 (2, "", f"error: <stdin>:{line}: invalid number: an integer of more than 4300 "
                                         "digits is not supported (column 23)\n"))

    def test_openinference_indexes_of_other_scripts_or_too_long_are_other_attributes(self) -> None:
        def flat(index: str) -> bytes:
            attributes = {f"llm.output_messages.{index}.message.role": "assistant",
                          f"llm.output_messages.{index}.message.tool_calls.0.tool_call.function.name": "f",
                          f"llm.output_messages.{index}.message.tool_calls.{index}.tool_call.function.name": "g",
                          f"llm.output_messages.{index}.message.tool_calls.{index}.tool_call.function.arguments":
                              "{}"}
            return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [
                {"traceId": "t", "spanId": "s", "name": "chat", "attributes": attributes}]}]}]}).encode("utf-8")

        for index in ("9" * 5000, "1" + "0" * 9, "\u0663", "\u2460"):
            with self.subTest(index=index[:20]):
                self.assertEqual(_run("otel", flat(index)), (0, "", ""))
        code, out, _ = _run("otel", flat("0" * 5000 + "3"))
        self.assertEqual((code, out.count('"tool": '), '"tool": "g"' in out), (0, 2, True))

    def test_odd_numbers_in_every_fixture_never_raise(self) -> None:
        for fmt in FORMATS:
            for name in sorted(os.listdir(os.path.join(FIXTURES, fmt))):
                if not name.endswith(".json"):
                    continue
                with open(os.path.join(FIXTURES, fmt, name), "rb") as handle:
                    document, concatenated = _load(handle.read())
                for mutated in _number_mutations(document):
                    data = _dump(mutated, concatenated)
                    for named in (fmt, "auto"):
                        code, out, err = _run(named, data)
                        self.assertIn(code, (0, 2), (fmt, name, err))
                        if code == 2:
                            self.assertEqual((out, err.count("\n"), err[:7]), ("", 1, "error: "), (fmt, name))


if __name__ == "__main__":
    unittest.main()


class StreamingTest(unittest.TestCase):
    """JSON Lines is read a line at a time: the import's peak memory follows the calls, not the file."""

    @staticmethod
    def _peak(notes: int) -> int:
        import tempfile
        import tracemalloc

        from toolreplay.importers import import_file

        note = json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                           "params": {"level": "info", "data": "x" * 2000}}) + "\n"
        call = (
            '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a", "arguments": {}}}\n'
            '{"jsonrpc": "2.0", "id": 1, "result": {"content": []}}\n'
        )
        with tempfile.TemporaryFile() as handle:
            handle.write((call + note * notes + call.replace("1", "2")).encode("utf-8"))
            handle.seek(0)
            tracemalloc.start()
            try:
                result = import_file(handle, "mcp", "log.jsonl")
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
        assert len(result.sessions[0].calls) == 2
        return peak

    def test_memory_does_not_grow_with_the_file(self) -> None:
        small, big = self._peak(200), self._peak(3200)  # about 0.4 MB and 6.5 MB of log
        self.assertLess(big, small + 200_000, (small, big))
        self.assertLess(big, 1_000_000)
