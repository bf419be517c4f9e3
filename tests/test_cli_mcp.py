"""The MCP commands in-process through `main`: usage errors, a refusal, and mcp-pins."""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import threading
import time
import unittest
from collections.abc import Callable
from typing import Any

from tests.test_cli import run
from tests.test_mcp_proxy import TINY, call, initialize, text_result
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.mcp.pins import ToolPins

CALL = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"rm","arguments":{"path":"/"}}}\n'


class McpProxyCliTest(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.policy = os.path.join(self.directory, "policy.json")
        with open(self.policy, "w", encoding="utf-8") as out:
            json.dump({"agent": "a", "allowed_tools": ["echo"]}, out)

    def test_usage_errors(self) -> None:
        self.assertEqual(run("mcp-proxy", "--policy", self.policy),
                         (2, "", "error: mcp-proxy needs the server command after --, or --servers FILE\n"))
        self.assertEqual(run("mcp-proxy", "--policy", self.policy, "--", "/no/such/server"),
                         (2, "", "error: cannot start the server /no/such/server: No such file or directory\n"))
        missing = os.path.join(self.directory, "missing.json")
        self.assertEqual(run("mcp-proxy", "--policy", missing, "--", "cat"),
                         (2, "", f"error: cannot read {missing}: No such file or directory\n"))

    def test_listener_limits_are_validated(self) -> None:
        base = ("mcp-proxy", "--policy", self.policy, "--records", self.directory, "--listen", "0")
        for flags, message in [
            (("--listen-head-timeout", "0"), "--listen-head-timeout 0.0: expected seconds, more than 0 and at most 3600"),
            (("--listen-head-timeout", "nan"), "--listen-head-timeout nan: expected seconds, more than 0 and at most "
                                               "3600"),
            (("--listen-head-timeout", "4000"), "--listen-head-timeout 4000.0: expected seconds, more than 0 and at "
                                                "most 3600"),
            (("--listen-max-connections", "0"), "--listen-max-connections 0: expected at least 1"),
        ]:
            with self.subTest(flags=flags):
                self.assertEqual(run(*base, *flags, "--", "cat"), (2, "", f"error: {message}\n"))
        for flag, value in (("--listen-head-timeout", "5"), ("--listen-max-connections", "5")):
            self.assertEqual(run("mcp-proxy", "--policy", self.policy, flag, value, "--", "cat"),
                             (2, "", f"error: {flag} needs --listen\n"))
        code, out, err = run(*base, "--listen-max-connections", "many", "--", "cat")
        self.assertEqual((code, out, err.splitlines()[0]), (2, "", "error: argument --listen-max-connections: "
                                                                   "invalid int value: 'many'"))

    def test_a_refused_call_in_process(self) -> None:
        record = os.path.join(self.directory, "record.jsonl")
        code, out, err = run("mcp-proxy", "--policy", self.policy, "--record", record, "--", sys.executable, TINY,
                             stdin=CALL)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(out, '{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text",'
                              '"text":"toolreplay: tool not allowed: rm"}],"isError":true}}\n')
        self.assertEqual(run("verify", record), (0, "chain: intact\n", ""))


    def test_redaction_before_sealing(self) -> None:
        token = "ghp_" + "Z8x" * 12
        with open(self.policy, "w", encoding="utf-8") as out:
            json.dump({"agent": "a", "allowed_tools": ["echo"], "redact": {}}, out)
        record, key = os.path.join(self.directory, "record.jsonl"), os.path.join(self.directory, "key")
        with open(key, "wb") as out:
            out.write(b"a key kept off the record\n")
        call = ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":'
                f'{{"text":"{token}"}}}}}}\n').encode()
        server = ["--", sys.executable, TINY]
        self.assertEqual(run("mcp-proxy", "--policy", self.policy, "--record", record, *server, stdin=call),
                         (2, "", 'error: the policy\'s "redact" section needs --redact-key FILE (a key of at least '
                                 '16 bytes, kept off the record)\n'))
        self.assertFalse(os.path.exists(record))
        code, out, err = run("mcp-proxy", "--policy", self.policy, "--record", record, "--redact-key", key, *server,
                             stdin=call)
        self.assertEqual((code, err), (0, ""))
        self.assertIn(token, out)  # the client gets the real answer
        with open(record, encoding="utf-8") as handle:
            text = handle.read()
        self.assertNotIn(token, text)
        self.assertRegex(text, r'"args":\{"text":"\[redacted:github-token:[0-9a-f]{24}\]"\}')
        self.assertEqual(run("verify", record), (0, "chain: intact\n", ""))
        with open(key, "wb") as out:
            out.write(b"short")
        self.assertEqual(run("mcp-proxy", "--policy", self.policy, "--record", record, "--redact-key", key, *server),
                         (2, "", f"error: --redact-key {key}: a redaction key must be at least 16 bytes\n"))


class _Heard(io.BytesIO):
    """A client's stdout that lets the test wait for the proxy's next message."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = threading.Condition()

    def write(self, data: Any) -> int:
        with self.changed:
            written = super().write(data)
            self.changed.notify_all()
            return written

    def messages(self, count: int = 0) -> list[Any]:
        """The messages heard so far, once there are at least `count` (or after 20 s)."""
        with self.changed:
            self.changed.wait_for(lambda: self.getvalue().count(b"\n") >= count, timeout=20)
            return [json.loads(line) for line in self.getvalue().splitlines()]


Step = Callable[[list[Any]], dict[str, Any]]


def converse(argv: list[str], script: list[tuple[Step, int]], end: int) -> tuple[int, list[Any], str]:
    """Run `main(argv)` in-process as a client would talk to it: each step's message (made from the messages
    heard so far) once the proxy has said that many, then the end of input once it has said `end`; the exit
    code, every message heard, stderr."""
    read, write = os.pipe()
    heard = _Heard()
    stdio = IO(os.fdopen(read, "rb"), io.TextIOWrapper(heard, encoding="utf-8", newline="\n"), io.StringIO())
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(main(argv, stdio)))
    thread.start()
    with os.fdopen(write, "wb") as client:
        for step, count in script:
            client.write(json.dumps(step(heard.messages(count))).encode() + b"\n")
            client.flush()
        heard.messages(end)
    thread.join(30)
    stdio.stdin.close()
    stdio.stdout.flush()
    assert isinstance(stdio.stderr, io.StringIO)
    return codes[0], heard.messages(), stdio.stderr.getvalue()


class RedactionSessionTest(unittest.TestCase):
    """Redaction over whole client sessions: --approvals without --record is redacted as a record would be
    (with --redact-key), and a repeated write gets the real answer, never the redacted record's."""

    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.policy = os.path.join(self.directory, "policy.json")
        with open(self.policy, "w", encoding="utf-8") as out:
            json.dump({"agent": "a", "allowed_tools": ["write_note"], "write_tools": ["write_note"],
                       "redact": {"builtin": False, "fields": ["text"]}}, out)
        self.key = os.path.join(self.directory, "key")
        with open(self.key, "wb") as out:
            out.write(b"0123456789abcdef0123")
        self.approvals = os.path.join(self.directory, "approvals.jsonl")
        self.notes = os.path.join(self.directory, "notes.txt")

    def proxy(self, *extra: str) -> list[str]:
        return ["mcp-proxy", "--policy", self.policy, "--approvals", self.approvals, *extra, "--", sys.executable,
                TINY, "--notes", self.notes]

    def session(self, answer: dict[str, Any] | None) -> tuple[int, list[Any], str]:
        """One client session: initialize, write_note with a secret, and `answer` to the question (None: no
        question is expected)."""
        script: list[tuple[Step, int]] = [
            (lambda heard: initialize(capabilities={"elicitation": {}}), 0),
            (lambda heard: {"jsonrpc": "2.0", "method": "notifications/initialized"}, 1),
            (lambda heard: call(1, "write_note", text="s3cret"), 1)]
        if answer is not None:
            script.append((lambda heard: {"jsonrpc": "2.0", "id": heard[1]["id"], "result": answer}, 2))
        return converse(self.proxy("--redact-key", self.key), script, len(script) - 1)

    def test_approvals_without_record_hold_no_secret_and_a_later_session_matches_them(self) -> None:
        self.assertEqual(run(*self.proxy()), (2, "", 'error: the policy\'s "redact" section needs --redact-key FILE '
                                                     '(a key of at least 16 bytes, kept off the record)\n'))
        short = os.path.join(self.directory, "short")
        with open(short, "wb") as out:
            out.write(b"short")
        self.assertEqual(run(*self.proxy("--redact-key", short)),
                         (2, "", f"error: --redact-key {short}: a redaction key must be at least 16 bytes\n"))
        code, heard, err = self.session({"action": "accept", "content": {"approve": True, "remember": "always"}})
        self.assertEqual((code, err, heard[1]["method"], heard[2]),
                         (0, "", "elicitation/create", text_result(1, 'write_note {"text": "s3cret"}', False)))
        with open(self.approvals, encoding="utf-8") as handle:
            text = handle.read()
        self.assertNotIn("s3cret", text)
        (line,) = [json.loads(item) for item in text.splitlines()]
        self.assertEqual((line["tool"], line["redacted"], list(line["args"])), ("write_note", True, ["text"]))
        self.assertRegex(line["args"]["text"], r"^\[redacted:field:[0-9a-f]{24}\]$")
        # a later session: the same call is answered by the remembered approval, nobody is asked
        code, heard, err = self.session(None)
        self.assertEqual((code, err, heard[1:]), (0, "", [text_result(1, 'write_note {"text": "s3cret"}', False)]))
        with open(self.notes, encoding="utf-8") as written:
            self.assertEqual(written.read(), '{"text": "s3cret"}\n' * 2)


    def test_a_repeated_write_gets_the_real_answer_never_the_redacted_record(self) -> None:
        record = os.path.join(self.directory, "record.jsonl")
        argv = ["mcp-proxy", "--policy", self.policy, "--record", record, "--redact-key", self.key, "--",
                sys.executable, TINY, "--notes", self.notes]
        start: list[tuple[Step, int]] = [(lambda heard: initialize(capabilities={"elicitation": {}}), 0),
                                         (lambda heard: {"jsonrpc": "2.0", "method": "notifications/initialized"}, 1)]
        yes = {"action": "accept", "content": {"approve": True}}
        code, heard, err = converse(argv, [*start, (lambda heard: call(1, "write_note", text="s3cret"), 1),
                                           (lambda heard: {"jsonrpc": "2.0", "id": heard[1]["id"], "result": yes}, 2),
                                           (lambda heard: call(2, "write_note", text="s3cret"), 3)], 4)
        real = 'write_note {"text": "s3cret"}'
        self.assertEqual((code, err, heard[2:]), (0, "", [text_result(1, real, False), text_result(2, real, False)]))
        # the proxy starts again on its record: the record holds the answer only redacted
        code, heard, err = converse(argv, [*start, (lambda heard: call(3, "write_note", text="s3cret"), 1)], 2)
        self.assertEqual((code, err, heard[1:]), (0, "", [text_result(
            3, "toolreplay: already ran: an identical write_note call ran earlier; its answer is no longer held in "
               "memory, and the record holds it only redacted", True)]))
        with open(self.notes, encoding="utf-8") as written:
            self.assertEqual(written.read(), '{"text": "s3cret"}\n')  # it ran once
        with open(record, encoding="utf-8") as handle:
            self.assertNotIn("s3cret", handle.read())


class InboxSessionTest(unittest.TestCase):
    """A client without elicitation: a write waits in the approvals inbox of the records folder, a person
    decides it there (as `toolreplay serve` does), and the record names the decision."""

    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.policy = os.path.join(self.directory, "policy.json")
        with open(self.policy, "w", encoding="utf-8") as out:
            json.dump({"agent": "a", "allowed_tools": ["write_note"], "write_tools": ["write_note"]}, out)
        self.notes = os.path.join(self.directory, "notes.txt")
        self.record = os.path.join(self.directory, "record.jsonl")

    def decide_when_asked(self, verdict: str) -> threading.Thread:
        from toolreplay.guard.inbox import Request, decide, pending_requests

        def run() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                waiting = [item for item in pending_requests(self.directory) if isinstance(item, Request)]
                if waiting:
                    decide(self.directory, waiting[0].id, verdict, "once", "Ada")
                    return
                time.sleep(0.01)

        thread = threading.Thread(target=run)
        thread.start()
        self.addCleanup(thread.join, 30)
        return thread

    def session(self, number: int) -> tuple[int, list[Any], str]:
        argv = ["mcp-proxy", "--policy", self.policy, "--record", self.record, "--inbox", self.directory, "--",
                sys.executable, TINY, "--notes", self.notes]
        return converse(argv, [(lambda heard: initialize(), 0),
                               (lambda heard: {"jsonrpc": "2.0", "method": "notifications/initialized"}, 1),
                               (lambda heard: call(number, "write_note", text=f"note {number}"), 1)], 2)

    def test_a_write_is_decided_in_the_inbox_and_the_record_names_who(self) -> None:
        self.decide_when_asked("approve")
        code, heard, err = self.session(1)
        self.assertEqual((code, err, heard[1:]), (0, "", [text_result(1, 'write_note {"text": "note 1"}', False)]))
        self.decide_when_asked("deny")
        code, heard, err = self.session(2)
        self.assertEqual((code, err, heard[1:]), (0, "", [text_result(2, "toolreplay: confirmation declined", True)]))
        with open(self.notes, encoding="utf-8") as written:
            self.assertEqual(written.read(), '{"text": "note 1"}\n')  # the denied one never ran
        with open(self.record, encoding="utf-8") as handle:
            metas = [json.loads(line)["meta"] for line in handle]
        self.assertEqual([(meta["outcome"], meta.get("x-decided-by"), meta.get("x-confirmed")) for meta in metas],
                         [("ran", "Ada", "once"), ("refused", "Ada", None)])

    def test_the_timeout_needs_the_inbox(self) -> None:
        self.assertEqual(run("mcp-proxy", "--policy", self.policy, "--inbox-timeout", "5", "--", sys.executable, TINY),
                         (2, "", "error: --inbox-timeout needs --inbox DIR\n"))


class McpPinsCliTest(unittest.TestCase):
    def test_show_and_accept(self) -> None:
        path = os.path.join(tempfile.mkdtemp(), "pins.json")
        self.assertEqual(run("mcp-pins", "show", path), (0, "", ""))
        tool = {"name": "echo\x1b[2J", "description": "Echo.", "inputSchema": {"type": "object"}}
        ToolPins(path).check([tool])
        ToolPins(path).check([{**tool, "description": "Echo!"}])
        code, out, err = run("mcp-pins", "show", path)
        self.assertEqual((code, err), (1, ""))
        self.assertRegex(out, r"^pinned echo\\x1b\[2J [0-9a-f]{16}\npending echo\\x1b\[2J [0-9a-f]{16} \(changed\)\n$")
        self.assertEqual(run("mcp-pins", "accept", path, "--tool", "echo\x1b[2J"), (
            0, "accepted tool 'echo\\x1b[2J' changed since it was pinned: description\n", ""))
        self.assertEqual(run("mcp-pins", "accept", path), (0, f"nothing pending for {path}\n", ""))


if __name__ == "__main__":
    unittest.main()
