"""One crash, restart and record-loss table for every front end of the guard's core.

Each scenario runs against the library guard (tests/guard_host.py: `Gate` + `SessionRecorder` in a
host process) and against `mcp-proxy` (in front of tests/mcp_servers/tiny_server.py), through the same
driver: start on a record, call, stop, kill -9, start again on the same record. Both must give the
same answers and leave the same side effects (the notes file the `write_note` tool appends to).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Any

from tests.support import integration

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST = os.path.join(ROOT, "tests", "guard_host.py")
TINY = os.path.join(ROOT, "tests", "mcp_servers", "tiny_server.py")
PREFIX = "toolreplay: "


class FrontEnd:
    """One running front end (a process group), spoken to one request at a time."""

    def __init__(self, command: list[str], directory: str) -> None:
        self.stderr = open(os.path.join(directory, "stderr.txt"), "a+", encoding="utf-8")  # noqa: SIM115
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                        cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, start_new_session=True)
        self.watchdog = threading.Timer(60, self.kill)
        self.watchdog.start()
        self.next_id = 1

    def send(self, data: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(data).encode() + b"\n")
        self.process.stdin.flush()

    def recv(self) -> Any:
        assert self.process.stdout is not None
        return json.loads(self.process.stdout.readline())

    def stop(self) -> None:
        """Close the input and wait for a clean exit."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        self.process.stdout.read()
        self.process.wait(timeout=30)
        self._close()

    def kill(self) -> None:
        """kill -9 the front end and everything it started (a crash, a power cut)."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()
        self._close()

    def _close(self) -> None:
        self.watchdog.cancel()
        for stream in (self.process.stdin, self.process.stdout, self.stderr):
            if stream is not None and not stream.closed:
                stream.close()


class LibraryHost(FrontEnd):
    def __init__(self, case: CrashTable) -> None:
        super().__init__([sys.executable, HOST, case.policy, case.record, case.notes, "--mutator", "write_note"],
                         case.directory)

    def request(self, tool: str, args: dict[str, Any]) -> None:
        self.send({"tool": tool, "args": args})

    def answer(self) -> tuple[str, str]:
        response = self.recv()
        error = response.get("error")
        if set(response) == {"ok", "error"} and response["ok"] is False:
            return "refused", error
        return "ok", response["text"]


class ProxyHost(FrontEnd):
    def __init__(self, case: CrashTable) -> None:
        super().__init__([sys.executable, "-m", "toolreplay", "mcp-proxy", "--policy", case.policy, "--record",
                          case.record, "--mutator", "write_note", "--", sys.executable, TINY, "--notes", case.notes],
                         case.directory)
        self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "crash", "version": "1"}}})
        assert self.recv()["id"] == 0
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def request(self, tool: str, args: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                   "params": {"name": tool, "arguments": args}})
        self.next_id += 1

    def answer(self) -> tuple[str, str]:
        result = self.recv()["result"]
        (text,) = [block["text"] for block in result["content"]]
        if result["isError"] and text.startswith(PREFIX):
            return "refused", text[len(PREFIX):]
        return "ok", text


class CrashTable:
    """The scenarios; a subclass names the front end (`host`)."""

    host: type[LibraryHost] | type[ProxyHost]
    directory: str
    policy: str
    record: str
    notes: str

    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory, True)  # type: ignore[attr-defined]
        self.record = os.path.join(self.directory, "record.jsonl")
        self.notes = os.path.join(self.directory, "notes.txt")
        self.write_policy({})

    def write_policy(self, extra: dict[str, Any]) -> None:
        self.policy = os.path.join(self.directory, "policy.json")
        with open(self.policy, "w", encoding="utf-8") as out:
            json.dump({"agent": "crash", "allowed_tools": ["echo", "write_note"], **extra}, out)

    def start(self) -> LibraryHost | ProxyHost:
        front = self.host(self)
        self.addCleanup(front.kill)  # type: ignore[attr-defined]
        return front

    def call(self, front: LibraryHost | ProxyHost, tool: str, **args: Any) -> tuple[str, str]:
        front.request(tool, args)
        return front.answer()

    def noted(self) -> list[dict[str, Any]]:
        if not os.path.exists(self.notes):
            return []
        with open(self.notes, encoding="utf-8") as lines:
            return [json.loads(line) for line in lines]

    def test_restart_on_the_same_record_does_not_repeat_a_write(self) -> None:
        eq = self.assertEqual  # type: ignore[attr-defined]
        front = self.start()
        eq(self.call(front, "write_note", text="a"), ("ok", 'write_note {"text": "a"}'))
        front.stop()
        eq(os.path.exists(self.record + ".intents"), False)  # every write ended in a record
        for _ in range(2):
            front = self.start()
            eq(self.call(front, "write_note", text="a"), ("ok", 'write_note {"text": "a"}'))
            front.stop()
        front = self.start()
        eq(self.call(front, "write_note", text="b"), ("ok", 'write_note {"text": "b"}'))
        front.stop()
        eq(self.noted(), [{"text": "a"}, {"text": "b"}])

    def test_budgets_and_rule_counts_continue_after_a_restart(self) -> None:
        eq = self.assertEqual  # type: ignore[attr-defined]
        self.write_policy({"limits": {"max_steps": 4}, "rules": [
            {"id": "one-note", "tools": ["write_note"], "effect": "deny", "reason": "one note a session",
             "unless": [{"count": "write_note", "max": 1}]}]})
        front = self.start()
        eq(self.call(front, "write_note", text="a"), ("ok", 'write_note {"text": "a"}'))
        eq(self.call(front, "echo", text="x"), ("ok", 'echo {"text": "x"}'))
        front.stop()
        front = self.start()
        eq(self.call(front, "write_note", text="b"), ("refused", "denied by rule one-note: one note a session"))
        eq(self.call(front, "echo", text="y"), ("ok", 'echo {"text": "y"}'))
        eq(self.call(front, "echo", text="z"), ("refused", "budget exceeded: max_steps"))
        front.stop()
        eq(self.noted(), [{"text": "a"}])

    def test_killed_while_a_write_runs_then_the_retry_is_refused_as_unknown(self) -> None:
        eq = self.assertEqual  # type: ignore[attr-defined]
        front = self.start()
        eq(self.call(front, "echo", text="x"), ("ok", 'echo {"text": "x"}'))
        front.request("write_note", {"text": "c", "hang": True})
        deadline = time.monotonic() + 30
        while not self.noted() and time.monotonic() < deadline:  # the write took effect, no answer yet
            time.sleep(0.02)
        front.kill()
        unknown = ("refused", "outcome unknown: an identical write_note call started earlier and its result was "
                              "never recorded; a person must check whether it took effect, then delete its line "
                              "from record.jsonl.intents")
        for _ in range(2):  # and again after a second restart
            front = self.start()
            eq(self.call(front, "write_note", text="c", hang=True), unknown)
            eq(self.call(front, "write_note", text="d"), ("ok", 'write_note {"text": "d"}'))
            front.stop()
        eq(self.noted(), [{"hang": True, "text": "c"}, {"text": "d"}])
        os.unlink(self.record + ".intents")  # a person checked and resolved it
        front = self.start()
        eq(self.call(front, "write_note", text="e"), ("ok", 'write_note {"text": "e"}'))
        front.stop()

    def test_record_deleted_under_a_running_front_end(self) -> None:
        eq = self.assertEqual  # type: ignore[attr-defined]
        front = self.start()
        eq(self.call(front, "echo", text="x"), ("ok", 'echo {"text": "x"}'))
        os.unlink(self.record)
        failed = ("refused", f"recording failed: {self.record} was deleted or replaced while being recorded")
        eq(self.call(front, "write_note", text="a"), failed)
        eq(self.call(front, "echo", text="y"), failed)
        front.stop()
        eq(self.noted(), [])


@integration  # kills and restarts processes
class LibraryCrashTest(CrashTable, unittest.TestCase):
    host = LibraryHost


@integration  # kills and restarts processes
class ProxyCrashTest(CrashTable, unittest.TestCase):
    host = ProxyHost


if __name__ == "__main__":
    unittest.main()
