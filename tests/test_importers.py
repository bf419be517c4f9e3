"""Importers: each format's fixtures (written from its documentation) give exact sessions and warnings.

Every fixture `tests/fixtures/import/FORMAT/NAME.json[l]` (or `.sse`, a streamed response's SSE text)
is imported with `--split`; `NAME.out` holds each written session after a `# 0000.jsonl` header line,
`NAME.err` the exact stderr (warnings; or the one error line of a fixture that must be refused, exit 2).
"""

from __future__ import annotations

import os
import tempfile
import unittest

from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.errors import InputError, UsageError
from toolreplay.importers import FORMATS, ConversionWarning, ImportedCall, import_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "import")
# Every format has a fixture for each of these behaviours.
REQUIRED = ("pairing", "parallel", "missing", "malformed", "error")


def _fixtures(fmt: str) -> list[str]:
    names = os.listdir(os.path.join(FIXTURES, fmt))
    return sorted(name for name in names if name.endswith((".json", ".jsonl", ".sse")))


def _refused(fmt: str, name: str) -> bool:
    """Whether a fixture is one the import must refuse (its `.err` is an error line)."""
    with open(os.path.join(FIXTURES, fmt, os.path.splitext(name)[0] + ".err"), encoding="utf-8") as handle:
        return handle.read().startswith("error: ")


def _run_split(fmt: str, data: bytes) -> tuple[int, str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        target = os.path.join(tmp, "out")
        io = IO.memory(stdin=data)
        code = main(["import", fmt, "-", "--split", target], io)
        shown = ""
        for name in sorted(os.listdir(target)) if os.path.isdir(target) else ():
            with open(os.path.join(target, name), encoding="utf-8") as handle:
                shown += f"# {name}\n" + handle.read()
        return code, shown, io.err()


class FixtureTest(unittest.TestCase):
    def test_every_format_has_every_behaviour(self) -> None:
        for fmt in FORMATS:
            stems = {os.path.splitext(name)[0] for name in _fixtures(fmt)}
            self.assertTrue(set(REQUIRED) <= stems, f"{fmt}: missing {set(REQUIRED) - stems}")

    def test_fixtures_give_exact_sessions_and_warnings(self) -> None:
        for fmt in FORMATS:
            for name in _fixtures(fmt):
                with self.subTest(fmt=fmt, fixture=name):
                    base = os.path.join(FIXTURES, fmt, os.path.splitext(name)[0])
                    with open(os.path.join(FIXTURES, fmt, name), "rb") as handle:
                        data = handle.read()
                    with open(base + ".out", encoding="utf-8") as handle:
                        expected_out = handle.read()
                    with open(base + ".err", encoding="utf-8") as handle:
                        expected_err = handle.read()
                    code = 2 if expected_err.startswith("error: ") else 0
                    self.assertEqual(_run_split(fmt, data), (code, expected_out, expected_err))

    def test_one_conversation_on_stdout_equals_its_split_file(self) -> None:
        for fmt in FORMATS:
            for name in _fixtures(fmt):
                base = os.path.join(FIXTURES, fmt, os.path.splitext(name)[0])
                with open(base + ".out", encoding="utf-8") as handle:
                    expected = handle.read()
                if expected.count("# ") != 1 or _refused(fmt, name):
                    continue
                with (
                    self.subTest(fmt=fmt, fixture=name),
                    open(os.path.join(FIXTURES, fmt, name), "rb") as handle,
                ):
                    io = IO.memory(stdin=handle.read())
                    self.assertEqual(main(["import", fmt, "-"], io), 0)
                    self.assertEqual(io.out(), expected.split("\n", 1)[1])

    def test_auto_detects_every_fixture(self) -> None:
        for fmt in FORMATS:
            for name in _fixtures(fmt):
                if _refused(fmt, name):
                    continue
                with (
                    self.subTest(fmt=fmt, fixture=name),
                    open(os.path.join(FIXTURES, fmt, name), "rb") as handle,
                ):
                    self.assertEqual(import_log(handle.read(), "auto", "x").format, fmt)


class LibraryTest(unittest.TestCase):
    def test_warnings_are_data(self) -> None:
        data = (
            b'[{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", '
            b'"function": {"name": "ls", "arguments": "{bad"}}]}]'
        )
        result = import_log(data, "openai-chat", "log.json")
        self.assertEqual(result.format, "openai-chat")
        self.assertEqual(len(result.sessions), 1)
        self.assertEqual(
            result.sessions[0].calls,
            (ImportedCall("ls", {"_raw_arguments": "{bad"}, {"error": "no recorded response"},
                          {"call_id": "c1", "turn": 0}),),
        )
        self.assertEqual(
            result.warnings,
            (
                ConversionWarning(
                    "log.json",
                    None,
                    "conversation 0, message 0: call 0 (ls): arguments are not valid "
                    'JSON; kept as {"_raw_arguments": "{bad"}',
                ),
                ConversionWarning(
                    "log.json",
                    None,
                    "conversation 0, message 0: call 0 (ls): no reply; response set "
                    'to {"error": "no recorded response"}',
                ),
            ),
        )

    def test_to_jsonl_is_format_record_lines(self) -> None:
        data = (
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": '
            b'"echo", "arguments": {"s": "\\u00e9"}}}'
        )
        session = import_log(data, "mcp", "x").sessions[0]
        self.assertEqual(
            session.to_jsonl(),
            '{"index": 0, "tool": "echo", "args": {"s": "\\u00e9"}, '
            '"response": {"error": "no recorded response"}, "meta": {"call_id": "1"}}\n',
        )

    def test_unknown_format_is_a_usage_error(self) -> None:
        with self.assertRaises(UsageError) as caught:
            import_log(b"[]", "langchain", "x")
        self.assertEqual(
            str(caught.exception),
            "unknown format 'langchain' (choose from openai-chat, openai-responses, anthropic, mcp, "
            "tau2, otel, inspect-ai, openai-agents, claude-code, gemini, swe-agent, openhands, atif, codex, gemini-cli, mini-swe-agent, auto)",
        )

    def test_floats_keep_their_form(self) -> None:
        data = (
            b'[{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "pay", '
            b'"arguments": "{\\"amount\\": 100.0}"}}]}, {"role": "tool", "tool_call_id": "c", '
            b'"content": "{\\"paid\\": 1e2}"}]'
        )
        self.assertEqual(
            import_log(data, "openai-chat", "x").sessions[0].to_jsonl(),
            '{"index": 0, "tool": "pay", "args": {"amount": 100.0}, "response": {"paid": 100.0}, '
            '"meta": {"call_id": "c", "turn": 0}}\n',
        )


# (format, input, exact error message) - input that is not JSON or not the named format.
ERRORS = [
    ("openai-chat", b'[{"role": "user"', "<stdin>:1: invalid JSON: Expecting ',' delimiter (column 17)"),
    ("openai-chat", b'{"a": 1}\n{"a": 2', "<stdin>:2: invalid JSON: Expecting ',' delimiter (column 8)"),
    ("openai-chat", b'{"a": 1, "a": 2}', '<stdin>: duplicate key "a"'),
    (
        "openai-chat",
        b'[\n  {"role": "user"},\n  {"role": "tool" "content": "x"}\n]',
        "<stdin>:3: invalid JSON: Expecting ',' delimiter (column 19)",
    ),
    ("openai-chat", b"[NaN]", "<stdin>: NaN is not allowed in JSON"),
    (
        "openai-chat",
        b"\xef\xbb\xbf[]",
        "<stdin>:1: byte-order mark at start of file (UTF-8 without BOM expected)",
    ),
    ("openai-chat", b'["\xff"]', "<stdin>:1: invalid UTF-8 (byte 0xff)"),
    ("openai-chat", b"  \n", "<stdin>: empty file: no conversation"),
    ("openai-chat", b'"hello"', "<stdin>: expected an array or an object of messages or conversations"),
    (
        "openai-chat",
        b'[{"content": "hi"}]',
        '<stdin>: conversation 0, message 0: not an OpenAI chat message (an object with a "role" string)',
    ),
    (
        "openai-chat",
        b'[{"role": "assistant", "tool_calls": {"id": "x"}}]',
        '<stdin>: conversation 0, message 0: "tool_calls" must be an array',
    ),
    (
        "openai-chat",
        b'[{"role": "assistant", "tool_calls": [{"id": "x", "function": {"arguments": "{}"}}]}]',
        '<stdin>: conversation 0, message 0: a tool call has no "function.name" string',
    ),
    (
        "openai-chat",
        b'[{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "a", "input": {}}]}]',
        "<stdin>: conversation 0, message 0: a tool_use content block belongs to the "
        "anthropic format, not openai-chat",
    ),
    (
        "openai-responses",
        b'[{"call_id": "c", "output": "x"}]',
        "<stdin>: conversation 0, message 0: not a Responses API item (an object with a "
        '"type" or "role" string)',
    ),
    (
        "openai-responses",
        b'[{"type": "function_call", "call_id": "c", "arguments": "{}"}]',
        '<stdin>: conversation 0, message 0: a function_call item has no "name" string',
    ),
    (
        "openai-responses",
        b'[{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}}]}]',
        '<stdin>: conversation 0, message 0: a "tool_calls" entry with "function" belongs to the openai-chat '
        "format, not openai-responses",
    ),
    (
        "anthropic",
        b'[{"role": "user", "content": 5}]',
        '<stdin>: conversation 0, message 0: "content" must be a string or an array of content blocks',
    ),
    (
        "anthropic",
        b'[{"role": "user", "content": ["text"]}]',
        '<stdin>: conversation 0, message 0: a content block must be an object with a "type" string',
    ),
    (
        "anthropic",
        b'[{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {}}]}]',
        '<stdin>: conversation 0, message 0: a tool_use block has no "name" string',
    ),
    (
        "anthropic",
        b'[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}]}]',
        '<stdin>: conversation 0, message 0: a tool_result block\'s "is_error" must be true or false',
    ),
    (
        "mcp",
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n{"id": 1, "result": {}}',
        '<stdin>:2: conversation 0, message 1: not a JSON-RPC 2.0 message (an object with "jsonrpc": "2.0")',
    ),
    (
        "mcp",
        b'{"jsonrpc": "2.0", "id": 1.5, "method": "tools/call", "params": {"name": "a"}}',
        '<stdin>:1: conversation 0, message 0: a request or response "id" must be a string or an integer',
    ),
    (
        "mcp",
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {}}}',
        '<stdin>:1: conversation 0, message 0: a tools/call request has no "params.name" string',
    ),
    (
        "mcp",
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a"}}\n'
        b'{"jsonrpc": "2.0", "id": 1, "result": "done"}',
        '<stdin>:2: conversation 0, message 1: a tools/call response\'s "result" must be an object',
    ),
    (
        "mcp",
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a"}}\n'
        b'{"jsonrpc": "2.0", "id": 1}',
        '<stdin>:2: conversation 0, message 1: a response must have exactly one of "result" and "error"',
    ),
    ("tau2", b'{"simulations": {}}', '<stdin>: "simulations" must be an array'),
    ("tau2", b'{"simulations": [{"task_id": "1"}]}', '<stdin>: simulation 0: no "messages" array'),
    (
        "tau2",
        b'[{"role": "assistant", "tool_calls": [{"id": "c", "name": "f", "arguments": {}, '
        b'"requestor": "bot"}]}]',
        '<stdin>: conversation 0, message 0: a tool call\'s "requestor" must be '
        '"assistant" or "user", not \'bot\'',
    ),
    (
        "tau2",
        b'[{"role": "tool", "id": "c", "content": "x", "requestor": "assistant", "error": "no"}]',
        '<stdin>: conversation 0, message 0: a tool message\'s "error" must be true or false',
    ),
    (
        "tau2",
        b'[{"messages": []}, [1]]',
        '<stdin>: element 1: not a conversation object (no "messages" or "traj"), unlike element 0',
    ),
    (
        "tau2",
        b'[{"role": "assistant", "tool_calls": [{"id": "c", "name": "f", "arguments": {"q": "\\ud800"}}]}]',
        "<stdin>: conversation 0, call 0: string holds a lone surrogate (invalid Unicode escape)",
    ),
    (
        "auto",
        b'[{"role": "user", "content": "hi"}]',
        '<stdin>: cannot detect the format: no message is one that only a known format writes (the first '
        'message has keys "role", "content"; the closest known format is openai-chat; name the format instead '
        "of auto)",
    ),
]


class ErrorTest(unittest.TestCase):
    def test_bad_input_is_exit_2_with_an_exact_message_and_no_output(self) -> None:
        for fmt, data, message in ERRORS:
            with self.subTest(fmt=fmt, data=data):
                io = IO.memory(stdin=data)
                self.assertEqual(main(["import", fmt, "-"], io), 2)
                self.assertEqual((io.out(), io.err()), ("", f"error: {message}\n"))

    def test_library_raises_input_error(self) -> None:
        with self.assertRaises(InputError) as caught:
            import_log(b"[", "mcp", "log.jsonl")
        self.assertEqual((caught.exception.path, caught.exception.line), ("log.jsonl", 1))


if __name__ == "__main__":
    unittest.main()
