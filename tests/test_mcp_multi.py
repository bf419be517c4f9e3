"""Several real MCP servers behind one proxy (`mcp-proxy --servers FILE`), driven by the official MCP
Python SDK client: the tiny test server twice (two prefixes, each with its own notes file, so what
each one saw can be checked) and mcp-server-git (PyPI). Missing components skip locally, fail in CI.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from typing import Any

from tests.support import require
from tests.test_cli import run
from tests.test_mcp_real import (
    EVERYTHING,
    HAVE_EVERYTHING,
    HAVE_GIT_SERVER,
    HAVE_SDK,
    ROOT,
    TINY,
    TOOLS,
    Workspace,
    git_repository,
    run_client,
    texts,
)

INTEGRATION_TIER = True  # the integration tier (tests/unit.py leaves this module out)


class SeveralServersTest(Workspace):
    """Two tiny servers and mcp-server-git behind one proxy, one policy, one record."""

    def setUp(self) -> None:
        require(HAVE_SDK, "the MCP Python SDK (pip install mcp)")
        require(HAVE_GIT_SERVER, "mcp-server-git and git (pip install mcp-server-git)")
        super().setUp()
        self.repo = git_repository(self.directory)
        self.notes = {name: os.path.join(self.directory, f"{name}.txt") for name in ("one", "two")}
        self.servers = os.path.join(self.directory, "servers.json")
        with open(self.servers, "w", encoding="utf-8") as out:
            json.dump({"servers": {
                "tiny-one": {"command": sys.executable, "args": [TINY, "--notes", self.notes["one"]], "prefix": "one"},
                "tiny-two": {"command": sys.executable, "args": [TINY, "--notes", self.notes["two"],
                                                                "--description", "Echo, the second."],
                             "prefix": "two"},
                "git": {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", self.repo],
                        "env": {"GIT_TERMINAL_PROMPT": "0"}}}}, out)
        self.policy = self.write_policy({
            "agent": "several", "allowed_tools": ["one__echo", "one__write_note", "one__crash", "one__ask_client",
                                                  "two__ask_client", "two__echo",
                                                  "two__write_note", "git__git_status", "git__git_log"],
            "rules": [{"id": "no-secrets-to-two", "tools": ["two__write_note"], "effect": "deny",
                       "reason": "no secrets in two's notes", "when": [{"arg": "text", "eq": "secret"}]}]})

    def proxy(self, scenario: Any, *extra: str) -> tuple[Any, str]:
        return run_client(["--policy", self.policy, "--record", self.record, *extra, "--servers", self.servers], [],
                          scenario)

    def notes_of(self, name: str) -> list[str]:
        if not os.path.exists(self.notes[name]):
            return []
        with open(self.notes[name], encoding="utf-8") as notes:
            return notes.read().splitlines()

    def test_one_policy_routes_calls_and_one_record_holds_them_all(self) -> None:
        async def scenario(session: Any) -> Any:
            listing = await session.list_tools()
            return ([(tool.name, tool.description) for tool in listing.tools],
                    texts(await session.call_tool("one__write_note", {"text": "to one"})),
                    texts(await session.call_tool("two__write_note", {"text": "to two"})),
                    texts(await session.call_tool("two__write_note", {"text": "secret"})),
                    texts(await session.call_tool("two__delete_all", {})),
                    texts(await session.call_tool("two__echo", {"text": "hi"})),
                    (await session.call_tool("git__git_status", {"repo_path": self.repo})).content[0].text[:18])

        pins = os.path.join(self.directory, "pins.json")
        value, stderr = self.proxy(scenario, "--pins", pins)
        self.assertEqual(value, (
            [("one__echo", "Echo the text back."), ("one__write_note", "Append a note."),
             ("one__ask_client", "Ask the client for its roots."), ("one__crash", "Exit at once."),
             ("two__echo", "Echo, the second."), ("two__write_note", "Append a note."),
             ("two__ask_client", "Ask the client for its roots."), ("git__git_status", "Shows the working tree status"),
             ("git__git_log", "Shows the commit logs")],
            (False, ['write_note {"text": "to one"}']),
            (False, ['write_note {"text": "to two"}']),
            (True, ["toolreplay: denied by rule no-secrets-to-two: no secrets in two's notes"]),
            (True, ["toolreplay: tool not allowed: two__delete_all"]),
            (False, ['echo {"text": "hi"}']),
            "Repository status:"))
        self.assertEqual((self.notes_of("one"), self.notes_of("two")), (['{"text": "to one"}'], ['{"text": "to two"}']))
        self.assertNotIn("toolreplay mcp-proxy:", stderr)
        with open(pins, encoding="utf-8") as pinned:  # one pins file, by the names the client sees
            names = sorted(json.load(pinned)["tools"])
        self.assertEqual([sum(name.startswith(prefix + "__") for name in names) for prefix in ("one", "two", "git")],
                         [11, 11, 12])
        self.assertEqual((len(names), names[:2], names[-2:]), (34, ["git__git_add", "git__git_branch"],
                                                               ["two__tick", "two__write_note"]))
        with open(self.record, encoding="utf-8") as record:
            rows = [json.loads(line) for line in record]
        self.assertEqual([(row["tool"], row["meta"]["outcome"], row["meta"]["x-server"]) for row in rows], [
            ("one__write_note", "ran", "tiny-one"), ("two__write_note", "ran", "tiny-two"),
            ("two__write_note", "refused", "tiny-two"), ("two__delete_all", "refused", "tiny-two"),
            ("two__echo", "ran", "tiny-two"), ("git__git_status", "ran", "git")])
        self.assertEqual(run("verify", self.record), (0, "chain: intact\n", ""))
        self.assertEqual(run("replay", self.record), (0, "calls: 6\ndivergence: none\nfindings: 0\n", ""))
        self.assertEqual(run("scope", self.record, self.policy), (0, (  # the proxy blocked both: information
            "calls: 6\nfindings: 0\ninformation: 2\n"
            "index 2: blocked: tool 'two__write_note' was refused by the guard: denied by rule no-secrets-to-two: no "
            "secrets in two's notes\n"
            "index 3: blocked: tool 'two__delete_all' was refused by the guard: tool not allowed: two__delete_all\n"),
            ""))

    def test_a_server_that_exits_is_started_again_and_the_others_serve_meanwhile(self) -> None:
        from mcp.shared.exceptions import MCPError

        async def answer(tool: str, args: dict[str, Any], session: Any) -> Any:
            try:
                return texts(await session.call_tool(tool, args))
            except MCPError as exc:  # a JSON-RPC error
                return str(exc)

        async def names(session: Any) -> list[str]:
            return [tool.name for tool in (await session.list_tools()).tools]

        async def scenario(session: Any) -> Any:
            crashed = await answer("one__crash", {}, session)  # a write (--mutator): it may have run
            listing = await names(session)
            down = await answer("one__echo", {"text": "gone?"}, session)
            others = await answer("two__echo", {"text": "still here"}, session)
            for _ in range(100):  # started again after 1 s
                if "one__echo" in (back := await names(session)):
                    break
                await asyncio.sleep(0.1)
            return (crashed, listing, down, others, back[:2], await answer("one__echo", {"text": "back"}, session))

        value, stderr = self.proxy(scenario, "--mutator", "one__crash")
        self.assertEqual(value, (
            (True, ["toolreplay: outcome unknown: the server 'tiny-one' ended before it answered; whether the "
                    "write took effect is unknown"]),
            ["two__echo", "two__write_note", "two__ask_client", "git__git_status", "git__git_log"],
            (True, ["toolreplay: server unavailable: the server 'tiny-one' has ended"]),  # not sent: refused
            (False, ['echo {"text": "still here"}']),
            ["one__echo", "one__write_note"],
            (False, ['echo {"text": "back"}'])))
        self.assertEqual(stderr, "toolreplay mcp-proxy: server 'tiny-one' ended (server exited): it is started "
                                 "again\ntoolreplay mcp-proxy: server 'tiny-one' is back (started again): its tools "
                                 "are listed again\n")
        with open(self.record, encoding="utf-8") as record:
            self.assertEqual([(row["tool"], row["meta"]["outcome"], row["meta"]["x-server"])
                              for row in map(json.loads, record)], [
                ("one__crash", "unknown", "tiny-one"), ("one__echo", "refused", "tiny-one"),
                ("two__echo", "ran", "tiny-two"), ("one__echo", "ran", "tiny-one")])
        self.assertEqual(run("verify", self.record), (0, "chain: intact\n", ""))

    def test_two_servers_asking_the_client_at_once_each_get_their_answer(self) -> None:
        """Both tiny servers send the client `roots/list` with the same id (`ask-1`), at the same time."""
        from mcp import ClientSession, StdioServerParameters, types
        from mcp.client.stdio import stdio_client

        asked: list[Any] = []

        async def roots(context: Any) -> Any:
            asked.append(context.request_id)
            return types.ListRootsResult(roots=[types.Root(uri=f"file:///root-{len(asked)}")])

        async def main() -> Any:
            params = StdioServerParameters(
                command=sys.executable, args=["-m", "toolreplay", "mcp-proxy", "--policy", self.policy, "--record",
                                              self.record, "--servers", self.servers], cwd=ROOT,
                env={"PYTHONPATH": ROOT})
            with tempfile.TemporaryFile("w+", encoding="utf-8") as errlog:
                async with stdio_client(params, errlog=errlog) as (read, write):
                    async with ClientSession(read, write, list_roots_callback=roots) as session:
                        await session.initialize()
                        await session.list_tools()  # else the SDK lists them after a result, while a server asks
                        return await asyncio.wait_for(asyncio.gather(
                            session.call_tool("one__ask_client", {}), session.call_tool("two__ask_client", {})), 60)

        one, two = asyncio.run(main())
        answers = sorted([texts(one)[1][0], texts(two)[1][0]])
        self.assertEqual([answer[:31] for answer in answers], ['ask_client {"roots": [{"uri": "'] * 2)
        self.assertEqual(sorted(answer[31:] for answer in answers), ['file:///root-1"}]}', 'file:///root-2"}]}'])
        self.assertEqual(sorted(asked), ["one__1", "two__2"] if asked[0] == "one__1" else ["one__2", "two__1"])

    def test_a_client_probing_server_discover_falls_back_to_initialize(self) -> None:
        """The SDK's `Client` (mode "auto") probes `server/discover` (2026-07-28): Method not found, so it
        initializes as before."""
        from mcp import Client, StdioServerParameters

        async def main() -> Any:
            params = StdioServerParameters(
                command=sys.executable, args=["-m", "toolreplay", "mcp-proxy", "--policy", self.policy,
                                              "--servers", self.servers], cwd=ROOT, env={"PYTHONPATH": ROOT})
            async with Client(params) as client:
                return texts(await asyncio.wait_for(client.call_tool("two__echo", {"text": "auto"}), 60))

        self.assertEqual(asyncio.run(main()), (False, ['echo {"text": "auto"}']))


class ResourcesAndPromptsTest(Workspace):
    """server-everything (resources, templates, prompts, completions) beside mcp-server-git (tools only)."""

    def test_resources_and_prompts_of_several_servers_are_listed_prefixed_and_served_by_their_own(self) -> None:
        require(HAVE_SDK, "the MCP Python SDK (pip install mcp)")
        require(HAVE_GIT_SERVER, "mcp-server-git and git (pip install mcp-server-git)")
        require(HAVE_EVERYTHING, f"@modelcontextprotocol/server-everything under {TOOLS} and node")
        from mcp import types

        servers = os.path.join(self.directory, "servers.json")
        with open(servers, "w", encoding="utf-8") as out:
            json.dump({"servers": {
                "everything": {"command": shutil.which("node"), "args": [EVERYTHING, "stdio"], "prefix": "ev"},
                "git": {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository",
                                                            git_repository(self.directory)]}}}, out)
        policy = self.write_policy({"agent": "several", "allowed_tools": [
            "git__git_status", "ev__resources/read", "ev__prompts/get", "git__resources/read"]})
        document = "ev__demo://resource/static/document/architecture.md"

        async def scenario(session: Any) -> Any:
            resources = [str(item.uri) for item in (await session.list_resources()).resources]
            templates = [item.uri_template for item in (await session.list_resource_templates()).resource_templates]
            read = (await session.read_resource(document)).contents[0]
            templated = (await session.read_resource("ev__demo://resource/dynamic/text/7")).contents[0]
            prompts = [item.name for item in (await session.list_prompts()).prompts]
            prompt = await session.get_prompt("ev__args-prompt", {"city": "Paris", "state": "Texas"})
            completion = await session.complete(types.PromptReference(type="ref/prompt", name="ev__completable-prompt"),
                                                {"name": "department", "value": "E"})
            try:
                await session.read_resource("git__file:///etc/hostname")
            except Exception as exc:  # noqa: BLE001  (the SDK raises its MCPError)
                refused = str(exc)
            return (resources[:2], len(resources), templates, str(read.uri), read.text[:15], str(templated.uri),
                    prompts, prompt.messages[0].content.text, completion.completion.values, refused)

        value, stderr = run_client(["--policy", policy, "--servers", servers], [], scenario)
        self.assertEqual(value, (
            [document, "ev__demo://resource/static/document/extension.md"], 7,
            ["ev__demo://resource/dynamic/text/{resourceId}", "ev__demo://resource/dynamic/blob/{resourceId}"],
            document, "# Everything Se", "ev__demo://resource/dynamic/text/7",
            ["ev__simple-prompt", "ev__args-prompt", "ev__completable-prompt", "ev__resource-prompt"],
            "What's weather in Paris, Texas?", ["Engineering"],
            "Unknown resource: file:///etc/hostname"))  # git's own answer: the read went to git, unprefixed
        self.assertNotIn("toolreplay mcp-proxy:", stderr)
