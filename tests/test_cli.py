"""Every audit command in-process through `main`: exact stdout, stderr and exit code."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from tests.support import integration
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.format.canonical import canonical_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "samples")
DIRTY = os.path.join(SAMPLES, "session-dirty.jsonl")
CLEAN = os.path.join(SAMPLES, "session-clean.jsonl")
SCOPE = os.path.join(SAMPLES, "scope.json")

REPLAY_DIRTY = (
    "calls: 6\ndivergence: index 5\nfindings: 2\n"
    "index 2: redundant-call: tool 'read_file' repeats the identical call at index 1 "
    "with no state change between them\n"
    "index 5: non-determinism: tool 'search' returned a different response "
    "than the identical call at index 3\n"
)
SCOPE_DIRTY = (
    "calls: 6\nfindings: 1\n"
    "index 4: permission-overreach: tool 'write_file' is not in the declared scope "
    "for agent 'docs-reader'\n"
)
REPLAY_DIRTY_JSON = """{
  "command": "replay",
  "calls": 6,
  "divergence": 5,
  "findings": [
    {
      "index": 2,
      "kind": "redundant-call",
      "severity": "finding",
      "tool": "read_file",
      "rule": null,
      "related_index": 1,
      "message": "tool 'read_file' repeats the identical call at index 1 with no state change between them"
    },
    {
      "index": 5,
      "kind": "non-determinism",
      "severity": "finding",
      "tool": "search",
      "rule": null,
      "related_index": 3,
      "message": "tool 'search' returned a different response than the identical call at index 3"
    }
  ]
}
"""
SCOPE_DIRTY_JSON = """{
  "command": "scope",
  "agent": "docs-reader",
  "calls": 6,
  "findings": [
    {
      "index": 4,
      "kind": "permission-overreach",
      "severity": "finding",
      "tool": "write_file",
      "rule": null,
      "related_index": null,
      "message": "tool 'write_file' is not in the declared scope for agent 'docs-reader'"
    }
  ]
}
"""
GOOD = b'{"index": 0, "tool": "t", "args": {}, "response": {}}\n'


def run(*argv: str, stdin: bytes = b"") -> tuple[int, str, str]:
    io = IO.memory(stdin)
    code = main(list(argv), io)
    return code, io.out(), io.err()


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _expected_seal(path: str) -> str:
    """The sealed form of a session, computed independently of toolreplay.audit.chain."""
    out, prev = [], "0" * 64
    for line in _read(path).decode().splitlines():
        record = json.loads(line)
        digest = hashlib.sha256((prev + canonical_json(record)).encode()).hexdigest()
        parts = ",".join(
            f'"{key}":{canonical_json(record[key])}' for key in ("index", "tool", "args", "response")
        )
        out.append(f'{{{parts},"prev":"{prev}","digest":"{digest}"}}\n')
        prev = digest
    return "".join(out)


class TempDirTest(unittest.TestCase):
    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        self.tmp = self._tmp.name
        # spool files of `seal` land here, so the test can see that none is left behind
        patcher = mock.patch.object(tempfile, "tempdir", self.tmp)
        patcher.start()
        self.addCleanup(patcher.stop)

    def write(self, name: str, data: bytes | str) -> str:
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
        return path

    def files(self) -> list[str]:
        return sorted(os.listdir(self.tmp))


class VersionTest(unittest.TestCase):
    def test_version(self) -> None:
        self.assertEqual(run("version"), (0, "toolreplay 0.8.0\n", ""))


class ReplayCommandTest(TempDirTest):
    def test_dirty(self) -> None:
        self.assertEqual(run("replay", DIRTY), (1, REPLAY_DIRTY, ""))

    def test_clean(self) -> None:
        self.assertEqual(run("replay", CLEAN), (0, "calls: 4\ndivergence: none\nfindings: 0\n", ""))

    def test_json(self) -> None:
        self.assertEqual(run("replay", DIRTY, "--format", "json"), (1, REPLAY_DIRTY_JSON, ""))
        self.assertEqual(
            run("replay", CLEAN, "--format", "json"),
            (0, '{\n  "command": "replay",\n  "calls": 4,\n  "divergence": null,\n  "findings": []\n}\n', ""),
        )
        self.assertEqual(run("replay", DIRTY, "--format", "text"), (1, REPLAY_DIRTY, ""))

    def test_stdin(self) -> None:
        self.assertEqual(run("replay", "-", stdin=_read(DIRTY)), (1, REPLAY_DIRTY, ""))

    def test_stdin_error_names_stdin(self) -> None:
        self.assertEqual(
            run("replay", "-", stdin=GOOD + b"[]\n"),
            (2, "", "error: <stdin>:2: record must be a JSON object, not array\n"),
        )

    def test_empty_session(self) -> None:
        self.assertEqual(
            run("replay", self.write("e.jsonl", "")), (0, "calls: 0\ndivergence: none\nfindings: 0\n", "")
        )

    def test_input_error(self) -> None:
        path = self.write(
            "bad.jsonl", GOOD + b"\n" + b'{"index": 1, "tool": "t", "args": {"x": NaN}, "response": {}}\n'
        )
        self.assertEqual(run("replay", path), (2, "", f"error: {path}:3: NaN is not allowed in JSON\n"))

    def test_deep_nesting_is_an_input_error(self) -> None:
        path = self.write(
            "deep.jsonl",
            GOOD
            + b'{"index": 1, "tool": "t", "args": {"x": '
            + b"[" * 100000
            + b"]" * 100000
            + b'}, "response": {}}\n',
        )
        self.assertEqual(run("replay", path), (2, "", f"error: {path}:2: nesting deeper than 512\n"))

    def test_mutators_add_to_defaults(self) -> None:
        session = self.write(
            "s.jsonl",
            "".join(
                line + "\n"
                for line in [
                    '{"index": 0, "tool": "get_order", "args": {"id": 1}, "response": {"status": "open"}}',
                    '{"index": 1, "tool": "cancel_order", "args": {"id": 1}, "response": {"ok": true}}',
                    '{"index": 2, "tool": "get_order", "args": {"id": 1}, "response": {"status": "gone"}}',
                    '{"index": 3, "tool": "write_file", "args": {"path": "x"}, "response": {}}',
                    '{"index": 4, "tool": "get_order", "args": {"id": 1}, "response": {"status": "gone"}}',
                ]
            ),
        )
        head = "calls: 5\ndivergence: index 2\n"
        nd = [
            "index 2: non-determinism: tool 'get_order' returned a different response "
            "than the identical call at index 0\n",
            "index 4: non-determinism: tool 'get_order' returned a different response "
            "than the identical call at index 0\n",
        ]
        redundant = (
            "index 2: redundant-call: tool 'get_order' repeats the identical call at index 0 "
            "with no state change between them\n"
        )
        self.assertEqual(run("replay", session), (1, head + "findings: 3\n" + nd[0] + redundant + nd[1], ""))
        want = (1, head + "findings: 2\n" + "".join(nd), "")
        self.assertEqual(run("replay", session, "--mutator", "cancel_order"), want)
        self.assertEqual(run("replay", session, "--mutator", "refund", "--mutator", "cancel_order"), want)
        mutators = self.write("m.txt", "# order tools\n\ncancel_order  # writes\n")
        self.assertEqual(run("replay", session, "--mutators", mutators), want)
        empty = self.write("none.txt", "# nothing\n")
        self.assertEqual(run("replay", session, "--mutators", empty, "--mutators", mutators), want)

    def test_bad_mutators_file(self) -> None:
        mutators = self.write("m.txt", "cancel order\n")
        self.assertEqual(
            run("replay", DIRTY, "--mutators", mutators),
            (2, "", f"error: {mutators}:1: a tool name has no white space: 'cancel order'\n"),
        )


class ScopeCommandTest(TempDirTest):
    def test_dirty(self) -> None:
        self.assertEqual(run("scope", DIRTY, SCOPE), (1, SCOPE_DIRTY, ""))

    def test_clean(self) -> None:
        self.assertEqual(run("scope", CLEAN, SCOPE), (0, "calls: 4\nfindings: 0\n", ""))

    def test_json(self) -> None:
        self.assertEqual(run("scope", DIRTY, SCOPE, "--format", "json"), (1, SCOPE_DIRTY_JSON, ""))

    def test_stdin(self) -> None:
        self.assertEqual(run("scope", "-", SCOPE, stdin=_read(DIRTY)), (1, SCOPE_DIRTY, ""))

    def test_bad_scope_file(self) -> None:
        scope = self.write("scope.json", '{"agent": "a", "allowed_tools": [1]}')
        self.assertEqual(
            run("scope", DIRTY, scope),
            (2, "", f'error: {scope}: field "allowed_tools" item 0 must be a string, not 1\n'),
        )

    def test_sealed_session(self) -> None:
        sealed = self.write("sealed.jsonl", _expected_seal(DIRTY))
        self.assertEqual(run("scope", sealed, SCOPE), (1, SCOPE_DIRTY, ""))
        self.assertEqual(run("replay", sealed), (1, REPLAY_DIRTY, ""))

    def test_mixed_session(self) -> None:
        sealed = _expected_seal(DIRTY).splitlines(keepends=True)
        plain = _read(DIRTY).decode().splitlines(keepends=True)
        path = self.write("mixed.jsonl", "".join(sealed[:3] + plain[3:]))
        self.assertEqual(
            run("scope", path, SCOPE),
            (
                2,
                "",
                f"error: {path}:4: plain record in a sealed file "
                "(every line must be a link with prev and digest)\n",
            ),
        )
        path = self.write("mixed2.jsonl", "".join(plain[:3] + sealed[3:]))
        self.assertEqual(
            run("replay", path),
            (
                2,
                "",
                f"error: {path}:4: sealed link in a file of plain records "
                "(prev and digest are not record fields)\n",
            ),
        )


class SealVerifyCommandTest(TempDirTest):
    def test_seal_stdout(self) -> None:
        self.assertEqual(run("seal", DIRTY), (0, _expected_seal(DIRTY), ""))
        self.assertEqual(run("seal", "-", stdin=_read(CLEAN)), (0, _expected_seal(CLEAN), ""))
        self.assertEqual(self.files(), [])

    def test_seal_then_verify(self) -> None:
        code, sealed, _ = run("seal", DIRTY)
        self.assertEqual(run("verify", "-", stdin=sealed.encode()), (0, "chain: intact\n", ""))
        self.assertEqual(
            run("verify", "-", "--format", "json", stdin=sealed.encode()),
            (
                0,
                (
                    '{\n  "command": "verify",\n  "chain": "intact",\n  "links_checked": 6,\n'
                    '  "first_broken_index": null,\n'
                    '  "field": null,\n  "expected": null,\n  "found": null\n}\n'
                ),
                "",
            ),
        )

    def test_verify_empty_file_says_it_is_empty(self) -> None:
        # An emptied log must not read as a verified one: 0 links is said in words (exit 0: nothing is broken).
        for data in (b"", b"\n  \n"):
            self.assertEqual(run("verify", "-", stdin=data), (0, "chain: empty (0 links)\n", ""))
            code, out, err = run("verify", "-", "--format", "json", stdin=data)
            self.assertEqual((code, json.loads(out)["chain"], json.loads(out)["links_checked"], err),
                             (0, "empty", 0, ""))

    def test_verify_broken(self) -> None:
        lines = _expected_seal(DIRTY).splitlines(keepends=True)
        digests = [json.loads(line)["digest"] for line in lines]
        path = self.write("broken.jsonl", "".join(lines[:2] + lines[3:]))
        self.assertEqual(
            run("verify", path),
            (
                1,
                f"chain: broken\nfirst broken link: index 2\nexpected: {digests[1]}\nfound: {digests[2]}\n",
                "",
            ),
        )
        self.assertEqual(
            run("verify", path, "--format", "json"),
            (
                1,
                (
                    '{\n  "command": "verify",\n  "chain": "broken",\n  "links_checked": 3,\n'
                    '  "first_broken_index": 2,\n'
                    f'  "field": "prev",\n  "expected": "{digests[1]}",\n  "found": "{digests[2]}"\n}}\n'
                ),
                "",
            ),
        )

    def test_verify_plain_session(self) -> None:
        self.assertEqual(
            run("verify", DIRTY),
            (
                2,
                "",
                f"error: {DIRTY}:1: not sealed: a plain session (no prev and digest); "
                "seal it with 'toolreplay seal'\n",
            ),
        )

    def test_seal_output_file(self) -> None:
        out = os.path.join(self.tmp, "out.jsonl")
        self.assertEqual(run("seal", DIRTY, "-o", out), (0, "", ""))
        self.assertEqual(_read(out).decode(), _expected_seal(DIRTY))
        self.assertEqual(self.files(), ["out.jsonl"])
        self.assertEqual(run("seal", CLEAN, "--output", out), (0, "", ""))
        self.assertEqual(_read(out).decode(), _expected_seal(CLEAN))
        self.assertEqual(run("verify", out), (0, "chain: intact\n", ""))

    def test_seal_error_on_last_line_writes_nothing(self) -> None:
        # 20,000 records (several MB of chain), then a bad last line
        filler = "x" * 200
        text = "".join(
            f'{{"index": {i}, "tool": "read", "args": {{"p": "f{i}"}}, "response": {{"t": "{filler}"}}}}\n'
            for i in range(20000)
        )
        body = text.encode() + b'{"index": 20000, "tool": "t", "args": {}, "response": {"x": 1e400}}\n'
        bad = self.write("bad.jsonl", body)
        want = (2, "", f"error: {bad}:20001: number 1e400 overflows a double\n")
        self.assertEqual(run("seal", bad), want)
        self.assertEqual(
            run("seal", "-", stdin=body), (2, "", "error: <stdin>:20001: number 1e400 overflows a double\n")
        )
        self.assertEqual(self.files(), ["bad.jsonl"])

    def test_seal_error_leaves_output_file_alone(self) -> None:
        bad = self.write("bad.jsonl", _read(DIRTY) + b"[]\n")
        out = os.path.join(self.tmp, "out.jsonl")
        self.assertEqual(
            run("seal", bad, "-o", out), (2, "", f"error: {bad}:7: record must be a JSON object, not array\n")
        )
        self.assertEqual(self.files(), ["bad.jsonl"])
        self.write("out.jsonl", "previous content\n")
        self.assertEqual(run("seal", bad, "-o", out)[0], 2)
        self.assertEqual(_read(out), b"previous content\n")
        self.assertEqual(self.files(), ["bad.jsonl", "out.jsonl"])

    def test_seal_missing_input_with_output(self) -> None:
        missing = os.path.join(self.tmp, "none.jsonl")
        out = os.path.join(self.tmp, "out.jsonl")
        self.assertEqual(
            run("seal", missing, "-o", out),
            (2, "", f"error: cannot read {missing}: No such file or directory\n"),
        )
        self.assertEqual(self.files(), [])

    def test_seal_output_in_missing_directory(self) -> None:
        out = os.path.join(self.tmp, "no", "out.jsonl")
        self.assertEqual(
            run("seal", DIRTY, "-o", out), (2, "", f"error: cannot write {out}: No such file or directory\n")
        )
        self.assertEqual(self.files(), [])

    def test_seal_output_is_a_directory(self) -> None:
        os.mkdir(os.path.join(self.tmp, "d"))
        out = os.path.join(self.tmp, "d")
        self.assertEqual(
            run("seal", DIRTY, "-o", out), (2, "", f"error: cannot write {out}: Is a directory\n")
        )
        self.assertEqual(self.files(), ["d"])
        self.assertEqual(os.listdir(out), [])


COMMANDS = ("version", "replay", "scope", "seal", "verify", "demo", "eval", "import")


class UsageErrorTest(unittest.TestCase):
    def assert_usage(self, argv: list[str], message: str | None = None, prefix: str | None = None) -> None:
        """Bad arguments: the error line, the command's usage, and where to find help."""
        code, out, err = run(*argv)
        self.assertEqual((code, out), (2, ""))
        first, rest = err.split("\n", 1)
        command = "toolreplay" + (f" {argv[0]}" if argv and argv[0] in COMMANDS else "")
        self.assertTrue(rest.startswith(f"usage: {command} "), err)
        self.assertTrue(rest.endswith(f"\nTry '{command} --help' for more information.\n"), err)
        if message is not None:
            self.assertEqual(first, f"error: {message}")
        if prefix is not None:
            self.assertTrue(first.startswith(f"error: {prefix}"), err)

    def assert_input_error(self, argv: list[str], message: str) -> None:
        """A file that cannot be read: one error line, no usage."""
        self.assertEqual(run(*argv), (2, "", f"error: {message}\n"))

    def test_no_command(self) -> None:
        self.assert_usage([], "the following arguments are required: COMMAND")

    def test_unknown_command(self) -> None:
        self.assert_usage(
            ["frobnicate"], prefix="argument COMMAND: invalid choice: 'frobnicate' (choose from "
        )

    def test_missing_arguments(self) -> None:
        self.assert_usage(["replay"], "the following arguments are required: SESSION")
        self.assert_usage(["scope", DIRTY], "the following arguments are required: POLICY")
        self.assert_usage(["seal"], "the following arguments are required: SESSION")
        self.assert_usage(["verify"], "the following arguments are required: SEALED")
        self.assert_usage(["seal", DIRTY, "-o"], "argument -o/--output: expected one argument")

    def test_unknown_option_and_format(self) -> None:
        self.assert_usage(["replay", DIRTY, "--fast"], "unrecognized arguments: --fast")
        self.assert_usage(["version", "extra"], "unrecognized arguments: extra")
        self.assert_usage(
            ["replay", DIRTY, "--format", "xml"], prefix="argument --format: invalid choice: 'xml'"
        )

    def test_missing_files(self) -> None:
        self.assert_input_error(["replay", "no-such.jsonl"], "cannot read no-such.jsonl: No such file or directory")
        self.assert_input_error(["verify", "no-such.jsonl"], "cannot read no-such.jsonl: No such file or directory")
        self.assert_input_error(
            ["scope", DIRTY, "no-such.json"], "cannot read no-such.json: No such file or directory"
        )
        self.assert_input_error(
            ["scope", "no-such.jsonl", SCOPE], "cannot read no-such.jsonl: No such file or directory"
        )
        self.assert_input_error(
            ["replay", DIRTY, "--mutators", "no-such.txt"],
            "cannot read no-such.txt: No such file or directory",
        )
        self.assert_input_error(["replay", SAMPLES], f"cannot read {SAMPLES}: Is a directory")


class JobsOptionTest(unittest.TestCase):
    def test_jobs_must_be_a_positive_integer(self) -> None:
        for value in ("0", "-1", "two"):
            code, out, err = run("replay", "--jobs", value, "samples/session-dirty.jsonl")
            self.assertEqual((code, out), (2, ""))
            self.assertEqual(err.split("\n")[0], f"error: argument --jobs: must be a positive integer, not '{value}'")
            self.assertTrue(err.endswith("Try 'toolreplay replay --help' for more information.\n"), err)

    def test_jobs_do_not_change_the_report(self) -> None:
        reference = run("replay", "samples/session-dirty.jsonl")
        for jobs in ("1", "2"):
            self.assertEqual(run("replay", "--jobs", jobs, "samples/session-dirty.jsonl"), reference)



@integration
class HelpTest(unittest.TestCase):
    def test_version_flag(self) -> None:
        done = subprocess.run([sys.executable, "-m", "toolreplay", "--version"], cwd=ROOT, capture_output=True)
        self.assertEqual((done.returncode, done.stdout, done.stderr), (0, b"toolreplay 0.8.0\n", b""))

    def test_every_command_has_a_description_and_its_exit_codes(self) -> None:
        for command in COMMANDS:
            with self.subTest(command=command):
                done = subprocess.run([sys.executable, "-m", "toolreplay", command, "--help"], cwd=ROOT,
                                      capture_output=True, text=True)
                self.assertEqual((done.returncode, done.stderr), (0, ""))
                usage, description = done.stdout.split("\n\n")[:2]
                self.assertTrue(usage.startswith(f"usage: toolreplay {command} "), done.stdout)
                self.assertTrue(description[:1].isupper() and description.endswith("."), description)
                self.assertIn("\nexit codes:\n  0  ", done.stdout)
                self.assertIn("\n  2  usage error", done.stdout)


if __name__ == "__main__":
    unittest.main()
