"""Resource reads and prompts through the gate: `resources/read` and `prompts/get` are reads of the
pseudo-tools of those names (`PREFIX__resources/read` with several servers), allowed or denied by the
policy and recorded with their outcome. The real components: the MCP Python SDK client (stdio, and
Streamable HTTP against `--listen`) and @modelcontextprotocol/server-everything. Missing components skip
locally, fail in CI.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from typing import Any

from tests.support import require
from tests.test_cli import run
from tests.test_mcp_http_listen import HAVE_HTTP, Listener, session_run
from tests.test_mcp_real import EVERYTHING, HAVE_EVERYTHING, HAVE_SDK, TOOLS, Workspace, approve, run_client

INTEGRATION_TIER = True  # the integration tier (tests/unit.py leaves this module out)

ARCHITECTURE = "demo://resource/static/document/architecture.md"
EXTENSION = "demo://resource/static/document/extension.md"
POLICY = {"agent": "reader", "allowed_tools": ["resources/read", "prompts/get"], "rules": [
    {"id": "no-extension", "tools": ["resources/read"], "effect": "deny", "reason": "not the extension notes",
     "when": [{"arg": "uri", "glob": ["demo://*/extension.md"]}]},
    {"id": "no-simple", "tools": ["prompts/get"], "effect": "deny", "reason": "not the simple prompt",
     "when": [{"arg": "name", "eq": "simple-prompt"}]}]}


async def refused(request: Any) -> tuple[int, str]:
    """The JSON-RPC error code and message a refused request raised (the SDK's MCPError)."""
    try:
        await request
    except Exception as exc:  # noqa: BLE001  (the SDK raises its MCPError)
        error = exc.error  # type: ignore[attr-defined]
        return error.code, error.message
    raise AssertionError("the request was not refused")


async def read_and_get(session: Any) -> Any:
    """An allowed and a denied read, an allowed and a denied prompt."""
    read = (await session.read_resource(ARCHITECTURE)).contents[0]
    denied_read = await refused(session.read_resource(EXTENSION))
    prompt = await session.get_prompt("args-prompt", {"city": "Paris", "state": "Texas"})
    denied_prompt = await refused(session.get_prompt("simple-prompt"))
    return (str(read.uri), read.text[:15], denied_read, prompt.messages[0].content.text, denied_prompt)


EXPECTED = (ARCHITECTURE, "# Everything Se", (-32602, "toolreplay: denied by rule no-extension: not the extension notes"),
            "What's weather in Paris, Texas?", (-32602, "toolreplay: denied by rule no-simple: not the simple prompt"))


def records_of(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as record:
        return [json.loads(line) for line in record]


def summary(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Each record's tool, arguments, outcome and what its response begins with."""
    def begins(response: dict[str, Any]) -> Any:
        if "contents" in response:
            return response["contents"][0]["text"][:15]
        if "messages" in response:
            return response["messages"][0]["content"]["text"]
        return response
    return [(record["tool"], record["args"], record["meta"]["outcome"], begins(record["response"]))
            for record in records]


EXPECTED_RECORDS = [
    ("resources/read", {"uri": ARCHITECTURE}, "ran", "# Everything Se"),
    ("resources/read", {"uri": EXTENSION}, "refused",
     {"ok": False, "error": "denied by rule no-extension: not the extension notes"}),
    ("prompts/get", {"name": "args-prompt", "arguments": {"city": "Paris", "state": "Texas"}}, "ran",
     "What's weather in Paris, Texas?"),
    ("prompts/get", {"name": "simple-prompt"}, "refused",
     {"ok": False, "error": "denied by rule no-simple: not the simple prompt"})]

SCOPE_OUTPUT = (
    "calls: 4\nfindings: 0\ninformation: 2\n"
    "index 1: blocked: tool 'resources/read' was refused by the guard: denied by rule no-extension: not the "
    "extension notes\n"
    "index 3: blocked: tool 'prompts/get' was refused by the guard: denied by rule no-simple: not the simple prompt\n")


class Everything(Workspace):
    def setUp(self) -> None:
        require(HAVE_SDK, "the MCP Python SDK (pip install mcp)")
        require(HAVE_EVERYTHING, f"@modelcontextprotocol/server-everything under {TOOLS} and node")
        super().setUp()
        self.server = [shutil.which("node") or "node", EVERYTHING, "stdio"]


class StdioTest(Everything):
    def test_reads_and_prompts_are_allowed_or_denied_by_the_policy_and_recorded(self) -> None:
        policy = self.write_policy(POLICY)
        value, _ = run_client(["--policy", policy, "--record", self.record], self.server, read_and_get)
        self.assertEqual(value, EXPECTED)
        records = records_of(self.record)
        self.assertEqual(summary(records), EXPECTED_RECORDS)
        self.assertEqual([record["meta"]["call_id"] for record in records], ["2", "3", "4", "5"])
        # the record is a session like any other: verified, replayed, scoped against the policy
        self.assertEqual(run("verify", self.record), (0, "chain: intact\n", ""))
        self.assertEqual(run("replay", self.record), (0, "calls: 4\ndivergence: none\nfindings: 0\n", ""))
        self.assertEqual(run("scope", self.record, policy), (0, SCOPE_OUTPUT, ""))

    def test_a_policy_that_does_not_allow_them_refuses_them_and_a_tool_cannot_take_their_name(self) -> None:
        policy = self.write_policy({"agent": "tools-only", "allowed_tools": ["echo"]})

        async def scenario(session: Any) -> Any:
            return (await refused(session.read_resource(ARCHITECTURE)), await refused(session.get_prompt("args-prompt")),
                    await refused(session.call_tool("resources/read", {"uri": ARCHITECTURE})),
                    [str(item.uri) for item in (await session.list_resources()).resources][:1])

        value, _ = run_client(["--policy", policy, "--record", self.record], self.server, scenario)
        self.assertEqual(value, (
            (-32602, "toolreplay: tool not allowed: resources/read"), (-32602, "toolreplay: tool not allowed: prompts/get"),
            (-32602, 'Invalid params: "resources/read" is the name the policy gives resources/read or prompts/get, '
                     "not a tool's"),
            [ARCHITECTURE]))  # the listing passes as it came
        self.assertEqual([(record["tool"], record["meta"]["outcome"]) for record in records_of(self.record)],
                         [("resources/read", "refused"), ("prompts/get", "refused")])

    def test_an_ask_rule_has_a_person_confirm_a_read_through_the_client(self) -> None:
        policy = self.write_policy({"agent": "asks", "allowed_tools": ["resources/read"], "rules": [
            {"id": "ask-docs", "tools": ["resources/read"], "effect": "ask", "reason": "a person looks first"}]})
        approve.messages.clear()  # type: ignore[attr-defined]

        async def scenario(session: Any) -> Any:
            return str((await session.read_resource(ARCHITECTURE)).contents[0].uri)

        value, _ = run_client(["--policy", policy, "--record", self.record], self.server, scenario, elicit=approve)
        self.assertEqual(value, ARCHITECTURE)
        self.assertEqual(approve.messages, [  # type: ignore[attr-defined]
            f'Allow the tool call "resources/read" with arguments {{"uri":"{ARCHITECTURE}"}}?'])
        self.assertEqual([(record["tool"], record["meta"]["outcome"], record["meta"]["x-confirmed"])
                          for record in records_of(self.record)], [("resources/read", "ran", "once")])

    def test_what_is_recorded_is_redacted(self) -> None:
        policy = self.write_policy({**POLICY, "redact": {"builtin": False,
                                                         "patterns": [{"name": "city", "regex": "Paris"}]}})
        key = os.path.join(self.directory, "key")
        with open(key, "wb") as out:
            out.write(b"k" * 32)
        value, _ = run_client(["--policy", policy, "--record", self.record, "--redact-key", key], self.server,
                              read_and_get)
        self.assertEqual(value, EXPECTED)  # the client gets what the server said
        prompt = records_of(self.record)[2]
        self.assertEqual(prompt["tool"], "prompts/get")
        mark = prompt["args"]["arguments"]["city"]
        self.assertRegex(mark, r"^\[redacted:city:[0-9a-f]{24}\]$")
        self.assertEqual(prompt["response"]["messages"][0]["content"]["text"], f"What's weather in {mark}, Texas?")
        with open(self.record, encoding="utf-8") as record:
            self.assertNotIn("Paris", record.read())


class ListenerTest(Everything):
    def test_reads_and_prompts_over_http_are_allowed_or_denied_and_recorded(self) -> None:
        require(HAVE_HTTP, "the http extra (uvicorn, httpx) and the MCP SDK")
        policy = self.write_policy(POLICY)
        records = os.path.join(self.directory, "records")
        listener = Listener(policy, records, self.server)
        try:
            value = asyncio.run(session_run(listener.url, read_and_get))
        finally:
            code, stderr = listener.stop()
        self.assertEqual(code, 0, stderr)
        self.assertEqual(value, EXPECTED)
        (record,) = [os.path.join(records, name) for name in os.listdir(records) if name.endswith(".jsonl")]
        self.assertEqual(summary(records_of(record)), EXPECTED_RECORDS)
        self.assertEqual(run("scope", record, policy), (0, SCOPE_OUTPUT, ""))


class SeveralServersTest(Everything):
    def test_each_server_has_its_own_pseudo_tools_and_the_record_names_the_server(self) -> None:
        servers = os.path.join(self.directory, "servers.json")
        with open(servers, "w", encoding="utf-8") as out:
            json.dump({"servers": {"first": {"command": self.server[0], "args": self.server[1:], "prefix": "one"},
                                   "second": {"command": self.server[0], "args": self.server[1:], "prefix": "two"}}},
                      out)
        policy = self.write_policy({"agent": "several", "allowed_tools": ["one__resources/read", "two__prompts/get"],
                                    "rules": [{"id": "no-extension", "tools": ["one__resources/read"],
                                               "effect": "deny", "reason": "not the extension notes",
                                               "when": [{"arg": "uri", "glob": ["demo://*/extension.md"]}]}]})

        async def scenario(session: Any) -> Any:
            read = (await session.read_resource("one__" + ARCHITECTURE)).contents[0]
            prompt = await session.get_prompt("two__args-prompt", {"city": "Oslo", "state": "Texas"})
            return (str(read.uri), await refused(session.read_resource("one__" + EXTENSION)),
                    await refused(session.read_resource("two__" + ARCHITECTURE)),
                    await refused(session.get_prompt("one__args-prompt", {"city": "Oslo", "state": "Texas"})),
                    prompt.messages[0].content.text)

        value, _ = run_client(["--policy", policy, "--record", self.record, "--servers", servers], [], scenario)
        self.assertEqual(value, (
            "one__" + ARCHITECTURE, (-32602, "toolreplay: denied by rule no-extension: not the extension notes"),
            (-32602, "toolreplay: tool not allowed: two__resources/read"),
            (-32602, "toolreplay: tool not allowed: one__prompts/get"), "What's weather in Oslo, Texas?"))
        # the gate's names carry the prefix, the arguments the server's own URI or name; x-server says which
        self.assertEqual([(record["tool"], record["args"], record["meta"]["outcome"], record["meta"]["x-server"])
                          for record in records_of(self.record)], [
            ("one__resources/read", {"uri": ARCHITECTURE}, "ran", "first"),
            ("two__prompts/get", {"name": "args-prompt", "arguments": {"city": "Oslo", "state": "Texas"}}, "ran",
             "second"),
            ("one__resources/read", {"uri": EXTENSION}, "refused", "first"),
            ("two__resources/read", {"uri": ARCHITECTURE}, "refused", "second"),
            ("one__prompts/get", {"name": "args-prompt", "arguments": {"city": "Oslo", "state": "Texas"}}, "refused",
             "first")])
        self.assertEqual(run("verify", self.record), (0, "chain: intact\n", ""))
