"""One crash, restart and record-loss table for every front end of the guard's core.

Each scenario runs against the library guard (tests/guard_host.py: `Gate` + `SessionRecorder` in a
host process), against `mcp-proxy` (in front of tests/mcp_servers/tiny_server.py) and against
`mcp-proxy --listen` (the same server, one client session a start), through the same driver: start,
call, stop, kill -9, start again. All must give the same answers and leave the same side effects (the
notes file the `write_note` tool appends to). The listener records each client session on its own, so
the scenarios that continue one record (`RecordContinuation`) are not its; a write cut short by a
crash is refused by the listener's next session as by a restarted stdio proxy.
"""

from __future__ import annotations

import hashlib
import http.client
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Any

from tests.support import integration, require

HAVE_UVICORN = importlib.util.find_spec("uvicorn") is not None

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
        self.record, self.intents = case.record, case.record + ".intents"

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
        self.record, self.intents = case.record, case.record + ".intents"
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


class ListenerHost(FrontEnd):
    """`mcp-proxy --listen` in front of the tiny server, spoken to over HTTP by one client session."""

    def __init__(self, case: CrashTable) -> None:
        server = [sys.executable, TINY, "--notes", case.notes]
        self.records = os.path.join(case.directory, "records")
        log = os.path.join(case.directory, "stderr.txt")
        self.earlier = 0  # listeners started before this one (their lines are in the same stderr file)
        if os.path.exists(log):
            with open(log, encoding="utf-8") as lines:
                self.earlier = lines.read().count("listening on ")
        super().__init__([sys.executable, "-m", "toolreplay", "mcp-proxy", "--policy", case.policy, "--listen",
                          "127.0.0.1:0", "--records", self.records, "--mutator", "write_note", "--", *server],
                         case.directory)
        # the documented name: the SHA-256 of the server command as canonical JSON
        upstream = hashlib.sha256(json.dumps(server, separators=(",", ":")).encode()).hexdigest()[:16]
        self.intents = os.path.join(self.records, f"upstream-{upstream}.intents")
        self.port = self._wait_for_port()
        status, headers, _ = self._post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "crash", "version": "1"}}})
        assert status == 200, status
        self.session = headers["mcp-session-id"]
        self.record = os.path.join(self.records, hashlib.sha256(self.session.encode()).hexdigest()[:16] + ".jsonl")
        assert self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})[0] == 202
        self.pending: http.client.HTTPConnection | None = None

    def _wait_for_port(self) -> int:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.process.poll() is None:
            self.stderr.seek(0)
            found = re.findall(r"^listening on http://127\.0\.0\.1:(\d+)/mcp$", self.stderr.read(), re.M)
            if len(found) > self.earlier:
                return int(found[-1])
            time.sleep(0.02)
        raise AssertionError("the listener did not start")

    def _connect(self, message: dict[str, Any]) -> http.client.HTTPConnection:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        headers = {"content-type": "application/json", "accept": "application/json"}
        if getattr(self, "session", None) is not None:
            headers["mcp-session-id"] = self.session
        connection.request("POST", "/mcp", body=json.dumps(message), headers=headers)
        return connection

    def _post(self, message: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        connection = self._connect(message)
        try:
            reply = connection.getresponse()
            return reply.status, {name.lower(): value for name, value in reply.getheaders()}, reply.read()
        finally:
            connection.close()

    def request(self, tool: str, args: dict[str, Any]) -> None:
        self.pending = self._connect({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                                      "params": {"name": tool, "arguments": args}})
        self.next_id += 1

    def answer(self) -> tuple[str, str]:
        assert self.pending is not None
        try:
            result = json.loads(self.pending.getresponse().read())["result"]
        finally:
            self.pending.close()
            self.pending = None
        (text,) = [block["text"] for block in result["content"]]
        if result["isError"] and text.startswith(PREFIX):
            return "refused", text[len(PREFIX):]
        return "ok", text

    def stop(self) -> None:
        """SIGTERM: every session ends, its record sealed, and the listener exits 0."""
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(timeout=30) == 0
        self._close()

    def _close(self) -> None:
        if getattr(self, "pending", None) is not None:
            assert self.pending is not None
            self.pending.close()
        super()._close()


Host = type[LibraryHost] | type[ProxyHost] | type[ListenerHost]


class CrashTable:
    """The scenarios every front end shares; a subclass names the front end (`host`)."""

    host: Host
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

    def start(self) -> LibraryHost | ProxyHost | ListenerHost:
        front = self.host(self)
        self.addCleanup(front.kill)  # type: ignore[attr-defined]
        return front

    def call(self, front: LibraryHost | ProxyHost | ListenerHost, tool: str, **args: Any) -> tuple[str, str]:
        front.request(tool, args)
        return front.answer()

    def noted(self) -> list[dict[str, Any]]:
        if not os.path.exists(self.notes):
            return []
        with open(self.notes, encoding="utf-8") as lines:
            return [json.loads(line) for line in lines]

    def test_killed_while_a_write_runs_then_the_retry_is_refused_as_unknown(self) -> None:
        eq = self.assertEqual  # type: ignore[attr-defined]
        front = self.start()
        eq(self.call(front, "echo", text="x"), ("ok", 'echo {"text": "x"}'))
        front.request("write_note", {"text": "c", "hang": True})
        deadline = time.monotonic() + 30
        while not self.noted() and time.monotonic() < deadline:  # the write took effect, no answer yet
            time.sleep(0.02)
        front.kill()
        intents = front.intents
        unknown = ("refused", "outcome unknown: an identical write_note call started earlier and its result was "
                              "never recorded; a person must check whether it took effect, then delete its line "
                              f"from {os.path.basename(intents)}")
        for text in ("d", "e"):  # and again after a second restart
            front = self.start()
            eq(self.call(front, "write_note", text="c", hang=True), unknown)
            eq(self.call(front, "write_note", text=text), ("ok", f'write_note {{"text": "{text}"}}'))
            front.stop()
        eq(self.noted(), [{"hang": True, "text": "c"}, {"text": "d"}, {"text": "e"}])
        os.unlink(intents)  # a person checked and resolved it
        front = self.start()
        eq(self.call(front, "write_note", text="f"), ("ok", 'write_note {"text": "f"}'))
        front.stop()

    def test_record_deleted_under_a_running_front_end(self) -> None:
        eq = self.assertEqual  # type: ignore[attr-defined]
        front = self.start()
        eq(self.call(front, "echo", text="x"), ("ok", 'echo {"text": "x"}'))
        os.unlink(front.record)
        failed = ("refused", f"recording failed: {front.record} was deleted or replaced while being recorded")
        eq(self.call(front, "write_note", text="a"), failed)
        eq(self.call(front, "echo", text="y"), failed)
        front.stop()
        eq(self.noted(), [])


class RecordContinuation(CrashTable):
    """The scenarios of a front end that continues one record across restarts (not the listener's)."""

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


@integration  # kills and restarts processes
class LibraryCrashTest(RecordContinuation, unittest.TestCase):
    host = LibraryHost


@integration  # kills and restarts processes
class ProxyCrashTest(RecordContinuation, unittest.TestCase):
    host = ProxyHost


@integration  # kills and restarts processes
class ListenerCrashTest(CrashTable, unittest.TestCase):
    host = ListenerHost

    def setUp(self) -> None:
        require(HAVE_UVICORN, "uvicorn (pip install '.[http]' in a ToolReplay checkout)")
        super().setUp()

    def test_the_crashed_sessions_record_says_outcome_unknown_and_one_listener_serves_an_upstream(self) -> None:
        front = self.start()
        assert isinstance(front, ListenerHost)
        front.request("write_note", {"text": "c", "hang": True})
        deadline = time.monotonic() + 30
        while not self.noted() and time.monotonic() < deadline:
            time.sleep(0.02)
        front.kill()
        crashed = front.record
        front = self.start()
        with open(crashed, encoding="utf-8") as lines:
            last = json.loads(lines.readlines()[-1])
        self.assertEqual((last["tool"], last["args"], last["response"], last["meta"]["outcome"]), (
            "write_note", {"hang": True, "text": "c"}, {"ok": False, "error": "outcome unknown: the proxy stopped "
                                                      "while this write ran, before its result was recorded; whether "
                                                      "it took effect is unknown"}, "unknown"))
        verified = subprocess.run([sys.executable, "-m", "toolreplay", "verify", crashed], capture_output=True,
                                  text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
        self.assertEqual((verified.returncode, verified.stdout), (0, "chain: intact\n"))
        second = subprocess.run([sys.executable, "-m", "toolreplay", "mcp-proxy", "--policy", self.policy, "--listen",
                                 "127.0.0.1:0", "--records", front.records, "--", sys.executable, TINY, "--notes",
                                 self.notes], capture_output=True, text=True, cwd=ROOT, timeout=60,
                                env={**os.environ, "PYTHONPATH": ROOT})
        self.assertEqual((second.returncode, second.stderr), (2, f"error: {front.intents} is already in use by "
                                                                 "another proxy\n"))
        front.stop()


if __name__ == "__main__":
    unittest.main()
