"""`mcp-proxy --listen` in front of the MCP Python SDK's own server (MCPServer under uvicorn,
tests/mcp_servers/http_server.py), with the SDK's Streamable HTTP client or raw httpx in front: a dropped
event stream resumed with Last-Event-ID on each side (the server's stream by the proxy, from the server's
event store; the client's stream by the SDK client, from the listener's buffer), and a token revoked or
narrowed mid-session (the server's own auth middleware answering 401 or 403), which reaches the client as
HTTP and is recorded as a call that did not run.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from typing import Any

from tests.support import require
from tests.test_mcp_http import HttpWorkspace, read_records, start_http_server
from tests.test_mcp_real import HAVE_SDK, texts

INTEGRATION_TIER = True
TOKEN = "tr-resume-token-8d2e41b7c0"  # a credential: must reach the server and nothing else
POLICY = {"agent": "resume", "allowed_tools": ["lookup", "write_note", "steps"], "write_tools": ["write_note"],
          "rules": [{"id": "notes", "tools": ["write_note"], "effect": "allow", "reason": "notes need no person"}]}


class Relay:
    """A TCP relay on 127.0.0.1 in front of `port`: `cut` drops every connection open now (new ones are
    relayed as before); `sent` is every byte clients sent through it."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._sent: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def sent(self) -> bytes:
        with self._lock:
            return b"".join(self._sent)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._port))
            with self._lock:
                self._open += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, from_client: bool) -> None:
        try:
            while data := source.recv(65536):
                if from_client:
                    with self._lock:
                        self._sent.append(data)
                target.sendall(data)
        except OSError:
            pass
        for end in (source, target):
            self._drop(end)

    def _drop(self, end: socket.socket) -> None:
        try:
            end.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        end.close()

    def cut(self) -> int:
        """Drop every open connection, at once; how many there were (each counts its two ends)."""
        with self._lock:
            ends, self._open = self._open, []
        for end in ends:
            self._drop(end)
        return len(ends)

    def close(self) -> None:
        self._server.close()
        self.cut()


async def steps_session(url: str, arguments: dict[str, Any], on_progress: Any = None,
                        headers: dict[str, str] | None = None) -> dict[str, Any]:
    """One SDK client session calling `steps`: its result, and the progress and log lines it got."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    seen: dict[str, Any] = {"progress": [], "logs": []}

    async def logged(params: Any) -> None:
        seen["logs"].append(params.data)

    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        seen["progress"].append(progress)
        if on_progress is not None:
            on_progress(progress)

    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write, logging_callback=logged) as session:
                await session.initialize()
                result = await asyncio.wait_for(
                    session.call_tool("steps", arguments, progress_callback=progressed), 60)
                seen["result"] = texts(result)
    return seen


class ResumeWorkspace(HttpWorkspace):
    def setUp(self) -> None:
        require(HAVE_SDK, "the MCP Python SDK (pip install mcp)")
        super().setUp()
        self.records = os.path.join(self.directory, "records")
        self.resumes = os.path.join(self.directory, "resumes.txt")

    def listen(self, url: str, policy: dict[str, Any] = POLICY) -> Any:
        from tests.test_mcp_http_listen import Listener

        listener = Listener(self.write_policy(policy), self.records, [url])
        self.addCleanup(lambda: listener.process.poll() is not None or listener.stop())  # a failed assertion too
        return listener

    def records_of(self) -> list[dict[str, Any]]:
        [name] = [name for name in os.listdir(self.records) if name.endswith(".jsonl")]
        return read_records(os.path.join(self.records, name))

    def resumed_from(self) -> list[str]:
        if not os.path.exists(self.resumes):
            return []
        with open(self.resumes, encoding="utf-8") as lines:
            return lines.read().splitlines()


class ResumeTest(ResumeWorkspace):
    def test_the_proxy_resumes_the_servers_dropped_stream_with_last_event_id(self) -> None:
        """The server closes the call's event stream after its first step (the SDK's close_sse_stream, its
        events kept in its event store); the proxy resumes it with Last-Event-ID: the client gets every step
        and the answer once, and the record holds the call once."""
        url, _ = start_http_server(self, "--event-store", "--retry", "100", "--resumes", self.resumes)
        listener = self.listen(url)
        seen = asyncio.run(steps_session(listener.url, {"count": 3, "pause": 0.3, "drop": True}))
        self.assertEqual(seen, {"progress": [1, 2, 3], "logs": ["step 1", "step 2", "step 3"],
                                "result": (False, ["done after 3 steps"])})
        [resumed] = self.resumed_from()  # one GET resumed the call's stream, from the event before the drop
        self.assertTrue(resumed.isdigit(), resumed)
        code, stderr = listener.stop()
        self.assertEqual((code, stderr.count("event stream")), (0, 0), stderr)
        self.assertEqual([(r["tool"], r["args"], r["meta"]["outcome"]) for r in self.records_of()],
                         [("steps", {"count": 3, "pause": 0.3, "drop": True}, "ran")])
        self.assertEqual(self.records_of()[0]["response"]["content"], [{"type": "text", "text": "done after 3 steps"}])

    def test_the_proxy_resumes_when_its_connection_to_the_server_is_cut(self) -> None:
        """The proxy's connections to the server are cut (a TCP relay between them) as the first step's
        progress reaches the client: the proxy resumes the call's stream with Last-Event-ID on a new
        connection, from the server's event store; every step and the answer reach the client once."""
        url, _ = start_http_server(self, "--event-store", "--retry", "100", "--resumes", self.resumes)
        relay = Relay(int(url.split(":")[2].split("/")[0]))
        self.addCleanup(relay.close)
        listener = self.listen(f"http://127.0.0.1:{relay.port}/mcp")
        cuts: list[int] = []

        def on_progress(progress: float) -> None:
            if progress == 1:
                cuts.append(relay.cut())

        seen = asyncio.run(steps_session(listener.url, {"count": 3, "pause": 1.0}, on_progress))
        self.assertEqual((seen["progress"], sorted(seen["logs"]), seen["result"]),
                         ([1, 2, 3], ["step 1", "step 2", "step 3"], (False, ["done after 3 steps"])))
        self.assertEqual(len(cuts), 1)
        self.assertGreaterEqual(cuts[0], 2)
        self.assertEqual(len(self.resumed_from()), 1)  # the call's stream (the GET stream, with no events, is opened anew)
        code, stderr = listener.stop()
        self.assertEqual(code, 0, stderr)
        self.assertEqual([(r["tool"], r["meta"]["outcome"]) for r in self.records_of()], [("steps", "ran")])

    def test_the_sdk_client_resumes_its_dropped_stream_from_the_listeners_buffer(self) -> None:
        """The client's connections to the listener are cut as the first step's progress comes: the SDK client
        reconnects with the Last-Event-ID the listener gave, and gets what came meanwhile from the listener's
        buffer, then the answer, each once; the call ran once."""
        url, _ = start_http_server(self, "--resumes", self.resumes)
        listener = self.listen(url)
        port = int(listener.url.split(":")[2].split("/")[0])
        relay = Relay(port)
        self.addCleanup(relay.close)
        cuts: list[int] = []

        def on_progress(progress: float) -> None:
            if progress == 1:
                cuts.append(relay.cut())

        seen = asyncio.run(steps_session(f"http://127.0.0.1:{relay.port}/mcp", {"count": 3, "pause": 1.0},
                                         on_progress))
        self.assertEqual((seen["progress"], sorted(seen["logs"]), seen["result"]),
                         ([1, 2, 3], ["step 1", "step 2", "step 3"], (False, ["done after 3 steps"])))
        self.assertEqual(len(cuts), 1)
        self.assertGreaterEqual(cuts[0], 2)  # the call's stream at least, both its ends
        sent = relay.sent.decode("latin-1").lower()
        resumed = [line.split(":", 1)[1].strip() for line in sent.split("\r\n") if line.startswith("last-event-id:")]
        # the call's stream (the session's third: the GET stream is its second), after its first or second event
        # (the first step's progress, then its log line, which may have come before the cut)
        self.assertRegex(" ".join(resumed), r"^3-[12]$")
        self.assertEqual(self.resumed_from(), [])  # the proxy's own stream to the server never dropped
        code, stderr = listener.stop()
        self.assertEqual(code, 0, stderr)
        self.assertEqual([(r["tool"], r["meta"]["outcome"]) for r in self.records_of()], [("steps", "ran")])


class TokenRevokedTest(ResumeWorkspace):
    """A session initialized with a good token; the token is then revoked (401) or narrowed (403) at the server,
    whose own auth middleware refuses the next calls. Each reaches the client as that HTTP status with the
    server's WWW-Authenticate (naming the listener's metadata), is recorded `refused` (it did not run: a write
    refused so may be made again), and the token is nowhere but at the server."""

    def revoked_mid_session(self, *server: str) -> None:
        import httpx

        grants = os.path.join(self.directory, "grants")
        self.grant("all", grants)
        url, _ = start_http_server(self, "--notes", self.notes, "--oauth", "TOOLREPLAY_TEST_TOKEN",
                                   "--grants", grants, *server, env={"TOOLREPLAY_TEST_TOKEN": TOKEN})
        listener = self.listen(url)
        base = listener.url[:-len("/mcp")]
        metadata = f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"'
        both = {"accept": "application/json, text/event-stream", "content-type": "application/json",
                "authorization": f"Bearer {TOKEN}"}
        with httpx.Client(timeout=30) as http:
            opened = http.post(listener.url, headers=both, json={
                "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
            self.assertEqual(opened.status_code, 200, opened.text)
            session = {**both, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            self.assertEqual(http.post(listener.url, headers=session, json={
                "jsonrpc": "2.0", "method": "notifications/initialized"}).status_code, 202)

            def call(number: int, tool: str, headers: dict[str, str] = session, **args: Any) -> httpx.Response:
                return http.post(listener.url, headers=headers, json={
                    "jsonrpc": "2.0", "id": number, "method": "tools/call", "params": {"name": tool, "arguments": args}})

            def refused(answer: httpx.Response, number: int, status: str) -> tuple[Any, ...]:
                return (answer.status_code, answer.headers.get("mcp-session-id") == session["mcp-session-id"],
                        answer.headers.get("content-type"), answer.json(), status)

            def refusal(number: int, status: str) -> dict[str, Any]:
                return {"jsonrpc": "2.0", "id": number, "result": {"content": [{"type": "text", "text": (
                    f"toolreplay: refused by the server: the server answered HTTP {status}")}], "isError": True}}

            self.assertEqual(call(2, "lookup", key="k").json()["result"]["content"], [
                {"type": "text", "text": "value of k"}])
            self.grant("revoked", grants)
            answers = [call(3, "write_note", text="x"), call(4, "lookup", key="k"),
                       call(5, "write_note", {**session, "accept": "application/json"}, text="x")]
            for number, answer in zip((3, 4, 5), answers, strict=True):
                with self.subTest(number=number):
                    self.assertEqual(refused(answer, number, "401 Unauthorized"), (
                        401, True, "application/json", refusal(number, "401 Unauthorized"), "401 Unauthorized"))
                    self.assertEqual(answer.headers["www-authenticate"], (
                        f'Bearer error="invalid_token", error_description="Authentication required", {metadata}'))
            # the intents file of the upstream (each write is announced there before it goes) holds no token
            self.assertEqual([name.endswith(".intents") for name in sorted(os.listdir(self.records))],
                             [False, True, False])  # the record, the intents file, its lock
            self.assertEqual(self.holding_the_token(), [])
            self.grant("narrow", grants)
            narrowed = call(6, "write_note", text="x")
            self.assertEqual(refused(narrowed, 6, "403 Forbidden"), (
                403, True, "application/json", refusal(6, "403 Forbidden"), "403 Forbidden"))
            self.assertEqual(narrowed.headers["www-authenticate"], (
                f'Bearer error="insufficient_scope", error_description="Required scope: mcp:tools", {metadata}'))
            self.grant("all", grants)  # authorized again: the write the server refused runs now, once
            self.assertEqual(call(7, "write_note", text="x").json()["result"]["content"], [
                {"type": "text", "text": "noted x"}])
            self.assertEqual(http.delete(listener.url, headers=session).status_code, 200)
        code, stderr = listener.stop()
        self.assertEqual(code, 0, stderr)
        self.assertEqual(self.notes_written(), ["x"])
        self.assertIn("the server answered HTTP 401 Unauthorized", stderr)
        self.assertIn("the server answered HTTP 403 Forbidden", stderr)
        records = self.records_of()
        self.assertEqual([(r["tool"], r["meta"]["outcome"], r["response"].get("error")) for r in records], [
            ("lookup", "ran", None),
            *[(tool, "refused", "refused by the server: the server answered HTTP 401 Unauthorized")
              for tool in ("write_note", "lookup", "write_note")],
            ("write_note", "refused", "refused by the server: the server answered HTTP 403 Forbidden"),
            ("write_note", "ran", None)])
        self.assertNotIn(TOKEN, stderr)
        self.assertEqual(self.holding_the_token(), [])

    def test_revoked_while_a_writes_stream_was_dropped(self) -> None:
        """The token is revoked while the server's stream of a write is dropped: the resumption gets 401. The
        write had reached the server, so its outcome is unknown (not refused); the proxy gives up at once rather
        than trying again, and says why; the client, whose stream had begun, gets the answer on it."""
        grants = os.path.join(self.directory, "grants")
        self.grant("all", grants)
        url, _ = start_http_server(self, "--oauth", "TOOLREPLAY_TEST_TOKEN", "--grants", grants, "--event-store",
                                   "--retry", "100", "--resumes", self.resumes, env={"TOOLREPLAY_TEST_TOKEN": TOKEN})
        listener = self.listen(url, {**POLICY, "write_tools": ["write_note", "steps"], "rules": [
            {"id": "steps", "tools": ["steps"], "effect": "allow", "reason": "steps need no person"}]})
        seen = asyncio.run(steps_session(listener.url, {"count": 2, "pause": 1.0, "drop": True},
                                         lambda progress: self.grant("revoked", grants),
                                         headers={"Authorization": f"Bearer {TOKEN}"}))
        lost = ("outcome unknown: the server answered HTTP 401 Unauthorized when its event stream was resumed; "
                "whether the write took effect is unknown")
        self.assertEqual((seen["progress"], seen["result"]), ([1], (True, ["toolreplay: " + lost])))
        self.assertIn(seen["logs"], ([], ["step 1"]))  # the first step's log line comes before the drop, or not
        self.assertEqual(len(self.resumed_from()), 1)  # given up at the first 401, not tried again
        code, stderr = listener.stop()
        self.assertEqual(code, 0, stderr)
        self.assertIn("the server answered HTTP 401 Unauthorized when its event stream was resumed\n", stderr)
        self.assertNotIn(TOKEN, stderr)
        self.assertEqual([(r["tool"], r["meta"]["outcome"], r["response"]) for r in self.records_of()],
                         [("steps", "unknown", {"ok": False, "error": lost})])
        self.assertEqual(self.holding_the_token(), [])

    def holding_the_token(self) -> list[str]:
        """The files of the records folder (records, intents) that hold the token."""
        found = []
        for name in sorted(os.listdir(self.records)):
            with open(os.path.join(self.records, name), "rb") as kept:
                if TOKEN.encode() in kept.read():
                    found.append(name)
        return found

    def grant(self, what: str, path: str) -> None:
        with open(path, "w", encoding="utf-8") as out:
            out.write(what + "\n")

    def test_revoked_with_answers_as_event_streams(self) -> None:
        self.revoked_mid_session()

    def test_revoked_with_answers_as_json(self) -> None:
        self.revoked_mid_session("--json")
