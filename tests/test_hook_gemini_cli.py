"""`toolreplay hook gemini-cli`: Gemini CLI's hook events through the command and the real processes.

Provenance of the payloads: Gemini CLI's own source, google-gemini/gemini-cli at commit 5411f113
(2026-08-21). docs/hooks/reference.md ("Base input schema", "BeforeTool", "AfterTool", "SessionEnd") and
packages/core/src/hooks/types.ts (`HookInput`, `BeforeToolInput`, `AfterToolInput`, `SessionEndInput`):
every event has `session_id` (a UUID, `randomUUID()` in packages/core/src/utils/session.ts),
`transcript_path`, `cwd`, `hook_event_name`, `timestamp`; BeforeTool adds `tool_name` and `tool_input`
(hookEventHandler.test.ts: `{session_id: 'test-session', cwd: '/test/project', hook_event_name:
'BeforeTool', tool_name: 'EditTool', tool_input: {file: 'test.txt'}}`), AfterTool adds `tool_response`,
built in packages/core/src/core/coreToolHookTriggers.ts as `{llmContent, returnDisplay, error}`
(JSON.stringify drops an undefined `error`), SessionEnd adds `reason` (`"exit"`, `"clear"`, ...). No event
carries a call id. Tool names and argument keys are docs/reference/tools.md's (`run_shell_command`:
`command`, `description`, `dir_path`; `write_file`: `file_path`, `content`; `read_file`: `file_path`),
MCP tools `mcp_<server>_<tool>` (packages/core/src/tools/mcp-tool.ts). The decision Gemini CLI reads is
docs/hooks/writing-hooks.md's `{"decision": "allow"}` / `{"decision": "deny", "reason": ...}`. Only `cwd`
(a temporary project), the ids and the times differ here.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.support import integration
from tests.test_cli import run
from toolreplay.guard.intents import read_intents
from toolreplay.hooks import client as hook_client
from toolreplay.hooks.core import GEMINI_CLI, HookAnswer, settings_snippet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SESSION = "8f2c1a3e-5b7d-4e9f-a1c3-2d4e6f8a0b1c"
TRANSCRIPT = f"/home/user/.gemini/tmp/my-project/chats/session-2026-08-21T16-16-{SESSION[:8]}.json"
POLICY = {
    "agent": "gemini-cli",
    "allowed_tools": ["run_shell_command", "read_file", "replace", "write_file", "mcp_db_query"],
    "write_tools": ["write_file", "mcp_db_query"],
    "rules": [
        {"id": "no-rm", "tools": ["run_shell_command"], "effect": "deny", "reason": "no rm -rf",
         "when": [{"arg": "command", "glob": ["rm -rf*"]}]},
        {"id": "src-only", "tools": ["replace"], "effect": "deny", "reason": "edit only src/",
         "unless": [{"arg": "file_path", "under": ["src"]}]},
        {"id": "push-asks", "tools": ["run_shell_command"], "effect": "ask", "reason": "a person approves a push",
         "when": [{"arg": "command", "glob": ["git push*"]}]},
    ],
}
ALLOW = '{"decision": "allow"}\n'
CONFIRM = ": the policy asks a person to confirm this call, and Gemini CLI hooks cannot ask; it did not run"


def deny(reason: str) -> str:
    return json.dumps({"decision": "deny", "reason": reason}) + "\n"


class GeminiHookTestCase(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory, True)
        self.project = os.path.join(self.directory, "my-project")
        self.records = os.path.join(self.directory, "records")
        os.mkdir(self.project)
        os.mkdir(self.records)
        self.policy = self.write_policy(POLICY)

    def write_policy(self, obj: dict[str, Any], name: str = "policy.json") -> str:
        path = os.path.join(self.directory, name)
        with open(path, "w", encoding="utf-8") as out:
            json.dump(obj, out)
        return path

    def payload(self, event: str, tool: str | None = None, args: dict[str, Any] | None = None,
                **extra: Any) -> dict[str, Any]:
        obj: dict[str, Any] = {"session_id": SESSION, "transcript_path": TRANSCRIPT, "cwd": self.project,
                               "hook_event_name": event, "timestamp": "2026-08-21T16:16:56.000Z"}
        if tool is not None:
            obj.update(tool_name=tool, tool_input=args if args is not None else {})
        obj.update(extra)
        return obj

    def in_process(self, payload: dict[str, Any] | bytes, policy: str | None = None) -> tuple[int, str, str]:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        return run("hook", "gemini-cli", "--policy", policy or self.policy, "--records", self.records, stdin=data)

    def hook(self, payload: dict[str, Any] | bytes) -> tuple[int, str, str]:
        """The real command, a new process, as Gemini CLI runs it (in the project folder)."""
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        env = dict(os.environ, PYTHONPATH=ROOT)
        done = subprocess.run([sys.executable, "-m", "toolreplay", "hook", "gemini-cli", "--policy", self.policy,
                               "--records", self.records], input=data, capture_output=True, cwd=self.project,
                              env=env, timeout=60, check=False)
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    def before(self, tool: str, args: dict[str, Any]) -> tuple[int, str, str]:
        return self.in_process(self.payload("BeforeTool", tool, args))

    def after(self, tool: str, args: dict[str, Any], content: Any = "ok") -> tuple[int, str, str]:
        return self.in_process(self.payload("AfterTool", tool, args,
                                            tool_response={"llmContent": content, "returnDisplay": content}))

    @property
    def record(self) -> str:
        return os.path.join(self.records, SESSION + ".jsonl")

    def lines(self) -> list[dict[str, Any]]:
        with open(self.record, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle]

    def assert_eight_concurrent_pairs(self, hook: Callable[[dict[str, Any]], tuple[int, str, str]],
                                      identical: bool = False) -> None:
        """Eight BeforeTool/AfterTool pairs of one session at once, each event a `hook` process: every call
        recorded once, with a response of its own, in one intact chain, nothing left pending. `identical`:
        eight identical read_file calls (paired first in, first out) instead of eight distinct commands."""
        def pair(number: int) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
            tool, args = (("read_file", {"file_path": "/etc/hostname"}) if identical
                          else ("run_shell_command", {"command": f"echo {number}"}))
            response = {"llmContent": f"{number}\n", "returnDisplay": f"{number}\n"}
            return (hook(self.payload("BeforeTool", tool, args)),
                    hook(self.payload("AfterTool", tool, args, tool_response=response)))

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(pair, range(8)))
        self.assertEqual(results, [((0, ALLOW, ""), (0, "", ""))] * 8)
        lines = self.lines()
        self.assertEqual([line["index"] for line in lines], list(range(8)))
        self.assertEqual(sorted(line["response"]["llmContent"] for line in lines), [f"{n}\n" for n in range(8)])
        if not identical:  # distinct calls: each response is its own call's
            for line in lines:
                self.assertEqual(line["response"]["llmContent"], line["args"]["command"][5:] + "\n")
        self.assertEqual([line["meta"]["outcome"] for line in lines], ["ran"] * 8)
        self.assertNotIn("call_id", lines[0]["meta"])
        self.assertEqual(run("verify", self.record), (0, "chain: intact\n", ""))
        # nothing is left pending; a hook server keeps the intent file, every intent in it settled
        names = sorted(os.listdir(self.records))
        self.assertEqual([name for name in names if name.startswith(SESSION) and not name.endswith(".intents")],
                         [SESSION + ".jsonl", SESSION + ".lock"])
        self.assertEqual([intent for intent in read_intents(self.record + ".intents") if intent.done is None], [])


class OutputTest(unittest.TestCase):
    """The pure parts: what Gemini CLI reads on stdout, and the settings block."""

    def test_the_decision_is_gemini_clis_decision_and_reason(self) -> None:
        self.assertEqual(GEMINI_CLI.output(HookAnswer("allow", "toolreplay: allowed by the policy")),
                         {"decision": "allow"})
        self.assertEqual(GEMINI_CLI.output(HookAnswer("deny", "toolreplay: tool not allowed: x")),
                         {"decision": "deny", "reason": "toolreplay: tool not allowed: x"})
        self.assertIsNone(GEMINI_CLI.output(HookAnswer()))
        self.assertEqual(GEMINI_CLI.events, ("BeforeTool", "AfterTool", "SessionEnd"))

    def test_settings_snippet(self) -> None:
        entry = [{"matcher": "*", "hooks": [{"name": "toolreplay", "type": "command", "command": "c"}]}]
        self.assertEqual(settings_snippet("c", GEMINI_CLI),
                         {"hooks": {"BeforeTool": entry, "AfterTool": entry, "SessionEnd": entry}})

    def test_the_fast_client_takes_gemini_cli(self) -> None:
        self.assertEqual(hook_client.plain_options(["gemini-cli", "--policy", "p.json", "--records", "r"]),
                         {"--policy": "p.json", "--records": "r"})


@integration  # the real command, a process per hook event
class DecisionsTest(GeminiHookTestCase):
    def test_the_behaviour_table_through_the_real_command(self) -> None:
        src = os.path.join(self.project, "src", "app.py")
        edit = {"old_string": "a", "new_string": "b", "instruction": "rename"}
        self.assertEqual(self.hook(self.payload("BeforeTool", "run_shell_command",
                                                {"command": "npm test", "description": "run the tests"})),
                         (0, ALLOW, ""))
        self.assertEqual(self.hook(self.payload("BeforeTool", "run_shell_command", {"command": "rm -rf /"})),
                         (0, deny("toolreplay: denied by rule no-rm: no rm -rf"), ""))
        self.assertEqual(self.hook(self.payload("BeforeTool", "grep_search", {"pattern": "x"})),
                         (0, deny("toolreplay: tool not allowed: grep_search"), ""))
        self.assertEqual(self.hook(self.payload("BeforeTool", "replace", dict(edit, file_path=src))), (0, ALLOW, ""))
        self.assertEqual(self.hook(self.payload("BeforeTool", "replace",
                                                dict(edit, file_path=os.path.join(self.project, "README.md")))),
                         (0, deny("toolreplay: denied by rule src-only: edit only src/"), ""))
        # confirmation: Gemini CLI hooks cannot ask, so the call is denied and says so
        self.assertEqual(self.hook(self.payload("BeforeTool", "write_file", {"file_path": src, "content": "x"})),
                         (0, deny("toolreplay: confirmation required" + CONFIRM), ""))
        self.assertEqual(self.hook(self.payload("BeforeTool", "run_shell_command", {"command": "git push"})),
                         (0, deny("toolreplay: confirmation required" + CONFIRM), ""))
        self.assertEqual(self.hook(self.payload("BeforeTool", "mcp_db_drop", {})),
                         (0, deny("toolreplay: tool not allowed: mcp_db_drop"), ""))
        self.assertEqual([(line["tool"], line["meta"]["outcome"], line["response"]["error"]) for line in self.lines()],
                         [("run_shell_command", "refused", "denied by rule no-rm: no rm -rf"),
                          ("grep_search", "refused", "tool not allowed: grep_search"),
                          ("replace", "refused", "denied by rule src-only: edit only src/"),
                          ("write_file", "refused", "confirmation required"),
                          ("run_shell_command", "refused", "confirmation required"),
                          ("mcp_db_drop", "refused", "tool not allowed: mcp_db_drop")])

    def test_bad_input_fails_closed_with_exit_2_and_one_line(self) -> None:
        # exit 2: Gemini CLI blocks the tool and gives the model stderr as the reason; any other failing exit
        # code would only be a warning, and the tool would run
        self.assertEqual(self.hook(b'{"session_id": '),
                         (2, "", "error: toolreplay hook: hook input is not a JSON object (invalid JSON)\n"))
        self.assertEqual(self.hook(self.payload("AfterTool", "read_file", {"file_path": "a"}, tool_response={})),
                         (2, "", 'error: toolreplay hook: AfterTool for "read_file" without a BeforeTool that allowed '
                                 "it (no call of that tool_name and tool_input is pending)\n"))

    def test_print_settings(self) -> None:
        code, out, err = run("hook", "gemini-cli", "--policy", ".gemini/policy.json", "--records",
                             ".gemini/toolreplay records", "--print-settings")
        client = shlex.quote(os.path.join(ROOT, "toolreplay", "hooks", "client.py"))
        command = (f"{shlex.quote(sys.executable)} -S {client} gemini-cli --policy .gemini/policy.json "
                   "--records '.gemini/toolreplay records'")
        entry = [{"matcher": "*", "hooks": [{"name": "toolreplay", "type": "command", "command": command}]}]
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(json.loads(out), {"hooks": {"BeforeTool": entry, "AfterTool": entry, "SessionEnd": entry}})


class RecordTest(GeminiHookTestCase):
    def test_a_session_is_one_sealed_record_that_verify_replay_and_scope_read(self) -> None:
        self.assertEqual(self.before("read_file", {"file_path": "README.md"}), (0, ALLOW, ""))
        self.assertEqual(self.after("read_file", {"file_path": "README.md"}, "# my project\n"), (0, "", ""))
        self.assertEqual(self.before("run_shell_command", {"command": "rm -rf build"})[0], 0)
        self.assertEqual(self.before("run_shell_command", {"command": "false"}), (0, ALLOW, ""))
        failed = {"llmContent": "Command: false\nExit Code: 1", "returnDisplay": "",
                  "error": {"message": "Command exited with code 1", "type": "shell_execute_error"}}
        self.assertEqual(self.in_process(self.payload("AfterTool", "run_shell_command", {"command": "false"},
                                                      tool_response=failed)), (0, "", ""))
        self.assertEqual(self.in_process(self.payload("SessionEnd", reason="exit")), (0, "", ""))
        lines = self.lines()
        self.assertEqual([(line["index"], line["tool"], line["meta"]["outcome"]) for line in lines],
                         [(0, "read_file", "ran"), (1, "run_shell_command", "refused"),
                          (2, "run_shell_command", "ran")])
        self.assertEqual(lines[0]["response"], {"llmContent": "# my project\n", "returnDisplay": "# my project\n"})
        self.assertEqual(lines[2]["response"], failed)
        # run_shell_command is one of Gemini CLI's built-in writes: its records say it changes state
        self.assertEqual([sorted(line["meta"]) for line in lines], [["duration_ms", "outcome", "ts"]]
                         + [["duration_ms", "mutates", "outcome", "ts"]] * 2)
        self.assertEqual(sorted(os.listdir(self.records)), [SESSION + ".jsonl", SESSION + ".lock"])
        self.assertEqual(run("verify", self.record), (0, "chain: intact\n", ""))
        code, out, _ = run("replay", self.record)
        self.assertEqual((code, out.splitlines()[0]), (0, "calls: 3"))
        rooted = self.write_policy(dict(POLICY, root=self.project), "rooted.json")
        self.assertEqual(run("scope", self.record, rooted),
                         (0, "calls: 3\nfindings: 0\ninformation: 1\nindex 1: blocked: tool 'run_shell_command' was "
                             "refused by the guard: denied by rule no-rm: no rm -rf\n", ""))

    def test_two_identical_calls_in_flight_are_completed_first_in_first_out(self) -> None:
        args = {"file_path": "/etc/hostname"}
        self.assertEqual(self.before("read_file", args), (0, ALLOW, ""))
        self.assertEqual(self.before("read_file", {"file_path": "/etc/hosts"}), (0, ALLOW, ""))
        self.assertEqual(self.before("read_file", args), (0, ALLOW, ""))
        self.assertEqual(self.after("read_file", args, "first"), (0, "", ""))
        self.assertEqual(self.after("read_file", {"file_path": "/etc/hosts"}, "hosts"), (0, "", ""))
        self.assertEqual(self.after("read_file", args, "second"), (0, "", ""))
        lines = self.lines()
        self.assertEqual([(line["args"]["file_path"], line["response"]["llmContent"]) for line in lines],
                         [("/etc/hostname", "first"), ("/etc/hosts", "hosts"), ("/etc/hostname", "second")])
        # the oldest BeforeTool is completed first: its time is the earlier one
        self.assertLess(lines[0]["meta"]["ts"], lines[1]["meta"]["ts"])
        self.assertLess(lines[1]["meta"]["ts"], lines[2]["meta"]["ts"])
        self.assertFalse(os.path.exists(os.path.join(self.records, SESSION + ".pending")))
        # a third AfterTool has no BeforeTool left to complete
        self.assertEqual(self.after("read_file", args), (2, "", 'error: toolreplay hook: AfterTool for "read_file" '
                                                               "without a BeforeTool that allowed it (no call of that "
                                                               "tool_name and tool_input is pending)\n"))

    def test_a_repeat_of_a_non_repeatable_write_is_denied_as_cached(self) -> None:
        allowing = self.write_policy(dict(POLICY, rules=[
            {"id": "inserts", "tools": ["mcp_db_query"], "effect": "allow", "reason": "inserts need no person",
             "when": [{"arg": "sql", "glob": ["insert *"]}]}]), "allowing.json")
        store = {"sql": "insert into notes values ('hello')"}
        self.assertEqual(self.in_process(self.payload("BeforeTool", "mcp_db_query", store), allowing), (0, ALLOW, ""))
        self.assertEqual(self.in_process(self.payload("AfterTool", "mcp_db_query", store, tool_response={
            "llmContent": [{"text": "1 row"}], "returnDisplay": "1 row"}), allowing), (0, "", ""))
        self.assertEqual(self.in_process(self.payload("BeforeTool", "mcp_db_query", store), allowing), (0, deny(
            "toolreplay: already ran: an identical mcp_db_query call is on record and is not run again"), ""))
        # the shell is one of Gemini CLI's repeatable writes: running it twice is two runs
        for _ in range(2):
            self.assertEqual(self.in_process(self.payload("BeforeTool", "run_shell_command", {"command": "ls"}),
                                             allowing), (0, ALLOW, ""))
            self.assertEqual(self.in_process(self.payload("AfterTool", "run_shell_command", {"command": "ls"},
                                                          tool_response={"llmContent": "a"}), allowing), (0, "", ""))
        self.assertEqual([line["meta"]["outcome"] for line in self.lines()], ["ran", "cached", "ran", "ran"])

    def test_a_write_whose_after_tool_never_came_is_an_unknown_outcome(self) -> None:
        args = {"command": "make deploy"}
        self.assertEqual(self.before("run_shell_command", args), (0, ALLOW, ""))
        # Gemini CLI was killed while the command ran: no AfterTool; the model tries again
        self.assertEqual(self.before("run_shell_command", args), (0, deny(
            "toolreplay: outcome unknown: an identical run_shell_command call started earlier and its result was "
            f"never recorded; a person must check whether it took effect, then delete its line from "
            f"{SESSION}.jsonl.intents"), ""))
        self.assertEqual(self.before("run_shell_command", {"command": "make status"}), (0, ALLOW, ""))


@integration
class ConcurrencyTest(GeminiHookTestCase):
    def test_eight_concurrent_hook_processes_on_one_session(self) -> None:
        self.assert_eight_concurrent_pairs(self.hook)

    def test_eight_identical_calls_at_once_are_each_recorded_once(self) -> None:
        self.assert_eight_concurrent_pairs(self.hook, identical=True)

    def test_eight_concurrent_events_through_the_fast_command_and_its_server(self) -> None:
        code, out, _ = run("hook", "gemini-cli", "--policy", self.policy, "--records", self.records,
                           "--print-settings")
        command = shlex.split(json.loads(out)["hooks"]["BeforeTool"][0]["hooks"][0]["command"])
        socket = os.path.join(self.records, hook_client.SOCKET_NAME)
        os.chmod(self.records, 0o700)  # a private folder whatever the umask: the server serves only there
        self.addCleanup(lambda: os.path.lexists(socket) and os.unlink(socket))  # the server ends when it goes

        def fast(payload: dict[str, Any]) -> tuple[int, str, str]:
            done = subprocess.run(command, input=json.dumps(payload).encode(), capture_output=True, cwd=self.project,
                                  timeout=60, check=False)
            return done.returncode, done.stdout.decode(), done.stderr.decode()

        self.assertEqual(code, 0)
        self.assertEqual(fast(self.payload("SessionEnd", reason="exit")), (0, "", ""))  # starts the server
        self.assert_eight_concurrent_pairs(fast)


class BadInputTest(GeminiHookTestCase):
    def assert_fails_closed(self, payload: dict[str, Any] | bytes, message: str, policy: str | None = None) -> None:
        self.assertEqual(self.in_process(payload, policy), (2, "", f"error: toolreplay hook: {message}\n"))

    def test_usage(self) -> None:
        self.assertEqual(run("hook", "gemini-cli", "--records", self.records, stdin=b"{}"),
                         (2, "", "error: hook gemini-cli needs --policy FILE and --records DIR\n"))

    def test_malformed_input(self) -> None:
        self.assert_fails_closed(b'{"session_id": ', "hook input is not a JSON object (invalid JSON)")
        self.assert_fails_closed(b"[]", "hook input is not a JSON object")
        self.assert_fails_closed(self.payload("BeforeAgent", prompt="hi"),
                                 'unknown hook event "BeforeAgent" (handled: BeforeTool, AfterTool, SessionEnd)')
        self.assert_fails_closed(self.payload("PreToolUse", "run_shell_command", {"command": "ls"}),
                                 'unknown hook event "PreToolUse" (handled: BeforeTool, AfterTool, SessionEnd)')
        self.assert_fails_closed({k: v for k, v in self.payload("BeforeTool", "read_file").items() if k != "tool_name"},
                                 "BeforeTool input has no tool_name")
        self.assert_fails_closed(dict(self.payload("BeforeTool", "read_file"), tool_input="x"),
                                 "BeforeTool input has no tool_input object")
        self.assert_fails_closed(dict(self.payload("BeforeTool", "read_file"), cwd="project"),
                                 "BeforeTool input has no absolute cwd")
        self.assert_fails_closed(dict(self.payload("SessionEnd"), session_id="../escape"),
                                 "session_id must be a plain file name (letters, digits, _ . -; up to 128)")
        self.assertEqual(os.listdir(self.records), [])

    def test_an_after_tool_without_its_before_tool(self) -> None:
        message = ('AfterTool for "read_file" without a BeforeTool that allowed it (no call of that tool_name and '
                   "tool_input is pending)")
        self.assert_fails_closed(self.payload("AfterTool", "read_file", {"file_path": "a"}, tool_response={}), message)
        self.assertEqual(self.before("read_file", {"file_path": "a"}), (0, ALLOW, ""))
        # other arguments (say, rewritten by another hook) or another tool: not this call
        self.assert_fails_closed(self.payload("AfterTool", "read_file", {"file_path": "b"}, tool_response={}), message)
        self.assert_fails_closed(self.payload("AfterTool", "write_file", {"file_path": "a"}, tool_response={}),
                                 message.replace('"read_file"', '"write_file"'))
        # a refused call is not pending either
        self.assertEqual(self.before("grep_search", {"pattern": "a"})[0], 0)
        self.assert_fails_closed(self.payload("AfterTool", "grep_search", {"pattern": "a"}, tool_response={}),
                                 message.replace('"read_file"', '"grep_search"'))
        self.assertEqual(self.after("read_file", {"file_path": "a"}), (0, "", ""))

    def test_a_policy_that_does_not_load(self) -> None:
        missing = os.path.join(self.directory, "missing.json")
        self.assert_fails_closed(self.payload("BeforeTool", "read_file", {}),
                                 f"policy does not load: cannot read {missing}: No such file or directory", missing)


if __name__ == "__main__":
    unittest.main()
