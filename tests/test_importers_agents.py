"""Coding agents' own logs (Codex, Gemini CLI, mini-swe-agent): detection, and no silent loss.

Every named format either imports calls, or a file it truly reads that holds none, or refuses the file
with one line that names what it saw (never an empty session for a file of calls it does not read).
"""

from __future__ import annotations

import json
import os
import tempfile
import unittest

from toolreplay.cli import main
from toolreplay.cli._io import IO

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "import")


def _run(args: list[str], data: bytes = b"") -> tuple[int, str, str]:
    io = IO.memory(stdin=data)
    code = main(args, io)
    return code, io.out(), io.err()


def _fixture(fmt: str, name: str) -> str:
    return os.path.join(FIXTURES, fmt, name)


class DetectionTest(unittest.TestCase):
    def test_auto_names_each_new_format(self) -> None:
        for fmt, name, calls in (("codex", "pairing.jsonl", 3), ("codex", "bare-items.jsonl", 1),
                                 ("codex", "exec.jsonl", 3), ("gemini-cli", "parallel.json", 2),
                                 ("gemini-cli", "recording.jsonl", 2), ("mini-swe-agent", "github-issue.json", 10),
                                 ("mini-swe-agent", "parallel.json", 3)):
            with self.subTest(name=name):
                code, out, err = _run(["import", "auto", _fixture(fmt, name)])
                self.assertEqual((code, out.count("\n"), err.splitlines()[0]), (0, calls, f"detected format: {fmt}"))

    def test_a_gemini_cli_recording_line_is_read_once(self) -> None:
        # g1 is written twice (scheduled, then with its result): one call, with the result.
        code, out, _ = _run(["import", "gemini-cli", _fixture("gemini-cli", "recording.jsonl")])
        self.assertEqual(code, 0)
        self.assertEqual(out.splitlines()[0],
                         '{"index": 0, "tool": "read_file", "args": {"file_path": "app.py"}, "response": {"output": '
                         '"def add(a, b):\\n    return a + b\\n"}, "meta": {"ts": "2026-03-02T09:00:03.000Z", '
                         '"call_id": "read_file-1", "turn": 0}}')


    def test_exec_items_without_ids_pair_by_what_they_run(self) -> None:
        # Some codex exec versions write items without "id" (seen in public logs of `codex exec --json`).
        stream = (b'{"type": "turn.started"}\n'
                  b'{"type": "item.started", "item": {"type": "command_execution", "command": "echo hi", '
                  b'"status": "in_progress"}}\n'
                  b'{"type": "item.completed", "item": {"type": "command_execution", "command": "echo hi", '
                  b'"aggregated_output": "hi\\n", "exit_code": 0, "status": "completed"}}\n')
        self.assertEqual(_run(["import", "codex", "-"], stream), (0, (
            '{"index": 0, "tool": "command_execution", "args": {"command": "echo hi"}, "response": {"output": "hi\\n", '
            '"exit_code": 0}, "meta": {"turn": 0}}\n'), ""))


class SuiteTest(unittest.TestCase):
    def test_a_suite_from_each_agents_log(self) -> None:
        # the user's words and the final answer: a rollout's user_message event (its user items also
        # hold the harness's instructions), a Gemini CLI message's type
        root = os.path.join(ROOT, "samples", "import")
        for name, question, answer in (("codex.jsonl", "show both files", "a.txt holds A, b.txt holds B."),
                                       ("gemini-cli.json", "what is in notes.txt?", "It says: buy milk.")):
            with self.subTest(name=name), tempfile.TemporaryDirectory() as tmp:
                target = os.path.join(tmp, "suite")
                code, _, _ = _run(["import", "auto", os.path.join(root, name), "--suite", target])
                with open(os.path.join(target, "suite.json"), encoding="utf-8") as handle:
                    case = json.load(handle)["cases"][0]
                self.assertEqual((code, case["question"], case["expected_answer"]), (0, question, answer))


class NoSilentLossTest(unittest.TestCase):
    def test_the_formats_that_lost_everything_now_refuse_with_what_they_saw(self) -> None:
        cases = (
            (["import", "swe-agent", _fixture("mini-swe-agent", "github-issue.json")],
             f"error: {_fixture('mini-swe-agent', 'github-issue.json')}: conversation 0, message 2: a mini-swe-agent "
             "action (a mswea_bash_command block) belongs to the mini-swe-agent format, not swe-agent\n"),
            (["import", "openai-responses", _fixture("codex", "exec.jsonl")],
             f"error: {_fixture('codex', 'exec.jsonl')}: conversation 0, message 0: a codex exec --json event "
             '("type": "thread.started") belongs to the codex format, not openai-responses\n'),
            (["import", "gemini", _fixture("gemini-cli", "parallel.json")],
             f"error: {_fixture('gemini-cli', 'parallel.json')}: this is a gemini-cli file (a Gemini CLI chat "
             'recording ("sessionId", "projectHash", "messages")), not gemini\n'),
        )
        for args, error in cases:
            with self.subTest(args=args):
                self.assertEqual(_run(args), (2, "", error))

    def test_a_layout_the_format_does_not_read_is_refused(self) -> None:
        self.assertEqual(
            _run(["import", "openai-responses", "-"], b'{"type": "foo.bar", "x": 1}\n{"type": "foo.baz"}\n'),
            (2, "", 'error: <stdin>:1: no tool call found: a message has "type": "foo.bar", which the '
                    "openai-responses format does not read (nothing was imported; name the right format, or auto)\n"))

    def test_a_known_layout_without_calls_is_an_empty_session(self) -> None:
        for fmt, data in (("openai-chat", b'[{"role": "user", "content": "hi"}]'),
                          ("codex", b'{"type": "thread.started", "thread_id": "t"}\n{"type": "turn.started"}\n'),
                          ("gemini-cli", b'{"sessionId": "s", "projectHash": "p", "messages": [{"id": "m", '
                                         b'"timestamp": "2026-01-01T00:00:00Z", "type": "user", "content": "hi"}]}')):
            with self.subTest(fmt=fmt):
                self.assertEqual(_run(["import", fmt, "-"], data), (0, "", ""))

    def test_the_message_of_a_call_in_the_wrong_place_does_not_contradict_itself(self) -> None:
        self.assertEqual(
            _run(["import", "anthropic", "-"], b'[{"role": "assistant", "content": "x", "tool_call_id": "c9"}]'),
            (2, "", "error: <stdin>: conversation 0, message 0: this message holds tool_call_id, but not where the "
                    "anthropic format reads a tool call: nothing was imported (name the right format, or auto)\n"))

    def test_auto_names_the_closest_known_format(self) -> None:
        self.assertEqual(
            _run(["import", "auto", "-"], b'[{"role": "user", "content": "hi"}]'),
            (2, "", "error: <stdin>: cannot detect the format: no message is one that only a known format writes "
                    '(the first message has keys "role", "content"; the closest known format is openai-chat; name '
                    "the format instead of auto)\n"))


if __name__ == "__main__":
    unittest.main()
