"""`toolreplay hook codex`: Codex CLI's hook events through the real command, a new process per event.

Provenance of the payloads: Codex's own source, openai/codex (the versions stored by the search index):

- codex-rs/hooks/schema/generated/pre-tool-use.command.input.schema.json (commit 3be4afd3): PreToolUse has
  `session_id`, `turn_id`, `transcript_path` (a string or null), `cwd`, `hook_event_name`, `model`,
  `permission_mode` (`default`, ...), `tool_name`, `tool_input`, `tool_use_id`;
  codex-rs/hooks/src/events/pre_tool_use.rs (commit 0082977c) builds it (`command_input_json`) and its
  tests' request is `tool_name: "Bash"`, `tool_input: {"command": "echo hello"}`, `model: "gpt-test"`;
  `command_input_uses_request_tool_name` has `tool_name: "apply_patch"`, `tool_use_id: "call-apply-patch"`.
- codex-rs/hooks/schema/generated/post-tool-use.command.input.schema.json (commit bde5e187): PostToolUse adds
  `tool_response` (any JSON); codex-rs/core/src/tools/handlers/apply_patch_tests.rs (a stored version the index names no commit for):
  `post_tool_use_payload_uses_patch_input_and_tool_output` gives an apply_patch `tool_input: {"command":
  PATCH}` and `tool_response: "Success. Updated files."`, with PATCH `*** Begin Patch\\n*** Add File:
  hello.txt\\n+hello\\n*** End Patch`; the same file at commit 0782c605 (`approval_keys_include_move_destination`)
  has `*** Update File: old/name.txt\\n*** Move to: renamed/dir/name.txt`.
- codex-rs/hooks/schema/generated/permission-request.command.input.schema.json (commit 04294e00):
  PermissionRequest has no `tool_use_id`; `tool_input` is `{"command", "description"?}`; the example input
  of openai/codex PR #17563 is `{"session_id", "turn_id", "transcript_path", "cwd", "hook_event_name":
  "PermissionRequest", "model": "gpt-5", "permission_mode": "default", "tool_name": "Bash", "tool_input":
  {"command": "rm -f /tmp/example"}}`.
- MCP tools are `mcp__SERVER__TOOL` (codex-rs/core/src/tools/handlers/mcp.rs, `ensure_mcp_prefix`, commit
  e88a5387) with their arguments as `tool_input`.
- The answers Codex reads: codex-rs/hooks/src/engine/output_parser.rs (commit 0ea83813) and the `parse_completed`
  of pre_tool_use.rs / permission_request.rs (commit c6687ba4): a deny is `hookSpecificOutput.permissionDecision:
  "deny"` with a reason (PreToolUse) or `hookSpecificOutput.decision.behavior: "deny"` (PermissionRequest); exit 2
  with stderr blocks; `allow` without `updatedInput`, `ask` and other exit codes fail open.
- The settings file: codex-rs/hooks/src/engine/discovery.rs (commit ac0800ed) reads CONFIG_FOLDER/hooks.json,
  `{"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": ...}]}]}}`.

Only `cwd` (a temporary project), the ids and the times differ here.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import unittest
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests import test_hook_server as server_tests
from tests.support import integration
from tests.test_cli import run
from tests.test_hook_server import PATIENCE, wait_for
from toolreplay.hooks import codex
from toolreplay.policy.model import parse_policy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SESSION = "019a6f3c-2b7e-7d41-9c55-3e8f1a2b4c6d"
POLICY = {
    "agent": "codex",
    "allowed_tools": ["Bash", "apply_patch", "mcp__db__query"],
    "write_tools": ["mcp__db__query"],
    "rules": [
        {"id": "no-rm", "tools": ["Bash"], "effect": "deny", "reason": "no rm -rf",
         "when": [{"arg": "command", "glob": ["rm -rf*"]}]},
        {"id": "src-only", "tools": ["apply_patch"], "effect": "deny", "reason": "edit only src/",
         "unless": [{"arg": "path", "under": ["src"]}]},
        {"id": "push-asks", "tools": ["Bash"], "effect": "ask", "reason": "a person approves a push",
         "when": [{"arg": "command", "glob": ["git push*"]}]},
    ],
}
CANNOT_ASK = ": the policy asks a person to confirm this call, and Codex hooks cannot ask; it did not run"


def patch(*lines: str) -> str:
    return "\n".join(("*** Begin Patch", *lines, "*** End Patch"))


def deny(reason: str) -> str:
    return json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                              "permissionDecisionReason": reason}}, sort_keys=True) + "\n"


def permission_deny(tool: str) -> str:
    message = f'toolreplay: no PreToolUse allowed this "{tool}" call, so no approval is given for it'
    return json.dumps({"hookSpecificOutput": {"decision": {"behavior": "deny", "message": message},
                                              "hookEventName": "PermissionRequest"}}, sort_keys=True) + "\n"


class PatchPathsTest(unittest.TestCase):
    def test_every_file_the_patch_touches(self) -> None:
        cases = [
            (patch("*** Add File: hello.txt", "+hello"), ["/p/hello.txt"]),
            (patch("*** Update File: old/name.txt", "*** Move to: renamed/dir/name.txt", "@@", "-old", "+new"),
             ["/p/old/name.txt", "/p/renamed/dir/name.txt"]),
            (patch("*** Delete File: /abs/gone.py", "*** Add File: a.py", "+x", "*** Update File: a.py", "@@"),
             ["/abs/gone.py", "/p/a.py"]),
            ("*** Begin Patch\r\n*** Add File: win.txt\r\n+x\r\n*** End Patch\r\n", ["/p/win.txt"]),
            # a line of the patch's content that looks like a header is part of a hunk: it has a prefix
            (patch("*** Update File: a.py", "@@", "+*** Add File: not-a-file"), ["/p/a.py"]),
        ]
        for text, expected in cases:
            with self.subTest(text=text):
                self.assertEqual(codex.patch_paths(text, "/p/"), expected)

    def test_a_patch_that_names_no_file_is_refused(self) -> None:
        for text, message in (
                (patch(), "apply_patch input names no file (no *** Add File, Update File, Delete File or Move to "
                          "line)"),
                ("echo hello", "apply_patch input names no file (no *** Add File, Update File, Delete File or Move "
                               "to line)"),
                (patch("*** Add File:  ", "+x"), "apply_patch input has an empty '*** Add File:' line")):
            with self.subTest(text=text), self.assertRaises(codex.PatchError) as caught:
                codex.patch_paths(text, "/p")
            self.assertEqual(str(caught.exception), message)

    def test_the_gate_decides_with_the_path_that_weighs_most(self) -> None:
        policy = parse_policy(dict(POLICY, root="/p"), "/")
        args = lambda text: {"session_id": SESSION, "cwd": "/p", "tool_name": "apply_patch",  # noqa: E731
                             "tool_input": {"command": text}}
        inside = patch("*** Add File: src/a.py", "+x", "*** Update File: src/b.py", "@@")
        outside = patch("*** Add File: src/a.py", "+x", "*** Update File: README.md", "@@")
        self.assertEqual(codex.gate_args(args(inside), policy), {"command": inside, "path": "/p/src/a.py"})
        self.assertEqual(codex.gate_args(args(outside), policy), {"command": outside, "path": "/p/README.md"})
        bash = {"session_id": SESSION, "cwd": "/p", "tool_name": "Bash", "tool_input": {"command": "ls"}}
        self.assertEqual(codex.gate_args(bash, policy), {"command": "ls"})


class CodexHookTestCase(unittest.TestCase):
    agent = "codex"

    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.project = os.path.join(self.directory, "my-project")
        self.records = os.path.join(self.directory, "records")
        os.mkdir(self.project)
        os.mkdir(self.records)
        self.policy = self.write_policy(POLICY)
        self.session = SESSION

    def write_policy(self, obj: dict[str, Any], name: str = "policy.json") -> str:
        path = os.path.join(self.directory, name)
        with open(path, "w", encoding="utf-8") as out:
            json.dump(obj, out)
        return path

    def payload(self, event: str, tool: str | None = None, args: dict[str, Any] | None = None,
                call_id: str | None = None, **extra: Any) -> dict[str, Any]:
        obj: dict[str, Any] = {"session_id": self.session, "turn_id": "turn-1", "transcript_path": None,
                               "cwd": self.project, "hook_event_name": event, "model": "gpt-5",
                               "permission_mode": "default"}
        if tool is not None:
            obj.update(tool_name=tool, tool_input=args if args is not None else {})
        if call_id is not None:
            obj.update(tool_use_id=call_id)
        obj.update(extra)
        return obj

    def hook(self, payload: dict[str, Any] | bytes, policy: str | None = None) -> tuple[int, str, str]:
        """The real command, a new process in the project folder, as Codex runs it."""
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        done = subprocess.run([sys.executable, "-m", "toolreplay", "hook", "codex", "--policy", policy or self.policy,
                               "--records", self.records], input=data, capture_output=True, cwd=self.project,
                              env=dict(os.environ, PYTHONPATH=ROOT), timeout=PATIENCE, check=False)
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    def in_process(self, payload: dict[str, Any] | bytes, policy: str | None = None) -> tuple[int, str, str]:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        return run("hook", "codex", "--policy", policy or self.policy, "--records", self.records, stdin=data)

    @property
    def record(self) -> str:
        return os.path.join(self.records, self.session + ".jsonl")

    def lines(self) -> list[dict[str, Any]]:
        with open(self.record, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle]

    def assert_eight_concurrent_pairs(self, hook: Callable[[dict[str, Any]], tuple[int, str, str]]) -> None:
        """Eight PreToolUse/PostToolUse pairs of one session at once, each event a `hook` process: every call
        recorded once, with its own response, in one intact chain."""
        def pair(number: int) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
            args = {"command": f"echo {number}"}
            return (hook(self.payload("PreToolUse", "Bash", args, f"call_{number}")),
                    hook(self.payload("PostToolUse", "Bash", args, f"call_{number}", tool_response=f"{number}\n")))

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(pair, range(8)))
        self.assertEqual(results, [((0, "", ""), (0, "", ""))] * 8)
        lines = self.lines()
        self.assertEqual(sorted(line["meta"]["call_id"] for line in lines), [f"call_{n}" for n in range(8)])
        self.assertEqual([line["index"] for line in lines], list(range(8)))
        for line in lines:
            self.assertEqual(line["response"], {"result": line["args"]["command"][5:] + "\n"})
        self.assertEqual(run("verify", self.record), (0, "chain: intact\n", ""))


@integration  # the real command, a process per hook event
class DecisionsTest(CodexHookTestCase):
    def test_allow_and_deny_as_the_policy_says_through_the_real_command(self) -> None:
        self.assertEqual(self.hook(self.payload("PreToolUse", "Bash", {"command": "echo hello"}, "call_1")),
                         (0, "", ""))
        self.assertEqual(self.hook(self.payload("PreToolUse", "Bash", {"command": "rm -rf build"}, "call_2")),
                         (0, deny("toolreplay: denied by rule no-rm: no rm -rf"), ""))
        self.assertEqual(self.hook(self.payload("PreToolUse", "Bash", {"command": "git push"}, "call_3")),
                         (0, deny("toolreplay: confirmation required" + CANNOT_ASK), ""))
        self.assertEqual(self.hook(self.payload("PreToolUse", "mcp__db__query", {"sql": "delete from t"}, "call_4")),
                         (0, deny("toolreplay: confirmation required" + CANNOT_ASK), ""))
        self.assertEqual(self.hook(self.payload("PreToolUse", "web_search", {"query": "x"}, "call_5")),
                         (0, deny("toolreplay: tool not allowed: web_search"), ""))

    def test_apply_patch_is_decided_on_every_file_it_touches(self) -> None:
        inside = patch("*** Add File: src/hello.txt", "+hello")
        outside = patch("*** Add File: src/a.py", "+x", "*** Update File: README.md", "@@", "-a", "+b")
        moved_out = patch("*** Update File: src/a.py", "*** Move to: docs/a.py", "@@", "-a", "+b")
        self.assertEqual(self.hook(self.payload("PreToolUse", "apply_patch", {"command": inside}, "call-apply-patch")),
                         (0, "", ""))
        for number, text in enumerate((outside, moved_out)):
            with self.subTest(text=text):
                self.assertEqual(self.hook(self.payload("PreToolUse", "apply_patch", {"command": text}, f"call_{number}")),
                                 (0, deny("toolreplay: denied by rule src-only: edit only src/"), ""))
        self.assertEqual(self.hook(self.payload("PostToolUse", "apply_patch", {"command": inside}, "call-apply-patch",
                                                tool_response="Success. Updated files.")), (0, "", ""))
        lines = self.lines()
        self.assertEqual([(line["args"]["path"], line["meta"]["outcome"]) for line in lines],
                         [(os.path.join(self.project, "README.md"), "refused"),
                          (os.path.join(self.project, "docs/a.py"), "refused"),
                          (os.path.join(self.project, "src/hello.txt"), "ran")])
        self.assertEqual(lines[2]["args"], {"command": inside, "path": os.path.join(self.project, "src/hello.txt")})
        self.assertEqual(lines[2]["response"], {"result": "Success. Updated files."})
        self.assertEqual(lines[2]["meta"]["call_id"], "call-apply-patch")
        # apply_patch is one of Codex's built-in writes: each of its records says it changes state
        self.assertEqual([line["meta"].get("mutates") for line in lines], [True, True, True])
        self.assertEqual(run("verify", self.record), (0, "chain: intact\n", ""))

    def test_permission_request_leaves_an_allowed_call_to_the_person_and_denies_any_other(self) -> None:
        self.assertEqual(self.hook(self.payload("PreToolUse", "Bash", {"command": "rm -f /tmp/example"}, "call_1")),
                         (0, "", ""))
        described = {"command": "rm -f /tmp/example", "description": "remove the example file"}
        self.assertEqual(self.hook(self.payload("PermissionRequest", "Bash", described)), (0, "", ""))
        self.assertEqual(self.hook(self.payload("PermissionRequest", "Bash", {"command": "rm -f /tmp/other"})),
                         (0, permission_deny("Bash"), ""))
        self.assertEqual(self.hook(self.payload("PermissionRequest", "NetworkAccess",
                                                {"command": "network-access example.com"})),
                         (0, permission_deny("NetworkAccess"), ""))
        # after the call completed nothing is pending: a late request for it is denied
        self.assertEqual(self.hook(self.payload("PostToolUse", "Bash", {"command": "rm -f /tmp/example"}, "call_1",
                                                tool_response="")), (0, "", ""))
        self.assertEqual(self.hook(self.payload("PermissionRequest", "Bash", described)),
                         (0, permission_deny("Bash"), ""))
        self.assertEqual([line["response"] for line in self.lines()], [{"result": ""}])

    def test_permission_request_for_an_mcp_tool_matches_its_whole_arguments(self) -> None:
        policy = self.write_policy(dict(POLICY, write_tools=[]), "no-writes.json")
        args = {"command": "select 1", "database": "prod"}
        self.assertEqual(self.hook(self.payload("PreToolUse", "mcp__db__query", args, "call_m"), policy), (0, "", ""))
        self.assertEqual(self.hook(self.payload("PermissionRequest", "mcp__db__query", args), policy), (0, "", ""))
        self.assertEqual(self.hook(self.payload("PermissionRequest", "mcp__db__query", dict(args, database="dev")),
                                   policy), (0, permission_deny("mcp__db__query"), ""))

    def test_print_settings_registers_the_fast_client_for_codexs_events(self) -> None:
        code, out, err = run("hook", "codex", "--policy", "policy.json", "--records", "records", "--print-settings")
        self.assertEqual((code, err), (0, ""))
        hooks = json.loads(out)["hooks"]
        self.assertEqual(list(hooks), ["PreToolUse", "PermissionRequest", "PostToolUse"])
        command = (f"{shlex.quote(sys.executable)} -S {shlex.quote(os.path.join(ROOT, 'toolreplay/hooks/client.py'))}"
                   " codex --policy policy.json --records records")
        for entries in hooks.values():
            self.assertEqual(entries, [{"matcher": "*", "hooks": [{"type": "command", "command": command}]}])

    def test_install_writes_hooks_json_whole_keeping_other_hooks(self) -> None:
        settings = os.path.join(self.directory, "hooks.json")
        other = {"matcher": "Bash", "hooks": [{"type": "command", "command": "notify-send ran"}]}
        with open(settings, "w", encoding="utf-8") as out:
            json.dump({"hooks": {"PostToolUse": [other], "Stop": [other]}, "x-note": "kept"}, out)
        arguments = ("hook", "codex", "--policy", self.policy, "--records", self.records, "--install", settings)
        self.assertEqual(run(*arguments), (0, f"{settings}: added the hook to 3 events (PreToolUse, "
                                              "PermissionRequest, PostToolUse)\n", ""))
        self.assertEqual(run(*arguments), (0, f"{settings}: the hook is already there for every event\n", ""))
        with open(settings, encoding="utf-8") as handle:
            written = json.load(handle)
        self.assertEqual(written["x-note"], "kept")
        self.assertEqual(written["hooks"]["Stop"], [other])
        self.assertEqual(written["hooks"]["PostToolUse"][0], other)
        self.assertEqual([len(written["hooks"][event]) for event in ("PreToolUse", "PermissionRequest", "PostToolUse")],
                         [1, 1, 2])

    def test_codex_has_no_http_hooks(self) -> None:
        self.assertEqual(run("hook", "codex", "--policy", "p", "--records", "r", "--print-settings", "--http"),
                         (2, "", "error: hook codex: Codex has no http hooks (its hooks run a command): use "
                                 "--print-settings without --http\n"))


@integration
class ConcurrencyTest(CodexHookTestCase):
    def test_eight_concurrent_hook_processes_on_one_session(self) -> None:
        self.assert_eight_concurrent_pairs(self.hook)
        self.assertEqual(sorted(os.listdir(self.records)), [self.session + ".jsonl", self.session + ".lock"])

    def test_a_hook_process_killed_while_it_waits_leaves_nothing_behind(self) -> None:
        payload = json.dumps(self.payload("PreToolUse", "Bash", {"command": "ls"}, "call_k")).encode()
        with open(os.path.join(self.records, self.session + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another hook process of the session holds it
            process = subprocess.Popen([sys.executable, "-m", "toolreplay", "hook", "codex", "--policy",
                                        self.policy, "--records", self.records], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
            assert process.stdin is not None
            process.stdin.write(payload)
            process.stdin.close()
            try:
                self.assertRaises(subprocess.TimeoutExpired, process.wait, 1)  # it waits for the lock
            finally:
                process.send_signal(signal.SIGKILL)
                process.wait()
                for stream in (process.stdout, process.stderr):
                    if stream is not None:
                        stream.close()
        self.assertEqual(os.listdir(self.records), [self.session + ".lock"])
        # Codex counts the killed hook as failed; the next event decides the call afresh
        self.assertEqual(self.hook(json.loads(payload)), (0, "", ""))


@integration
class ThroughTheServerTest(CodexHookTestCase, server_tests.HookServerTestCase):
    """The registered fast client and the records folder's hook server, with Codex's events."""

    def setUp(self) -> None:
        CodexHookTestCase.setUp(self)
        self.socket = os.path.join(self.records, ".toolreplay-hook.sock")
        os.chmod(self.records, 0o700)
        self.addCleanup(self.stop_server)

    def fast_command(self) -> list[str]:
        code, out, _ = run("hook", "codex", "--policy", self.policy, "--records", self.records, "--print-settings")
        self.assertEqual(code, 0)
        return shlex.split(json.loads(out)["hooks"]["PreToolUse"][0]["hooks"][0]["command"])

    def test_eight_concurrent_hook_processes_through_the_server(self) -> None:
        self.assertEqual(self.fast(self.payload("PreToolUse", "Bash", {"command": "pwd"}, "call_r")), (0, "", ""))
        wait_for(lambda: os.path.exists(self.socket), "the server")
        self.assertEqual(self.fast(self.payload("PostToolUse", "Bash", {"command": "pwd"}, "call_r",
                                                tool_response="/\n")), (0, "", ""))
        os.unlink(self.record)  # the pairs below are the whole record
        self.assert_eight_concurrent_pairs(self.fast)

    server_pid = server_tests.FastHookTest.server_pid

    def test_a_server_killed_while_it_decides_blocks_the_call(self) -> None:
        self.assertEqual(self.fast(self.payload("PreToolUse", "Bash", {"command": "pwd"}, "call_r")), (0, "", ""))
        wait_for(lambda: os.path.exists(self.socket), "the server")
        pid = self.server_pid()
        with open(os.path.join(self.records, self.session + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the server takes the event, then waits for the session's lock
            event = os.path.join(self.directory, "event.json")
            with open(event, "w", encoding="utf-8") as handle:
                json.dump(self.payload("PreToolUse", "Bash", {"command": "ls"}, "call_k"), handle)
            with open(event, "rb") as stdin:
                client = subprocess.Popen(self.fast_command(), stdin=stdin, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, cwd=self.project)
            self.assertRaises(subprocess.TimeoutExpired, client.wait, 1)
            os.kill(pid, signal.SIGKILL)
            out, err = client.communicate(timeout=PATIENCE)
        # exit 2 with a reason on stderr: Codex blocks the call
        self.assertEqual((client.returncode, out, err), (2, b"", b"error: toolreplay hook: the hook server ended "
                                                                b"before it answered; the call is blocked\n"))
        with open(os.path.join(self.records, self.session + ".pending"), encoding="utf-8") as handle:
            self.assertEqual(sorted(json.load(handle)), ["call_r"])  # the killed event left nothing


class BadInputTest(CodexHookTestCase):
    def assert_fails_closed(self, payload: dict[str, Any] | bytes, message: str, policy: str | None = None) -> None:
        # exit 2 and a reason on stderr: Codex blocks the call (an empty stderr would let it run)
        self.assertEqual(self.in_process(payload, policy), (2, "", f"error: toolreplay hook: {message}\n"))

    def test_malformed_input(self) -> None:
        handled = "(handled: PreToolUse, PermissionRequest, PostToolUse)"
        cases = [
            (b"not json", "hook input is not a JSON object (invalid JSON)"),
            (b"[1]", "hook input is not a JSON object"),
            (self.payload("Stop"), f'unknown hook event "Stop" {handled}'),
            (self.payload("SessionEnd"), f'unknown hook event "SessionEnd" {handled}'),
            (dict(self.payload("PreToolUse", "Bash", {"command": "ls"}, "c"), session_id="../x"),
             "session_id must be a plain file name (letters, digits, _ . -; up to 128)"),
            (self.payload("PreToolUse", "Bash", {"command": "ls"}), "PreToolUse input has no tool_use_id"),
            (dict(self.payload("PreToolUse", "Bash", None, "c"), tool_input="ls"),
             "PreToolUse input has no tool_input object"),
            (dict(self.payload("PermissionRequest", "Bash", {"command": "ls"}), cwd="relative"),
             "PermissionRequest input has no absolute cwd"),
            (self.payload("PreToolUse", "apply_patch", {"command": "echo hi"}, "c"),
             "apply_patch input names no file (no *** Add File, Update File, Delete File or Move to line)"),
            (self.payload("PreToolUse", "apply_patch", {"input": "x"}, "c"),
             "apply_patch input has no command string (the patch)"),
            (self.payload("PostToolUse", "Bash", {"command": "ls"}, "call_9", tool_response=""),
             'PostToolUse for tool_use_id "call_9" without a PreToolUse that allowed it'),
        ]
        for payload, message in cases:
            with self.subTest(message=message):
                self.assert_fails_closed(payload, message)
        self.assertEqual(os.listdir(self.records), [self.session + ".lock"])  # nothing recorded

    def test_a_policy_that_does_not_load(self) -> None:
        broken = self.write_policy({"allowed_tools": ["Bash"]}, "broken.json")
        self.assert_fails_closed(self.payload("PreToolUse", "Bash", {"command": "ls"}, "c"),
                                 f'policy does not load: {broken}: missing field "agent"', broken)
        self.assert_fails_closed(self.payload("PermissionRequest", "Bash", {"command": "ls"}),
                                 f'policy does not load: {broken}: missing field "agent"', broken)


if __name__ == "__main__":
    unittest.main()
