"""A client for the conformance suite's client scenarios: `client.py [--proxy POLICY] URL`.

The suite starts a test server for the scenario named by MCP_CONFORMANCE_SCENARIO and runs this with its
URL. Bare, the MCP Python SDK's Streamable HTTP client speaks to the URL; with `--proxy POLICY`, the SDK's
stdio client speaks to `mcp-proxy --policy POLICY -- URL`, so what the suite checks is the proxy's own
client side (its initialize, its calls, its answers to the server's requests, its resumption of a dropped
stream). Exit status 0 once the scenario's steps are done.
"""

from __future__ import annotations

import asyncio
import os
import sys
from contextlib import AbstractAsyncContextManager
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def connection(url: str, policy: str | None) -> AbstractAsyncContextManager[Any]:
    if policy is None:
        from mcp.client.streamable_http import streamable_http_client
        return streamable_http_client(url)
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client
    return stdio_client(StdioServerParameters(
        command=sys.executable, args=["-m", "toolreplay", "mcp-proxy", "--policy", policy, "--", url],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}))


async def with_defaults(context: Any, params: Any) -> Any:
    """Accept, each field the schema gives a default for set to that default (what a client applies)."""
    from mcp import types
    properties = params.requested_schema.get("properties", {})
    content = {name: field["default"] for name, field in properties.items() if "default" in field}
    return types.ElicitResult(action="accept", content=content)


async def run(scenario: str, url: str, policy: str | None) -> None:
    from mcp import ClientSession
    async with connection(url, policy) as streams:
        async with ClientSession(streams[0], streams[1], elicitation_callback=with_defaults) as session:
            await session.initialize()
            tools = {tool.name for tool in (await session.list_tools()).tools}
            if scenario == "tools_call":
                await session.call_tool("add_numbers", {"a": 5, "b": 3})
            elif scenario == "elicitation-sep1034-client-defaults":
                await session.call_tool("test_client_elicitation_defaults", {})
            elif scenario == "sse-retry":
                await session.call_tool("test_reconnection", {})
            elif scenario != "initialize":
                raise SystemExit(f"client.py: no steps for scenario {scenario!r} (tools: {sorted(tools)})")


def main(argv: list[str]) -> int:
    policy = None
    if argv[:1] == ["--proxy"]:
        policy, argv = argv[1], argv[2:]
    asyncio.run(run(os.environ["MCP_CONFORMANCE_SCENARIO"], argv[0], policy))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
