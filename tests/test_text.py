"""Hostile text from a log (tool names with newlines, ANSI escapes, bidi controls) is shown, never obeyed."""

from __future__ import annotations

import json
import os
import tempfile
import unittest

from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.format.text import escape_text

# A model-chosen tool name that, printed raw, would clear the screen, forge a clean report and hide
# the real finding lines behind it.
HOSTILE = "read\x1b[2J\x1b[H\ncalls: 2\nfindings: 0\r\x1b[8m\u202e\u2028\x85\x7f"
ESCAPED = r"read\x1b[2J\x1b[H\x0acalls: 2\x0afindings: 0\x0d\x1b[8m\u202e\u2028\x85\x7f"


def _line(index: int, tool: str, response: dict[str, object]) -> str:
    return json.dumps({"index": index, "tool": tool, "args": {"q": 1}, "response": response}) + "\n"


class EscapeTextTest(unittest.TestCase):
    def test_every_unsafe_class_is_escaped(self) -> None:
        cases = {
            "\x00": r"\x00", "\t": r"\x09", "\n": r"\x0a", "\x1b": r"\x1b", "\x7f": r"\x7f", "\x80": r"\x80",
            "\x9f": r"\x9f", "\u061c": r"\u061c", "\u200e": r"\u200e", "\u200f": r"\u200f",
            "\u2028": r"\u2028", "\u2029": r"\u2029", "\u202a": r"\u202a", "\u202e": r"\u202e",
            "\u2066": r"\u2066", "\u2069": r"\u2069",
        }
        for raw, shown in cases.items():
            with self.subTest(char=hex(ord(raw))):
                self.assertEqual(escape_text(f"a{raw}b"), f"a{shown}b")

    def test_every_character_of_the_unsafe_ranges_is_escaped(self) -> None:
        # escape_text skips its pattern for text that str.isprintable() accepts: every unsafe
        # character must be unprintable, or that shortcut would let it through.
        ranges = [(0x00, 0x1F), (0x7F, 0x9F), (0x61C, 0x61C), (0x200E, 0x200F), (0x2028, 0x202E), (0x2066, 0x2069)]
        for low, high in ranges:
            for code in range(low, high + 1):
                with self.subTest(char=hex(code)):
                    shown = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
                    self.assertEqual(escape_text(f"ok {chr(code)}"), f"ok {shown}")

    def test_printable_text_is_unchanged(self) -> None:
        for text in ("read_file", "naïve 検索 émoji 😀", "back\\slash", "\u00a0nbsp", ""):
            self.assertIs(escape_text(text), text)

    def test_hostile_name(self) -> None:
        self.assertEqual(escape_text(HOSTILE), ESCAPED)


class HostileReportTest(unittest.TestCase):
    """A recorded session whose tool names carry control sequences cannot hide a finding."""

    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.session = os.path.join(self.tmp.name, "hostile.jsonl")
        with open(self.session, "w", encoding="utf-8") as handle:
            handle.write(_line(0, HOSTILE, {"v": 1}) + _line(1, HOSTILE, {"v": 2}))
        self.scope = os.path.join(self.tmp.name, "scope.json")
        with open(self.scope, "w", encoding="utf-8") as handle:
            json.dump({"agent": "a\x1b[31m\u202eb", "allowed_tools": ["other"]}, handle)

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def _run(self, *argv: str) -> tuple[int, str, str]:
        io = IO.memory()
        code = main(list(argv), io)
        return code, io.out(), io.err()

    def test_replay_text(self) -> None:
        code, out, err = self._run("replay", self.session)
        self.assertEqual((code, err), (1, ""))
        self.assertEqual(out, (
            "calls: 2\ndivergence: index 1\nfindings: 2\n"
            f"index 1: non-determinism: tool '{ESCAPED}' returned a different response than the identical "
            "call at index 0\n"
            f"index 1: redundant-call: tool '{ESCAPED}' repeats the identical call at index 0 with no state "
            "change between them\n"))

    def test_scope_text(self) -> None:
        code, out, _ = self._run("scope", self.session, self.scope)
        self.assertEqual(code, 1)
        agent = r"a\x1b[31m\u202eb"
        line = f"permission-overreach: tool '{ESCAPED}' is not in the declared scope for agent '{agent}'"
        self.assertEqual(out, f"calls: 2\nfindings: 2\nindex 0: {line}\nindex 1: {line}\n")

    def test_json_keeps_the_exact_name(self) -> None:
        code, out, _ = self._run("replay", self.session, "--format", "json")
        self.assertEqual(code, 1)
        self.assertEqual({f["tool"] for f in json.loads(out)["findings"]}, {HOSTILE})

    def test_no_text_output_carries_a_raw_control_character(self) -> None:
        for argv in (("replay", self.session), ("scope", self.session, self.scope)):
            with self.subTest(command=argv[0]):
                _, out, err = self._run(*argv)
                for text in (out, err):
                    self.assertEqual(escape_text(text.replace("\n", "")), text.replace("\n", ""))

    def test_import_warning(self) -> None:
        log = os.path.join(self.tmp.name, "chat.json")
        with open(log, "w", encoding="utf-8") as handle:
            json.dump([{"role": "assistant", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": HOSTILE, "arguments": "{"}}]}], handle)
        code, out, err = self._run("import", "openai-chat", log)
        self.assertEqual(code, 0)
        self.assertEqual(len(err.splitlines()), err.count("warning: "))
        self.assertIn(ESCAPED, err)
        self.assertNotIn("\x1b", err)

    def test_error_line(self) -> None:
        bad = os.path.join(self.tmp.name, "bad\x1b[2J.jsonl")
        with open(bad, "w", encoding="utf-8") as handle:
            handle.write("{\n")
        code, out, err = self._run("replay", bad)
        self.assertEqual((code, out), (2, ""))
        self.assertTrue(err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err)
        self.assertIn(r"bad\x1b[2J.jsonl:1:", err)


if __name__ == "__main__":
    unittest.main()


class HostileEvalTest(unittest.TestCase):
    def test_a_failed_run_calling_a_hostile_tool_stays_on_one_line(self) -> None:
        from toolreplay.evaluation.agent import Answer, Conversation, NamedAgent, ToolCall
        from toolreplay.evaluation.report import eval_text
        from toolreplay.evaluation.runner import evaluate
        from toolreplay.evaluation.suite import parse_suite

        def agent(conversation: Conversation) -> ToolCall | Answer:
            return ToolCall(HOSTILE, {"q": 1}) if not conversation.calls else Answer("done\x1b[2K\u2028")

        suite = parse_suite({"tools": {"module": "toolreplay.demos.orders:TOOLS"}, "cases": [
            {"id": "c1", "question": "q?", "expected_answer": "shipped", "expected_tools": ["get_order"]}]}, "s.json")
        text = eval_text(evaluate(suite, [NamedAgent("hostile", "tests:hostile", agent)]))
        failure = text.split("\n")[-2]
        self.assertTrue(failure.startswith("hostile case 1 c1: tool match failed (strict): expected [get_order], "
                                           f"called [{ESCAPED} "), failure)
        self.assertTrue(failure.endswith(r'"done\u001b[2K\u2028"'), failure)
        self.assertEqual(escape_text(text.replace("\n", "")), text.replace("\n", ""))
