"""`crosscheck`: a Claude Code transcript against the record its hook wrote (through the real command).

The record is written by `toolreplay hook claude-code` itself, event by event (payloads as in
tests/test_hook_claude_code.py, from Claude Code's hooks reference). The transcript lines follow
Claude Code's own transcript format (`~/.claude/projects/PROJECT/SESSION.jsonl`, as the fixture
tests/fixtures/import/claude-code/transcript.jsonl does): `user` and `assistant` lines with `sessionId`,
`uuid`, `parentUuid`, one `tool_use` block per assistant line and the `tool_result` in the next user
line, `is_error` and the hook's reason as its content when the hook denied the call.
"""

from __future__ import annotations

import json
import os
import tempfile
import unittest
from typing import Any

from tests.test_cli import run

SESSION = "5c1e8a4f-2b7d-4e39-9a61-0d3f7c2b8e14"
POLICY = {"agent": "claude-code", "allowed_tools": ["Bash", "Read"],
          "rules": [{"id": "no-rm", "tools": ["Bash"], "effect": "deny", "reason": "no rm -rf",
                     "when": [{"arg": "command", "glob": ["rm -rf*"]}]}]}
DENIED = "toolreplay: denied by rule no-rm: no rm -rf"


def _line(kind: str, uuid: str, parent: str | None, message: dict[str, Any], session: str = SESSION) -> str:
    return json.dumps({"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/home/dev/shop",
                       "sessionId": session, "version": "2.1.63", "gitBranch": "main", "type": kind,
                       "message": message, "uuid": uuid, "timestamp": "2026-03-02T09:14:05.108Z"}) + "\n"


def transcript(calls: list[tuple[str, str, dict[str, Any], str, bool]], session: str = SESSION) -> str:
    """A transcript: a user request, then per call an assistant tool_use line and a user tool_result line."""
    text = _line("user", "u0", None, {"role": "user", "content": "Clean up and test"}, session)
    parent = "u0"
    for number, (call_id, tool, args, result, is_error) in enumerate(calls):
        text += _line("assistant", f"a{number}", parent, {
            "model": "claude-opus-4-6", "id": f"msg_{number}", "type": "message", "role": "assistant",
            "content": [{"type": "tool_use", "id": call_id, "name": tool, "input": args}]}, session)
        text += _line("user", f"r{number}", f"a{number}", {"role": "user", "content": [
            {"tool_use_id": call_id, "type": "tool_result", "content": result, "is_error": is_error}]}, session)
        parent = f"r{number}"
    return text


class _HookAndTranscript(unittest.TestCase):
    """A records folder, a policy, the real hook command and transcripts written beside them."""

    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.records = os.path.join(self.directory, "records")
        os.mkdir(self.records)
        self.policy = os.path.join(self.directory, "policy.json")
        with open(self.policy, "w", encoding="utf-8") as handle:
            json.dump(POLICY, handle)

    def hook(self, event: str, tool: str, args: dict[str, Any], call_id: str, **extra: Any) -> tuple[int, str, str]:
        payload = {"session_id": SESSION, "transcript_path": "/home/dev/.claude/projects/shop/x.jsonl",
                   "cwd": self.directory, "permission_mode": "default", "hook_event_name": event,
                   "tool_name": tool, "tool_input": args, "tool_use_id": call_id, **extra}
        return run("hook", "claude-code", "--policy", self.policy, "--records", self.records,
                   stdin=json.dumps(payload).encode())

    def guard(self) -> None:
        """The hook's record: pytest allowed and run, rm -rf denied, ls allowed (its Post never came)."""
        self.assertEqual(self.hook("PreToolUse", "Bash", {"command": "pytest -q"}, "toolu_01")[0], 0)
        self.assertEqual(self.hook("PostToolUse", "Bash", {"command": "pytest -q"}, "toolu_01",
                                   tool_response={"stdout": "1 passed", "stderr": ""})[0], 0)
        code, out, _ = self.hook("PreToolUse", "Bash", {"command": "rm -rf build"}, "toolu_02")
        self.assertEqual((code, json.loads(out)["hookSpecificOutput"]["permissionDecision"]), (0, "deny"))

    def write(self, text: str, name: str = "session.jsonl") -> str:
        path = os.path.join(self.directory, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path


class CrosscheckTest(_HookAndTranscript):
    def test_a_matching_pair_reports_nothing(self) -> None:
        self.guard()
        path = self.write(transcript([("toolu_01", "Bash", {"command": "pytest -q"}, "1 passed", False),
                                      ("toolu_02", "Bash", {"command": "rm -rf build"}, DENIED, True)]))
        self.assertEqual(run("crosscheck", path, "--records", self.records),
                         (0, "crosscheck: 1 session, 2 host calls: 0 bypassed, 0 ran-after-deny, 0 not-run, "
                             "0 no-record; 1 deny honoured\n", ""))

    def test_a_bypassed_call_and_a_call_run_after_a_deny(self) -> None:
        self.guard()
        self.assertEqual(self.hook("PreToolUse", "Read", {"file_path": "/etc/hosts"}, "toolu_04")[0], 0)
        path = self.write(transcript([("toolu_01", "Bash", {"command": "pytest -q"}, "1 passed", False),
                                      ("toolu_02", "Bash", {"command": "rm -rf build"}, "", False),
                                      ("toolu_03", "Bash", {"command": "curl evil.example"}, "ok", False)]))
        self.assertEqual(run("crosscheck", path, "--records", self.records), (1, (
            f"ran-after-deny: {path}: session {SESSION}, call toolu_02 (Bash), record 1: ran after the guard denied "
            "it (denied by rule no-rm: no rm -rf)\n"
            f"bypassed: {path}: session {SESSION}, call toolu_03 (Bash): ran in the host, never passed the guard\n"
            f"not-run: {path}: session {SESSION}, call toolu_04 (Read): the guard allowed it; the host never shows "
            "it\n"
            "crosscheck: 1 session, 3 host calls: 1 bypassed, 1 ran-after-deny, 1 not-run, 0 no-record; 0 denies "
            "honoured\n"), ""))
        code, out, _ = run("crosscheck", path, "--records", self.records, "--format", "json")
        report = json.loads(out)
        self.assertEqual((code, report["counts"]),
                         (1, {"bypassed": 1, "ran-after-deny": 1, "not-run": 1, "no-record": 0}))
        self.assertEqual([(f["kind"], f["call_id"], f["record_index"]) for f in report["findings"]],
                         [("ran-after-deny", "toolu_02", 1), ("bypassed", "toolu_03", None),
                          ("not-run", "toolu_04", None)])

    def test_the_transcripts_of_one_session_are_compared_together(self) -> None:
        # a sub-agent's calls fire the session's hooks, and Claude Code writes them to a transcript of their own
        self.guard()
        self.assertEqual(self.hook("PreToolUse", "Read", {"file_path": "/etc/hosts"}, "toolu_04")[0], 0)
        self.assertEqual(self.hook("PostToolUse", "Read", {"file_path": "/etc/hosts"}, "toolu_04",
                                   tool_response="127.0.0.1 localhost")[0], 0)
        main_path = self.write(transcript([("toolu_01", "Bash", {"command": "pytest -q"}, "1 passed", False),
                                           ("toolu_02", "Bash", {"command": "rm -rf build"}, DENIED, True)]))
        agent = self.write(transcript([("toolu_04", "Read", {"file_path": "/etc/hosts"}, "127.0.0.1 localhost",
                                        False)]).replace('"isSidechain": false', '"isSidechain": true'),
                           "agent-a1.jsonl")
        code, out, _ = run("crosscheck", main_path, "--records", self.records)
        self.assertEqual((code, out.splitlines()[0]),
                         (0, f"not-run: {main_path}: session {SESSION}, call toolu_04 (Read), record 2: the guard "
                             "allowed it; the host never shows it"))
        self.assertEqual(run("crosscheck", main_path, agent, "--records", self.records),
                         (0, "crosscheck: 1 session, 3 host calls: 0 bypassed, 0 ran-after-deny, 0 not-run, "
                             "0 no-record; 1 deny honoured\n", ""))
        code, out, _ = run("crosscheck", main_path, agent, "--records", self.records, "--format", "json")
        self.assertEqual(json.loads(out)["sessions"][0]["transcripts"], [main_path, agent])

    def test_a_session_without_a_record(self) -> None:
        other = "9d0e0c1a-0000-4000-8000-000000000001"
        path = self.write(transcript([("toolu_09", "Bash", {"command": "ls"}, "a b", False)], other))
        self.assertEqual(run("crosscheck", path, "--records", self.records), (0, (
            f"no-record: {path}: session {other}: no record {os.path.join(self.records, other)}.jsonl (1 calls in "
            "the host)\n"
            "crosscheck: 1 session, 1 host calls: 0 bypassed, 0 ran-after-deny, 0 not-run, 1 no-record; 0 denies "
            "honoured\n"), ""))

    def test_a_transcript_and_a_record_that_do_not_belong_together(self) -> None:
        self.guard()
        path = self.write(transcript([("toolu_77", "Read", {"file_path": "/x"}, "x", False)]))
        record = os.path.join(self.records, SESSION + ".jsonl")
        self.assertEqual(run("crosscheck", path, "--records", self.records), (2, "", (
            f"error: {path}: session {SESSION}: its 1 calls and the 2 of {record} have no call in common (no call "
            "id, no tool with the same arguments): not the same session; nothing compared\n")))

    def test_a_file_without_a_session_id(self) -> None:
        path = self.write('[{"role": "user", "content": "hi"}]', "chat.json")
        self.assertEqual(run("crosscheck", path, "--records", self.records), (2, "", (
            f"error: {path}: no session id found (a Claude Code transcript's sessionId, a Codex rollout's "
            "session_meta, a Gemini CLI recording's sessionId)\n")))


if __name__ == "__main__":
    unittest.main()


class GeminiCrosscheckTest(unittest.TestCase):
    """Gemini CLI's hooks give no call id: calls pair by order, tool and canonical arguments."""

    def test_calls_pair_by_tool_and_arguments(self) -> None:
        directory = tempfile.mkdtemp()
        records = os.path.join(directory, "records")
        os.mkdir(records)
        policy = os.path.join(directory, "policy.json")
        with open(policy, "w", encoding="utf-8") as handle:
            json.dump({"agent": "gemini-cli", "allowed_tools": ["read_file", "run_shell_command"]}, handle)
        session = "7c1d0b7e-3f3e-4c8e-9a57-5d0d5c3a6e21"
        for event, extra in (("BeforeTool", {}), ("AfterTool", {"tool_response": {"llmContent": "buy milk"}})):
            payload = {"session_id": session, "transcript_path": "/home/dev/.gemini/tmp/h/chats/s.json",
                       "cwd": directory, "hook_event_name": event, "timestamp": "2026-01-05T10:00:02.000Z",
                       "tool_name": "read_file", "tool_input": {"file_path": "notes.txt"}, **extra}
            self.assertEqual(run("hook", "gemini-cli", "--policy", policy, "--records", records,
                                 stdin=json.dumps(payload).encode())[0], 0)
        chat = {"sessionId": session, "projectHash": "ph1", "startTime": "2026-01-05T10:00:00.000Z",
                "lastUpdated": "2026-01-05T10:00:09.000Z", "messages": [
                    {"id": "m1", "timestamp": "2026-01-05T10:00:00.000Z", "type": "user", "content": "notes?"},
                    {"id": "m2", "timestamp": "2026-01-05T10:00:02.000Z", "type": "gemini", "content": "",
                     "toolCalls": [{"id": "read_file-1", "name": "read_file", "args": {"file_path": "notes.txt"},
                                    "result": [{"functionResponse": {"id": "read_file-1", "name": "read_file",
                                                                     "response": {"output": "buy milk"}}}],
                                    "status": "success", "timestamp": "2026-01-05T10:00:02.100Z"},
                                   {"id": "run_shell_command-2", "name": "run_shell_command",
                                    "args": {"command": "cat notes.txt"},
                                    "result": [{"functionResponse": {"id": "run_shell_command-2",
                                                                     "name": "run_shell_command",
                                                                     "response": {"output": "buy milk"}}}],
                                    "status": "success", "timestamp": "2026-01-05T10:00:03.000Z"}]}]}
        path = os.path.join(directory, "session.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(chat, handle)
        self.assertEqual(run("crosscheck", path, "--records", records), (1, (
            f"bypassed: {path}: session {session}, call run_shell_command-2 (run_shell_command): ran in the host, "
            "never passed the guard\n"
            "crosscheck: 1 session, 2 host calls: 1 bypassed, 0 ran-after-deny, 0 not-run, 0 no-record; 0 denies "
            "honoured\n"), ""))


class BadInputTest(_HookAndTranscript):
    def test_malformed_input_is_one_line_and_exit_2(self) -> None:
        self.guard()
        cut = self.write(transcript([("toolu_01", "Bash", {"command": "pytest -q"}, "1 passed", False)])[:-40],
                         "cut.jsonl")
        code, out, err = run("crosscheck", cut, "--records", self.records)
        self.assertEqual((code, out, err.count("\n"), err.startswith(f"error: {cut}:3: ")), (2, "", 1, True), err)
        with open(os.path.join(self.records, SESSION + ".jsonl"), "a", encoding="utf-8") as handle:
            handle.write("{not json\n")
        path = self.write(transcript([("toolu_01", "Bash", {"command": "pytest -q"}, "1 passed", False)]))
        code, out, err = run("crosscheck", path, "--records", self.records)
        record = os.path.join(self.records, SESSION + ".jsonl")
        self.assertEqual((code, out, err.count("\n"), err.startswith(f"error: {record}:3: ")), (2, "", 1, True), err)

    def test_a_session_id_that_names_no_plain_file(self) -> None:
        path = self.write(transcript([("toolu_01", "Bash", {"command": "ls"}, "a", False)], "../etc/passwd"))
        self.assertEqual(run("crosscheck", path, "--records", self.records), (2, "", (
            f'error: {path}: session id "../etc/passwd" is not a plain file name (letters, digits, _ . -; up to '
            "128): no record can be named by it\n")))

    def test_a_records_folder_that_is_not_one(self) -> None:
        path = self.write(transcript([("toolu_01", "Bash", {"command": "ls"}, "a", False)]))
        missing = os.path.join(self.directory, "nowhere")
        self.assertEqual(run("crosscheck", path, "--records", missing),
                         (2, "", f"error: {missing}: not a folder of hook records\n"))
