"""`toolreplay hook AGENT --inbox DIR`: a call the policy wants confirmed waits in the approvals inbox and is
allowed or denied from there (as `toolreplay serve` decides it); the record names who decided.

The payloads are those of tests/test_hook_gemini_cli.py and tests/test_hook_codex.py (their provenance is
there). The person is a thread that decides through `toolreplay.guard.inbox.decide`, what the console's
form calls; tests/test_console_inbox.py has the console itself deciding for a front end.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
from typing import Any

from tests import test_hook_codex as codex_tests
from tests import test_hook_gemini_cli as gemini_tests
from tests.support import integration
from tests.test_cli import run
from tests.test_hook_server import wait_for
from tests.test_inbox import wait_for_request
from toolreplay.guard.inbox import Request, decide, inbox_folder
from toolreplay.hooks.protocol import ANSWER_SECONDS, answer_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIENT = os.path.join(ROOT, "toolreplay", "hooks", "client.py")


class Person:
    """Decides the first call that comes into the inbox, on a thread of its own; `request` is what it saw."""

    def __init__(self, records: str, verdict: str, by: str = "Ada") -> None:
        self.request: Request | None = None
        self.thread = threading.Thread(target=self._decide, args=(records, verdict, by))
        self.thread.start()

    def _decide(self, records: str, verdict: str, by: str) -> None:
        self.request = wait_for_request(records, timeout=30)
        decide(records, self.request.id, verdict, "once", by)

    def seen(self) -> Request:
        self.thread.join(30)
        assert self.request is not None
        return self.request


class InboxCase(unittest.TestCase):
    agent = ""

    def setUp(self) -> None:
        self.directory = os.path.realpath(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.directory, True)
        self.project = os.path.join(self.directory, "my-project")
        self.records = os.path.join(self.directory, "records")
        os.mkdir(self.project)
        os.mkdir(self.records, 0o700)
        self.policy = os.path.join(self.directory, "policy.json")
        with open(self.policy, "w", encoding="utf-8") as out:
            json.dump(self.policy_object(), out)

    def policy_object(self) -> dict[str, Any]:
        raise NotImplementedError

    def hook(self, payload: dict[str, Any], *extra: str) -> tuple[int, str, str]:
        return run("hook", self.agent, "--policy", self.policy, "--records", self.records, "--inbox", self.records,
                   *extra, stdin=json.dumps(payload).encode())

    def lines(self, session: str) -> list[dict[str, Any]]:
        with open(os.path.join(self.records, session + ".jsonl"), encoding="utf-8") as handle:
            return [json.loads(line) for line in handle]

    def assert_inbox_empty(self) -> None:
        self.assertEqual(os.listdir(inbox_folder(self.records)), [])


class GeminiCase(InboxCase):
    agent = "gemini-cli"
    session = gemini_tests.SESSION

    def policy_object(self) -> dict[str, Any]:
        return gemini_tests.POLICY

    def payload(self, event: str, tool: str, args: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {"session_id": self.session, "transcript_path": gemini_tests.TRANSCRIPT, "cwd": self.project,
                "hook_event_name": event, "timestamp": "2026-08-21T16:16:56.000Z", "tool_name": tool,
                "tool_input": args, **extra}


class GeminiCliInboxTest(GeminiCase):

    def test_an_approved_write_is_allowed_and_its_record_names_who(self) -> None:
        args = {"file_path": os.path.join(self.project, "src", "a.py"), "content": "x"}
        person = Person(self.records, "approve")
        self.assertEqual(self.hook(self.payload("BeforeTool", "write_file", args)), (0, gemini_tests.ALLOW, ""))
        request = person.seen()
        self.assertEqual((request.tool, request.args, request.front_end, request.session),
                         ("write_file", args, "hook gemini-cli", os.path.join(self.records, self.session + ".jsonl")))
        response = {"llmContent": "written", "returnDisplay": "written"}
        self.assertEqual(self.hook(self.payload("AfterTool", "write_file", args, tool_response=response)), (0, "", ""))
        [line] = self.lines(self.session)
        self.assertEqual((line["tool"], line["response"], line["meta"]["outcome"], line["meta"]["x-decided-by"],
                          line["meta"]["x-confirmed"]), ("write_file", response, "ran", "Ada", "once"))
        self.assertEqual(run("verify", os.path.join(self.records, self.session + ".jsonl")),
                         (0, "chain: intact\n", ""))
        self.assert_inbox_empty()

    def test_an_ask_rule_denied_in_the_inbox_is_denied_and_recorded(self) -> None:
        person = Person(self.records, "deny", "Bob")
        self.assertEqual(self.hook(self.payload("BeforeTool", "run_shell_command", {"command": "git push"})),
                         (0, gemini_tests.deny("toolreplay: confirmation declined (asked in the approvals inbox); "
                                               "it did not run"), ""))
        self.assertEqual((person.seen().tool, person.seen().args), ("run_shell_command", {"command": "git push"}))
        [line] = self.lines(self.session)
        self.assertEqual((line["meta"]["outcome"], line["response"]["error"], line["meta"]["x-decided-by"]),
                         ("refused", "confirmation declined", "Bob"))
        self.assert_inbox_empty()

    def test_nobody_deciding_in_time_denies_the_call(self) -> None:
        args = {"file_path": os.path.join(self.project, "b.txt"), "content": "y"}
        self.assertEqual(self.hook(self.payload("BeforeTool", "write_file", args), "--inbox-timeout", "0.2"),
                         (0, gemini_tests.deny("toolreplay: confirmation timed out (nobody decided in the approvals "
                                               "inbox within 0.2 s); it did not run"), ""))
        [line] = self.lines(self.session)
        self.assertEqual((line["meta"]["outcome"], line["response"]["error"], "x-decided-by" in line["meta"]),
                         ("refused", "confirmation timed out", False))
        self.assert_inbox_empty()

    def test_a_call_that_needs_nobody_does_not_wait(self) -> None:
        self.assertEqual(self.hook(self.payload("BeforeTool", "read_file", {"file_path": "a"})),
                         (0, gemini_tests.ALLOW, ""))
        self.assertEqual(self.hook(self.payload("BeforeTool", "run_shell_command", {"command": "rm -rf /"})),
                         (0, gemini_tests.deny("toolreplay: denied by rule no-rm: no rm -rf"), ""))
        self.assert_inbox_empty()

    def test_bad_options_block_the_call(self) -> None:
        payload = json.dumps(self.payload("BeforeTool", "write_file", {"file_path": "a", "content": "x"})).encode()
        missing = os.path.join(self.directory, "nowhere")
        cases = [
            (["--inbox-timeout", "5"], "error: --inbox-timeout needs --inbox DIR\n"),
            (["--inbox", self.records, "--inbox-timeout", "soon"],
             "error: toolreplay hook: --inbox-timeout soon: expected seconds, more than 0 and at most 86400\n"),
            (["--inbox", self.records, "--inbox-timeout", "0"],
             "error: toolreplay hook: --inbox-timeout 0: expected seconds, more than 0 and at most 86400\n"),
            (["--inbox", missing], f"error: toolreplay hook: cannot keep an inbox in {missing}: it is not a folder\n"),
        ]
        for extra, message in cases:
            with self.subTest(extra=extra):
                self.assertEqual(run("hook", self.agent, "--policy", self.policy, "--records", self.records, *extra,
                                     stdin=payload), (2, "", message))
        self.assertFalse(os.path.exists(os.path.join(self.records, self.session + ".jsonl")))

    def test_the_http_hooks_take_no_inbox(self) -> None:
        self.assertEqual(run("hook", "claude-code", "--policy", "p.json", "--records", "r", "--inbox", "r",
                             "--print-settings", "--http"),
                         (2, "", "error: hook claude-code: --inbox goes with the command hook (`hook serve` has no "
                                 "inbox): use --print-settings without --http\n"))

    def test_print_settings_registers_a_hook_timeout_longer_than_the_wait(self) -> None:
        code, out, err = run("hook", self.agent, "--policy", "p.json", "--records", "records", "--inbox", "records",
                             "--print-settings")
        command = (f"{shlex.quote(sys.executable)} -S {shlex.quote(CLIENT)} gemini-cli --policy p.json --records "
                   "records --inbox records")
        entry = [{"matcher": "*", "hooks": [{"name": "toolreplay", "type": "command", "command": command,
                                             "timeout": 60000}]}]  # milliseconds: 40 s in the inbox, 20 s more
        self.assertEqual((code, err, json.loads(out)),
                         (0, "", {"hooks": {"BeforeTool": entry, "AfterTool": entry, "SessionEnd": entry}}))


class CodexSettingsTest(unittest.TestCase):
    def test_the_hook_timeout_is_in_seconds_and_covers_the_wait(self) -> None:
        code, out, err = run("hook", "codex", "--policy", "p.json", "--records", "r", "--inbox", "r",
                             "--inbox-timeout", "120", "--print-settings")
        self.assertEqual((code, err), (0, ""))
        hooks = [group["hooks"][0] for groups in json.loads(out)["hooks"].values() for group in groups]
        self.assertEqual({(hook["timeout"], hook["command"].endswith(" --inbox r --inbox-timeout 120")) for hook in hooks},
                         {(140, True)})


class CodexInboxTest(InboxCase):
    agent = "codex"
    session = codex_tests.SESSION

    def policy_object(self) -> dict[str, Any]:
        return codex_tests.POLICY

    def payload(self, event: str, tool: str, args: dict[str, Any], call_id: str | None = None,
                **extra: Any) -> dict[str, Any]:
        obj = {"session_id": self.session, "turn_id": "turn-1", "transcript_path": None, "cwd": self.project,
               "hook_event_name": event, "model": "gpt-5", "permission_mode": "default", "tool_name": tool,
               "tool_input": args, **extra}
        if call_id is not None:
            obj["tool_use_id"] = call_id
        return obj

    def test_approve_deny_and_timeout(self) -> None:
        query = {"sql": "delete from t where id = 7"}
        person = Person(self.records, "approve", "Grace")
        self.assertEqual(self.hook(self.payload("PreToolUse", "mcp__db__query", query, "call_1")), (0, "", ""))
        self.assertEqual(person.seen().front_end, "hook codex")
        # Codex would ask the person itself: the PermissionRequest of a call the inbox approved is left to them
        self.assertEqual(self.hook(self.payload("PermissionRequest", "mcp__db__query", query)), (0, "", ""))
        self.assertEqual(self.hook(self.payload("PostToolUse", "mcp__db__query", query, "call_1",
                                                tool_response="1 row")), (0, "", ""))
        person = Person(self.records, "deny", "Grace")
        self.assertEqual(self.hook(self.payload("PreToolUse", "Bash", {"command": "git push"}, "call_2")),
                         (0, codex_tests.deny("toolreplay: confirmation declined (asked in the approvals inbox); it "
                                              "did not run"), ""))
        person.seen()
        self.assertEqual(self.hook(self.payload("PreToolUse", "Bash", {"command": "git push -f"}, "call_3"),
                                   "--inbox-timeout", "0.1"),
                         (0, codex_tests.deny("toolreplay: confirmation timed out (nobody decided in the approvals "
                                              "inbox within 0.1 s); it did not run"), ""))
        lines = self.lines(self.session)
        self.assertEqual([(line["meta"]["outcome"], line["meta"].get("x-decided-by"), line["meta"].get("call_id"))
                          for line in lines],
                         [("ran", "Grace", "call_1"), ("refused", "Grace", "call_2"), ("refused", None, "call_3")])
        self.assertEqual(lines[0]["response"], {"result": "1 row"})
        self.assert_inbox_empty()


class ClaudeCodeInboxTest(InboxCase):
    """Claude Code can ask the person itself (`ask`); with --inbox the person answers in the inbox instead."""

    agent = "claude-code"

    def policy_object(self) -> dict[str, Any]:
        return {"agent": "claude-code", "allowed_tools": ["Bash", "Write"], "write_tools": ["Write"]}

    def test_an_approval_in_the_inbox_is_an_allow_not_an_ask(self) -> None:
        payload = {"session_id": "s1", "transcript_path": "/t.jsonl", "cwd": self.project,
                   "hook_event_name": "PreToolUse", "tool_name": "Write", "tool_use_id": "toolu_1",
                   "tool_input": {"file_path": os.path.join(self.project, "a.txt"), "content": "x"}}
        person = Person(self.records, "approve", "Lin")
        code, out, err = self.hook(payload)
        person.seen()
        self.assertEqual((code, err, json.loads(out)), (0, "", {"hookSpecificOutput": {
            "hookEventName": "PreToolUse", "permissionDecision": "allow",
            "permissionDecisionReason": "toolreplay: approved in the approvals inbox by Lin"}}))


class AnswerWaitTest(unittest.TestCase):
    def test_the_fast_client_waits_for_the_inbox_too(self) -> None:
        self.assertEqual(answer_seconds({"--records": "r"}), ANSWER_SECONDS)
        self.assertEqual(answer_seconds({"--inbox": "r"}), ANSWER_SECONDS + 40)
        self.assertEqual(answer_seconds({"--inbox": "r", "--inbox-timeout": "300"}), ANSWER_SECONDS + 300)
        self.assertEqual(answer_seconds({"--inbox": "r", "--inbox-timeout": "x"}), ANSWER_SECONDS)


@integration  # the fast client and its hook server, real processes
class ThroughTheServerTest(GeminiCase):
    def fast(self, payload: dict[str, Any], cwd: str | None = None) -> tuple[int, str, str]:
        """The registered command with relative options, run in the project folder (or `cwd`, its parent) as
        Gemini CLI runs it."""
        up = "" if cwd is not None else "../"
        done = subprocess.run([sys.executable, "-S", CLIENT, "gemini-cli", "--policy", up + "policy.json", "--records",
                               up + "records", "--inbox", up + "records", "--inbox-timeout", "20"],
                              input=json.dumps(payload).encode(), capture_output=True, cwd=cwd or self.project,
                              timeout=60, check=False)
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    def tearDown(self) -> None:
        socket = os.path.join(self.records, ".toolreplay-hook.sock")
        if os.path.exists(socket):  # the server ends once its socket is gone
            os.unlink(socket)

    def test_relative_options_and_the_timeout_reach_the_server(self) -> None:
        # decided by the client itself, which starts the server for the next events in its own folder (the
        # project's parent): the project's events come from elsewhere, their paths joined to their folder
        self.assertEqual(self.fast(self.payload("BeforeTool", "read_file", {"file_path": "a"}), self.directory),
                         (0, gemini_tests.ALLOW, ""))
        wait_for(lambda: os.path.exists(os.path.join(self.records, ".toolreplay-hook.sock")), "the hook server")
        for verdict, expected in (("approve", gemini_tests.ALLOW), ("deny", gemini_tests.deny(
                "toolreplay: confirmation declined (asked in the approvals inbox); it did not run"))):
            with self.subTest(verdict=verdict):
                person = Person(self.records, verdict, "Ada")
                self.assertEqual(self.fast(self.payload("BeforeTool", "write_file", {"file_path": verdict,
                                                                                    "content": "x"})),
                                 (0, expected, ""))
                self.assertEqual(person.seen().args, {"file_path": verdict, "content": "x"})
        self.assertTrue(os.path.exists(os.path.join(self.records, ".toolreplay-hook.sock")))  # the server answered
        [denied] = [line for line in self.lines(self.session) if line["meta"]["outcome"] == "refused"]
        self.assertEqual((denied["args"]["file_path"], denied["meta"]["x-decided-by"]), ("deny", "Ada"))


if __name__ == "__main__":
    unittest.main()
