"""`toolreplay hook serve`: the HTTP hook endpoint, and the Claude Code `type: "http"` hooks that post to it.

Provenance of the hook fields: the Claude Code hooks reference (https://code.claude.com/docs/en/hooks, "HTTP
hooks"), as the claude-code-settings crate documents its `HttpHook` (docs.rs/claude-code-settings 0.1.0:
`url`, `headers` with `$VAR` / `${VAR}` filled only from `allowedEnvVars`, `timeout`, `onFailure`), and
anthropics/claude-code#46193, which quotes the reference: "non-2xx responses, connection failures, and
timeouts all produce non-blocking errors ... To block a tool call or deny a permission, return a 2xx response
with a JSON body containing decision: "block" or a hookSpecificOutput with permissionDecision: "deny"". The
event bodies are the command hook's stdin (tests/test_hook_claude_code.py has their provenance).
"""

from __future__ import annotations

import fcntl
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Any

from tests.support import PATIENCE, integration, wait_for
from tests.test_cli import run
from tests.test_hook_claude_code import ALLOW, ASK, POLICY, ROOT, TRANSCRIPT, decision
from toolreplay.guard.intents import read_intents
from toolreplay.hooks.http import MAX_BODY_BYTES, TOKEN_NAME

INTEGRATION_TIER = True  # a server process per test class
SESSION = "00893aaf-19fa-41d2-8238-13269b9b3ca0"


def payload(project: str, event: str, tool: str | None = None, args: dict[str, Any] | None = None,
            call_id: str | None = None, **extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"session_id": SESSION, "transcript_path": TRANSCRIPT, "cwd": project,
                           "permission_mode": "default", "hook_event_name": event}
    if tool is not None:
        obj.update(tool_name=tool, tool_input=args or {}, tool_use_id=call_id)
    obj.update(extra)
    return obj


def comparable(path: str) -> list[dict[str, Any]]:
    """A record without what differs between two runs of the same events: times and the chain's digests."""
    with open(path, encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle]
    for line in lines:
        line.pop("prev")
        line.pop("digest")
        line["meta"].pop("ts")
        line["meta"].pop("duration_ms", None)
    return lines


class ServeTestCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.directory = tempfile.mkdtemp()
        cls.project = os.path.join(cls.directory, "my-project")
        os.makedirs(os.path.join(cls.project, "src"))
        cls.policy = os.path.join(cls.directory, "policy.json")
        with open(cls.policy, "w", encoding="utf-8") as out:
            json.dump(POLICY, out)
        cls.records = cls.folder("records")
        cls.server = cls.serve(cls.records)
        assert cls.server.stdout is not None
        line = cls.server.stdout.readline().decode()
        prefix = "listening on http://127.0.0.1:"
        assert line.startswith(prefix), line
        cls.port = int(line[len(prefix):].split("/", 1)[0])
        with open(os.path.join(cls.records, TOKEN_NAME), encoding="ascii") as handle:
            cls.token = handle.read().strip()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.terminate()
        out, err = cls.server.communicate(timeout=PATIENCE)
        shutil.rmtree(cls.directory, True)
        if (cls.server.returncode, out, err) != (0, b"", b""):  # SIGTERM: it stops cleanly, saying nothing
            raise AssertionError(f"hook serve ended with {cls.server.returncode}: {out!r} {err!r}")

    @classmethod
    def folder(cls, name: str) -> str:
        path = os.path.join(cls.directory, name)
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)
        return path

    @classmethod
    def serve(cls, records: str, *more: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "toolreplay", "hook", "serve", "--policy", cls.policy,
                                 "--records", records, "--port", "0", *more], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))

    def setUp(self) -> None:
        for name in os.listdir(self.records):  # each test its own session record
            if name.startswith(SESSION):
                os.unlink(os.path.join(self.records, name))

    def post(self, body: bytes | dict[str, Any], token: str | None = "", path: str = "/hook/claude-code",
             headers: dict[str, str] | None = None) -> tuple[int, str]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=PATIENCE)
        try:
            sent = {"Content-Type": "application/json"}
            if token is not None:
                sent["Authorization"] = f"Bearer {token or self.token}"
            sent.update(headers or {})
            connection.request("POST", path, data, sent)
            response = connection.getresponse()
            return response.status, response.read().decode()
        finally:
            connection.close()

    def command_hook(self, records: str, event: dict[str, Any]) -> tuple[int, str, str]:
        return run("hook", "claude-code", "--policy", self.policy, "--records", records,
                   stdin=json.dumps(event).encode())


@integration
class SameAsTheCommandHookTest(ServeTestCase):
    def test_decisions_and_record_equal_the_command_hooks(self) -> None:
        src, readme = os.path.join(self.project, "src/app.py"), os.path.join(self.project, "README.md")
        events = [
            (payload(self.project, "PreToolUse", "Bash", {"command": "npm test"}, "toolu_01"), ALLOW),
            (payload(self.project, "PostToolUse", "Bash", {"command": "npm test"}, "toolu_01",
                     tool_response={"stdout": "ok\n"}), ""),
            (payload(self.project, "PreToolUse", "Bash", {"command": "rm -rf build"}, "toolu_02"),
             decision("deny", "toolreplay: denied by rule no-rm: no rm -rf")),
            (payload(self.project, "PreToolUse", "Bash", {"command": "git push"}, "toolu_03"), ASK),
            (payload(self.project, "PostToolUseFailure", "Bash", {"command": "git push"}, "toolu_03",
                     error="rejected", is_interrupt=False), ""),
            (payload(self.project, "PreToolUse", "Edit", {"file_path": readme}, "toolu_04"),
             decision("deny", "toolreplay: denied by rule src-only: edit only src/")),
            (payload(self.project, "PreToolUse", "Edit", {"file_path": src}, "toolu_05"), ALLOW),
            (payload(self.project, "PostToolUse", "Edit", {"file_path": src}, "toolu_05",
                     tool_response={"filePath": src, "success": True}), ""),
            (payload(self.project, "SessionEnd", reason="exit"), ""),
        ]
        command_records = self.folder("command-records")
        for event, expected in events:
            with self.subTest(event=event["hook_event_name"], id=event.get("tool_use_id")):
                self.assertEqual(self.post(event), (200, expected))
                self.assertEqual(self.command_hook(command_records, event), (0, expected, ""))
        self.assertEqual(comparable(os.path.join(self.records, SESSION + ".jsonl")),
                         comparable(os.path.join(command_records, SESSION + ".jsonl")))
        self.assertEqual(run("verify", os.path.join(self.records, SESSION + ".jsonl")), (0, "chain: intact\n", ""))

    def test_one_connection_carries_a_sessions_events(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=PATIENCE)
        self.addCleanup(connection.close)
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        for number in range(3):
            args = {"command": f"echo {number}"}
            for event, expected in (("PreToolUse", ALLOW), ("PostToolUse", "")):
                connection.request("POST", "/hook/claude-code", json.dumps(
                    payload(self.project, event, "Bash", args, f"toolu_{number}", tool_response={})), headers)
                response = connection.getresponse()
                self.assertEqual((response.status, response.read().decode()), (200, expected))
        self.assertEqual(len(comparable(os.path.join(self.records, SESSION + ".jsonl"))), 3)

    def test_what_the_server_keeps_follows_an_edited_policy_and_a_command_hook_beside_it(self) -> None:
        """The server keeps the policy and the session's record between events: a policy edited between two
        events decides the second, and a command hook's event in the same session is in the record it reads."""
        record = os.path.join(self.records, SESSION + ".jsonl")
        with open(self.policy, encoding="utf-8") as handle:
            original = handle.read()
        self.addCleanup(self.write, self.policy, original)
        ls = {"command": "ls"}
        self.assertEqual(self.post(payload(self.project, "PreToolUse", "Bash", ls, "toolu_k1")), (200, ALLOW))
        self.assertEqual(self.command_hook(self.records, payload(self.project, "PostToolUse", "Bash", ls, "toolu_k1",
                                                                 tool_response={"stdout": "a\n"})), (0, "", ""))
        self.write(self.policy, json.dumps(dict(POLICY, allowed_tools=["Read", "Write"], rules=[])))
        self.assertEqual(self.post(payload(self.project, "PreToolUse", "Bash", ls, "toolu_k2")),
                         (200, decision("deny", "toolreplay: tool not allowed: Bash")))
        self.write(self.policy, original)
        self.assertEqual(self.post(payload(self.project, "PreToolUse", "Bash", ls, "toolu_k3")), (200, ALLOW))
        self.assertEqual([(line["meta"]["call_id"], line["meta"]["outcome"]) for line in comparable(record)],
                         [("toolu_k1", "ran"), ("toolu_k2", "refused")])
        self.assertEqual(run("verify", record), (0, "chain: intact\n", ""))

    def test_a_killed_servers_open_intent_is_an_unknown_outcome_for_the_command_hook(self) -> None:
        """The server keeps the session's intent file open between events; killed between a PreToolUse and its
        PostToolUse, it leaves the synced intent in the file, which a command hook then reads."""
        records = self.folder("killed")
        server = self.serve(records)
        self.addCleanup(server.communicate, timeout=PATIENCE)
        self.addCleanup(server.kill)
        assert server.stdout is not None
        port = int(server.stdout.readline().decode().split("127.0.0.1:", 1)[1].split("/", 1)[0])
        with open(os.path.join(records, TOKEN_NAME), encoding="ascii") as handle:
            headers = {"Authorization": f"Bearer {handle.read().strip()}"}
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PATIENCE)
        self.addCleanup(connection.close)
        make, ls = {"command": "make"}, {"command": "ls"}
        for event, expected in ((payload(self.project, "PreToolUse", "Bash", ls, "toolu_1"), ALLOW),
                                (payload(self.project, "PostToolUse", "Bash", ls, "toolu_1", tool_response={}), ""),
                                (payload(self.project, "PreToolUse", "Bash", make, "toolu_2"), ALLOW)):
            connection.request("POST", "/hook/claude-code", json.dumps(event), headers)
            response = connection.getresponse()
            self.assertEqual((response.status, response.read().decode()), (200, expected))
        server.kill()
        server.wait(PATIENCE)
        intents = os.path.join(records, SESSION + ".jsonl.intents")
        self.assertEqual([(intent.args, intent.done) for intent in read_intents(intents)],
                         [(ls, 0), (make, None)])  # a settled line stays in the kept file
        code, out, err = self.command_hook(records, payload(self.project, "PreToolUse", "Bash", make, "toolu_3"))
        self.assertEqual((code, err), (0, ""))
        self.assertIn("outcome unknown", json.loads(out)["hookSpecificOutput"]["permissionDecisionReason"])
        self.assertEqual(self.command_hook(records, payload(self.project, "PostToolUse", "Bash", make, "toolu_2",
                                                            tool_response={"stdout": "built"})), (0, "", ""))
        self.assertFalse(os.path.exists(intents))
        self.assertEqual([line["meta"]["outcome"] for line in comparable(os.path.join(records, SESSION + ".jsonl"))],
                         ["ran", "refused", "ran"])

    @staticmethod
    def write(path: str, text: str) -> None:
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)


@integration
class RefusedTest(ServeTestCase):
    def assert_nothing_recorded(self) -> None:
        # the session's lock may be taken (as by a command hook); no record, no pending call
        self.assertEqual([name for name in os.listdir(self.records) if name.startswith(SESSION)
                          and not name.endswith(".lock")], [])

    def test_a_wrong_or_missing_token_is_401_and_nothing_is_recorded(self) -> None:
        event = payload(self.project, "PreToolUse", "Bash", {"command": "ls"}, "toolu_t")
        line = "error: toolreplay hook: a wrong or missing bearer token; nothing recorded\n"
        for token in (None, "x" * 43, self.token + "x"):
            with self.subTest(token=token):
                self.assertEqual(self.post(event, token), (401, line))
        self.assertEqual(self.post(event, None, headers={"Authorization": self.token}), (401, line))  # no "Bearer"
        self.assert_nothing_recorded()

    def test_bad_input_is_blocked_with_one_line(self) -> None:
        handled = "(handled: PreToolUse, PostToolUse, PostToolUseFailure, SessionEnd)"
        for body, expected in (
                (b"not json", (400, "error: toolreplay hook: hook input is not a JSON object (invalid JSON)\n")),
                (b"", (400, "error: toolreplay hook: hook input is not a JSON object (invalid JSON)\n")),
                (payload(self.project, "Notification"),
                 (400, f'error: toolreplay hook: unknown hook event "Notification" {handled}\n')),
                (payload(self.project, "PreToolUse", "Bash", {"command": "ls"}),  # no tool_use_id
                 (200, decision("deny", "toolreplay: PreToolUse input has no tool_use_id"))),
                (payload(self.project, "PostToolUse", "Bash", {"command": "ls"}, "toolu_none", tool_response={}),
                 (200, json.dumps({"decision": "block", "reason": 'toolreplay: PostToolUse for tool_use_id '
                                   '"toolu_none" without a PreToolUse that allowed it'}, sort_keys=True) + "\n"))):
            with self.subTest(body=body):
                self.assertEqual(self.post(body), expected)
        self.assert_nothing_recorded()

    def test_a_huge_body_is_refused_unread(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=PATIENCE)
        self.addCleanup(connection.close)
        connection.putrequest("POST", "/hook/claude-code")
        connection.putheader("Authorization", f"Bearer {self.token}")
        connection.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
        connection.endheaders(b"{")
        response = connection.getresponse()
        self.assertEqual((response.status, response.read().decode()),
                         (413, f"error: toolreplay hook: the event is larger than {MAX_BODY_BYTES:,} bytes; "
                               "the call is blocked\n"))
        self.assert_nothing_recorded()

    def test_other_paths_and_methods(self) -> None:
        self.assertEqual(self.post(b"{}", path="/hook/other"),
                         (404, "error: toolreplay hook: no such hook endpoint (POST /hook/AGENT)\n"))
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=PATIENCE)
        self.addCleanup(connection.close)
        connection.request("GET", "/hook/claude-code")
        response = connection.getresponse()
        self.assertEqual((response.status, response.read().decode()), (405, "error: toolreplay hook: POST the event\n"))

    def raw(self, data: bytes) -> bytes:
        """What the server sends back for these bytes, up to its closing the connection."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=PATIENCE) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)  # all it sends: a request cut short ends there
            answer = b""
            while part := sock.recv(65536):
                answer += part
        return answer

    def test_a_malformed_head_is_400_or_431_and_the_connection_closed(self) -> None:
        auth = f"Authorization: Bearer {self.token}\r\n".encode()
        event = json.dumps(payload(self.project, "PreToolUse", "Bash", {"command": "ls"}, "toolu_w")).encode()

        def answer(status: str, line: str) -> bytes:
            body = f"error: toolreplay hook: {line}\n".encode()
            return (f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}"
                    "\r\nConnection: close\r\n\r\n").encode() + body

        for data, expected in (
                (b"GARBAGE\r\n\r\n", answer("400 Bad Request", "a malformed request line")),
                (b"POST /hook/claude-code HTTP/2.0\r\n\r\n", answer("400 Bad Request", "a malformed request line")),
                (b"POST /hook/claude-code HTTP/1.1\r\nNo colon here\r\n\r\n",
                 answer("400 Bad Request", "a malformed header line")),
                (b"POST /hook/claude-code HTTP/1.1\r\nX-A: 1\r\n folded\r\n\r\n",
                 answer("400 Bad Request", "a malformed header line")),
                (b"POST /hook/claude-code HTTP/1.1\r\nX-A: " + b"a" * 70000 + b"\r\n\r\n",
                 answer("431 Request Header Fields Too Large", "the request head exceeds 65536 bytes")),
                (b"POST /hook/claude-code HTTP/1.1\r\n" + auth + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                 answer("411 Length Required", "the request has no Content-Length")),
                (b"POST /hook/claude-code HTTP/1.1\r\n" + auth + b"Content-Length: -1\r\n\r\n",
                 answer("411 Length Required", "the request has no Content-Length")),
                (b"POST /hook/claude-code HTTP/1.1\r\n" + auth + b"Content-Length: 1, 2\r\n\r\n",
                 answer("411 Length Required", "the request has no Content-Length")),
                (b"POST /hook/claude-code HTTP/1.1\r\n" + auth + b"Content-Length: \xb2\r\n\r\n",  # latin-1 '2'
                 answer("411 Length Required", "the request has no Content-Length")),
                (b"POST /hook/claude-code HTTP/1.1\r\n" + auth + b"Content-Length: " + b"9" * 5000 + b"\r\n\r\n",
                 answer("413 Content Too Large", f"the event is larger than {MAX_BODY_BYTES:,} bytes; the call is "
                                                 "blocked")),
                (b"POST /hook/claude-code HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
                 answer("401 Unauthorized", "a wrong or missing bearer token; nothing recorded").replace(
                     b"Connection", b"WWW-Authenticate: Bearer\r\nConnection")),
                (b"POST /hook/other HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",  # a body not read: closed
                 answer("404 Not Found", "no such hook endpoint (POST /hook/AGENT)")),
                (b"POST /hook/claude-code HTTP/1.1\r\n" + auth + b"Content-Length: 100\r\n\r\n{",  # cut short
                 b"")):
            with self.subTest(data=data[:60]):
                self.assertEqual(self.raw(data), expected)
        self.assertEqual(self.raw(b"POST /hook/claude-code HTTP/1.1\r\nConnection: close\r\n" + auth
                                  + f"Content-Length: {len(event)}\r\n\r\n".encode() + event),
                         b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {len(ALLOW)}\r\nConnection: close\r\n\r\n{ALLOW}".encode())
        self.assertEqual(len(comparable(os.path.join(self.records, SESSION + ".jsonl"))), 0)  # held back: allowed

    def test_keep_alive_pipelined_requests_http_1_0_and_expect(self) -> None:
        auth = f"Authorization: Bearer {self.token}\r\n".encode()
        events = [json.dumps(payload(self.project, event, "Bash", {"command": "ls"}, "toolu_k", tool_response={}))
                  .encode() for event in ("PreToolUse", "PostToolUse")]
        two = b"".join(b"POST /hook/claude-code HTTP/1.1\r\n" + auth + f"Content-Length: {len(body)}\r\n\r\n"
                       .encode() + body for body in events)
        # both answered on one connection, in order; the server closes it on the third request's Connection: close
        answer = self.raw(two + b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
        self.assertEqual(answer.count(b"HTTP/1.1 "), 3)
        self.assertIn(ALLOW.encode(), answer.split(b"HTTP/1.1 ")[1])
        self.assertTrue(answer.split(b"HTTP/1.1 ")[2].startswith(b"200 OK\r\nContent-Type: text/plain; charset=utf-8"
                                                                 b"\r\nContent-Length: 0\r\n\r\n"))
        self.assertTrue(answer.split(b"HTTP/1.1 ")[3].startswith(b"405 Method Not Allowed\r\n"))
        self.assertTrue(answer.endswith(b"Connection: close\r\n\r\nerror: toolreplay hook: POST the event\n"))
        # HTTP/1.0 closes after its answer; Expect: 100-continue gets its 100 first
        answer = self.raw(b"POST /hook/claude-code HTTP/1.0\r\nExpect: 100-continue\r\n" + auth
                          + f"Content-Length: {len(events[0])}\r\n\r\n".encode() + events[0].replace(b"toolu_k",
                                                                                                    b"toolu_j"))
        self.assertTrue(answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"), answer[:80])
        self.assertTrue(answer.endswith(b"Connection: close\r\n\r\n" + ALLOW.encode()), answer[-80:])

    def test_a_policy_that_does_not_load_denies(self) -> None:
        os.rename(self.policy, self.policy + ".moved")
        self.addCleanup(os.rename, self.policy + ".moved", self.policy)
        status, body = self.post(payload(self.project, "PreToolUse", "Bash", {"command": "ls"}, "toolu_p"))
        self.assertEqual(status, 200)
        code, _, err = self.command_hook(self.records, payload(self.project, "PreToolUse", "Bash", {"command": "ls"},
                                                               "toolu_p"))
        self.assertEqual((code, err[:46]), (2, "error: toolreplay hook: policy does not load: "))
        self.assertEqual(body, decision("deny", "toolreplay: " + err.strip()[len("error: toolreplay hook: "):]))
        self.assert_nothing_recorded()

    def test_one_server_per_records_folder(self) -> None:
        second = self.serve(self.records)
        out, err = second.communicate(timeout=PATIENCE)
        self.assertEqual((second.returncode, out, err.decode()),
                         (2, b"", f"error: toolreplay hook serve: another hook server serves {self.records}\n"))


def _blocked_on(pid: int, descriptor: int) -> bool:
    """Whether process `pid` waits for the flock on the file open as `descriptor` (Linux's /proc/locks lists a
    waiter as `N: -> FLOCK ... PID MAJOR:MINOR:INODE ...`)."""
    inode = f":{os.fstat(descriptor).st_ino} "
    with open("/proc/locks", encoding="ascii") as locks:
        return any(" -> " in line and f" {pid} " in line and inode in line for line in locks)


@integration
class StopTest(ServeTestCase):
    def test_a_sigterm_lets_the_event_in_hand_finish(self) -> None:
        answers: list[tuple[int, str]] = []
        event = payload(self.project, "PreToolUse", "Bash", {"command": "ls"}, "toolu_s")
        with open(os.path.join(self.records, SESSION + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the server takes the event, then waits for the session's lock
            poster = threading.Thread(target=lambda: answers.append(self.post(event)))
            poster.start()
            if os.path.exists("/proc/locks"):
                wait_for(lambda: _blocked_on(self.server.pid, lock.fileno()), "the server to wait for the lock")
            else:
                time.sleep(0.5)
            self.server.terminate()
            self.assertRaises(subprocess.TimeoutExpired, self.server.wait, 0.5)  # it waits for the event
        poster.join(PATIENCE)
        self.assertEqual(answers, [(200, ALLOW)])
        self.assertEqual(self.server.wait(PATIENCE), 0)
        with open(os.path.join(self.records, SESSION + ".pending"), encoding="utf-8") as handle:
            self.assertEqual(list(json.load(handle)), ["toolu_s"])


class ServeRefusesTest(unittest.TestCase):
    def test_no_non_loopback_address_without_the_flag(self) -> None:
        for host in ("0.0.0.0", "192.168.1.10", "example.com"):
            with self.subTest(host=host):
                self.assertEqual(run("hook", "serve", "--policy", "p", "--records", "r", "--host", host),
                                 (2, "", f"error: hook serve: --host {host} is not a loopback address: the hook "
                                         "endpoint would be reachable from other machines (say --allow-remote if "
                                         "that is meant)\n"))

    def test_a_policy_that_does_not_load_is_said_at_start(self) -> None:
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory, True)
        policy = os.path.join(directory, "policy.json")
        with open(policy, "w", encoding="utf-8") as out:
            json.dump({"allowed_tools": ["Bash"]}, out)
        self.assertEqual(run("hook", "serve", "--policy", policy, "--records", directory, "--port", "0"),
                         (2, "", f'error: toolreplay hook serve: policy does not load: {policy}: missing field '
                                 '"agent"\n'))

    def test_no_server_in_a_folder_others_can_write(self) -> None:
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory, True)
        os.chmod(directory, 0o777)
        policy = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)  # noqa: SIM115 - removed below
        self.addCleanup(os.unlink, policy.name)
        with policy:
            json.dump(POLICY, policy)
        self.assertEqual(run("hook", "serve", "--policy", policy.name, "--records", directory, "--port", "0"),
                         (2, "", f"error: toolreplay hook serve: records folder {directory} is not private (it must "
                                 "be yours, and neither its group nor others may write it): no hook server there\n"))
        self.assertEqual(os.listdir(directory), [])

    def test_print_settings_and_install_with_http(self) -> None:
        hook = {"type": "http", "url": "http://127.0.0.1:47213/hook/claude-code",
                "headers": {"Authorization": "Bearer ${TOOLREPLAY_HOOK_TOKEN}"},
                "allowedEnvVars": ["TOOLREPLAY_HOOK_TOKEN"], "onFailure": "block"}
        code, out, err = run("hook", "claude-code", "--policy", "p", "--records", "r", "--print-settings", "--http")
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(json.loads(out), {"hooks": {event: [{"matcher": "*", "hooks": [hook]}] for event in
                                                     ("PreToolUse", "PostToolUse", "PostToolUseFailure", "SessionEnd")}})
        code, out, _ = run("hook", "claude-code", "--policy", "p", "--records", "r", "--print-settings", "--http",
                           "--port", "9000")
        self.assertEqual(json.loads(out)["hooks"]["SessionEnd"][0]["hooks"][0]["url"],
                         "http://127.0.0.1:9000/hook/claude-code")
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory, True)
        settings = os.path.join(directory, "settings.json")
        arguments = ("hook", "claude-code", "--policy", "p", "--records", "r", "--install", settings, "--http")
        self.assertEqual(run(*arguments), (0, f"{settings}: added the hook to 4 events (PreToolUse, PostToolUse, "
                                              "PostToolUseFailure, SessionEnd)\n", ""))
        self.assertEqual(run(*arguments), (0, f"{settings}: the hook is already there for every event\n", ""))
        self.assertEqual(run("hook", "claude-code", "--policy", "p", "--records", "r", "--http"),
                         (2, "", "error: hook claude-code: --http and --port go with --print-settings or --install\n"))


if __name__ == "__main__":
    unittest.main()
