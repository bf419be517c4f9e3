"""`toolreplay hook claude-code`: Claude Code's hook events through the real command.

Provenance of the payloads: the field names and shapes follow the Claude Code hooks reference
(https://code.claude.com/docs/en/hooks, "PreToolUse input", "PostToolUse input", "PostToolUseFailure
input", "SessionEnd input"): its PreToolUse example is
`{"session_id": "abc123", "transcript_path": "/home/user/.claude/projects/.../00893aaf-19fa-41d2-8238-13269b9b3ca0.jsonl",
"cwd": "/home/user/my-project", "permission_mode": "default", "hook_event_name": "PreToolUse",
"tool_name": "Bash", "tool_input": {"command": "npm test"}, "tool_use_id": "toolu_01ABC123..."}`;
PostToolUse adds `tool_response` (a TodoWrite sample in the claudemy.org hooks lesson:
`"tool_response": {"oldTodos": [], "newTodos": [...]}`), PostToolUseFailure adds `error` and
`is_interrupt`, SessionEnd has `reason`. Only `cwd` (a temporary project) and the ids differ here.
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
from unittest import mock

from tests.support import integration
from tests.test_cli import run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRANSCRIPT = "/home/user/.claude/projects/my-project/00893aaf-19fa-41d2-8238-13269b9b3ca0.jsonl"
POLICY = {
    "agent": "claude-code",
    "allowed_tools": ["Bash", "Read", "Edit", "Write", "TodoWrite", "mcp__db__query"],
    "write_tools": ["Write"],
    "rules": [
        {"id": "no-rm", "tools": ["Bash"], "effect": "deny", "reason": "no rm -rf",
         "when": [{"arg": "command", "glob": ["rm -rf*"]}]},
        {"id": "src-only", "tools": ["Edit"], "effect": "deny", "reason": "edit only src/",
         "unless": [{"arg": "file_path", "under": ["src"]}]},
        {"id": "push-asks", "tools": ["Bash"], "effect": "ask", "reason": "a person approves a push",
         "when": [{"arg": "command", "glob": ["git push*"]}]},
    ],
}


def decision(kind: str, reason: str) -> str:
    return json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": kind,
                                              "permissionDecisionReason": reason}}, sort_keys=True) + "\n"


ALLOW = decision("allow", "toolreplay: allowed by the policy")
ASK = decision("ask", "toolreplay: the policy asks a person to confirm this call")


class HookTestCase(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.project = os.path.join(self.directory, "my-project")
        self.records = os.path.join(self.directory, "records")
        os.mkdir(self.project)
        os.mkdir(self.records)
        self.policy = self.write_policy(POLICY)
        self.session = "00893aaf-19fa-41d2-8238-13269b9b3ca0"

    def write_policy(self, obj: dict[str, Any], name: str = "policy.json") -> str:
        path = os.path.join(self.directory, name)
        with open(path, "w", encoding="utf-8") as out:
            json.dump(obj, out)
        return path

    def payload(self, event: str, tool: str | None = None, args: dict[str, Any] | None = None,
                call_id: str | None = None, **extra: Any) -> dict[str, Any]:
        obj: dict[str, Any] = {"session_id": self.session, "transcript_path": TRANSCRIPT, "cwd": self.project,
                               "permission_mode": "default", "hook_event_name": event}
        if tool is not None:
            obj.update(tool_name=tool, tool_input=args or {}, tool_use_id=call_id)
        obj.update(extra)
        return obj

    def hook(self, payload: dict[str, Any] | bytes, policy: str | None = None) -> tuple[int, str, str]:
        """The real command, a new process, as Claude Code runs it."""
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        done = subprocess.run([sys.executable, "-m", "toolreplay", "hook", "claude-code", "--policy",
                               policy or self.policy, "--records", self.records], input=data,
                              capture_output=True, cwd=ROOT, timeout=60, check=False)
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    def in_process(self, payload: dict[str, Any] | bytes, policy: str | None = None) -> tuple[int, str, str]:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        return run("hook", "claude-code", "--policy", policy or self.policy, "--records", self.records, stdin=data)

    def pre(self, tool: str, args: dict[str, Any], call_id: str) -> tuple[int, str, str]:
        return self.in_process(self.payload("PreToolUse", tool, args, call_id))

    def post(self, tool: str, args: dict[str, Any], call_id: str, response: Any = None) -> tuple[int, str, str]:
        return self.in_process(self.payload("PostToolUse", tool, args, call_id,
                                            tool_response=response if response is not None else {"ok": True}))

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
            return (hook(self.payload("PreToolUse", "Bash", args, f"toolu_{number}")),
                    hook(self.payload("PostToolUse", "Bash", args, f"toolu_{number}",
                                      tool_response={"stdout": f"{number}\n"})))

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(pair, range(8)))
        self.assertEqual(results, [((0, ALLOW, ""), (0, "", ""))] * 8)
        lines = self.lines()
        self.assertEqual(sorted(line["meta"]["call_id"] for line in lines), [f"toolu_{n}" for n in range(8)])
        self.assertEqual([line["index"] for line in lines], list(range(8)))
        for line in lines:
            self.assertEqual(line["response"], {"stdout": line["args"]["command"][5:] + "\n"})
        self.assertEqual(run("verify", self.record), (0, "chain: intact\n", ""))


@integration  # the real command, a process per hook event
class DecisionsTest(HookTestCase):
    def test_allow_deny_and_ask_as_the_policy_says_through_the_real_command(self) -> None:
        src = os.path.join(self.project, "src", "app.py")
        self.assertEqual(self.hook(self.payload("PreToolUse", "Bash", {"command": "npm test"}, "toolu_01")),
                         (0, ALLOW, ""))
        self.assertEqual(self.hook(self.payload("PreToolUse", "Bash", {"command": "rm -rf /"}, "toolu_02")),
                         (0, decision("deny", "toolreplay: denied by rule no-rm: no rm -rf"), ""))
        self.assertEqual(self.hook(self.payload("PreToolUse", "Grep", {"pattern": "x"}, "toolu_03")),
                         (0, decision("deny", "toolreplay: tool not allowed: Grep"), ""))
        self.assertEqual(self.hook(self.payload("PreToolUse", "Write", {"file_path": src, "content": "x"},
                                                "toolu_04")), (0, ASK, ""))
        self.assertEqual(self.hook(self.payload("PreToolUse", "Bash", {"command": "git push"}, "toolu_05")),
                         (0, ASK, ""))
        self.assertEqual(self.hook(self.payload("PreToolUse", "mcp__db__query", {"sql": "select 1"}, "toolu_06")),
                         (0, ALLOW, ""))
        self.assertEqual(self.hook(self.payload("PreToolUse", "mcp__db__drop", {}, "toolu_07")),
                         (0, decision("deny", "toolreplay: tool not allowed: mcp__db__drop"), ""))

    def test_path_rules_read_absolute_paths_against_the_hooks_cwd(self) -> None:
        edit = {"old_string": "a", "new_string": "b"}
        self.assertEqual(self.pre("Edit", dict(edit, file_path=os.path.join(self.project, "src", "a.py")), "e1"),
                         (0, ALLOW, ""))
        self.assertEqual(self.pre("Edit", dict(edit, file_path=os.path.join(self.project, "README.md")), "e2"),
                         (0, decision("deny", "toolreplay: denied by rule src-only: edit only src/"), ""))
        outside = os.path.join(self.directory, "src", "a.py")  # a src/ that is not the project's
        code, out, _ = self.pre("Edit", dict(edit, file_path=outside), "e3")
        self.assertEqual((code, json.loads(out)["hookSpecificOutput"]["permissionDecision"]), (0, "deny"))
        # a policy that declares its root keeps it
        other = self.write_policy(dict(POLICY, root=self.directory), "rooted.json")
        self.assertEqual(self.in_process(self.payload("PreToolUse", "Edit", dict(edit, file_path=outside), "e4"),
                                         other), (0, ALLOW, ""))

    def test_budgets_count_the_session_across_processes(self) -> None:
        policy = self.write_policy(dict(POLICY, limits={"max_steps": 2}), "budget.json")
        for number in range(2):
            payload = self.payload("PreToolUse", "Read", {"file_path": "/x"}, f"r{number}")
            self.assertEqual(self.in_process(payload, policy), (0, ALLOW, ""))
            self.assertEqual(self.in_process(dict(payload, hook_event_name="PostToolUse", tool_response={}), policy),
                             (0, "", ""))
        self.assertEqual(self.in_process(self.payload("PreToolUse", "Read", {"file_path": "/y"}, "r2"), policy),
                         (0, decision("deny", "toolreplay: budget exceeded: max_steps"), ""))

    def test_print_settings(self) -> None:
        code, out, err = run("hook", "claude-code", "--policy", ".claude/policy.json", "--records",
                             ".claude/toolreplay records", "--print-settings")
        client = shlex.quote(os.path.join(ROOT, "toolreplay", "hooks", "client.py"))
        command = (f"{shlex.quote(sys.executable)} -S {client} claude-code --policy .claude/policy.json "
                   "--records '.claude/toolreplay records'")
        entry = [{"matcher": "*", "hooks": [{"type": "command", "command": command}]}]
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(json.loads(out), {"hooks": {"PreToolUse": entry, "PostToolUse": entry,
                                                     "PostToolUseFailure": entry, "SessionEnd": entry}})


class RecordTest(HookTestCase):
    def test_a_session_is_one_sealed_record_that_verify_replay_and_scope_read(self) -> None:
        todos = {"todos": [{"content": "write a readme", "status": "pending", "priority": "medium", "id": "1"}]}
        self.assertEqual(self.pre("TodoWrite", todos, "toolu_a"), (0, ALLOW, ""))
        self.assertEqual(self.post("TodoWrite", todos, "toolu_a", {"oldTodos": [], "newTodos": todos["todos"]}),
                         (0, "", ""))
        self.assertEqual(self.pre("Bash", {"command": "rm -rf build"}, "toolu_b")[0], 0)
        self.assertEqual(self.pre("Bash", {"command": "false"}, "toolu_c"), (0, ALLOW, ""))
        self.assertEqual(self.in_process(self.payload(
            "PostToolUseFailure", "Bash", {"command": "false"}, "toolu_c",
            error="Command exited with non-zero status code 1", is_interrupt=False)), (0, "", ""))
        self.assertEqual(self.in_process(self.payload("SessionEnd", reason="other")), (0, "", ""))
        lines = self.lines()
        self.assertEqual([(line["index"], line["tool"], line["meta"]["call_id"], line["meta"]["outcome"])
                          for line in lines],
                         [(0, "TodoWrite", "toolu_a", "ran"), (1, "Bash", "toolu_b", "refused"),
                          (2, "Bash", "toolu_c", "ran")])
        self.assertEqual(lines[0]["response"], {"oldTodos": [], "newTodos": todos["todos"]})
        self.assertEqual(lines[2]["response"], {"ok": False, "error": "Command exited with non-zero status code 1"})
        self.assertEqual(sorted(os.listdir(self.records)), [self.session + ".jsonl", self.session + ".lock"])
        self.assertEqual(run("verify", self.record), (0, "chain: intact\n", ""))
        code, out, _ = run("replay", self.record)
        self.assertEqual((code, out.splitlines()[0]), (0, "calls: 3"))
        rooted = self.write_policy(dict(POLICY, root=self.project), "rooted.json")
        # scope checks every call as the guard did: exactly the guard's refusal, blocked (information: exit 0)
        self.assertEqual(run("scope", self.record, rooted), (0, "calls: 3\nfindings: 0\ninformation: 1\nindex 1: "
                                                                "blocked: tool 'Bash' was refused by the guard: denied "
                                                                "by rule no-rm: no rm -rf\n", ""))

    def test_the_record_declares_the_writes_so_replay_needs_no_mutator(self) -> None:
        source = os.path.join(self.project, "src", "app.py")
        read = {"file_path": source}

        def file(content: str) -> dict[str, Any]:
            return {"type": "text", "file": {"filePath": source, "content": content}}

        steps: list[tuple[str, dict[str, Any], Any]] = [
            ("Read", read, file("x = 1\n")),
            ("Edit", {"file_path": source, "old_string": "1", "new_string": "2"}, {"filePath": source}),
            ("Read", read, file("x = 2\n")),  # changed by the Edit: no non-determinism
            ("Bash", {"command": "rm -rf build"}, None),  # refused: it changed nothing
            ("Read", read, file("x = 2\n")),  # so this repeat is redundant
            ("Bash", {"command": "npm test"}, {"stdout": "ok\n"}),
            ("Read", read, file("x = 2\n")),  # after a shell command: not redundant
            ("Write", {"file_path": source, "content": "x = 3\n"}, {"type": "update", "filePath": source}),
        ]
        denied = decision("deny", "toolreplay: denied by rule no-rm: no rm -rf")
        for number, (tool, args, response) in enumerate(steps):
            answer = denied if response is None else ASK if tool == "Write" else ALLOW
            self.assertEqual(self.pre(tool, args, f"toolu_{number}"), (0, answer, ""))
            if response is not None:
                self.assertEqual(self.post(tool, args, f"toolu_{number}", response), (0, "", ""))
        lines = self.lines()
        # Edit and Bash are Claude Code's built-in writes (repeatable), Write the policy's write tool;
        # a refused write is declared too (replay knows it did not run)
        self.assertEqual([(line["tool"], line["meta"]["outcome"], line["meta"].get("mutates")) for line in lines],
                         [("Read", "ran", None), ("Edit", "ran", True), ("Read", "ran", None),
                          ("Bash", "refused", True), ("Read", "ran", None), ("Bash", "ran", True),
                          ("Read", "ran", None), ("Write", "ran", True)])
        redundant = "index {}: redundant-call: tool 'Read' repeats the identical call at index {} with no state change " \
                    "between them\n"
        changed = "index {}: non-determinism: tool 'Read' returned a different response than the identical call at " \
                  "index 0\n"
        # the default mode: a state change only ends a run of redundant calls (any change of a response is
        # non-determinism); the refused rm -rf changed nothing, the shell command did
        plain = ("calls: 8\ndivergence: index 2\nfindings: 4\n" + changed.format(2) + changed.format(4)
                 + redundant.format(4, 2) + changed.format(6))
        state = ("calls: 8\ndivergence: none\nfindings: 1\ninformation: 1\nindex 2: changed-after-write: tool 'Read' "
                 "returned a different response than the identical call at index 0 after the state-changing call at "
                 "index 1\n" + redundant.format(4, 2))
        flags = ("--mutator", "Bash", "--mutator", "Edit", "--mutator", "Write")
        for mode, expected in (((), plain), (("--state-aware",), state)):
            self.assertEqual(run("replay", *mode, self.record), (1, expected, ""))
            self.assertEqual(run("replay", *mode, self.record, *flags), (1, expected, ""))
        # the same calls without the declaration (a record from before it): the noise --mutator was for
        undeclared = os.path.join(self.directory, "undeclared.jsonl")
        with open(undeclared, "w", encoding="utf-8") as out:
            for line in lines:
                meta = {key: value for key, value in line["meta"].items() if key != "mutates"}
                out.write(json.dumps({"index": line["index"], "tool": line["tool"], "args": line["args"],
                                      "response": line["response"], "meta": meta}) + "\n")
        self.assertEqual(run("replay", undeclared), (1, (
            "calls: 8\ndivergence: index 2\nfindings: 6\n" + changed.format(2) + redundant.format(2, 0)
            + changed.format(4) + redundant.format(4, 2) + changed.format(6) + redundant.format(6, 4)), ""))
        self.assertEqual(run("replay", undeclared, *flags), (1, plain, ""))
        self.assertEqual(run("replay", "--state-aware", undeclared), (1, (
            "calls: 8\ndivergence: index 2\nfindings: 4\ninformation: 0\n" + changed.format(2)
            + redundant.format(2, 0) + redundant.format(4, 2) + redundant.format(6, 4)), ""))
        self.assertEqual(run("replay", "--state-aware", undeclared, *flags), (1, state, ""))

    def test_shadow_rules_and_the_loop_breaker_through_the_hooks(self) -> None:
        # decided in the core: each hook process rebuilds the gate, whose rules' history comes from the record
        policy = self.write_policy(dict(POLICY, rules=POLICY["rules"] + [
            {"id": "no-loop", "tools": ["Bash"], "effect": "deny", "reason": "the same command at most 3 times",
             "unless": [{"identical": "Bash", "max": 3}]},
            {"id": "watch-tests", "tools": ["Bash"], "effect": "deny", "shadow": True, "reason": "tests again?",
             "unless": [{"identical": "Bash", "max": 1}]}]), "loop.json")
        args = {"command": "npm test"}
        for number in range(3):
            payload = self.payload("PreToolUse", "Bash", args, f"toolu_{number}")
            self.assertEqual(self.in_process(payload, policy), (0, ALLOW, ""))
            self.assertEqual(self.in_process(self.payload("PostToolUse", "Bash", args, f"toolu_{number}",
                                                          tool_response={"stdout": "ok\n"}), policy), (0, "", ""))
        self.assertEqual(self.in_process(self.payload("PreToolUse", "Bash", args, "toolu_3"), policy), (0, decision(
            "deny", "toolreplay: denied by rule no-loop: the same command at most 3 times"), ""))
        watch = [{"rule": "watch-tests", "effect": "deny", "reason": "tests again?"}]
        self.assertEqual([(line["meta"]["outcome"], line["meta"].get("x-shadow")) for line in self.lines()],
                         [("ran", None), ("ran", watch), ("ran", watch), ("refused", watch)])

    def test_a_write_whose_post_never_came_is_an_unknown_outcome_and_its_retry_is_refused(self) -> None:
        args = {"command": "make deploy"}
        self.assertEqual(self.hook(self.payload("PreToolUse", "Bash", args, "toolu_1")), (0, ALLOW, ""))
        # Claude Code was killed while the command ran: no PostToolUse; the next session start retries
        self.assertEqual(self.hook(self.payload("PreToolUse", "Bash", args, "toolu_2")), (0, decision(
            "deny", "toolreplay: outcome unknown: an identical Bash call started earlier and its result was "
                    f"never recorded; a person must check whether it took effect, then delete its line from "
                    f"{self.session}.jsonl.intents"), ""))
        self.assertEqual(self.lines()[0]["meta"]["outcome"], "refused")
        # another call still runs; a read needs no intent
        self.assertEqual(self.pre("Bash", {"command": "make status"}, "toolu_3"), (0, ALLOW, ""))

    def test_a_repeatable_write_settled_while_another_is_open_is_not_unknown(self) -> None:
        self.assertEqual(self.pre("Bash", {"command": "npm test"}, "t1"), (0, ALLOW, ""))
        self.assertEqual(self.pre("Bash", {"command": "npm run build"}, "t2"), (0, ALLOW, ""))
        self.assertEqual(self.post("Bash", {"command": "npm test"}, "t1"), (0, "", ""))
        self.assertEqual(self.pre("Bash", {"command": "npm test"}, "t3"), (0, ALLOW, ""))
        self.assertEqual(self.post("Bash", {"command": "npm run build"}, "t2"), (0, "", ""))
        self.assertEqual(self.post("Bash", {"command": "npm test"}, "t3"), (0, "", ""))
        self.assertEqual([line["meta"]["call_id"] for line in self.lines()], ["t1", "t2", "t3"])
        self.assertFalse(os.path.exists(self.record + ".intents"))


@integration
class ConcurrencyTest(HookTestCase):
    def test_eight_concurrent_hook_processes_on_one_session(self) -> None:
        self.assert_eight_concurrent_pairs(self.hook)
        self.assertEqual(sorted(os.listdir(self.records)), [self.session + ".jsonl", self.session + ".lock"])

    def test_a_hook_process_killed_while_it_waits_leaves_nothing_behind(self) -> None:
        payload = json.dumps(self.payload("PreToolUse", "Bash", {"command": "ls"}, "toolu_k")).encode()
        with open(os.path.join(self.records, self.session + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another hook process of the session holds it
            process = subprocess.Popen([sys.executable, "-m", "toolreplay", "hook", "claude-code", "--policy",
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
        # Claude Code counts the killed hook as an error; the next one decides the call afresh
        self.assertEqual(self.hook(json.loads(payload)), (0, ALLOW, ""))


@integration
class StartUpTest(HookTestCase):
    def test_a_hook_process_loads_only_what_the_hook_needs(self) -> None:
        # a new process per tool call: what it imports is most of what it costs
        payload = json.dumps(self.payload("PreToolUse", "Bash", {"command": "ls"}, "toolu_s")).encode()
        script = ("import sys\nfrom toolreplay.cli import main\ncode = main()\nsys.stdout.flush()\n"
                  "sys.stderr.write(' '.join(sorted(sys.modules)))\nsys.exit(code)\n")
        done = subprocess.run([sys.executable, "-c", script, "hook", "claude-code", "--policy", self.policy,
                               "--records", self.records], input=payload, capture_output=True, cwd=ROOT,
                              timeout=60, check=False)
        self.assertEqual((done.returncode, done.stdout.decode()), (0, ALLOW))
        loaded = set(done.stderr.decode().split())
        self.assertIn("toolreplay.guard.gate", loaded)
        unneeded = ["argparse", "calendar", "datetime", "hmac", "shlex", "toolreplay.cli._parser",
                    "toolreplay.guard.screen", "toolreplay.policy.screen"]
        self.assertEqual([name for name in unneeded if name in loaded], [])

    def test_other_arguments_still_go_through_the_parser(self) -> None:
        for arguments, message in (
                (["--policy", self.policy], "error: hook claude-code needs --policy FILE and --records DIR\n"),
                (["--policy", self.policy, "--rec", self.records, "--x", "1"], "error: unrecognized arguments: --x 1\n")):
            with self.subTest(arguments=arguments):
                code, out, err = run("hook", "claude-code", *arguments, stdin=b"{}")
                self.assertEqual((code, out, err.splitlines(keepends=True)[0]), (2, "", message))


# Real-looking secrets: AWS's documented example key id, a GitHub token of the real shape, jwt.io's example JWT.
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
GITHUB_TOKEN = "ghp_" + "x7Kq2mN9pL4vR8sT1wY6zB3cD5fG0hJ2kA9e"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
       ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")


class RedactionTest(HookTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.policy = self.write_policy(dict(POLICY, write_tools=["Write", "mcp__db__query"], redact={"builtin": True}),
                                        "redacting.json")
        self.key = os.path.join(self.directory, "redact.key")
        with open(self.key, "wb") as out:
            out.write(b"a key of 32 bytes kept elsewhere\n")

    def redacted(self, payload: dict[str, Any], key: str | None = "default") -> tuple[int, str, str]:
        extra = [] if key is None else ["--redact-key", self.key if key == "default" else key]
        return run("hook", "claude-code", "--policy", self.policy, "--records", self.records, *extra,
                   stdin=json.dumps(payload).encode())

    def assert_no_secret_on_disk(self) -> None:
        for name in os.listdir(self.records):
            with open(os.path.join(self.records, name), "rb") as handle:
                data = handle.read()
            for secret in (AWS_KEY_ID, GITHUB_TOKEN, JWT, "IOSFODNN7EXAMPLE", GITHUB_TOKEN[4:], JWT.split(".")[2]):
                self.assertNotIn(secret.encode(), data, name)

    def test_no_secret_byte_reaches_the_record_and_calls_match_by_their_redacted_form(self) -> None:
        deploy = {"command": f"AWS_ACCESS_KEY_ID={AWS_KEY_ID} aws s3 ls s3://bucket"}
        self.assertEqual(self.redacted(self.payload("PreToolUse", "Bash", deploy, "toolu_1")), (0, ALLOW, ""))
        self.assert_no_secret_on_disk()  # the intent and the pending call, while the command runs
        self.assertEqual(self.redacted(self.payload("PostToolUse", "Bash", deploy, "toolu_1", tool_response={
            "stdout": f"token {GITHUB_TOKEN}\nsession {JWT}\n", "stderr": "", "interrupted": False})), (0, "", ""))
        note = {"file_path": os.path.join(self.project, "src", "env.py"), "content": f"TOKEN = '{GITHUB_TOKEN}'\n"}
        self.assertEqual(self.redacted(self.payload("PreToolUse", "Write", note, "toolu_2")), (0, ASK, ""))
        self.assertEqual(self.redacted(self.payload("PostToolUse", "Write", note, "toolu_2", tool_response={
            "type": "create", "filePath": note["file_path"], "content": note["content"]})), (0, "", ""))
        # a write of the policy's (not one of Claude Code's, each call of which is a new action), then the same
        # call again in a new process: matched by its redacted form to the record's, it is not run again
        store = {"sql": f"insert into tokens values ('{GITHUB_TOKEN}')"}
        self.assertEqual(self.redacted(self.payload("PreToolUse", "mcp__db__query", store, "toolu_3")), (0, ASK, ""))
        self.assertEqual(self.redacted(self.payload("PostToolUse", "mcp__db__query", store, "toolu_3",
                                                    tool_response={"rows": 1})), (0, "", ""))
        self.assertEqual(self.redacted(self.payload("PreToolUse", "mcp__db__query", store, "toolu_6")), (0, decision(
            "deny", "toolreplay: already ran: an identical mcp__db__query call is on record and is not run again"),
            ""))
        # a write whose Post never came: its identical retry is refused, matched by the redacted intent
        push = {"command": f"curl -H 'Authorization: Bearer {JWT}' https://example.com/deploy"}
        self.assertEqual(self.redacted(self.payload("PreToolUse", "Bash", push, "toolu_4")), (0, ALLOW, ""))
        code, out, _ = self.redacted(self.payload("PreToolUse", "Bash", push, "toolu_5"))
        self.assertEqual((code, json.loads(out)["hookSpecificOutput"]["permissionDecisionReason"][:38]),
                         (0, "toolreplay: outcome unknown: an identi"))
        self.assert_no_secret_on_disk()
        lines = self.lines()
        self.assertEqual([(line["tool"], line["meta"]["outcome"]) for line in lines],
                         [("Bash", "ran"), ("Write", "ran"), ("mcp__db__query", "ran"), ("mcp__db__query", "cached"),
                          ("Bash", "refused")])
        self.assertRegex(lines[0]["args"]["command"],
                         r"^AWS_ACCESS_KEY_ID=\[redacted:aws-access-key:[0-9a-f]{24}\] aws s3 ls s3://bucket$")
        self.assertRegex(lines[0]["response"]["stdout"], r"^token \[redacted:github-token:[0-9a-f]{24}\]\n"
                                                         r"session \[redacted:jwt:[0-9a-f]{24}\]\n$")
        self.assertRegex(lines[1]["args"]["content"], r"^TOKEN = '\[redacted:github-token:[0-9a-f]{24}\]'\n$")
        self.assertEqual((lines[3]["args"], lines[3]["response"]), (lines[2]["args"], {"rows": 1}))
        self.assertEqual(run("verify", self.record), (0, "chain: intact\n", ""))

    def test_the_key_is_read_as_mcp_proxys_and_fails_closed(self) -> None:
        pre = self.payload("PreToolUse", "Bash", {"command": "ls"}, "toolu_k")
        short = os.path.join(self.directory, "short.key")
        with open(short, "wb") as out:
            out.write(b"fifteen bytes!!\r\n")  # one final CRLF left out, as for --hmac-key
        missing = os.path.join(self.directory, "missing.key")
        plain = self.write_policy(POLICY, "plain.json")
        prefix = "error: toolreplay hook: "
        self.assertEqual(self.redacted(pre, key=None), (2, "", prefix + "the policy's \"redact\" section needs "
                                                             "--redact-key FILE (a key of at least 16 bytes, kept off "
                                                             "the record)\n"))
        self.assertEqual(self.redacted(pre, key=short), (2, "", prefix + f"--redact-key {short}: a redaction key "
                                                              "must be at least 16 bytes\n"))
        self.assertEqual(self.redacted(pre, key=missing), (2, "", prefix + f"--redact-key {missing}: cannot read "
                                                                f"{missing}: No such file or directory\n"))
        self.assertEqual(run("hook", "claude-code", "--policy", plain, "--records", self.records, "--redact-key",
                             self.key, stdin=json.dumps(pre).encode()),
                         (2, "", prefix + "--redact-key needs a policy with a \"redact\" section\n"))
        self.assertEqual(os.listdir(self.records), [self.session + ".lock"])
        # a Post too: its response goes on record only redacted
        self.assertEqual(self.redacted(pre), (0, ALLOW, ""))
        post = self.payload("PostToolUse", "Bash", {"command": "ls"}, "toolu_k", tool_response={"stdout": JWT})
        self.assertEqual(self.redacted(post, key=None)[0], 2)
        self.assertEqual(self.redacted(post), (0, "", ""))
        self.assert_no_secret_on_disk()

    def test_print_settings_names_the_key(self) -> None:
        code, out, _ = run("hook", "claude-code", "--policy", "p.json", "--records", "r", "--redact-key",
                           "my key", "--print-settings")
        self.assertEqual((code, json.loads(out)["hooks"]["PreToolUse"][0]["hooks"][0]["command"]),
                         (0, f"{shlex.quote(sys.executable)} -S {os.path.join(ROOT, 'toolreplay', 'hooks', 'client.py')} "
                             "claude-code --policy p.json --records r --redact-key 'my key'"))


class InstallTest(HookTestCase):
    def install(self, settings: str) -> tuple[int, str, str]:
        return run("hook", "claude-code", "--policy", ".claude/policy.json", "--records", "records", "--install",
                   settings)

    def expected_block(self) -> dict[str, Any]:
        code, out, _ = run("hook", "claude-code", "--policy", ".claude/policy.json", "--records", "records",
                           "--print-settings")
        self.assertEqual(code, 0)
        return dict(json.loads(out)["hooks"])

    def test_a_new_settings_file_gets_the_block(self) -> None:
        settings = os.path.join(self.project, "settings.json")
        self.assertEqual(self.install(settings), (0, f"{settings}: added the hook to 4 events (PreToolUse, "
                                                     "PostToolUse, PostToolUseFailure, SessionEnd)\n", ""))
        with open(settings, encoding="utf-8") as handle:
            self.assertEqual(json.load(handle), {"hooks": self.expected_block()})

    def test_other_settings_and_hooks_stay_and_nothing_is_added_twice(self) -> None:
        settings = os.path.join(self.project, "settings.json")
        theirs = {"matcher": "Bash", "hooks": [{"type": "command", "command": "jq -e . >/dev/null"}]}
        with open(settings, "w", encoding="utf-8") as out:
            json.dump({"model": "opus", "hooks": {"PreToolUse": [theirs], "Stop": [theirs]}}, out)
        self.assertEqual(self.install(settings)[0], 0)
        with open(settings, "rb") as handle:
            first = handle.read()
        block = self.expected_block()
        self.assertEqual(json.loads(first), {"model": "opus", "hooks": {
            "PreToolUse": [theirs, *block["PreToolUse"]], "Stop": [theirs], "PostToolUse": block["PostToolUse"],
            "PostToolUseFailure": block["PostToolUseFailure"], "SessionEnd": block["SessionEnd"]}})
        self.assertEqual(self.install(settings), (0, f"{settings}: the hook is already there for every event\n", ""))
        with open(settings, "rb") as handle:
            self.assertEqual(handle.read(), first)

    def test_a_settings_file_it_cannot_read_is_left_alone(self) -> None:
        settings = os.path.join(self.project, "settings.json")
        for content, message in ((b'{"hooks": {\n  "PreToolUse": [}\n', "2: invalid JSON"),
                                 (b"[]", "the settings file is not a JSON object"),
                                 (b'{"hooks": {"PreToolUse": {}}}', '"hooks"."PreToolUse" is not a list')):
            with self.subTest(content=content):
                with open(settings, "wb") as out:
                    out.write(content)
                code, out_text, err = self.install(settings)
                self.assertEqual((code, out_text), (2, ""))
                self.assertTrue(err.startswith(f"error: {settings}:") and message in err, err)
                with open(settings, "rb") as handle:
                    self.assertEqual(handle.read(), content)

    def test_install_and_print_settings_exclude_each_other(self) -> None:
        code, _, err = run("hook", "claude-code", "--policy", "p", "--records", "r", "--print-settings", "--install",
                           "s.json")
        self.assertEqual((code, err.splitlines()[0]), (2, "error: argument --install: not allowed with argument "
                                                          "--print-settings"))


class BadInputTest(HookTestCase):
    def assert_fails_closed(self, payload: dict[str, Any] | bytes, message: str, policy: str | None = None) -> None:
        self.assertEqual(self.in_process(payload, policy), (2, "", f"error: toolreplay hook: {message}\n"))

    def test_usage(self) -> None:
        self.assertEqual(run("hook", "claude-code", "--records", self.records, stdin=b"{}"),
                         (2, "", "error: hook claude-code needs --policy FILE and --records DIR\n"))

    def test_a_fault_of_the_hook_itself_blocks_the_call(self) -> None:
        # exit 1 (a traceback) would let Claude Code run the tool: any fault is exit 2, one line, no traceback
        payload = json.dumps(self.payload("PreToolUse", "Bash", {"command": "ls"}, "toolu_f")).encode()
        with mock.patch("toolreplay.hooks.core.handle_hook", side_effect=KeyError("tool_input\x1b[2J")):
            self.assertEqual(self.in_process(payload), (2, "", "error: toolreplay hook: internal error (KeyError: "
                                                           "'tool_input\\x1b[2J'); the call is blocked\n"))

    def test_malformed_input(self) -> None:
        self.assertEqual(self.hook(b'{"session_id": '),
                         (2, "", "error: toolreplay hook: hook input is not a JSON object (invalid JSON)\n"))
        self.assert_fails_closed(b"\xff", "hook input is not a JSON object (invalid JSON)")
        self.assert_fails_closed(b"[]", "hook input is not a JSON object")
        self.assert_fails_closed(self.payload("Stop"), 'unknown hook event "Stop" (handled: PreToolUse, '
                                                       'PostToolUse, PostToolUseFailure, SessionEnd)')
        self.assert_fails_closed(self.payload("PreToolUse", "Bash", {"command": "ls"}, None),
                                 "PreToolUse input has no tool_use_id")
        self.assert_fails_closed(dict(self.payload("PreToolUse", "Bash", {}, "x"), tool_input="ls"),
                                 "PreToolUse input has no tool_input object")
        self.assert_fails_closed(dict(self.payload("PreToolUse", "Bash", {}, "x"), cwd="project"),
                                 "PreToolUse input has no absolute cwd")
        for session in ("../escape", "a/b", ".hidden", "", "x" * 129, None):
            self.assert_fails_closed(dict(self.payload("SessionEnd"), session_id=session),
                                     "session_id must be a plain file name (letters, digits, _ . -; up to 128)")
        self.assertEqual(os.listdir(self.records), [])

    def test_a_post_without_a_pre(self) -> None:
        self.assert_fails_closed(self.payload("PostToolUse", "Bash", {"command": "ls"}, "toolu_9", tool_response={}),
                                 'PostToolUse for tool_use_id "toolu_9" without a PreToolUse that allowed it')
        self.assertEqual(self.pre("Bash", {"command": "ls"}, "toolu_9"), (0, ALLOW, ""))
        self.assert_fails_closed(self.payload("PostToolUse", "Read", {}, "toolu_9", tool_response={}),
                                 "PostToolUse names another tool than its PreToolUse")
        self.assert_fails_closed(self.payload("PreToolUse", "Bash", {"command": "ls"}, "toolu_9"),
                                 'tool_use_id "toolu_9" was already allowed and has not completed')

    def test_a_policy_that_does_not_load(self) -> None:
        missing = os.path.join(self.directory, "missing.json")
        self.assert_fails_closed(self.payload("PreToolUse", "Bash", {}, "x"),
                                 f"policy does not load: cannot read {missing}: No such file or directory", missing)
        bad = self.write_policy({"agent": "a", "allowed_tools": ["Bash"], "write_tools": ["Edit"]}, "bad.json")
        self.assert_fails_closed(self.payload("PreToolUse", "Bash", {}, "x"),
                                 f'policy does not load: {bad}: write tool "Edit" is not in allowed_tools '
                                 "(a write tool must be allowed to be confirmed)", bad)

    def test_a_record_that_cannot_be_written(self) -> None:
        os.rmdir(self.records)
        self.assert_fails_closed(self.payload("PreToolUse", "Bash", {}, "x"),
                                 f"records folder {self.records} does not exist")
        os.mkdir(self.records)
        with open(self.record, "w", encoding="utf-8") as out:
            out.write('{"index":0,"tool":"Bash","args":{},"response":{}}\n')  # plain, not sealed
        self.assert_fails_closed(self.payload("PreToolUse", "Bash", {}, "x"),
                                 f"cannot open the record: {self.record}: file holds plain records; "
                                 "cannot continue it as a sealed record")


if __name__ == "__main__":
    unittest.main()
