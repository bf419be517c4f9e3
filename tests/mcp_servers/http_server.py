"""An MCP server over Streamable HTTP for the proxy's tests and benchmark: the MCP Python SDK's MCPServer
(formerly FastMCP) under uvicorn, on 127.0.0.1 and a port the system picks, printed as the first line
of output (`port N`).

Tools: `lookup` (a read), `write_note` (a write: appends to --notes FILE), `delete_all` (for a policy
to deny), `fail` (raises: an error result), `chatty` (logs to the client before its result: an answer
as an event stream), `write_and_die` (appends to --notes FILE, then the process exits before it answers:
a write whose outcome the proxy cannot know), `slow` (answers after `seconds`; with `--began FILE` it first
appends `slow SECONDS` to FILE, so a test knows the server has the call) and `steps` (reports
progress and logs a line for each of its `count` steps, `pause` seconds apart, then answers; with `drop`
it closes its event stream after the first step, as a server polling its client does: the client resumes
it with Last-Event-ID, which needs `--event-store`).
`--require-token VAR` answers 401 to every request whose `Authorization` is not `Bearer $VAR`;
`--json` answers with JSON bodies instead of event streams; `--event-store` keeps the events of every
stream in memory so that a stream dropped is resumed (with `--retry MS` in its priming event), and
`--resumes FILE` appends the Last-Event-ID of each GET that resumes one;
`--grants FILE` (with `--oauth`) reads what the one token is granted at each request: `all` (the scope
`mcp:tools`, which every request needs), `narrow` (no scope: 403 insufficient_scope), else revoked (401).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventMessage, EventStore


class _MemoryEvents(EventStore):
    """Every event of every stream, in memory (a test server lives for one test): what a resumed stream replays."""

    def __init__(self) -> None:
        self._events: list[tuple[str, str, Any]] = []  # (event id, stream id, message or None for a priming event)

    async def store_event(self, stream_id: str, message: Any) -> str:
        event_id = str(len(self._events) + 1)
        self._events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: Any) -> str | None:
        found = [index for index, (event_id, _, _) in enumerate(self._events) if event_id == last_event_id]
        if not found:
            return None
        stream = self._events[found[0]][1]
        for event_id, stream_id, message in self._events[found[0] + 1:]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--notes", default=os.devnull)
    parser.add_argument("--require-token", metavar="VAR")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--port", type=int, default=0, help="the port (default: one the system picks)")
    parser.add_argument("--oauth", metavar="VAR", help="the SDK's own OAuth resource server: the bearer token in "
                        "environment variable VAR is valid, the server publishes its protected resource metadata")
    parser.add_argument("--event-store", action="store_true")
    parser.add_argument("--retry", type=int, metavar="MS")
    parser.add_argument("--grants", metavar="FILE")
    parser.add_argument("--resumes", metavar="FILE", help="append the Last-Event-ID of every GET that carries one")
    parser.add_argument("--began", metavar="FILE", help="append `slow SECONDS` as each slow call begins")
    options = parser.parse_args()
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so, and without it each small
    # event after the response's headers waits for the client's delayed acknowledgement (40 ms)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a server started again on the same port
    sock.bind(("127.0.0.1", options.port))
    port = sock.getsockname()[1]

    auth: dict[str, Any] = {}
    if options.oauth:
        from mcp.server.auth.provider import AccessToken
        from mcp.server.auth.settings import AuthSettings

        class OneToken:
            async def verify_token(self, token: str) -> AccessToken | None:
                if token != os.environ[options.oauth]:
                    return None
                if options.grants is None:
                    return AccessToken(token=token, client_id="test-client", scopes=[])
                with open(options.grants, encoding="utf-8") as grants:
                    granted = grants.read().strip()
                if granted not in ("all", "narrow"):  # revoked
                    return None
                return AccessToken(token=token, client_id="test-client",
                                   scopes=["mcp:tools"] if granted == "all" else [])

        auth = {"token_verifier": OneToken(), "auth": AuthSettings(
            issuer_url="https://auth.example/", resource_server_url=f"http://127.0.0.1:{port}/mcp",
            required_scopes=["mcp:tools"] if options.grants else [], validate_token_resource=False)}
    server = MCPServer("http-test", **auth)

    @server.tool()
    def lookup(key: str) -> str:
        """Read a value."""
        return f"value of {key}"

    @server.tool()
    def write_note(text: str) -> str:
        """Append a note."""
        with open(options.notes, "a", encoding="utf-8") as notes:
            notes.write(text + "\n")
        return f"noted {text}"

    @server.tool()
    def delete_all() -> str:
        """Delete everything."""
        return "deleted everything"

    @server.tool()
    def fail() -> str:
        """Always fails."""
        raise ValueError("the tool failed on purpose")

    @server.tool()
    async def chatty(text: str, ctx: Context) -> str:
        """Logs before it answers."""
        await ctx.info(f"working on {text}")
        return f"chatty {text}"

    @server.tool()
    def write_and_die(text: str) -> str:
        """Append a note, then exit without answering."""
        with open(options.notes, "a", encoding="utf-8") as notes:
            notes.write(text + "\n")
        os._exit(3)

    @server.tool()
    async def slow(seconds: float) -> str:
        """Answer after a while."""
        if options.began is not None:
            with open(options.began, "a", encoding="utf-8") as began:
                began.write(f"slow {seconds}\n")
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    async def steps(count: int, pause: float, ctx: Context, drop: bool = False) -> str:
        """Report each step, then answer."""
        for step in range(1, count + 1):
            await ctx.report_progress(step, count)
            await ctx.info(f"step {step}")
            if drop and step == 1:
                await ctx.close_sse_stream()  # the client resumes the stream with Last-Event-ID
            await asyncio.sleep(pause)
        return f"done after {count} steps"

    store = _MemoryEvents() if options.event_store else None
    app: Any = server.streamable_http_app(json_response=options.json, event_store=store, retry_interval=options.retry)
    if options.require_token:
        expected = f"Bearer {os.environ[options.require_token]}".encode()
        inner = app

        async def app(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
            await inner(scope, receive, send)

    if options.resumes:
        logged = app

        async def app(scope: Any, receive: Any, send: Any) -> None:
            last = dict(scope.get("headers", [])).get(b"last-event-id")
            if scope["type"] == "http" and scope["method"] == "GET" and last is not None:
                with open(options.resumes, "a", encoding="utf-8") as resumes:
                    resumes.write(last.decode("latin-1") + "\n")
            await logged(scope, receive, send)

    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    print(f"port {port}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
    sys.exit(0)


if __name__ == "__main__":
    main()
