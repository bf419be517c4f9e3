"""How replay, scope, seal and verify read what they are given: the line limit, a torn last line, an
unsealed file given to verify, a raw log given instead of a session, and `-o` for replay and scope."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import unittest
from unittest import mock

from tests.test_cli import DIRTY, REPLAY_DIRTY, SAMPLES, SCOPE, SCOPE_DIRTY, run


def _bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


class Folder(unittest.TestCase):
    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.tmp = folder.name

    def write(self, name: str, data: bytes) -> str:
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as handle:
            handle.write(data)
        return path

    def sealed(self) -> bytes:
        code, out, _ = run("seal", DIRTY)
        self.assertEqual(code, 0)
        return out.encode()


class LineLimitTest(Folder):
    def test_dev_zero_ends_with_an_input_error_in_every_command(self) -> None:
        for argv in (("replay", "/dev/zero"), ("scope", "/dev/zero", SCOPE), ("seal", "/dev/zero"),
                     ("verify", "/dev/zero"), ("mutators", "/dev/zero")):
            self.assertEqual(run(*argv, "--max-line-bytes", "4096"),
                             (2, "", "error: /dev/zero:1: line longer than 4096 bytes\n"), argv)

    def test_the_default_limit_is_64_mib(self) -> None:
        self.assertEqual(run("replay", "/dev/zero"), (2, "", "error: /dev/zero:1: line longer than 67108864 bytes\n"))

    def test_a_long_line_on_stdin_and_in_the_parallel_reader(self) -> None:
        session = _bytes(DIRTY)
        long = session + b'{"index": 6, "tool": "t", "args": {"x": "' + b"y" * 3000 + b'"}, "response": {}}\n'
        path = self.write("long.jsonl", long)
        want = (2, "", "error: {}:7: line longer than 1000 bytes\n")
        self.assertEqual(run("replay", "-", "--max-line-bytes", "1000", stdin=long),
                         (want[0], "", want[2].format("<stdin>")))
        with mock.patch("toolreplay.format.chunks.PARALLEL_MIN_BYTES", 0), \
                mock.patch("toolreplay.format.chunks.CHUNK_BYTES", 200):
            for jobs in ("1", "2"):
                self.assertEqual(run("replay", path, "--max-line-bytes", "1000", "--jobs", jobs),
                                 (want[0], "", want[2].format(path)))
        self.assertEqual(run("replay", path, "--max-line-bytes", "4000")[0], 1)  # read: the sample's findings

    def test_the_option_takes_a_positive_number(self) -> None:
        for value in ("0", "-1", "1M", "x"):
            code, out, err = run("replay", DIRTY, "--max-line-bytes", value)
            self.assertEqual((code, out), (2, ""))
            self.assertIn("must be a positive number of bytes", err)


class TornLastLineTest(Folder):
    def test_verify_reports_the_complete_links_and_the_incomplete_line(self) -> None:
        sealed = self.sealed()
        torn = sealed[:-20]
        size = len(torn) - len(torn[:torn.rfind(b"\n") + 1])
        path = self.write("torn.jsonl", torn)
        self.assertEqual(run("verify", path), (1, f"chain: intact\nlast line incomplete ({size} bytes)\n", ""))
        code, out, err = run("verify", path, "--format", "json")
        self.assertEqual((code, json.loads(out)["links_checked"], json.loads(out)["last_line_incomplete"], err),
                         (1, 5, size, ""))
        self.assertEqual(run("verify", "-", stdin=torn),
                         (1, f"chain: intact\nlast line incomplete ({size} bytes)\n", ""))

    def test_a_broken_chain_before_the_torn_line_is_reported_as_broken(self) -> None:
        # verify stops at the first broken link (as for any file): the verdict is the broken chain
        lines = self.sealed().splitlines(keepends=True)
        path = self.write("torn.jsonl", b"".join(lines[:2] + lines[3:])[:-20])
        code, out, err = run("verify", path)
        self.assertEqual((code, out.splitlines()[:2], len(out.splitlines()), err),
                         (1, ["chain: broken", "first broken link: index 2"], 4, ""))

    def test_the_checkpoint_is_checked_against_the_complete_links(self) -> None:
        secret = self.write("ci.secret", b"a secret of at least 16 bytes\n")
        sealed_path = os.path.join(self.tmp, "s.jsonl")
        checkpoint = os.path.join(self.tmp, "s.checkpoint")
        self.assertEqual(run("seal", os.path.join(SAMPLES, "session-clean.jsonl"), "-o", sealed_path, "--checkpoint",
                             checkpoint, "--origin", "example.com/s", "--hmac-key", "ci", secret)[0], 0)
        with open(sealed_path, "ab") as handle:
            handle.write(b'{"index":4,"tool":"read_fi')  # a fifth link, cut short by a crash
        self.assertEqual(
            run("verify", sealed_path, "--checkpoint", checkpoint, "--hmac-key", "ci", secret),
            (1, "chain: intact\ncheckpoint: verified\nsigned by: ci\norigin: example.com/s\nanchored: 4 of 4 links\n"
                "last line incomplete (26 bytes)\n", ""))

    def test_a_torn_line_in_the_middle_is_an_input_error(self) -> None:
        lines = self.sealed().splitlines(keepends=True)
        path = self.write("torn.jsonl", b"".join(lines[:2]) + lines[2][:40] + b"\n" + b"".join(lines[3:]))
        code, out, err = run("verify", path)
        self.assertEqual((code, out), (2, ""))
        self.assertTrue(err.startswith(f"error: {path}:3: invalid JSON"), err)

    def test_replay_of_a_torn_file_is_still_an_input_error(self) -> None:
        path = self.write("torn.jsonl", self.sealed()[:-20])
        code, out, err = run("replay", path)
        self.assertEqual((code, out), (2, ""))
        self.assertTrue(err.startswith(f"error: {path}:6: invalid JSON"), err)


class NotSealedTest(Folder):
    def test_verify_of_a_plain_session_says_it_is_not_sealed(self) -> None:
        self.assertEqual(run("verify", DIRTY), (2, "", f"error: {DIRTY}:1: not sealed: a plain session (no prev "
                                                        "and digest); seal it with 'toolreplay seal'\n"))

    def test_a_plain_record_after_links_is_still_a_damaged_sealed_file(self) -> None:
        lines = self.sealed().splitlines(keepends=True)
        path = self.write("mixed.jsonl", lines[0] + _bytes(DIRTY).splitlines(keepends=True)[1])
        self.assertEqual(run("verify", path), (2, "", f"error: {path}:2: plain record in a sealed file (every line "
                                                      "must be a link with prev and digest)\n"))


class ImportHintTest(Folder):
    def test_a_raw_log_gets_a_hint_to_import_it(self) -> None:
        for name, fmt in (("openai-chat.json", "openai-chat"), ("claude-code.jsonl", "claude-code"),
                          ("anthropic.json", "anthropic"), ("mcp.jsonl", "mcp")):
            path = self.write(name, _bytes(os.path.join(SAMPLES, "import", name)))
            hint = (f" (this looks like a log in the {fmt} format, not a session: convert it with "
                    f"'toolreplay import {fmt} {path} -o SESSION.jsonl')\n")
            for argv in (("replay", path), ("scope", path, SCOPE), ("verify", path)):
                code, out, err = run(*argv)
                self.assertEqual((code, out), (2, ""), argv)
                self.assertTrue(err.startswith(f"error: {path}:") and err.endswith(hint), err)

    def test_openhands_atif_and_sdk_span_logs_get_the_hint_too(self) -> None:
        fixtures = os.path.join(os.path.dirname(SAMPLES), "tests", "fixtures", "import")
        for name, fmt in (("openhands/sdk-events.jsonl", "openhands"), ("openhands/wrong-initial-state.json", "openhands"),
                          ("atif/rfc-example.json", "atif"), ("otel/sdk-lines.jsonl", "otel"),
                          ("otel/sdk-console.json", "otel")):
            path = self.write(os.path.basename(name), _bytes(os.path.join(fixtures, name)))
            code, out, err = run("replay", path)
            self.assertEqual((code, out), (2, ""), name)
            self.assertTrue(err.endswith(f" (this looks like a log in the {fmt} format, not a session: convert it "
                                         f"with 'toolreplay import {fmt} {path} -o SESSION.jsonl')\n"), err)

    def test_chat_messages_without_tool_calls(self) -> None:
        path = self.write("chat.jsonl", b'{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "yo"}\n')
        self.assertEqual(run("replay", path), (2, "", f'error: {path}:1: unknown field "role" (this looks like chat '
                                                      f"messages, not a session: convert it with 'toolreplay import "
                                                      f"auto {path} -o SESSION.jsonl')\n"))

    def test_no_hint_for_a_session_with_a_bad_line_or_for_stdin(self) -> None:
        path = self.write("bad.jsonl", _bytes(DIRTY) + b"[]\n")
        self.assertEqual(run("replay", path), (2, "", f"error: {path}:7: record must be a JSON object, not array\n"))
        log = _bytes(os.path.join(SAMPLES, "import", "mcp.jsonl"))
        for fmt in ("text", "html"):  # html reads standard input from a copy: still no hint, still <stdin>
            self.assertEqual(run("replay", "-", "--format", fmt, stdin=log),
                             (2, "", 'error: <stdin>:1: unknown field "jsonrpc"\n'))
            self.assertEqual(run("scope", "-", SCOPE, "--format", fmt, stdin=log),
                             (2, "", 'error: <stdin>:1: unknown field "jsonrpc"\n'))


class OutputOptionTest(Folder):
    def test_replay_and_scope_write_their_report_to_a_file(self) -> None:
        for argv, want, code in ((("replay", DIRTY), REPLAY_DIRTY, 1), (("scope", DIRTY, SCOPE), SCOPE_DIRTY, 1)):
            target = os.path.join(self.tmp, "report.txt")
            self.assertEqual(run(*argv, "-o", target), (code, "", ""))
            with open(target, encoding="utf-8") as handle:
                self.assertEqual(handle.read(), want)
            os.unlink(target)

    def test_json_and_html_go_to_the_file_too(self) -> None:
        target = os.path.join(self.tmp, "report")
        for fmt in ("json", "html"):
            code, out, _ = run("replay", DIRTY, "--format", fmt)
            self.assertEqual(run("replay", DIRTY, "--format", fmt, "--output", target), (code, "", ""))
            with open(target, encoding="utf-8") as handle:
                self.assertEqual(handle.read(), out)

    def test_an_input_error_leaves_the_file_as_it_was_and_nothing_behind(self) -> None:
        bad = self.write("bad.jsonl", _bytes(DIRTY) + b"[]\n")
        target = self.write("report.txt", b"previous\n")
        for argv in (("replay", bad), ("scope", bad, SCOPE)):
            self.assertEqual(run(*argv, "-o", target)[0], 2)
            with open(target, "rb") as handle:
                self.assertEqual(handle.read(), b"previous\n")
        self.assertEqual(sorted(os.listdir(self.tmp)), ["bad.jsonl", "report.txt"])

    def test_a_failed_write_is_a_clean_error(self) -> None:
        folder = os.path.join(self.tmp, "missing", "report.txt")
        code, out, err = run("replay", DIRTY, "-o", folder)
        self.assertEqual((code, out), (2, ""))
        self.assertTrue(err.startswith(f"error: cannot write {folder}: "), err)
        shutil.rmtree(self.tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
