"""Remembered approvals through the MCP proxy: a person answers `always` (or `session`) in the elicitation,
and a later proxy session on the same approvals file runs the same call without asking, naming the
approval in its record; revoked, it is asked again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from typing import Any

from tests.support import integration, require
from tests.test_cli import run
from tests.test_mcp_proxy import POLICY, ROOT, TINY, Proxy, call, initialize, text_result
from tests.test_mcp_real import HAVE_SDK, run_client, texts

APPROVE_ALWAYS = {"action": "accept", "content": {"approve": True, "remember": "always"}}


@integration
class ProxyApprovalsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.top = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.top)
        self.approvals = os.path.join(self.top, "approvals.jsonl")
        self.notes = os.path.join(self.top, "notes.txt")
        self.sessions = 0

    def start(self, *extra: str, rules: dict[str, Any] | None = None) -> Proxy:
        """A new proxy session (its own folder and record) on the shared approvals file."""
        self.sessions += 1
        directory = os.path.join(self.top, f"session-{self.sessions}")
        os.mkdir(directory)
        proxy = Proxy(directory, "--approvals", self.approvals, *extra, server_args=("--notes", self.notes),
                      rules=rules)
        self.addCleanup(proxy.kill)
        proxy.ask(initialize(capabilities={"elicitation": {}}))
        proxy.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return proxy

    def metas(self, proxy: Proxy) -> list[dict[str, Any]]:
        with open(proxy.record, encoding="utf-8") as record:
            return [{key: value for key, value in json.loads(line).get("meta", {}).items() if key.startswith("x-")}
                    for line in record]

    def confirm(self, proxy: Proxy, message_id: int, answer: dict[str, Any]) -> dict[str, Any]:
        """Call write_note, answer the question with `answer`; the question asked."""
        proxy.send(call(message_id, "write_note", text="hi"))
        question = proxy.recv()
        self.assertEqual(question["method"], "elicitation/create")
        proxy.send({"jsonrpc": "2.0", "id": question["id"], "result": answer})
        self.assertEqual(proxy.recv(), text_result(message_id, 'write_note {"text": "hi"}', False))
        params: dict[str, Any] = question["params"]
        return params

    def test_always_is_remembered_across_sessions_until_revoked(self) -> None:
        proxy = self.start()
        question = self.confirm(proxy, 1, APPROVE_ALWAYS)
        self.assertEqual(question["requestedSchema"]["properties"]["remember"]["enum"], ["once", "session", "always"])
        self.assertEqual(proxy.close(), (0, b"", ""))
        code, out, err = run("approvals", "list", "--file", self.approvals)
        self.assertEqual((code, err), (0, ""))
        header, line = out.splitlines()
        approval = line.split()[0]
        self.assertEqual((header, line), ("approvals: 1", f'{approval} write_note args {{"text":"hi"}} created '
                                          + line.rsplit(" ", 1)[1]))
        self.assertEqual(self.metas(proxy), [{"x-remembered": approval}])

        proxy = self.start()  # a new session: the same call runs without a question
        self.assertEqual(proxy.ask(call(2, "write_note", text="hi")), text_result(2, 'write_note {"text": "hi"}', False))
        proxy.send(call(3, "write_note", text="other"))  # another call is still asked
        self.assertEqual(proxy.recv()["method"], "elicitation/create")
        self.assertEqual(proxy.close()[0], 0)
        self.assertEqual(self.metas(proxy)[0], {"x-approval": approval})

        self.assertEqual(run("approvals", "revoke", approval, "--file", self.approvals),
                         (0, f'revoked {line}\n', ""))
        proxy = self.start()  # revoked: asked again
        self.confirm(proxy, 4, {"action": "accept", "content": {"approve": True}})
        self.assertEqual(proxy.close()[0], 0)
        self.assertEqual(self.metas(proxy), [{"x-confirmed": "once"}])  # a plain yes, not remembered
        with open(self.notes, encoding="utf-8") as written:
            self.assertEqual(written.read(), '{"text": "hi"}\n' * 3)

    def test_with_redaction_the_approvals_file_holds_no_secret(self) -> None:
        key = os.path.join(self.top, "key")
        with open(key, "wb") as out:
            out.write(b"0123456789abcdef0123")
        redact = {"redact": {"builtin": False, "fields": ["text"]}}
        proxy = self.start("--redact-key", key, rules=redact)
        self.confirm(proxy, 1, APPROVE_ALWAYS)
        self.assertEqual(proxy.close()[0], 0)
        with open(self.approvals, encoding="utf-8") as handle:
            line = json.loads(handle.read())
        self.assertEqual((line["redacted"], list(line["args"])), (True, ["text"]))
        self.assertRegex(line["args"]["text"], r"^\[redacted:field:[0-9a-f]{24}\]$")
        proxy = self.start("--redact-key", key, rules=redact)
        self.assertEqual(proxy.ask(call(2, "write_note", text="hi")), text_result(2, 'write_note {"text": "hi"}', False))
        self.assertEqual(proxy.close()[0], 0)
        self.assertEqual(self.metas(proxy), [{"x-approval": line["id"]}])

    def test_session_is_remembered_for_this_proxy_only(self) -> None:
        proxy = self.start("--repeatable", "write_note")
        self.confirm(proxy, 1, {"action": "accept", "content": {"approve": True, "remember": "session"}})
        self.assertEqual(proxy.ask(call(2, "write_note", text="hi")), text_result(2, 'write_note {"text": "hi"}', False))
        self.assertEqual(proxy.close()[0], 0)
        remembered, allowed = self.metas(proxy)
        self.assertRegex(remembered["x-remembered"], "^session-[0-9a-f]{12}$")
        self.assertEqual(allowed, {"x-approval": remembered["x-remembered"]})
        self.assertFalse(os.path.exists(self.approvals))
        proxy = self.start("--repeatable", "write_note")
        self.confirm(proxy, 3, {"action": "accept", "content": {"approve": True}})
        self.assertEqual(proxy.close()[0], 0)

    def test_a_client_that_cannot_ask_runs_what_a_hand_written_approval_allows(self) -> None:
        with open(self.approvals, "w", encoding="utf-8") as out:
            out.write('{"id": "short-notes", "tool": "write_note", "when": [{"arg": "text", "max_length": 5}]}\n')
        directory = os.path.join(self.top, "no-elicitation")
        os.mkdir(directory)
        proxy = Proxy(directory, "--approvals", self.approvals, server_args=("--notes", self.notes))
        self.addCleanup(proxy.kill)
        proxy.ask(initialize())
        self.assertEqual(proxy.ask(call(1, "write_note", text="hi")), text_result(1, 'write_note {"text": "hi"}', False))
        self.assertEqual(proxy.ask(call(2, "write_note", text="too long")),
                         text_result(2, "toolreplay: confirmation required", True))
        self.assertEqual(proxy.ask(call(3, "write_note", text=5)), text_result(3, "toolreplay: confirmation required",
                                                                                 True))  # cannot be evaluated
        self.assertEqual(proxy.close()[0], 0)
        self.assertEqual(self.metas(proxy), [{"x-approval": "short-notes"}, {}, {}])

    def test_without_approvals_the_question_offers_no_remembering(self) -> None:
        proxy = Proxy(self.top)
        self.addCleanup(proxy.kill)
        proxy.ask(initialize(capabilities={"elicitation": {}}))
        proxy.send(call(1, "write_note", text="hi"))
        question = proxy.recv()
        self.assertEqual(question["params"]["requestedSchema"]["properties"], {
            "approve": {"type": "boolean", "title": "Run this call", "default": False}})
        proxy.send({"jsonrpc": "2.0", "id": question["id"], "result": APPROVE_ALWAYS})
        self.assertEqual(proxy.recv(), text_result(1, 'write_note {"text": "hi"}', False))
        self.assertEqual(proxy.close()[0], 0)
        self.assertFalse(os.path.exists(self.approvals))

    def test_a_malformed_approvals_file_stops_the_proxy_from_starting(self) -> None:
        with open(self.approvals, "w", encoding="utf-8") as out:
            out.write('{"id": "a", "tool": "write_note", "args": {}}\n{"id": "a", "tool": "write_note"}\n')
        policy = os.path.join(self.top, "policy.json")
        with open(policy, "w", encoding="utf-8") as out:
            json.dump(POLICY, out)
        started = os.path.join(self.top, "started")
        done = subprocess.run([sys.executable, "-m", "toolreplay", "mcp-proxy", "--policy", policy, "--approvals",
                               self.approvals, "--", sys.executable, "-c", f"open({started!r}, 'w')"],
                              capture_output=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, timeout=60,
                              input=json.dumps(initialize()).encode() + b"\n", check=False)
        self.assertEqual((done.returncode, done.stdout, done.stderr.decode()), (2, b"", (
            f'error: {self.approvals}:2: an approval has exactly one of "args" (the exact arguments) and "when" '
            '(conditions)\n')))
        self.assertFalse(os.path.exists(started))

    def test_two_proxies_appending_at_once_lose_nothing(self) -> None:
        """Two proxy processes, each confirming four distinct calls with `always`, interleaved."""
        first, second = self.start(), self.start()
        questions = []
        for number in range(4):
            for offset, proxy in enumerate((first, second)):
                proxy.send(call(10 * offset + number, "write_note", text=f"{offset}-{number}"))
                questions.append((proxy, proxy.recv()))
        for proxy, question in questions:  # answered together: the appends race
            proxy.send({"jsonrpc": "2.0", "id": question["id"], "result": APPROVE_ALWAYS})
        for proxy, _ in questions:
            self.assertFalse(proxy.recv()["result"]["isError"])
        self.assertEqual(first.close()[0], 0)
        self.assertEqual(second.close()[0], 0)
        with open(self.approvals, encoding="utf-8") as handle:
            texts = sorted(json.loads(line)["args"]["text"] for line in handle)
        self.assertEqual(texts, sorted(f"{offset}-{number}" for offset in range(2) for number in range(4)))


@integration
class SdkClientApprovalsTest(unittest.TestCase):
    """The official MCP Python SDK client answers the question, `remember` included."""

    def test_an_sdk_client_remembers_always_and_is_not_asked_next_session(self) -> None:
        require(HAVE_SDK, "the MCP Python SDK (pip install mcp)")
        from mcp import types

        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        policy = os.path.join(directory, "policy.json")
        with open(policy, "w", encoding="utf-8") as out:
            json.dump(POLICY, out)
        approvals = os.path.join(directory, "approvals.jsonl")
        schemas: list[dict[str, Any]] = []

        async def always(context: Any, params: Any) -> Any:
            schemas.append(getattr(params, "requested_schema", None) or params.requestedSchema)  # SDK 2 or 1
            return types.ElicitResult(action="accept", content={"approve": True, "remember": "always"})

        async def scenario(session: Any) -> Any:
            return texts(await session.call_tool("write_note", {"text": "hi"}))

        for number in (1, 2):
            value, stderr = run_client(["--policy", policy, "--record", os.path.join(directory, f"{number}.jsonl"),
                                        "--approvals", approvals], [sys.executable, TINY], scenario, elicit=always)
            self.assertEqual((value, stderr), ((False, ['write_note {"text": "hi"}']), ""))
        self.assertEqual(len(schemas), 1)  # asked in the first session only
        self.assertEqual(schemas[0]["properties"]["remember"]["enum"], ["once", "session", "always"])
        (line,) = run("approvals", "list", "--file", approvals)[1].splitlines()[1:]
        with open(os.path.join(directory, "2.jsonl"), encoding="utf-8") as record:
            self.assertEqual(json.loads(record.readline())["meta"]["x-approval"], line.split()[0])


if __name__ == "__main__":
    unittest.main()
