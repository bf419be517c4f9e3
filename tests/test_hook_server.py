"""The hook server and its fast client: what `hook claude-code --print-settings` registers.

The client (toolreplay/hooks/client.py, run by `python -S`) hands each event to the records folder's
server, or handles it itself when no server took it; the answers are the command line's own. The fake
servers here are sockets that misbehave on purpose: one that takes the event and ends before answering
(the call must be blocked, never handled twice), one that closes without taking it (the client decides).
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import unittest
from typing import Any

from tests.support import PATIENCE, integration, wait_for
from tests.test_cli import run
from tests.test_hook_claude_code import ALLOW, ASK, ROOT, HookTestCase, decision
from toolreplay.hooks import client as hook_client
from toolreplay.hooks import protocol
from toolreplay.hooks import server as hook_server

SERVER_FILES = [".toolreplay-hook.lock", ".toolreplay-hook.sock"]


class ClientPartsTest(unittest.TestCase):
    def test_plain_options(self) -> None:
        self.assertEqual(hook_client.plain_options(["claude-code", "--policy", "p.json", "--records", "r"]),
                         {"--policy": "p.json", "--records": "r"})
        for arguments in (["claude-code", "--policy", "p"], ["claude-code", "--policy", "p", "--records", "-r"],
                          ["claude-code", "--policy", "p", "--records", "r", "--policy", "q"],
                          ["claude-code", "--policy", "p", "--records", "r", "--print-settings"],
                          ["gemini", "--policy", "p", "--records", "r"], []):
            with self.subTest(arguments=arguments):
                self.assertIsNone(hook_client.plain_options(arguments))

    def test_socket_path(self) -> None:
        self.assertEqual(hook_client.socket_path("/r/records/", "/home/me"), "/r/records/.toolreplay-hook.sock")
        self.assertEqual(hook_client.socket_path("records", "/home/me/"), "/home/me/records/.toolreplay-hook.sock")

    def test_identity_is_the_version_and_the_installed_package(self) -> None:
        from toolreplay import __version__

        self.assertEqual(hook_client.identity(), f"{__version__} {ROOT}".encode())


needs_root = unittest.skipUnless(os.geteuid() == 0, "needs root: gives a file or a process to another user")
NOBODY = 65534  # another user's uid (root gives a socket or a process to it)


class TrustTest(unittest.TestCase):
    """Which folders and sockets the client trusts with an event (toolreplay/hooks/protocol.py)."""

    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory)

    def folder(self, mode: int) -> str:
        path = tempfile.mkdtemp(dir=self.directory)
        os.chmod(path, mode)
        return path

    def test_a_private_folder_is_the_users_and_no_one_else_can_write_it(self) -> None:
        for mode, private in ((0o700, True), (0o755, True), (0o775, False), (0o757, False), (0o777, False),
                              (0o1777, False), (0o1755, True)):
            with self.subTest(mode=oct(mode)):
                self.assertIs(protocol.is_private_folder(self.folder(mode)), private)
        afile = os.path.join(self.directory, "file")
        open(afile, "w").close()
        self.assertFalse(protocol.is_private_folder(afile))
        self.assertFalse(protocol.is_private_folder(os.path.join(self.directory, "missing")))

    @needs_root
    def test_a_folder_of_another_user_is_not_private(self) -> None:
        folder = self.folder(0o755)
        os.chown(folder, NOBODY, NOBODY)
        self.assertFalse(protocol.is_private_folder(folder))

    def test_own_socket(self) -> None:
        path = os.path.join(self.directory, protocol.SOCKET_NAME)
        self.assertIsNone(protocol.is_own_socket(path))
        open(path, "w").close()
        self.assertFalse(protocol.is_own_socket(path))  # a file is no socket
        os.unlink(path)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(path)
            self.assertTrue(protocol.is_own_socket(path))
            if os.geteuid() == 0:
                os.chown(path, NOBODY, NOBODY)
                self.assertFalse(protocol.is_own_socket(path))
        link = os.path.join(self.directory, "link.sock")
        os.symlink(path, link)
        self.assertFalse(protocol.is_own_socket(link))  # a link is not followed


class HookServerTestCase(HookTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.socket = os.path.join(self.records, hook_client.SOCKET_NAME)
        os.chmod(self.records, 0o700)  # a private folder whatever the umask: the server serves only there
        self.addCleanup(self.stop_server)

    def stop_server(self) -> None:
        if os.path.lexists(self.socket):
            os.unlink(self.socket)  # a server sees its socket gone and ends within a quarter of a second

    def fast_command(self) -> list[str]:
        code, out, _ = run("hook", "claude-code", "--policy", self.policy, "--records", self.records,
                           "--print-settings")
        self.assertEqual(code, 0)
        return shlex.split(json.loads(out)["hooks"]["PreToolUse"][0]["hooks"][0]["command"])

    def fast(self, payload: dict[str, Any] | bytes, command: list[str] | None = None) -> tuple[int, str, str]:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        done = subprocess.run(command or self.fast_command(), input=data, capture_output=True, cwd=self.project,
                              timeout=PATIENCE, check=False)
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    def start_server(self) -> threading.Thread:
        thread = threading.Thread(target=hook_server.serve, args=(self.records, 600.0), daemon=True)
        thread.start()
        wait_for(lambda: os.path.exists(self.socket), "the hook server's socket")
        self.addCleanup(thread.join, PATIENCE)
        self.addCleanup(self.stop_server)  # first: the server ends, then it is joined
        return thread


class ServerInThreadTest(HookServerTestCase):
    """The server in a thread of the test, answering the protocol directly."""

    def request(self, arguments: list[str], data: bytes, identity: bytes | None = None) -> bytes:
        fields = [hook_client.PROTOCOL, identity or hook_client.identity(), self.project.encode(),
                  str(len(arguments)).encode(), *(argument.encode() for argument in arguments)]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(self.socket)
            connection.sendall(b"\0".join(fields) + b"\0" + data)
            connection.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := connection.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)

    def test_the_server_answers_as_the_command_line_does(self) -> None:
        self.start_server()
        arguments = ["claude-code", "--policy", self.policy, "--records", self.records]
        payload = json.dumps(self.payload("PreToolUse", "Bash", {"command": "ls"}, "toolu_1")).encode()
        self.assertEqual(self.request(arguments, payload), b"A0\0" + str(len(ALLOW)).encode() + b"\0" + ALLOW.encode())
        error = b"error: toolreplay hook: hook input is not a JSON object (invalid JSON)\n"
        self.assertEqual(self.request(arguments, b"{"), b"A2\x000\0" + error)
        post = self.payload("PostToolUse", "Bash", {"command": "ls"}, "toolu_1", tool_response={"stdout": "a\n"})
        self.assertEqual(self.request(arguments, json.dumps(post).encode()), b"A0\x000\0")
        self.assertEqual(run("verify", self.record), (0, "chain: intact\n", ""))
        self.assertEqual([line["response"] for line in self.lines()], [{"stdout": "a\n"}])
        self.assertEqual(os.stat(self.socket).st_mode & 0o777, 0o600)

    def test_another_version_is_told_v_and_the_server_ends(self) -> None:
        thread = self.start_server()
        self.assertEqual(self.request(["claude-code"], b"{}", identity=b"0.0.1 /elsewhere"), b"V")
        thread.join(PATIENCE)
        self.assertFalse(thread.is_alive())
        self.assertFalse(os.path.exists(self.socket))

    def test_a_malformed_request_is_closed_without_an_answer(self) -> None:
        self.start_server()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(self.socket)
            connection.sendall(b"GET / HTTP/1.1\r\n\r\n")
            connection.shutdown(socket.SHUT_WR)
            self.assertEqual(connection.recv(10), b"")
        self.assertEqual(sorted(os.listdir(self.records)), SERVER_FILES)
        self.assertFalse(os.path.exists(self.record))

    def test_the_socket_appears_once_it_listens_and_a_half_made_one_is_replaced(self) -> None:
        with open(os.path.join(self.records, ".toolreplay-hook.new"), "w"):
            pass  # as a server that ended between bind and rename leaves it
        self.start_server()  # connects as soon as the socket exists: it must be listening by then
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(self.socket)
        self.assertEqual(sorted(os.listdir(self.records)), SERVER_FILES)

    def serve_into(self, done: list[int]) -> None:
        done.append(hook_server.serve(self.records, 0.1))

    def test_no_server_in_a_folder_others_can_write(self) -> None:
        for mode in (0o777, 0o1777, 0o770):
            with self.subTest(mode=oct(mode)):
                os.chmod(self.records, mode)
                done: list[int] = []
                thread = threading.Thread(target=self.serve_into, args=(done,), daemon=True)
                thread.start()
                thread.join(PATIENCE)
                self.assertEqual(done, [1])
                self.assertEqual(os.listdir(self.records), [])  # neither socket nor lock

    def test_one_server_per_folder_and_it_ends_when_idle_or_its_socket_goes(self) -> None:
        thread = self.start_server()
        self.assertEqual(hook_server.serve(self.records), 0)  # a second one: the folder has its server
        os.unlink(self.socket)
        thread.join(PATIENCE)
        self.assertFalse(thread.is_alive())
        idle = threading.Thread(target=hook_server.serve, args=(self.records, 0.1), daemon=True)
        idle.start()
        idle.join(PATIENCE)
        self.assertFalse(idle.is_alive())
        self.assertEqual(sorted(os.listdir(self.records)), SERVER_FILES[:1])


@integration  # processes: the fast client, Python without site, and the server it starts
class FastHookTest(HookServerTestCase):
    def test_print_settings_registers_the_fast_client(self) -> None:
        client = os.path.join(ROOT, "toolreplay", "hooks", "client.py")
        self.assertEqual(self.fast_command(), [sys.executable, "-S", client, "claude-code", "--policy", self.policy,
                                               "--records", self.records])

    def test_the_command_registered_before_the_hooks_moved_still_answers(self) -> None:
        # Settings files written by 0.6 name toolreplay/cli/hook_client.py: it runs the same client.
        old = [sys.executable, "-S", os.path.join(ROOT, "toolreplay", "cli", "hook_client.py"),
               *self.fast_command()[3:]]
        denied = decision("deny", "toolreplay: denied by rule no-rm: no rm -rf")
        self.assertEqual(self.fast(self.payload("PreToolUse", "Bash", {"command": "rm -rf /"}, "toolu_0"), old),
                         (0, denied, ""))
        wait_for(lambda: os.path.exists(self.socket), "the hook server's socket")
        self.assertEqual(self.fast(self.payload("PreToolUse", "Bash", {"command": "ls"}, "toolu_1"), old), (0, ALLOW, ""))

    def test_the_first_event_starts_the_server_and_every_answer_is_the_command_lines(self) -> None:
        cases = [("Bash", {"command": "ls"}, ALLOW),
                 ("Bash", {"command": "rm -rf /"}, decision("deny", "toolreplay: denied by rule no-rm: no rm -rf")),
                 ("Bash", {"command": "git push"}, ASK),
                 ("Grep", {"pattern": "x"}, decision("deny", "toolreplay: tool not allowed: Grep"))]
        self.assertEqual(self.fast(self.payload("PreToolUse", "Bash", {"command": "pwd"}, "toolu_0")), (0, ALLOW, ""))
        wait_for(lambda: os.path.exists(self.socket), "the server the first event started")
        for number, (tool, args, expected) in enumerate(cases, 1):
            with self.subTest(tool=tool, args=args):
                self.assertEqual(self.fast(self.payload("PreToolUse", tool, args, f"toolu_{number}")),
                                 (0, expected, ""))
        self.assertEqual(self.fast(self.payload("PostToolUse", "Bash", {"command": "ls"}, "toolu_1",
                                                tool_response={"stdout": "a\n"})), (0, "", ""))
        self.assertEqual(self.fast(b"{"), (2, "", "error: toolreplay hook: hook input is not a JSON object "
                                                  "(invalid JSON)\n"))
        self.assertTrue(os.path.exists(self.socket))
        self.assertEqual(run("verify", self.record), (0, "chain: intact\n", ""))
        calls = [(line["tool"], line["meta"]["call_id"]) for line in self.lines()]
        self.assertEqual(calls, [("Bash", "toolu_2"), ("Grep", "toolu_4"), ("Bash", "toolu_1")])

    def test_relative_paths_are_the_clients(self) -> None:
        shutil.copy(self.policy, os.path.join(self.project, "policy.json"))
        os.mkdir(os.path.join(self.project, "records"), 0o700)
        command = self.fast_command()
        command[command.index("--policy") + 1] = "policy.json"
        command[command.index("--records") + 1] = "records"
        for number in range(2):  # the first in its own process, the second through the server
            payload = json.dumps(self.payload("PreToolUse", "Bash", {"command": f"echo {number}"}, f"t{number}"))
            done = subprocess.run(command, input=payload.encode(), capture_output=True, cwd=self.project,
                                  timeout=PATIENCE, check=False)
            self.assertEqual((done.returncode, done.stdout.decode(), done.stderr.decode()), (0, ALLOW, ""))
            if number == 0:
                self.socket = os.path.join(self.project, "records", hook_client.SOCKET_NAME)
                wait_for(lambda: os.path.exists(self.socket), "the server")
        with open(os.path.join(self.project, "records", self.session + ".pending"), encoding="utf-8") as handle:
            self.assertEqual(sorted(json.load(handle)), ["t0", "t1"])

    def test_through_the_server_the_client_loads_only_the_protocol(self) -> None:
        # a new process per tool call under `python -S`: beyond the interpreter's own start, the socket's calls
        # and the protocol module (with the packages that hold it), nothing
        def loaded(command: list[str], data: bytes) -> tuple[set[str], bytes]:
            done = subprocess.run([sys.executable, "-S", "-X", "importtime", *command], input=data,
                                  capture_output=True, cwd=self.project, timeout=PATIENCE, check=False)
            names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.decode().splitlines()
                     if line.startswith("import time:") and "|" in line}
            return names, done.stdout

        self.assertEqual(self.fast(self.payload("PreToolUse", "Read", {"file_path": "x"}, "toolu_r")), (0, ALLOW, ""))
        wait_for(lambda: os.path.exists(self.socket), "the server")
        payload = json.dumps(self.payload("PreToolUse", "Bash", {"command": "ls"}, "toolu_1")).encode()
        names, out = loaded(self.fast_command()[2:], payload)
        self.assertEqual(out, ALLOW.encode())
        startup, _ = loaded(["-c", "pass"], b"")
        self.assertEqual(sorted(names - startup),
                         ["_socket", "toolreplay", "toolreplay.hooks", "toolreplay.hooks.protocol"])

    def test_eight_concurrent_hook_processes_through_the_server(self) -> None:
        self.assertEqual(self.fast(self.payload("PreToolUse", "Read", {"file_path": "x"}, "toolu_r")), (0, ALLOW, ""))
        wait_for(lambda: os.path.exists(self.socket), "the server")

        self.assert_eight_concurrent_pairs(self.fast)

    def server_pid(self) -> int:
        """The pid of the process listening on the socket (its peer credentials)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(self.socket)
            pid, _, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                  struct.calcsize("3i")))
        return int(pid)

    def test_a_server_killed_while_it_decides_blocks_the_call_and_the_next_event_starts_another(self) -> None:
        self.assertEqual(self.fast(self.payload("PreToolUse", "Read", {"file_path": "x"}, "toolu_r")), (0, ALLOW, ""))
        wait_for(lambda: os.path.exists(self.socket), "the server")
        pid = self.server_pid()
        payload = json.dumps(self.payload("PreToolUse", "Bash", {"command": "ls"}, "toolu_k")).encode()
        with open(os.path.join(self.records, self.session + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the server takes the event, then waits for the session's lock
            event = os.path.join(self.directory, "event.json")
            with open(event, "wb") as handle:
                handle.write(payload)
            with open(event, "rb") as stdin:
                client = subprocess.Popen(self.fast_command(), stdin=stdin, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, cwd=self.project)
            self.assertRaises(subprocess.TimeoutExpired, client.wait, 1)
            os.kill(pid, signal.SIGKILL)
            out, err = client.communicate(timeout=PATIENCE)
        self.assertEqual((client.returncode, out, err), (2, b"", b"error: toolreplay hook: the hook server ended "
                                                                b"before it answered; the call is blocked\n"))
        with open(os.path.join(self.records, self.session + ".pending"), encoding="utf-8") as handle:
            self.assertEqual(sorted(json.load(handle)), ["toolu_r"])  # the killed event left nothing
        # the socket is left behind, dead: the next event decides itself and starts a new server
        self.assertEqual(self.fast(self.payload("PreToolUse", "Bash", {"command": "ls"}, "toolu_2")), (0, ALLOW, ""))
        wait_for(lambda: self.alive_server(pid), "a new server")

    def alive_server(self, old: int) -> bool:
        try:
            return self.server_pid() != old
        except OSError:
            return False

    def test_a_records_folder_too_deep_for_a_socket_has_no_server(self) -> None:
        deep = os.path.join(self.directory, *["d" * 40] * 3)
        os.makedirs(deep)
        self.records = deep
        self.assertEqual(self.fast(self.payload("PreToolUse", "Bash", {"command": "ls"}, "toolu_1")), (0, ALLOW, ""))
        self.assertEqual(self.fast(self.payload("PostToolUse", "Bash", {"command": "ls"}, "toolu_1",
                                                tool_response={"stdout": "a\n"})), (0, "", ""))
        self.assertEqual(sorted(os.listdir(deep)), [self.session + ".jsonl", self.session + ".lock"])
        self.assertEqual(run("verify", self.record), (0, "chain: intact\n", ""))

    def fake_server(self, answer: bytes | None) -> threading.Thread:
        """A socket that reads the whole request, sends `answer` (None: nothing) and closes."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.socket)
        listener.listen(1)

        def serve_once() -> None:
            with listener:
                connection, _ = listener.accept()
                with connection:
                    while connection.recv(65536):
                        pass
                    if answer is not None:
                        connection.sendall(answer)

        thread = threading.Thread(target=serve_once, daemon=True)
        thread.start()
        self.addCleanup(thread.join, PATIENCE)
        return thread

    def test_a_server_that_took_the_event_and_ended_blocks_the_call(self) -> None:
        self.fake_server(b"A")
        payload = self.payload("PreToolUse", "Bash", {"command": "ls"}, "toolu_1")
        self.assertEqual(self.fast(payload), (2, "", "error: toolreplay hook: the hook server ended before it "
                                                     "answered; the call is blocked\n"))
        self.assertFalse(os.path.exists(self.record))  # never handled twice: the client did not decide it

    def test_a_server_that_did_not_take_the_event_leaves_it_to_the_client(self) -> None:
        for answer in (None, b"V"):
            with self.subTest(answer=answer):
                self.fake_server(answer)
                payload = self.payload("PreToolUse", "Bash", {"command": "rm -rf /"}, f"toolu_{answer!r}")
                self.assertEqual(self.fast(payload), (0, decision("deny", "toolreplay: denied by rule no-rm: no rm -rf"), ""))
                os.unlink(self.socket)
        self.assertEqual([line["meta"]["outcome"] for line in self.lines()], ["refused", "refused"])


ALLOWED = b"A0\0%d\0" % len(ALLOW) + ALLOW.encode()  # a server's answer `allow`
RM_HOME = {"command": "rm -rf ~"}


class AllowingServer:
    """Another user's server, as far as a client can tell: a socket in the records folder that answers `allow`
    to every event. `requests` counts the connections that sent something."""

    def __init__(self, path: str) -> None:
        self.requests = 0
        self.connections = 0
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(8)
        self._listener.settimeout(0.05)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with self._listener:
            while not self._stop.is_set():
                try:
                    connection, _ = self._listener.accept()
                except TimeoutError:
                    continue
                with connection:
                    self.connections += 1
                    connection.settimeout(PATIENCE)
                    received = b""
                    while chunk := connection.recv(65536):
                        received += chunk
                    if received:
                        self.requests += 1
                    try:
                        connection.sendall(ALLOWED)
                    except OSError:
                        pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(PATIENCE)


# Another user's server behind a socket of ours: bound by root, then listening as NOBODY (the peer credentials
# a client reads are the listener's at listen()). It prints how many bytes the one connection sent.
PEER_OF_ANOTHER_USER = f"""
import os, socket, sys
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
os.setgid({NOBODY})
os.setuid({NOBODY})
listener.listen(1)
listener.settimeout({PATIENCE})
print("ready", flush=True)
connection, _ = listener.accept()
connection.settimeout({PATIENCE})
received = b""
while chunk := connection.recv(65536):
    received += chunk
try:
    connection.sendall({ALLOWED!r})
except OSError:
    pass
print(len(received), flush=True)
"""


@integration  # processes: the fast client as the agent runs it
class UntrustedSocketTest(HookServerTestCase):
    """A socket the user does not own, or in a folder others can write, never answers for the user: the client
    decides the event itself (with a policy that allows only Read, `Bash rm -rf ~` is denied and recorded)."""

    def setUp(self) -> None:
        super().setUp()
        self.policy = self.write_policy({"agent": "claude-code", "allowed_tools": ["Read"]}, "read-only.json")

    def assert_decided_here(self, call_id: str) -> None:
        self.assertEqual(self.fast(self.payload("PreToolUse", "Bash", RM_HOME, call_id)),
                         (0, decision("deny", "toolreplay: tool not allowed: Bash"), ""))
        self.assertEqual([(line["tool"], line["args"], line["meta"]["outcome"], line["meta"]["call_id"])
                          for line in self.lines()][-1], ("Bash", RM_HOME, "refused", call_id))

    def test_a_socket_in_a_folder_others_can_write_is_not_used(self) -> None:
        for number, mode in enumerate((0o777, 0o1777, 0o775)):
            with self.subTest(mode=oct(mode)):
                os.chmod(self.records, mode)
                fake = AllowingServer(self.socket)
                self.addCleanup(fake.close)
                self.assert_decided_here(f"toolu_{number}")
                fake.close()
                self.assertEqual(fake.connections, 0)
                os.unlink(self.socket)
                self.assertNotIn(".toolreplay-hook.lock", os.listdir(self.records))  # and no server started there

    @needs_root
    def test_a_socket_of_another_user_is_not_used(self) -> None:
        fake = AllowingServer(self.socket)
        self.addCleanup(fake.close)
        os.chown(self.socket, NOBODY, NOBODY)
        self.assert_decided_here("toolu_1")
        fake.close()
        self.assertEqual(fake.connections, 0)

    @needs_root
    def test_a_server_running_as_another_user_is_not_sent_the_event(self) -> None:
        fake = subprocess.Popen([sys.executable, "-c", PEER_OF_ANOTHER_USER, self.socket], stdout=subprocess.PIPE)
        self.addCleanup(fake.kill)
        self.addCleanup(fake.wait)
        assert fake.stdout is not None
        self.assertEqual(fake.stdout.readline(), b"ready\n")
        self.assertTrue(protocol.is_own_socket(self.socket))  # the socket is ours: only its peer tells
        self.assert_decided_here("toolu_1")
        out, _ = fake.communicate(timeout=PATIENCE)
        self.assertEqual(out, b"0\n")  # it was sent nothing


@integration  # processes: the fast client hands anything but its plain options to the full command line
class HandOverTest(HookServerTestCase):
    def test_help_settings_and_typos_are_answered_as_by_the_command_line(self) -> None:
        client = os.path.join(ROOT, "toolreplay", "hooks", "client.py")
        cases = [["claude-code", "--policy", "p.json", "--records", "r", "--print-settings"],
                 ["gemini-cli", "--policy", "p.json", "--records", "r", "--print-settings", "--redact-key", "k"],
                 ["claude-code", "--help"], ["claude-code", "--polcy", "p.json", "--records", "r"],
                 ["codex", "--policy", "p.json"], []]
        env = dict(os.environ, PYTHONPATH=ROOT, COLUMNS="100")
        for arguments in cases:
            with self.subTest(arguments=arguments):
                expected = subprocess.run([sys.executable, "-m", "toolreplay", "hook", *arguments], input=b"{}",
                                          capture_output=True, cwd=self.project, env=env, timeout=PATIENCE, check=False)
                got = subprocess.run([sys.executable, "-S", client, *arguments], input=b"{}", capture_output=True,
                                     cwd=self.project, env=env, timeout=PATIENCE, check=False)
                self.assertEqual((got.returncode, got.stdout, got.stderr),
                                 (expected.returncode, expected.stdout, expected.stderr))
                self.assertIn(expected.returncode, (0, 2))
                self.assertTrue(expected.stdout or expected.stderr)


if __name__ == "__main__":
    unittest.main()
