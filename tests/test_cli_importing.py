"""`toolreplay import`: where the sessions go (stdout, -o, --split), and what is never left behind."""

from __future__ import annotations

import os
import tempfile
import unittest

from toolreplay.cli import main
from toolreplay.cli._io import IO

ONE = (
    b'[{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", '
    b'"arguments": "{\\"path\\": \\".\\"}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}]'
)
ONE_SESSION = ('{"index": 0, "tool": "ls", "args": {"path": "."}, "response": {"text": "a.txt"}, '
               '"meta": {"call_id": "c1", "turn": 0}}\n')
TWO = b'{"messages": ' + ONE + b'}\n{"messages": []}\n'


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "samples", "import")


class SamplesTest(unittest.TestCase):
    def test_each_sample_is_detected_as_its_format_and_replays(self) -> None:
        for name in sorted(os.listdir(SAMPLES)):
            fmt = os.path.splitext(name)[0]
            with self.subTest(sample=name), tempfile.TemporaryDirectory() as tmp:
                io = IO.memory()
                self.assertEqual(main(["import", "auto", os.path.join(SAMPLES, name), "--split", tmp], io), 0)
                self.assertEqual(io.err().split("\n")[0], f"detected format: {fmt}")
                for session in sorted(os.listdir(tmp)):
                    replay = IO.memory()
                    self.assertIn(main(["replay", os.path.join(tmp, session)], replay), (0, 1))
                    self.assertEqual(replay.err(), "")


class ImportCommandTest(unittest.TestCase):
    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name

    def tearDown(self) -> None:
        self._tmp.cleanup()

    def _run(self, *argv: str, stdin: bytes = b"") -> tuple[int, str, str]:
        io = IO.memory(stdin=stdin)
        code = main(list(argv), io)
        return code, io.out(), io.err()

    def _file(self, name: str, data: bytes) -> str:
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as handle:
            handle.write(data)
        return path

    def _read(self, *parts: str) -> str:
        with open(os.path.join(self.tmp, *parts), encoding="utf-8") as handle:
            return handle.read()

    def test_one_conversation_to_stdout(self) -> None:
        self.assertEqual(
            self._run("import", "openai-chat", self._file("log.json", ONE)), (0, ONE_SESSION, "")
        )

    def test_stdin_and_auto_says_the_format(self) -> None:
        self.assertEqual(
            self._run("import", "auto", "-", stdin=ONE), (0, ONE_SESSION, "detected format: openai-chat\n")
        )

    def test_output_file(self) -> None:
        out = os.path.join(self.tmp, "s.jsonl")
        self.assertEqual(self._run("import", "openai-chat", "-", "-o", out, stdin=ONE), (0, "", ""))
        self.assertEqual(self._read("s.jsonl"), ONE_SESSION)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["s.jsonl"])

    def test_output_file_untouched_on_error(self) -> None:
        out = self._file("s.jsonl", b"old\n")
        self.assertEqual(
            self._run("import", "mcp", "-", "-o", out, stdin=ONE),
            (
                2,
                "",
                'error: <stdin>: conversation 0, message 0: a "tool_calls" entry with "function" '
                "belongs to the openai-chat format, not mcp\n",
            ),
        )
        self.assertEqual(self._read("s.jsonl"), "old\n")
        self.assertEqual(sorted(os.listdir(self.tmp)), ["s.jsonl"])

    def test_many_conversations_need_split(self) -> None:
        path = self._file("log.jsonl", TWO)
        self.assertEqual(
            self._run("import", "openai-chat", path),
            (
                2,
                "",
                f"error: {path} holds 2 conversations; use --split DIR to write one "
                f"session per conversation\n",
            ),
        )
        self.assertEqual(self._run("import", "openai-chat", path, "-o", os.path.join(self.tmp, "x"))[0], 2)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "x")))

    def test_split_writes_one_session_per_conversation(self) -> None:
        target = os.path.join(self.tmp, "out")
        self.assertEqual(self._run("import", "openai-chat", "-", "--split", target, stdin=TWO), (0, "", ""))
        self.assertEqual(sorted(os.listdir(target)), ["0000.jsonl", "0001.jsonl"])
        self.assertEqual(
            (self._read("out", "0000.jsonl"), self._read("out", "0001.jsonl")), (ONE_SESSION, "")
        )
        self.assertEqual(sorted(os.listdir(self.tmp)), ["out"])

    def test_split_over_one_conversation_writes_0000(self) -> None:
        target = os.path.join(self.tmp, "out")
        self.assertEqual(self._run("import", "openai-chat", "-", "--split", target, stdin=ONE), (0, "", ""))
        self.assertEqual(os.listdir(target), ["0000.jsonl"])

    def test_split_into_an_empty_directory(self) -> None:
        target = os.path.join(self.tmp, "out")
        os.mkdir(target)
        self.assertEqual(self._run("import", "openai-chat", "-", "--split", target, stdin=TWO), (0, "", ""))
        self.assertEqual(sorted(os.listdir(target)), ["0000.jsonl", "0001.jsonl"])

    def test_split_refuses_a_non_empty_directory_or_a_file(self) -> None:
        target = os.path.join(self.tmp, "out")
        os.mkdir(target)
        self._file(os.path.join("out", "keep.txt"), b"x")
        self.assertEqual(
            self._run("import", "openai-chat", "-", "--split", target, stdin=TWO),
            (
                2,
                "",
                f"error: {target}: directory exists and is not empty (--split writes only "
                f"into a new or empty "
                "directory)\n",
            ),
        )
        self.assertEqual(os.listdir(target), ["keep.txt"])
        afile = self._file("afile", b"")
        self.assertEqual(
            self._run("import", "openai-chat", "-", "--split", afile, stdin=TWO),
            (2, "", f"error: {afile}: exists and is not a directory\n"),
        )

    def test_split_leaves_nothing_on_error(self) -> None:
        target = os.path.join(self.tmp, "out")
        bad = TWO + b'{"messages": [{"content": "no role"}]}\n'
        self.assertEqual(
            self._run("import", "openai-chat", "-", "--split", target, stdin=bad),
            (
                2,
                "",
                "error: <stdin>:3: conversation 2, message 0: not an OpenAI chat message (an object with a "
                '"role" string)\n',
            ),
        )
        self.assertEqual(os.listdir(self.tmp), [])

    def test_warnings_go_to_stderr_after_a_successful_write(self) -> None:
        data = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ls"}}\n'
        self.assertEqual(
            self._run("import", "mcp", "-", stdin=data),
            (
                0,
                '{"index": 0, "tool": "ls", "args": {}, "response": {"error": "no recorded response"}, '
                '"meta": {"call_id": "1"}}\n',
                "warning: <stdin>:1: conversation 0, message 0: call 0 (ls): no reply; response set to "
                '{"error": "no recorded response"}\n',
            ),
        )

    def test_unwritable_targets(self) -> None:
        for option in ("-o", "--split"):
            target = os.path.join(self.tmp, "no-such-dir", "out")
            with self.subTest(option=option):
                self.assertEqual(
                    self._run("import", "openai-chat", "-", option, target, stdin=ONE),
                    (2, "", f"error: cannot write {target}: No such file or directory\n"),
                )
        self.assertEqual(os.listdir(self.tmp), [])

    def test_usage_errors(self) -> None:
        missing = os.path.join(self.tmp, "nope.json")
        self.assertEqual(
            self._run("import", "openai-chat", missing),
            (2, "", f"error: cannot read {missing}: No such file or directory\n"),
        )
        code, out, err = self._run("import", "openai-chat", "-", "-o", "a", "--split", "b")
        self.assertEqual((code, out), (2, ""))
        self.assertEqual(err.split("\n")[0], "error: argument --split: not allowed with argument -o/--output")
        self.assertTrue(err.endswith("Try 'toolreplay import --help' for more information.\n"), err)
        code, out, err = self._run("import", "langchain", "-")
        self.assertEqual(code, 2)
        self.assertTrue(err.startswith("error: argument FORMAT: invalid choice: 'langchain'"), err)


if __name__ == "__main__":
    unittest.main()
