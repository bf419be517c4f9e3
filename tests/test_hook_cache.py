"""What a hook server keeps between events (toolreplay/hooks/cache.py): the same answers and the same record
bytes as a process per event, over a scripted session; the record read whole again whenever it changed
behind the server's back.

Each scenario runs the same events twice on fresh folders, on the same clock (every time function reads the
event's scripted second): once as the command hook does (no cache, everything read at every event), once
through one `HookCache` as `hook serve` and the socket server do. The answers (stdout, stderr, exit code) and
the files left in the records folder must be the same bytes, but for the intent file, compared by the intents it
holds open (the server keeps the file between events, with a line for each settled intent, where a process per
event removes it once nothing is open: see `Folder.files`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import unittest
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from toolreplay.guard import gate
from toolreplay.guard import recorder as recorder_module
from toolreplay.guard.assembly import Guard
from toolreplay.guard.intents import LASTING_BYTES, Intent, read_intents
from toolreplay.hooks import core
from toolreplay.hooks.cache import HookCache
from toolreplay.hooks.reply import Reply, reply_to_event

SESSION = "5c1d0e4e-0b7a-4a39-9d0e-cache0000001"
BASE_NS = 1_800_000_000 * 10**9  # the wall clock at second 0 of a script

POLICY: dict[str, Any] = {
    "agent": "claude-code",
    "allowed_tools": ["Bash", "Read", "Write", "mcp__db__query", "mcp__db__insert"],
    "write_tools": ["Write", "mcp__db__insert"],
    "limits": {"max_steps": 30},
    "rules": [
        {"id": "no-rm", "tools": ["Bash"], "effect": "deny", "reason": "no rm -rf",
         "when": [{"arg": "command", "glob": ["rm -rf*"]}]},
        {"id": "push-asks", "tools": ["Bash"], "effect": "ask", "reason": "a person approves a push",
         "when": [{"arg": "command", "glob": ["git push*"]}]},
        {"id": "reads", "tools": ["Read"], "effect": "deny", "reason": "at most 3 reads",
         "unless": [{"count": "Read", "max": 3}]},
        {"id": "query-rate", "tools": ["mcp__db__query"], "effect": "deny", "reason": "2 queries a second",
         "unless": [{"rate": "mcp__db__query", "max": 2, "seconds": 1}]},
        {"id": "read-first", "tools": ["Write"], "effect": "deny", "reason": "read a file before writing it",
         "unless": [{"after": "Read", "same": ["file_path"]}]},
    ],
}
# the policy edited mid-session: curl denied, one read more
EDITED = dict(POLICY, rules=[*POLICY["rules"][:2],
                             dict(POLICY["rules"][2], unless=[{"count": "Read", "max": 4}]),
                             *POLICY["rules"][3:],
                             {"id": "no-curl", "tools": ["Bash"], "effect": "deny", "reason": "no curl",
                              "when": [{"arg": "command", "glob": ["curl*"]}]}])

Step = tuple[float, Any]  # (second, an event's payload fields, or a callable run on the folder)


def _pre(tool: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": args, "tool_use_id": call_id}


def _post(tool: str, args: dict[str, Any], call_id: str, response: Any) -> dict[str, Any]:
    return {"hook_event_name": "PostToolUse", "tool_name": tool, "tool_input": args, "tool_use_id": call_id,
            "tool_response": response}


def _pair(at: float, tool: str, args: dict[str, Any], call_id: str, response: Any) -> list[Step]:
    return [(at, _pre(tool, args, call_id)), (at + 0.125, _post(tool, args, call_id, response))]


A, B = {"file_path": "/p/a.txt"}, {"file_path": "/p/b.txt"}
WRITE_B = dict(B, content="b")
SCRIPT: list[Step] = [
    *_pair(0, "Read", A, "toolu_01", {"content": "a"}),
    *_pair(1, "Bash", {"command": "ls"}, "toolu_02", {"stdout": "a.txt\n"}),
    (2, _pre("Bash", {"command": "rm -rf /"}, "toolu_03")),  # denied by a rule, recorded at once
    *_pair(3, "Bash", {"command": "git push"}, "toolu_04", {"stdout": "pushed"}),  # ask
    (4, _pre("Write", WRITE_B, "toolu_05")),  # denied: b was never read
    *_pair(5, "mcp__db__insert", {"row": 1}, "toolu_06", {"ok": True}),  # a write tool: ask
    (6, _pre("mcp__db__insert", {"row": 1}, "toolu_07")),  # the identical write (not repeatable): already ran
    # two queries in a second, a third refused by the rate, a fourth after the window
    *_pair(7, "mcp__db__query", {"sql": "select 1"}, "toolu_08", {"rows": [1]}),
    *_pair(7.25, "mcp__db__query", {"sql": "select 2"}, "toolu_09", {"rows": [2]}),
    (7.5, _pre("mcp__db__query", {"sql": "select 3"}, "toolu_10")),
    *_pair(8.5, "mcp__db__query", {"sql": "select 4"}, "toolu_11", {"rows": [4]}),
    # two identical Bash runs at once: the second is refused while the first's outcome is unknown
    (9, _pre("Bash", {"command": "make"}, "toolu_12")),
    (9.25, _pre("Bash", {"command": "make"}, "toolu_13")),
    (9.5, _pre("Read", B, "toolu_14")),  # a read beside the open write
    (9.75, _post("Bash", {"command": "make"}, "toolu_12", {"stdout": "built"})),
    (10, _post("Read", B, "toolu_14", {"content": "b"})),
    (10.25, {"hook_event_name": "PostToolUseFailure", "tool_name": "Bash", "tool_input": {"command": "make"},
             "tool_use_id": "toolu_13", "error": "no such call"}),  # its Pre was denied: blocked
    *_pair(11, "Read", {"file_path": "/p/c.txt"}, "toolu_15", {"content": "c"}),
    (12, _pre("Read", {"file_path": "/p/d.txt"}, "toolu_16")),  # the fourth read: denied by the count
    # a Post that fails, then the write whose outcome stays unknown (no Post ever comes)
    (13, _pre("Bash", {"command": "npm test"}, "toolu_17")),
    (13.125, {"hook_event_name": "PostToolUseFailure", "tool_name": "Bash", "tool_input": {"command": "npm test"},
              "tool_use_id": "toolu_17", "error": "exit 1"}),
    (14, _pre("Bash", {"command": "deploy"}, "toolu_18")),
    (15, _pre("Bash", {"command": "deploy"}, "toolu_19")),  # unknown outcome
    (16, "edit the policy"),
    (16.5, _pre("Bash", {"command": "curl example.org"}, "toolu_20")),  # denied by the new rule
    *_pair(17, "Read", {"file_path": "/p/d.txt"}, "toolu_21", {"content": "d"}),  # the new count allows it
    *_pair(18, "Write", WRITE_B, "toolu_22", {"ok": True}),  # b has been read now: ask
    (19, _pre("mcp__db__insert", {"row": 1}, "toolu_23")),  # still already ran, under the edited policy
]
# then calls until the budget (max_steps 30) is spent, and the session's end
SCRIPT += [step for number in range(8) for step in _pair(20 + number, "Bash", {"command": f"echo {number}"},
                                                          f"toolu_{30 + number}", {"stdout": f"{number}\n"})]
SCRIPT += [(28 + number, _pre("Bash", {"command": f"echo {number}"}, f"toolu_{40 + number}")) for number in range(3)]
SCRIPT += [(40, {"hook_event_name": "SessionEnd", "reason": "other"})]


def _gemini(event: str, tool: str, args: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"hook_event_name": event, "tool_name": tool, "tool_input": args, **more}


# Gemini CLI: no call ids (an AfterTool completes the oldest pending identical BeforeTool), no asking
GEMINI_SCRIPT: list[Step] = [
    (0, _gemini("BeforeTool", "run_shell_command", {"command": "make"})),
    (0.25, _gemini("BeforeTool", "read_file", {"file_path": "/p/a.txt"})),
    (0.5, _gemini("AfterTool", "read_file", {"file_path": "/p/a.txt"}, tool_response={"llmContent": "a"})),
    (0.75, _gemini("BeforeTool", "run_shell_command", {"command": "make"})),  # unknown: the first still runs
    (1, _gemini("AfterTool", "run_shell_command", {"command": "make"}, tool_response={"llmContent": "built"})),
    (2, _gemini("BeforeTool", "run_shell_command", {"command": "git push"})),  # an ask: denied, it cannot ask
    (3, _gemini("BeforeTool", "write_file", {"file_path": "/p/a.txt", "content": "x"})),
    (3.5, _gemini("AfterTool", "write_file", {"file_path": "/p/a.txt", "content": "x"},
                  tool_response={"llmContent": "ok"})),
    (4, _gemini("BeforeTool", "mcp_db_insert", {"row": 1})),  # a write tool: denied, it cannot ask
    (5, {"hook_event_name": "SessionEnd", "reason": "exit"}),
]
GEMINI_POLICY: dict[str, Any] = {
    "agent": "gemini-cli", "allowed_tools": ["run_shell_command", "read_file", "write_file", "mcp_db_insert"],
    "write_tools": ["mcp_db_insert"],
    "rules": [{"id": "push-asks", "tools": ["run_shell_command"], "effect": "ask", "reason": "a person approves",
               "when": [{"arg": "command", "glob": ["git push*"]}]}]}

# A redacting policy: the record holds the tokens as keyed hashes; the key file changes mid-session
REDACTING = dict(POLICY, redact={"fields": ["token"]})
REDACT_SCRIPT: list[Step] = [
    *_pair(0, "mcp__db__insert", {"row": 1, "token": "s3cret"}, "toolu_01", {"ok": True, "token": "t0ken"}),
    (1, _pre("mcp__db__insert", {"row": 1, "token": "s3cret"}, "toolu_02")),  # ran, its answer held only redacted
    *_pair(2, "Read", A, "toolu_03", {"content": "a", "token": "s3cret"}),
    (3, lambda folder: folder.write_key(b"another key, also of 32 bytes..")),
    (4, _pre("mcp__db__insert", {"row": 1, "token": "s3cret"}, "toolu_04")),  # another key: another call
]

# Codex: PreToolUse and PostToolUse with a tool_use_id, a PermissionRequest, no session end
CODEX_SCRIPT: list[Step] = [
    (0, _pre("Bash", {"command": "cargo build"}, "call-1")),
    (0.25, {"hook_event_name": "PermissionRequest", "tool_name": "Bash", "tool_input": {"command": "cargo build"}}),
    (0.5, _post("Bash", {"command": "cargo build"}, "call-1", "Finished")),
    (1, {"hook_event_name": "PermissionRequest", "tool_name": "Bash", "tool_input": {"command": "cargo build"}}),
    (2, _pre("Bash", {"command": "rm -rf target"}, "call-2")),
    *_pair(3, "Bash", {"command": "cargo test"}, "call-3", "ok"),
    (4, _pre("Bash", {"command": "cargo test"}, "call-4")),
]


class ScriptedTime:
    """The `time` module as the hooks' core and the gate see it: every clock (wall, monotonic, perf_counter)
    reads the script's second."""

    def __init__(self) -> None:
        self.second = 0.0

    def time_ns(self) -> int:
        return BASE_NS + round(self.second * 1e9)

    def monotonic(self) -> float:
        return 1000.0 + self.second

    def perf_counter(self) -> float:
        return 2000.0 + self.second

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@contextmanager
def scripted_clock() -> Iterator[Callable[[float], None]]:
    """The hook's clocks at the second `set(second)` chose (only in the modules that read them for a record:
    nothing else in the process sees another time)."""
    scripted = ScriptedTime()
    with mock.patch.object(core, "time", scripted), mock.patch.object(gate, "time", scripted):
        yield lambda second: setattr(scripted, "second", second)


class Folder:
    """A project, a records folder and the policy file of one run."""

    def __init__(self, case: unittest.TestCase) -> None:
        self.directory = tempfile.mkdtemp()
        case.addCleanup(shutil.rmtree, self.directory)
        self.project = os.path.join(self.directory, "project")
        self.records = os.path.join(self.directory, "records")
        os.mkdir(self.project)
        os.mkdir(self.records, 0o700)
        self.policy = os.path.join(self.directory, "policy.json")
        self.write_policy(POLICY)

    def write_policy(self, obj: dict[str, Any]) -> None:
        with open(self.policy, "w", encoding="utf-8") as out:
            json.dump(obj, out)

    @property
    def record(self) -> str:
        return os.path.join(self.records, SESSION + ".jsonl")

    def event(self, fields: dict[str, Any], cache: HookCache | None, agent: str = "claude-code") -> Reply:
        payload = {"session_id": SESSION, "transcript_path": "/dev/null", "cwd": self.project,
                   "permission_mode": "default", **fields}
        return reply_to_event(json.dumps(payload).encode(), self.policy, self.records, self.key, agent, cache=cache)

    key: str | None = None

    def write_key(self, secret: bytes) -> None:
        self.key = os.path.join(self.directory, "redact.key")
        with open(self.key, "wb") as out:
            out.write(secret)

    def files(self) -> dict[str, bytes]:
        """Every file the hook left in the records folder, by name; the intent file as the intents it holds
        open, in order and without their numbers (none open: as no file), and the pending calls' intents as
        their places in that list."""
        found = {}
        for name in sorted(os.listdir(self.records)):
            if name.endswith(".lock"):
                continue
            with open(os.path.join(self.records, name), "rb") as handle:
                found[name] = handle.read()
        intents = os.path.join(self.records, SESSION + ".jsonl.intents")
        opened = [intent for intent in read_intents(intents) if intent.done is None]
        places = {intent.seq: place for place, intent in enumerate(opened)}
        found.pop(SESSION + ".jsonl.intents", None)
        if opened:
            found[SESSION + ".jsonl.intents"] = b"".join(
                Intent(0, intent.start, intent.tool, intent.args, intent.key).line() for intent in opened)
        if SESSION + ".pending" in found and found[SESSION + ".pending"]:
            pending = json.loads(found[SESSION + ".pending"])
            for entry in pending.values():
                entry["intent"] = places.get(entry["intent"], f"not open: {entry['intent']}")
            found[SESSION + ".pending"] = json.dumps(pending, sort_keys=True).encode()
        return found


def run_script(case: unittest.TestCase, script: list[Step], cache_for: Callable[[int], HookCache | None],
               agent: str = "claude-code", policy: dict[str, Any] = POLICY) -> tuple[list[Reply], dict[str, bytes]]:
    """The replies to the script's events (`cache_for(n)` is the cache event n is handled with) and the files."""
    folder = Folder(case)
    folder.write_policy(policy)
    if "redact" in policy:
        folder.write_key(b"the first key, 32 bytes long....")
    replies = []
    with scripted_clock() as set_second:
        for number, (second, step) in enumerate(script):
            set_second(second)
            if step == "edit the policy":
                folder.write_policy(EDITED)
            elif callable(step):
                step(folder)
            else:
                reply = folder.event(step, cache_for(number), agent)
                replies.append(Reply(reply.code, reply.stdout, reply.stderr.replace(folder.directory, "DIR")))
    return replies, folder.files()


class CountedReads:
    """How often a record is read whole: by a recorder's open, and for a gate's history."""

    def __init__(self) -> None:
        self.opens = self.histories = 0

    @contextmanager
    def counting(self) -> Iterator[CountedReads]:
        resume, read_history = recorder_module._resume, Guard.read_history

        def counted_resume(*args: Any, **kwargs: Any) -> Any:
            self.opens += 1
            return resume(*args, **kwargs)

        def counted_history(guard: Guard, *args: Any, **kwargs: Any) -> Any:
            self.histories += 1
            return read_history(guard, *args, **kwargs)

        with mock.patch.object(recorder_module, "_resume", counted_resume), \
                mock.patch.object(Guard, "read_history", counted_history):
            yield self


class SameAsAProcessPerEventTest(unittest.TestCase):
    maxDiff = None

    def fresh(self, script: list[Step] = SCRIPT) -> tuple[list[Reply], dict[str, bytes]]:
        return run_script(self, script, lambda number: None)

    def test_the_script_decides_what_it_says(self) -> None:
        """The script is what the comments say (else the comparison below proves little)."""
        replies, files = self.fresh()
        decisions = []
        for reply in replies:
            if reply.code != 0:
                decisions.append("error")
            elif not reply.stdout:
                decisions.append("")
            else:
                decisions.append(json.loads(reply.stdout)["hookSpecificOutput"]["permissionDecision"])
        self.assertEqual(decisions[:37], [
            "allow", "", "allow", "", "deny", "ask", "", "deny", "ask", "", "deny",
            "allow", "", "allow", "", "deny", "allow", "",
            "allow", "deny", "allow", "", "", "error", "allow", "", "deny",
            "allow", "", "allow", "deny", "deny", "allow", "", "ask", "", "deny"])
        reasons = [json.loads(reply.stdout)["hookSpecificOutput"]["permissionDecisionReason"] for reply in replies
                   if reply.stdout and "deny" in reply.stdout]
        self.assertIn("toolreplay: denied by rule query-rate: 2 queries a second", reasons)
        self.assertIn("toolreplay: denied by rule reads: at most 3 reads", reasons)
        self.assertIn("toolreplay: denied by rule no-curl: no curl", reasons)
        self.assertEqual(sum(reason.startswith("toolreplay: outcome unknown") for reason in reasons), 2)
        self.assertEqual(sum(reason.startswith("toolreplay: already ran") for reason in reasons), 2)
        self.assertEqual(decisions[37:], ["allow", ""] * 8 + ["deny"] * 3 + [""])  # the last: SessionEnd
        self.assertEqual(reasons[-3:], ["toolreplay: budget exceeded: max_steps"] * 3)
        self.assertEqual(set(files), {SESSION + ".jsonl", SESSION + ".jsonl.intents", SESSION + ".pending"})

    def test_a_cache_gives_the_same_answers_and_bytes_and_reads_the_record_once(self) -> None:
        expected = self.fresh()
        cache = HookCache()
        self.addCleanup(cache.close)
        with CountedReads().counting() as reads:
            got = run_script(self, SCRIPT, lambda number: cache)
        self.assertEqual(got, expected)
        # the first event and the session's end read the record whole; the gate's history is read at the first
        # PreToolUse and again for the edited policy
        self.assertEqual((reads.opens, reads.histories), (2, 2))

    def test_a_process_per_event_beside_the_server_makes_it_read_again(self) -> None:
        """Every third event is handled by a hook process (no cache) in the same folder: the server's kept
        state no longer matches the file, so it reads the record whole, and nothing differs."""
        expected = self.fresh()
        cache = HookCache()
        self.addCleanup(cache.close)
        with CountedReads().counting() as reads:
            got = run_script(self, SCRIPT, lambda number: None if number % 3 == 2 else cache)
        self.assertEqual(got, expected)
        self.assertGreater(reads.opens, 20)

    def test_a_record_changed_behind_the_servers_back_is_read_whole(self) -> None:
        """A record edited between events (same size, another time) is read whole: its broken chain is refused
        as a process per event refuses it."""
        def tamper(folder: Folder) -> None:
            with open(folder.record, "r+b") as handle:
                data = handle.read()
                handle.seek(0)
                handle.write(data.replace(b'"a.txt\\n"', b'"b.txt\\n"', 1))
            status = os.stat(folder.record)
            os.utime(folder.record, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000))

        script = [*SCRIPT[:10], (4.5, tamper), *SCRIPT[10:14]]
        expected = self.fresh(script)
        cache = HookCache()
        self.addCleanup(cache.close)
        got = run_script(self, script, lambda number: cache)
        self.assertEqual(got, expected)
        after = got[0][10:]
        self.assertEqual(len(after), 4)
        for reply, (_, step) in zip(after, script[11:], strict=True):
            self.assertEqual(reply.code, 2)
            if step["hook_event_name"] == "PreToolUse":
                self.assertIn("cannot open the record: DIR/records/" + SESSION + ".jsonl:2: chain broken at link "
                              "index 1; a broken chain cannot be continued", reply.stderr)
            else:  # its Pre did not allow it
                self.assertIn("without a PreToolUse that allowed it", reply.stderr)

    def test_a_deleted_record_starts_again_as_it_does_for_a_process(self) -> None:
        def delete(folder: Folder) -> None:
            os.unlink(folder.record)

        script = [*SCRIPT[:10], (4.5, delete), *SCRIPT[10:20]]
        cache = HookCache()
        self.addCleanup(cache.close)
        self.assertEqual(run_script(self, script, lambda number: cache), self.fresh(script))


    def test_gemini_cli_and_codex_through_a_cache_as_through_a_process_per_event(self) -> None:
        for agent, script, policy, decided in (
                ("gemini-cli", GEMINI_SCRIPT, GEMINI_POLICY,
                 ["allow", "allow", "", "deny", "", "deny", "allow", "", "deny", ""]),
                # Codex's allow is no output; its PermissionRequest for a call a PreToolUse allowed too
                ("codex", CODEX_SCRIPT, POLICY, ["", "", "", "deny", "deny", "", "", ""])):
            with self.subTest(agent=agent):
                expected = run_script(self, script, lambda number: None, agent, policy)
                answers = []
                for reply in expected[0]:
                    out = json.loads(reply.stdout) if reply.stdout else {}
                    specific = out.get("hookSpecificOutput", {})
                    behaviour = specific.get("decision", {}).get("behavior") if "decision" in specific else None
                    answers.append(out.get("decision") or specific.get("permissionDecision") or behaviour or "")
                self.assertEqual(answers, decided)
                self.assertEqual({reply.code for reply in expected[0]}, {0})
                cache = HookCache()
                self.addCleanup(cache.close)
                self.assertEqual(run_script(self, script, lambda number, kept=cache: kept, agent, policy), expected)


    def test_a_redacting_policy_and_a_changed_key_through_a_cache_as_through_a_process_per_event(self) -> None:
        expected = run_script(self, REDACT_SCRIPT, lambda number: None, policy=REDACTING)
        reasons = [json.loads(reply.stdout)["hookSpecificOutput"]["permissionDecisionReason"]
                   for reply in expected[0] if reply.stdout]
        self.assertEqual(reasons[1], "toolreplay: already ran: an identical mcp__db__insert call ran earlier; its "
                                     "answer is no longer held in memory, and the record holds it only redacted")
        self.assertEqual(reasons[3], "toolreplay: the policy asks a person to confirm this call")
        record = expected[1][SESSION + ".jsonl"]
        self.assertNotIn(b"s3cret", record)
        self.assertNotIn(b"t0ken", record)
        cache = HookCache()
        self.addCleanup(cache.close)
        self.assertEqual(run_script(self, REDACT_SCRIPT, lambda number: cache, policy=REDACTING), expected)


class KeptIntentFileTest(unittest.TestCase):
    """The intent file a server keeps open between events: durable before the answer, read as it is by a fresh
    process, and never written where no reader would look when a hook process beside it changes the file."""

    def setUp(self) -> None:
        self.folder = Folder(self)
        self.folder.write_policy({key: value for key, value in POLICY.items() if key != "limits"})  # no budget
        self.cache = HookCache()
        self.addCleanup(self.cache.close)
        self.intents = self.folder.record + ".intents"

    def event(self, fields: dict[str, Any], cache: HookCache | None = None) -> str:
        reply = self.folder.event(fields, cache)
        self.assertEqual((reply.code, reply.stderr), (0, ""))
        return reply.stdout

    def open_intents(self) -> list[tuple[str, dict[str, Any]]]:
        return [(intent.tool, intent.args) for intent in read_intents(self.intents) if intent.done is None]

    def test_an_allowed_writes_intent_is_synced_before_the_answer_and_no_file_is_made_per_write(self) -> None:
        synced: list[bytes] = []
        fsync = os.fsync

        def watched(descriptor: int) -> None:
            fsync(descriptor)
            if os.path.samestat(os.fstat(descriptor), os.stat(self.intents)):
                with open(self.intents, "rb") as handle:
                    synced.append(handle.read())

        made = []
        with mock.patch.object(os, "fsync", watched):
            for number in range(3):
                args = {"command": f"make {number}"}
                self.assertIn('"allow"', self.event(_pre("Bash", args, f"toolu_{number}"), self.cache))
                self.assertTrue(synced[-1].endswith(Intent(number, number, "Bash", args, f"toolu_{number}").line()))
                self.assertEqual(self.open_intents(), [("Bash", args)])  # on disk when the answer is given
                made.append(os.stat(self.intents).st_ino)
                self.assertEqual(self.event(_post("Bash", args, f"toolu_{number}", "ok"), self.cache), "")
                self.assertEqual(self.open_intents(), [])
        self.assertEqual(len(synced), 3)  # one sync per write, none for a settling
        self.assertEqual(len(set(made)), 1)  # one file, kept: none made and removed per write

    def test_a_kept_file_that_has_grown_is_emptied_when_nothing_is_open(self) -> None:
        sizes = []
        for number in range(100):  # each pair leaves an intent line of about 260 bytes and a settled line
            args = {"command": f"echo {number:04d} " + "x" * 200}
            self.event(_pre("Bash", args, f"toolu_{number}"), self.cache)
            self.event(_post("Bash", args, f"toolu_{number}", "ok"), self.cache)
            sizes.append(os.path.getsize(self.intents))
        emptied = sizes.index(0)
        self.assertEqual(sizes[:emptied], sorted(set(sizes[:emptied])))  # it grew until then
        self.assertGreater(sizes[emptied - 1], LASTING_BYTES - 300)
        self.assertLessEqual(max(sizes), LASTING_BYTES)
        self.assertEqual([size < 400 for size in sizes[emptied + 1:emptied + 3]], [True, False])  # from nothing again

    def test_the_kept_files_open_intent_is_an_unknown_outcome_for_a_fresh_process(self) -> None:
        """The server is gone between a PreToolUse and its PostToolUse (its cache with it, the file left as it
        is): a hook process refuses the identical write, then settles the first from its Post."""
        make = {"command": "make"}
        self.event(_pre("Bash", {"command": "ls"}, "toolu_1"), self.cache)
        self.event(_post("Bash", {"command": "ls"}, "toolu_1", "ok"), self.cache)  # a settled line stays
        self.event(_pre("Bash", make, "toolu_2"), self.cache)
        self.cache.close()
        self.assertIn("outcome unknown", self.event(_pre("Bash", make, "toolu_3")))
        self.assertEqual(self.open_intents(), [("Bash", make)])
        self.assertEqual(self.event(_post("Bash", make, "toolu_2", "built")), "")
        self.assertFalse(os.path.exists(self.intents))  # a process per event removes it once nothing is open
        with open(self.folder.record, encoding="utf-8") as handle:
            self.assertEqual([json.loads(line)["meta"]["outcome"] for line in handle], ["ran", "refused", "ran"])

    def test_a_hook_process_beside_the_server_appending_replacing_or_removing_the_file(self) -> None:
        """Between the server's events a hook process appends an intent to the kept file, settles it (which
        removes the file), and cuts it down (a new file): the server's next intent is always in the file at
        the path, and every intent is settled by the record of its own call."""
        calls = [{"command": f"step {number}"} for number in range(6)]
        self.event(_pre("Bash", calls[0], "toolu_0"), self.cache)
        self.event(_pre("Bash", calls[1], "toolu_1"))  # appended to the server's open file
        self.event(_post("Bash", calls[0], "toolu_0", "0"), self.cache)  # the file grew: read again
        self.event(_post("Bash", calls[1], "toolu_1", "1"))  # nothing open: removed
        self.assertFalse(os.path.exists(self.intents))
        self.event(_pre("Bash", calls[2], "toolu_2"), self.cache)  # a new file, not the removed one
        self.assertEqual(self.open_intents(), [("Bash", calls[2])])
        self.event(_post("Bash", calls[2], "toolu_2", "2"), self.cache)
        self.event(_pre("Bash", calls[3], "toolu_3"))  # reads the server's settled lines, writes the file anew
        self.event(_pre("Bash", calls[4], "toolu_4"), self.cache)
        self.assertEqual(self.open_intents(), [("Bash", calls[3]), ("Bash", calls[4])])
        self.event(_post("Bash", calls[3], "toolu_3", "3"), self.cache)
        self.event(_post("Bash", calls[4], "toolu_4", "4"))
        self.event(_pre("Bash", calls[5], "toolu_5"), self.cache)
        self.assertEqual(self.open_intents(), [("Bash", calls[5])])
        self.event(_post("Bash", calls[5], "toolu_5", "5"), self.cache)
        self.assertEqual(self.open_intents(), [])
        with open(self.folder.record, encoding="utf-8") as handle:
            lines = [json.loads(line) for line in handle]
        self.assertEqual(sorted((line["args"]["command"], line["response"]["result"]) for line in lines),
                         [(f"step {number}", str(number)) for number in range(6)])
        self.assertEqual({line["meta"]["outcome"] for line in lines}, {"ran"})


class HookCacheTest(unittest.TestCase):
    def test_sessions_beyond_the_limit_are_forgotten_least_recently_used_first(self) -> None:
        from toolreplay.hooks.cache import SessionState

        cache = HookCache(sessions=2)
        first, second, third = SessionState(), SessionState(), SessionState()
        cache.keep("a", first)
        cache.keep("b", second)
        self.assertIs(cache.session("a"), first)  # now the most recent
        cache.keep("c", third)
        self.assertIs(cache.session("a"), first)
        self.assertIsNot(cache.session("b"), second)  # forgotten: an empty state
        self.assertIsNone(cache.session("b").point)
        cache.forget("a")
        self.assertIsNone(cache.session("a").history)

    def test_a_guard_is_built_once_per_key(self) -> None:
        cache = HookCache(guards=1)
        built: list[str] = []

        def build(name: str) -> Callable[[], Any]:
            return lambda: built.append(name) or name

        self.assertEqual([cache.guard("k1", build("g1")), cache.guard("k1", build("g2"))], ["g1", "g1"])
        self.assertEqual(cache.guard("k2", build("g3")), "g3")
        self.assertEqual(cache.guard("k1", build("g4")), "g4")  # pushed out by k2
        self.assertEqual(built, ["g1", "g3", "g4"])


if __name__ == "__main__":
    unittest.main()
