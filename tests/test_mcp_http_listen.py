"""`toolreplay mcp-proxy --listen`: the guarded server served to MCP clients over Streamable HTTP.

The real components: the MCP Python SDK's Streamable HTTP client (`streamable_http_client` and
`ClientSession`), httpx for the raw requests a well-behaved client never sends, the tiny test server and
@modelcontextprotocol/server-everything (stdio) behind the listener. The listener needs uvicorn (the http
extra); missing components skip these tests locally and fail them in CI.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support import require, size_of, wait_for
from tests.test_cli import run
from tests.test_mcp_real import EVERYTHING, HAVE_EVERYTHING, TINY, texts

INTEGRATION_TIER = True
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE_HTTP = all(importlib.util.find_spec(name) is not None for name in ("mcp", "uvicorn", "httpx"))
TOKEN = "s3cret-token-0123456789abcdef"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
BOTH = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
JSON_ONLY = {"content-type": "application/json", "accept": "application/json"}


def error(code: int, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": text}}


class Listener:
    """`toolreplay mcp-proxy --listen 127.0.0.1:0` in a process; `stop` sends SIGTERM and returns its stderr."""

    def __init__(self, policy: str, records: str, server: list[str], *extra: str, cwd: str = ROOT) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "toolreplay", "mcp-proxy", "--policy", policy,
             *(() if "--listen" in extra else ("--listen", "127.0.0.1:0")), "--records", records, *extra, "--", *server],
            cwd=cwd, env={**os.environ, "PYTHONPATH": ROOT}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert self.process.stderr is not None
        ready, _, _ = select.select([self.process.stderr], [], [], 60)
        first = self.process.stderr.readline().decode() if ready else ""
        if not first.startswith("listening on http://"):
            self.process.kill()
            self.process.wait()
            self.process.stderr.close()
            raise AssertionError(f"the listener did not start: {first!r}")
        self.url = first.split()[-1].replace("0.0.0.0", "127.0.0.1")

    def stop(self) -> tuple[int, str]:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        assert self.process.stderr is not None
        with self.process.stderr:
            return code, self.process.stderr.read().decode()


Scenario = Callable[[Any], Awaitable[Any]]


async def session_run(url: str, scenario: Scenario, elicit: Callable[..., Awaitable[Any]] | None = None,
                      headers: dict[str, str] | None = None) -> Any:
    """Initialize a session with the SDK's Streamable HTTP client, run `scenario(session)`, end the session."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write, elicitation_callback=elicit) as session:
                await session.initialize()
                return await asyncio.wait_for(scenario(session), 60)


def answer(approve: bool) -> Callable[..., Awaitable[Any]]:
    async def elicit(context: Any, params: Any) -> Any:
        from mcp import types
        elicit.messages.append(params.message)  # type: ignore[attr-defined]
        return types.ElicitResult(action="accept", content={"approve": approve})

    elicit.messages = []  # type: ignore[attr-defined]
    return elicit


class ListenerCase(unittest.TestCase):
    """A temporary folder, a policy, and a listener in front of the tiny server."""

    server_args: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()

    def setUp(self) -> None:
        require(HAVE_HTTP, "the MCP Python SDK, uvicorn and httpx (pip install mcp '.[http]')")
        self.directory = os.path.realpath(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.directory)
        self.records = os.path.join(self.directory, "records")
        self.notes = os.path.join(self.directory, "notes.txt")
        self.began = os.path.join(self.directory, "began.txt")  # the tiny server's note of each held call
        self.policy = os.path.join(self.directory, "policy.json")
        with open(self.policy, "w", encoding="utf-8") as out:
            json.dump({"agent": "tiny", "allowed_tools": ["echo", "write_note", "tick", "hold", "crash"],
                       "write_tools": ["write_note"]}, out)
        self.listener = self.start(*self.extra)
        self.stderr: str | None = None

    def start(self, *extra: str) -> Listener:
        listener = Listener(self.policy, self.records, [sys.executable, TINY, "--notes", self.notes, "--began",
                                                        self.began, *self.server_args], *extra)
        self.addCleanup(self.stopped, listener)
        return listener

    def stopped(self, listener: Listener) -> str:
        if listener.process.poll() is not None and self.stderr is not None:
            return self.stderr
        code, self.stderr = listener.stop()
        self.assertEqual(code, 0, self.stderr)
        return self.stderr

    def record_files(self) -> list[str]:
        return sorted(os.path.join(self.records, name) for name in os.listdir(self.records)
                      if name.endswith(".jsonl"))

    def tools_of(self, record: str) -> list[str]:
        with open(record, encoding="utf-8") as lines:
            return [json.loads(line)["tool"] for line in lines]

    def sdk(self, scenario: Scenario, elicit: Callable[..., Awaitable[Any]] | None = None) -> Any:
        return asyncio.run(session_run(self.listener.url, scenario, elicit))


class SdkClientTest(ListenerCase):
    """The SDK's own Streamable HTTP client through the listener."""

    def test_listing_calls_refusals_and_one_sealed_record(self) -> None:
        async def scenario(session: Any) -> Any:
            listing = await session.list_tools()
            return ([tool.name for tool in listing.tools],
                    texts(await session.call_tool("echo", {"text": "hi"})),
                    texts(await session.call_tool("delete_all", {})),
                    texts(await session.call_tool("write_note", {"text": "yes"})))

        approve = answer(True)
        self.assertEqual(self.sdk(scenario, approve), (
            ["echo", "write_note", "tick", "hold", "crash"],
            (False, ['echo {"text": "hi"}']),
            (True, ["toolreplay: tool not allowed: delete_all"]),
            (False, ['write_note {"text": "yes"}'])))
        self.assertEqual(approve.messages,  # type: ignore[attr-defined]
                         ['Allow the tool call "write_note" with arguments {"text":"yes"}?'])
        with open(self.notes, encoding="utf-8") as notes:
            self.assertEqual(notes.read(), '{"text": "yes"}\n')
        [record] = self.record_files()
        self.assertEqual(self.tools_of(record), ["echo", "delete_all", "write_note"])
        self.assertEqual(run("verify", record), (0, "chain: intact\n", ""))
        stderr = self.stopped(self.listener)
        name = os.path.basename(record)[:-6]
        self.assertEqual(stderr, f"toolreplay mcp-proxy: session {name}: started, record {record}\n"
                                 f"toolreplay mcp-proxy: session {name}: ended (the client ended the session)\n")

    def test_declined_write_does_not_run(self) -> None:
        async def scenario(session: Any) -> Any:
            return texts(await session.call_tool("write_note", {"text": "no"}))

        self.assertEqual(self.sdk(scenario, answer(False)), (True, ["toolreplay: confirmation declined"]))
        self.assertFalse(os.path.exists(self.notes))
        [record] = self.record_files()
        self.assertEqual(self.tools_of(record), ["write_note"])
        self.assertEqual(run("verify", record), (0, "chain: intact\n", ""))

    def test_without_elicitation_a_write_is_refused(self) -> None:
        async def scenario(session: Any) -> Any:
            return texts(await session.call_tool("write_note", {"text": "x"}))

        self.assertEqual(self.sdk(scenario), (True, ["toolreplay: confirmation required"]))
        self.assertFalse(os.path.exists(self.notes))

    def test_two_concurrent_sessions_have_their_own_server_and_record(self) -> None:
        async def scenario(session: Any) -> Any:
            first = texts(await session.call_tool("tick", {}))
            await asyncio.sleep(0.2)  # both sessions are open at once
            return first, texts(await session.call_tool("tick", {}))

        async def both() -> Any:
            return await asyncio.gather(session_run(self.listener.url, scenario),
                                        session_run(self.listener.url, scenario))

        ticks = ((False, ["tick 1"]), (False, ["tick 2"]))
        self.assertEqual(asyncio.run(both()), [ticks, ticks])  # each session started its own server
        records = self.record_files()
        self.assertEqual(len(records), 2)
        for record in records:
            self.assertEqual(self.tools_of(record), ["tick", "tick"])
            self.assertEqual(run("verify", record), (0, "chain: intact\n", ""))

    def test_sigterm_ends_every_session_and_seals_its_record(self) -> None:
        import httpx

        with httpx.Client(timeout=30) as http:
            first = http.post(self.listener.url, json=INIT, headers=JSON_ONLY)
            session = {**JSON_ONLY, "mcp-session-id": first.headers["mcp-session-id"]}
            http.post(self.listener.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                      headers=session)
            reply = http.post(self.listener.url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                                       "params": {"name": "echo", "arguments": {}}}, headers=session)
        self.assertEqual(reply.json()["result"]["content"], [{"type": "text", "text": "echo {}"}])
        stderr = self.stopped(self.listener)
        [record] = self.record_files()
        self.assertTrue(stderr.endswith(f"session {os.path.basename(record)[:-6]}: ended (the listener is closing)\n"),
                        stderr)
        self.assertEqual(run("verify", record), (0, "chain: intact\n", ""))


class BadInputTest(ListenerCase):
    """Every request a client should not send gets a clear answer; other sessions go on."""

    extra = ("--max-body", "2000")

    def setUp(self) -> None:
        super().setUp()
        import httpx

        self.http = httpx.Client(timeout=30)
        self.addCleanup(self.http.close)
        reply = self.http.post(self.listener.url, json=INIT, headers=JSON_ONLY)
        self.assertEqual(reply.status_code, 200)
        self.session = reply.headers["mcp-session-id"]
        self.headers = {**JSON_ONLY, "mcp-session-id": self.session}
        self.assertEqual(self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code, 202)

    def post(self, message: Any, headers: dict[str, str] | None = None, path: str = "") -> Any:
        content = message if isinstance(message, bytes) else json.dumps(message).encode()
        return self.http.post(self.listener.url + path, content=content, headers=headers or self.headers)

    def hold(self, message_id: int) -> Any:
        """POST a `hold` call (answered only when cancelled) on a socket of its own; the open socket."""
        import socket

        body = json.dumps(self.call(message_id, "hold")).encode()
        address = self.listener.url.split("/")[2]
        held = socket.create_connection((address.split(":")[0], int(address.split(":")[1])), timeout=30)
        before = size_of(self.began)
        held.sendall(f"POST /mcp HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n"
                     f"accept: application/json, text/event-stream\r\nmcp-session-id: {self.session}\r\n"
                     f"content-length: {len(body)}\r\n\r\n".encode() + body)
        # until the call reaches the server (a fixed wait was too short under load)
        wait_for(lambda: size_of(self.began) != before, "the held call to reach the server")
        return held

    def assertRefused(self, reply: Any, status: int, code: int, text: str) -> None:
        self.assertEqual((reply.status_code, reply.headers["content-type"], reply.json()),
                         (status, "application/json", error(code, text)))

    def call(self, message_id: int, name: str = "echo", arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": message_id, "method": "tools/call",
                "params": {"name": name, "arguments": arguments or {}}}

    def test_each_bad_request_and_its_answer(self) -> None:
        self.assertRefused(self.post(b'{"jsonrpc": "2.0", "id": 3,'), 400, -32700, "Parse error")
        self.assertRefused(self.post(b"[1, 2]"), 400, -32600, "Invalid Request: the body must be a JSON-RPC message")
        self.assertRefused(self.post(self.call(4), {**self.headers, "mcp-session-id": "no-such-session"}), 404,
                           -32600, "Not Found: unknown or expired session")
        self.assertRefused(self.post(self.call(5), JSON_ONLY), 400, -32600,
                           "Bad Request: missing Mcp-Session-Id header")
        self.assertRefused(self.post(self.call(6, arguments={"text": "x" * 3000})), 413, -32600,
                           "Payload Too Large: the body exceeds 2000 bytes")
        self.assertRefused(self.post(self.call(7), {**self.headers, "content-type": "text/plain"}), 415, -32600,
                           "Unsupported Media Type: Content-Type must be application/json")
        self.assertRefused(self.post(self.call(8), {**self.headers, "accept": "text/html"}), 406, -32600,
                           "Not Acceptable: the client must accept application/json")
        self.assertRefused(self.post(self.call(9), path="/other"), 404, -32600, "Not Found")
        self.assertRefused(self.post(self.call(10), {**self.headers, "origin": "https://evil.example"}), 403,
                           -32600, "Forbidden: Origin not allowed")
        self.assertRefused(self.post(self.call(11), {**self.headers, "host": "evil.example"}), 403, -32600,
                           "Forbidden: Host not allowed")
        self.assertRefused(self.post(self.call(12), {**self.headers, "mcp-protocol-version": "1999-01-01"}), 400,
                           -32600, "Bad Request: unsupported MCP-Protocol-Version: 1999-01-01")
        self.assertRefused(self.post([self.call(13), self.call(14)]), 400, -32600,
                           "Invalid Request: batches are not supported by the negotiated protocol version")
        reply = self.http.put(self.listener.url, content=b"{}", headers=self.headers)
        self.assertRefused(reply, 405, -32600, "Method Not Allowed")
        self.assertEqual(reply.headers["allow"], "GET, POST, DELETE")
        self.assertRefused(self.http.get(self.listener.url, headers=self.headers), 406, -32600,
                           "Not Acceptable: the client must accept text/event-stream")
        # a loopback origin is fine, and nothing above reached the server: only this call is recorded
        reply = self.post(self.call(15, arguments={"text": "ok"}), {**self.headers, "origin": "http://localhost:3000"})
        self.assertEqual((reply.status_code, reply.json()["result"]["content"][0]["text"]), (200, 'echo {"text": "ok"}'))
        [record] = self.record_files()
        self.assertEqual(self.tools_of(record), ["echo"])

    def test_a_malformed_http_request_gets_400_and_the_session_goes_on(self) -> None:
        import socket

        address = self.listener.url.split("/")[2]
        for garbage in (b"POST /mcp HTTP/1.1\r\nbad header line\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\r\n\r\n",
                        b"POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\ncontent-length: 7\r\n\r\n"):
            with self.subTest(garbage=garbage), socket.create_connection(
                    (address.split(":")[0], int(address.split(":")[1])), timeout=30) as raw:
                raw.sendall(garbage)
                answer = b""
                while chunk := raw.recv(65536):
                    answer += chunk
                head, _, body = answer.partition(b"\r\n\r\n")
                self.assertEqual((head.split(b"\r\n")[0], body), (b"HTTP/1.1 400 Bad Request",
                                                                   b"Invalid HTTP request received."))
        reply = self.post(self.call(20, arguments={"text": "still"}))
        self.assertEqual((reply.status_code, reply.json()["result"]["content"][0]["text"]), (200, 'echo {"text": "still"}'))

    def test_an_id_in_flight_is_refused_and_a_client_leaving_mid_stream_ends_nothing_else(self) -> None:
        with self.hold(20):
            self.assertRefused(self.post(self.call(20)), 400, -32600,
                               "Invalid Request: the id is already used by a request in flight")
        # the held request's client is gone; the session and the listener go on
        self.assertEqual(self.post(self.call(21, arguments={"text": "after"})).json()["result"]["content"][0]["text"],
                         'echo {"text": "after"}')
        self.assertEqual(asyncio.run(session_run(self.listener.url, lambda session: session.call_tool("echo", {})))
                         .content[0].text, "echo {}")
        self.assertEqual(len(self.record_files()), 2)

    def test_a_cancelled_request_ends_its_stream(self) -> None:
        with self.hold(60) as held:
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 60}}
            self.assertEqual(self.post(cancel).status_code, 202)
            answer = b""
            while not answer.endswith(b"}}"):
                answer += held.recv(65536)
        self.assertEqual(answer.split(b"\r\n\r\n", 1)[1],
                         b'{"jsonrpc":"2.0","id":60,"error":{"code":-32800,"message":"Request cancelled"}}')
        [record] = self.record_files()
        deadline = time.monotonic() + 20  # the stream ends at once; the call is recorded once the router has it
        while os.path.getsize(record) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        with open(record, encoding="utf-8") as lines:
            self.assertEqual([(item["tool"], item["response"]) for item in map(json.loads, lines)],
                             [("hold", {"ok": False, "error": "cancelled: the client cancelled the call while the server "
                                                             "ran it"})])

    def test_an_answer_alone_comes_as_json_even_when_the_client_accepts_sse(self) -> None:
        sse = {**self.headers, "accept": "application/json, text/event-stream"}
        reply = self.post(self.call(30, arguments={"text": "s"}), sse)
        self.assertEqual((reply.status_code, reply.headers["content-type"], reply.headers["mcp-session-id"]),
                         (200, "application/json", self.session))
        self.assertEqual(reply.text, '{"jsonrpc":"2.0","id":30,"result":{"content":[{"type":"text",'
                                     '"text":"echo {\\"text\\": \\"s\\"}"}],"isError":false}}')

    def test_one_get_stream_a_session_and_resuming_only_a_kept_stream(self) -> None:
        sse = {**self.headers, "accept": "text/event-stream"}
        with self.http.stream("GET", self.listener.url, headers=sse) as stream:
            self.assertEqual((stream.status_code, stream.headers["content-type"]), (200, "text/event-stream"))
            self.assertRefused(self.http.get(self.listener.url, headers=sse), 409, -32600,
                               "Conflict: the session already has a GET stream")
        for last in ("7", "7-1", "1-x"):
            self.assertRefused(self.http.get(self.listener.url, headers={**sse, "last-event-id": last}), 400, -32600,
                               "Bad Request: no stream of this session to resume from that Last-Event-ID")

    def test_delete_ends_the_session_and_seals_its_record(self) -> None:
        self.assertEqual(self.post(self.call(40)).status_code, 200)
        reply = self.http.delete(self.listener.url, headers=self.headers)
        self.assertEqual((reply.status_code, reply.content), (200, b""))
        self.assertRefused(self.post(self.call(41)), 404, -32600, "Not Found: unknown or expired session")
        [record] = self.record_files()
        self.assertEqual(run("verify", record), (0, "chain: intact\n", ""))
        self.assertIn("ended (the client ended the session)", self.stopped(self.listener))

    def test_a_server_that_exits_ends_its_session(self) -> None:
        reply = self.post(self.call(50, "crash"))
        self.assertEqual(reply.status_code, 200)
        self.assertTrue(reply.json()["result"]["isError"])
        deadline = time.monotonic() + 20
        while self.post(self.call(51)).status_code != 404 and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertRefused(self.post(self.call(52)), 404, -32600, "Not Found: unknown or expired session")


class ConfirmationStreamTest(ListenerCase):
    """The proxy's question about a call goes on that call's own SSE stream, before its answer."""

    def test_question_then_answer_on_the_calls_stream(self) -> None:
        import httpx

        init = {**INIT, "params": {**INIT["params"], "capabilities": {"elicitation": {}}}}
        with httpx.Client(timeout=30) as http:
            reply = http.post(self.listener.url, json=init, headers=JSON_ONLY)
            headers = {**BOTH, "mcp-session-id": reply.headers["mcp-session-id"]}
            http.post(self.listener.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
            call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                    "params": {"name": "write_note", "arguments": {"text": "sse"}}}
            with http.stream("POST", self.listener.url, json=call, headers=headers) as stream:
                events = stream.iter_lines()
                self.assertEqual(next(events), "id: 2-1")  # the session's second stream (initialize's was the first)
                self.assertEqual(next(events), "event: message")
                question = json.loads(next(events).removeprefix("data: "))
                self.assertEqual((question["method"], question["params"]["message"]),
                                 ("elicitation/create", 'Allow the tool call "write_note" with arguments {"text":"sse"}?'))
                yes = {"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept",
                                                                          "content": {"approve": True}}}
                self.assertEqual(http.post(self.listener.url, json=yes, headers=headers).status_code, 202)
                rest = [line for line in events if line]
        self.assertEqual(rest, ["id: 2-2", "event: message", 'data: {"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text",'
                                                  '"text":"write_note {\\"text\\": \\"sse\\"}"}],"isError":false}}'])
        with open(self.notes, encoding="utf-8") as notes:
            self.assertEqual(notes.read(), '{"text": "sse"}\n')


    def test_a_client_that_went_resumes_the_calls_stream_with_last_event_id(self) -> None:
        self.went_and_resumed("resumed")

    def test_a_client_that_went_after_a_large_body_resumes_the_calls_stream(self) -> None:
        """A body past uvicorn's high-water mark (64 KiB) may leave the connection's reading paused once it is
        read: the listener still sees the client go (the stream is kept) and the client resumes it."""
        self.went_and_resumed("large " + "x" * 200_000)

    def went_and_resumed(self, text: str) -> None:
        import httpx

        init = {**INIT, "params": {**INIT["params"], "capabilities": {"elicitation": {}}}}
        with httpx.Client(timeout=30) as http:
            reply = http.post(self.listener.url, json=init, headers=JSON_ONLY)
            headers = {**BOTH, "mcp-session-id": reply.headers["mcp-session-id"]}
            call = {"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                    "params": {"name": "write_note", "arguments": {"text": text}}}
            with httpx.Client(timeout=30) as leaving, leaving.stream("POST", self.listener.url, json=call,
                                                                    headers=headers) as stream:
                events = stream.iter_lines()
                self.assertEqual((next(events), next(events)), ("id: 2-1", "event: message"))
                question = json.loads(next(events).removeprefix("data: "))
            yes = {"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"approve": True}}}
            self.assertEqual(http.post(self.listener.url, json=yes, headers=headers).status_code, 202)
            sse = {**headers, "accept": "text/event-stream"}
            with http.stream("GET", self.listener.url, headers={**sse, "last-event-id": "2-1"}) as resumed:
                self.assertEqual(resumed.status_code, 200)
                rest = [line for line in resumed.iter_lines() if line]
            again = http.get(self.listener.url, headers={**sse, "last-event-id": "2-2"})  # ended: not kept
            self.assertEqual((again.status_code, again.json()["error"]["message"]),
                             (400, "Bad Request: no stream of this session to resume from that Last-Event-ID"))
        answer = json.dumps("write_note " + json.dumps({"text": text}))
        self.assertEqual(rest, ["id: 2-2", "event: message", 'data: {"jsonrpc":"2.0","id":8,"result":{"content":'
                                f'[{{"type":"text","text":{answer}}}],"isError":false}}}}'])
        with open(self.notes, encoding="utf-8") as notes:
            self.assertEqual(notes.read(), json.dumps({"text": text}) + "\n")

    def test_the_get_stream_resumes_with_what_was_sent_and_what_waited(self) -> None:
        import httpx

        with open(self.policy, "w", encoding="utf-8") as out:
            json.dump({"agent": "tiny", "allowed_tools": ["noisy"]}, out)
        listener = Listener(self.policy, os.path.join(self.directory, "noisy-records"), [sys.executable, TINY])
        self.addCleanup(self.stopped, listener)
        with httpx.Client(timeout=30) as http:
            reply = http.post(listener.url, json=INIT, headers=JSON_ONLY)  # the session's stream 1
            headers = {**JSON_ONLY, "mcp-session-id": reply.headers["mcp-session-id"]}
            sse = {**headers, "accept": "text/event-stream"}
            noisy = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "noisy", "arguments": {}}}
            log = ('data: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info",'
                   '"data":"noisy was called"}}')
            with http.stream("GET", listener.url, headers=sse) as stream:  # stream 2
                self.assertEqual(http.post(listener.url, json={**noisy, "id": 1}, headers=headers).status_code, 200)
                events = stream.iter_lines()
                first = [next(events) for _ in range(3)]
            # the GET stream is gone: the server's next message waits for it
            self.assertEqual(http.post(listener.url, json={**noisy, "id": 2}, headers=headers).status_code, 200)
            with http.stream("GET", listener.url, headers={**sse, "last-event-id": "2-0"}) as resumed:
                events = resumed.iter_lines()
                replayed = [line for line in (next(events) for _ in range(8)) if line]
        self.assertEqual(first, ["id: 2-1", "event: message", log])
        self.assertEqual(replayed, ["id: 2-1", "event: message", log, "id: 2-2", "event: message", log])

    def test_a_client_leaving_mid_sse_leaves_the_write_unrun_and_recorded(self) -> None:
        import httpx

        init = {**INIT, "params": {**INIT["params"], "capabilities": {"elicitation": {}}}}
        with httpx.Client(timeout=30) as http:
            reply = http.post(self.listener.url, json=init, headers=JSON_ONLY)
            headers = {**BOTH, "mcp-session-id": reply.headers["mcp-session-id"]}
            call = {"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                    "params": {"name": "write_note", "arguments": {"text": "left"}}}
            with httpx.Client(timeout=30) as leaving, leaving.stream("POST", self.listener.url, json=call,
                                                                    headers=headers) as stream:
                events = stream.iter_lines()
                self.assertEqual(next(events), "id: 2-1")  # the session's second stream (initialize's was the first)
                self.assertEqual(next(events), "event: message")
                self.assertIn('"method":"elicitation/create"', next(events))
            # that client is gone, the question unanswered; the session goes on
            echo = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "echo", "arguments": {}}}
            self.assertEqual(http.post(self.listener.url, json=echo, headers=headers).json()["result"]["content"],
                             [{"type": "text", "text": "echo {}"}])
            self.assertEqual(http.delete(self.listener.url, headers=headers).status_code, 200)
        self.assertFalse(os.path.exists(self.notes))
        [record] = self.record_files()
        with open(record, encoding="utf-8") as lines:
            self.assertEqual(sorted((item["tool"], item["response"]) for item in map(json.loads, lines)), [
                ("echo", {"content": [{"type": "text", "text": "echo {}"}], "isError": False}),
                ("write_note", {"ok": False, "error": "confirmation required"})])
        self.assertEqual(run("verify", record), (0, "chain: intact\n", ""))


class ApprovalsTest(ListenerCase):
    """--approvals: a "session" yes belongs to the client session that gave it, not to the listener."""

    def test_a_session_approval_does_not_answer_another_sessions_question(self) -> None:
        import httpx

        approvals = os.path.join(self.directory, "approvals.jsonl")
        listener = Listener(self.policy, os.path.join(self.directory, "approved"),  # one listener a folder and server
                            [sys.executable, TINY, "--notes", self.notes], "--approvals", approvals)
        self.addCleanup(self.stopped, listener)
        url = listener.url
        write = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                 "params": {"name": "write_note", "arguments": {"text": "hi"}}}
        with httpx.Client(timeout=30) as http:
            init = {**INIT, "params": {**INIT["params"], "capabilities": {"elicitation": {}}}}
            reply = http.post(url, json=init, headers=JSON_ONLY)
            first = {**BOTH, "mcp-session-id": reply.headers["mcp-session-id"]}
            with http.stream("POST", url, json=write, headers=first) as stream:
                events = stream.iter_lines()
                self.assertEqual(next(events), "id: 2-1")  # the session's second stream (initialize's was the first)
                self.assertEqual(next(events), "event: message")
                question = json.loads(next(events).removeprefix("data: "))
                yes = {"jsonrpc": "2.0", "id": question["id"], "result": {
                    "action": "accept", "content": {"approve": True, "remember": "session"}}}
                self.assertEqual(http.post(url, json=yes, headers=first).status_code, 202)
                self.assertIn('"isError":false', [line for line in events if line][-1])
            # another client session, whose client cannot be asked: the first session's yes is not its own
            reply = http.post(url, json=INIT, headers=JSON_ONLY)
            second = {**JSON_ONLY, "mcp-session-id": reply.headers["mcp-session-id"]}
            self.assertEqual(http.post(url, json={**write, "id": 8}, headers=second).json(), {
                "jsonrpc": "2.0", "id": 8, "result": {"content": [{"type": "text", "text": "toolreplay: "
                                                                   "confirmation required"}], "isError": True}})
        with open(self.notes, encoding="utf-8") as notes:
            self.assertEqual(notes.read(), '{"text": "hi"}\n')
        self.assertFalse(os.path.exists(approvals))


class BatchTest(ListenerCase):
    def test_a_batch_in_a_session_of_2025_03_26_is_answered_as_one_array(self) -> None:
        import httpx

        init = {**INIT, "params": {**INIT["params"], "protocolVersion": "2025-03-26"}}
        with httpx.Client(timeout=30) as http:
            reply = http.post(self.listener.url, json=init, headers=JSON_ONLY)
            headers = {**JSON_ONLY, "mcp-session-id": reply.headers["mcp-session-id"]}
            batch = [{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {}}},
                     {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "delete_all",
                                                                                    "arguments": {}}},
                     {"jsonrpc": "2.0", "method": "notifications/initialized"}]
            reply = http.post(self.listener.url, json=batch, headers=headers)
        self.assertEqual(reply.status_code, 200)
        self.assertEqual(sorted(reply.json(), key=lambda answer: answer["id"]), [
            {"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "echo {}"}], "isError": False}},
            {"jsonrpc": "2.0", "id": 3, "result": {"content": [{"type": "text", "text": "toolreplay: tool not "
                                                                "allowed: delete_all"}], "isError": True}}])


class UnstartableServerTest(ListenerCase):
    def test_a_server_that_cannot_start_gets_502_and_leaves_no_record(self) -> None:
        import httpx

        listener = Listener(self.policy, self.records, [os.path.join(self.directory, "no-such-server")])
        self.addCleanup(listener.stop)
        with httpx.Client(timeout=30) as http:
            reply = http.post(listener.url, json=INIT, headers=JSON_ONLY)
        self.assertEqual((reply.status_code, reply.json()), (502, error(
            -32603, f"Bad Gateway: cannot start the server {self.directory}/no-such-server: No such file or directory")))
        self.assertNotIn("mcp-session-id", reply.headers)
        self.assertEqual(self.record_files(), [])


class InProcessTest(unittest.TestCase):
    """HttpListener in this process."""

    def test_connections_are_not_delayed_by_nagle(self) -> None:
        import socket

        require(HAVE_HTTP, "uvicorn (pip install '.[http]' in a ToolReplay checkout)")
        from toolreplay.mcp.http.listen import HttpListener
        from toolreplay.mcp.transport import StdioServer
        from toolreplay.policy.model import Policy

        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        listener = HttpListener(lambda headers: StdioServer([sys.executable, TINY]),
                                Policy(agent="a", allowed_tools=frozenset()), records=directory,
                                diagnostics=sys.stderr)
        listener.start()
        self.addCleanup(listener.close)
        [server] = listener._server.servers
        [listening] = server.sockets
        self.assertEqual(listening.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), 1)
        # uvicorn's httptools protocol (llhttp), installed with the http extra
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        self.assertTrue(issubclass(listener._server.config.http, HttpToolsProtocol))
        self.assertEqual(listener._server.config.limit_concurrency, 101)  # uvicorn counts this connection too
        self.assertEqual(listener.url, f"http://127.0.0.1:{listener.port}/mcp")


class IdleTest(ListenerCase):
    extra = ("--session-timeout", "0.5")

    def test_an_idle_session_expires(self) -> None:
        import httpx

        with httpx.Client(timeout=30) as http:
            session = http.post(self.listener.url, json=INIT, headers=JSON_ONLY).headers["mcp-session-id"]
            time.sleep(2)
            reply = http.post(self.listener.url, json={"jsonrpc": "2.0", "id": 2, "method": "ping"},
                              headers={**JSON_ONLY, "mcp-session-id": session})
        self.assertEqual((reply.status_code, reply.json()), (404, error(-32600, "Not Found: unknown or expired session")))
        self.assertIn("ended (the session was idle)", self.stopped(self.listener))


def half_sent(url: str, head: bytes) -> Any:
    """A connection to the listener that sent `head` (part of a request head, or nothing) and waits."""
    import socket

    host, port = url.split("/")[2].rsplit(":", 1)
    connection = socket.create_connection((host, int(port)), timeout=30)
    connection.sendall(head)
    return connection


def read_all(connection: Any) -> bytes:
    """What the listener sends on a connection until it closes it."""
    parts = []
    while chunk := connection.recv(65536):
        parts.append(chunk)
    connection.close()
    return b"".join(parts)


class HeadDeadlineTest(ListenerCase):
    """--listen-head-timeout: a request head sent slowly, or never, does not hold its connection open."""

    extra = ("--listen-head-timeout", "1")

    def test_half_sent_heads_are_closed_at_the_deadline_and_a_session_goes_on(self) -> None:
        import httpx

        started = time.monotonic()
        connections = [half_sent(self.listener.url, b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n") for _ in range(20)]
        connections.append(half_sent(self.listener.url, b""))  # nothing at all
        with httpx.Client(timeout=30) as http:  # meanwhile a session is served
            self.assertEqual(http.post(self.listener.url, json=INIT, headers=JSON_ONLY).status_code, 200)
        answers = {read_all(connection) for connection in connections}
        elapsed = time.monotonic() - started
        self.assertEqual(answers, {b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"})
        self.assertGreater(elapsed, 0.9)
        self.assertLess(elapsed, 5)

    def test_a_keep_alive_connection_gets_the_deadline_for_its_next_head_only(self) -> None:
        body = json.dumps(INIT).encode()
        request = (b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                   b"accept: application/json\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        connection = half_sent(self.listener.url, request)
        time.sleep(1.5)  # longer than the deadline: a served request is not cut
        connection.sendall(b"GET /mcp HTTP/1.1\r\n")  # the next head, never finished
        answer = read_all(connection)
        self.assertTrue(answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:40])
        self.assertTrue(answer.endswith(b'"version":"1.0"}}}HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\n'
                                        b"connection: close\r\n\r\n"), answer[-120:])


class JoinedWritesTest(unittest.TestCase):
    """What uvicorn writes within one turn of the loop (a response's head, then its body) leaves in one send;
    a close sends what is pending first."""

    def test_writes_of_one_turn_leave_together_and_close_flushes(self) -> None:
        from toolreplay.mcp.http.listen import _JoinedWrites

        class Recording:
            def __init__(self) -> None:
                self.calls: list[Any] = []

            def write(self, data: bytes) -> None:
                self.calls.append(data)

            def is_closing(self) -> bool:
                return False

            def close(self) -> None:
                self.calls.append("close")

            def get_extra_info(self, name: str) -> str:
                return f"info {name}"

        async def main() -> list[Any]:
            transport = Recording()
            joined = _JoinedWrites(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
            joined.write(b"HTTP/1.1 200 OK\r\n\r\n")
            joined.write(b"")
            joined.write(b"{}")
            before = list(transport.calls)
            await asyncio.sleep(0)
            joined.write(b"last")
            joined.close()
            return [before, transport.calls, joined.get_extra_info("peername")]

        self.assertEqual(asyncio.run(main()), [[], [b"HTTP/1.1 200 OK\r\n\r\n{}", b"last", "close"], "info peername"])


class ConnectionCapTest(ListenerCase):
    """--listen-max-connections: a request on one connection more than N is answered 503."""

    extra = ("--listen-max-connections", "3")

    def test_connections_over_the_cap_are_refused_and_served_again_once_others_close(self) -> None:
        import httpx

        def first_answer(status: int) -> Any:
            """A request on a new connection each time, until one is answered `status` (20 s at most): the
            listener counts a connection once its loop has accepted it, and forgets it once it saw it close."""
            deadline = time.monotonic() + 20
            while True:
                with httpx.Client(timeout=30) as http:
                    reply = http.post(self.listener.url, json=INIT, headers=JSON_ONLY)
                if reply.status_code == status or time.monotonic() > deadline:
                    return reply
                time.sleep(0.05)

        held = [half_sent(self.listener.url, b"POST /mcp HTTP/1.1\r\n") for _ in range(3)]
        refused = first_answer(503)
        self.assertEqual((refused.status_code, refused.text), (503, "Service Unavailable"))
        for connection in held:
            connection.close()
        self.assertEqual(first_answer(200).status_code, 200)


class PublicTest(ListenerCase):
    """A listener other machines may reach: only with a bearer token, checked on every request."""

    def setUp(self) -> None:
        require(HAVE_HTTP, "the MCP Python SDK, uvicorn and httpx (pip install mcp '.[http]')")
        self.directory = os.path.realpath(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.directory)
        self.token_file = os.path.join(self.directory, "token")
        with open(self.token_file, "w", encoding="utf-8") as out:
            out.write(TOKEN + "\n")
        self.extra = ("--listen", "0.0.0.0:0", "--listen-public", "--token-file", self.token_file)
        super().setUp()

    def test_usage_errors(self) -> None:
        base = ("mcp-proxy", "--policy", self.policy, "--records", self.records)
        self.assertEqual(run(*base, "--listen", "0.0.0.0:0", "--", "true"), (
            2, "", "error: --listen 0.0.0.0: not a loopback address; serving other machines needs --listen-public "
                   "and --token-file\n"))
        self.assertEqual(run(*base, "--listen", "0.0.0.0:0", "--listen-public", "--", "true"), (
            2, "", "error: --listen-public needs --token-file FILE (a bearer token every request must carry)\n"))
        self.assertEqual(run("mcp-proxy", "--policy", self.policy, "--listen", "8080", "--", "true"), (
            2, "", "error: --listen needs --records DIR (one sealed record per client session)\n"))
        self.assertEqual(run("mcp-proxy", "--policy", self.policy, "--records", self.records, "--", "true"), (
            2, "", "error: --records needs --listen\n"))
        self.assertEqual(run(*base, "--listen", "x:y", "--", "true"), (
            2, "", "error: --listen x:y: expected PORT or HOST:PORT\n"))
        self.assertEqual(run(*base, "--listen", "8080", "--record", "r.jsonl", "--", "true"), (
            2, "", "error: --listen records each session on its own: use --records DIR, not --record\n"))
        self.assertEqual(run(*base, "--listen", "8080", "--path", "mcp", "--", "true"), (
            2, "", "error: --path mcp: a path starts with /\n"))
        short = os.path.join(self.directory, "short-token")
        with open(short, "w", encoding="utf-8") as out:
            out.write("too-short\n")
        self.assertEqual(run(*base, "--listen", "8080", "--token-file", short, "--", "true"), (
            2, "", f"error: --token-file {short}: the token must be at least 16 bytes\n"))

    def test_token_required_on_every_request(self) -> None:
        import httpx

        unauthorized = error(-32600, "Unauthorized: a valid bearer token is required")
        with httpx.Client(timeout=30) as http:
            for headers in (JSON_ONLY, {**JSON_ONLY, "authorization": "Bearer wrong-token-0123456789"},
                            {**JSON_ONLY, "authorization": TOKEN}):
                reply = http.post(self.listener.url, json=INIT, headers=headers)
                self.assertEqual((reply.status_code, reply.headers["www-authenticate"], reply.json()),
                                 (401, "Bearer", unauthorized))

        async def scenario(session: Any) -> Any:
            return texts(await session.call_tool("echo", {"text": "with token"}))

        self.assertEqual(asyncio.run(session_run(self.listener.url, scenario,
                                                 headers={"authorization": f"Bearer {TOKEN}"})),
                         (False, ['echo {"text": "with token"}']))
        [record] = self.record_files()
        with open(record, encoding="utf-8") as written:
            self.assertNotIn(TOKEN, written.read())
        self.assertNotIn(TOKEN, self.stopped(self.listener))


class EverythingServerTest(ListenerCase):
    """@modelcontextprotocol/server-everything (stdio) behind the listener."""

    def setUp(self) -> None:
        require(HAVE_HTTP, "the MCP Python SDK, uvicorn and httpx (pip install mcp '.[http]')")
        require(HAVE_EVERYTHING, "@modelcontextprotocol/server-everything and node (.ci/install.d/30-mcp.sh)")
        self.directory = os.path.realpath(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.directory)
        self.records = os.path.join(self.directory, "records")
        self.policy = os.path.join(self.directory, "policy.json")
        with open(self.policy, "w", encoding="utf-8") as out:
            json.dump({"agent": "everything", "allowed_tools": ["echo", "get-sum", "trigger-long-running-operation"]},
                      out)
        self.listener = Listener(self.policy, self.records, ["node", EVERYTHING, "stdio"])
        self.addCleanup(self.stopped, self.listener)
        self.stderr = None

    def test_listing_allowed_and_refused_calls(self) -> None:
        async def scenario(session: Any) -> Any:
            listing = await session.list_tools()
            return (sorted(tool.name for tool in listing.tools),
                    texts(await session.call_tool("echo", {"message": "hello"})),
                    texts(await session.call_tool("get-sum", {"a": 2, "b": 3})),
                    texts(await session.call_tool("get-env", {})))

        self.assertEqual(self.sdk(scenario), (
            ["echo", "get-sum", "trigger-long-running-operation"], (False, ["Echo: hello"]),
            (False, ["The sum of 2 and 3 is 5."]), (True, ["toolreplay: tool not allowed: get-env"])))
        [record] = self.record_files()
        self.assertEqual(self.tools_of(record), ["echo", "get-sum", "get-env"])
        self.assertEqual(run("verify", record), (0, "chain: intact\n", ""))

    def test_progress_reaches_the_call_before_its_answer(self) -> None:
        progress: list[tuple[float, float | None]] = []

        async def note(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, total))

        async def scenario(session: Any) -> Any:
            return texts(await session.call_tool("trigger-long-running-operation", {"duration": 0.4, "steps": 2},
                                                 progress_callback=note))

        self.assertEqual(self.sdk(scenario), (
            False, ["Long running operation completed. Duration: 0.4 seconds, Steps: 2."]))
        self.assertEqual(progress, [(1, 2), (2, 2)])


class SeveralServersTest(ListenerCase):
    """`--listen` with `--servers`: each client session gets its own set of servers behind one policy."""

    def setUp(self) -> None:
        require(HAVE_HTTP, "the MCP Python SDK, uvicorn and httpx (pip install mcp '.[http]')")
        self.directory = os.path.realpath(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.directory)
        self.records = os.path.join(self.directory, "records")
        self.policy = os.path.join(self.directory, "policy.json")
        with open(self.policy, "w", encoding="utf-8") as out:
            json.dump({"agent": "tiny", "allowed_tools": ["one__echo", "two__echo"]}, out)
        self.servers = os.path.join(self.directory, "servers.json")
        with open(self.servers, "w", encoding="utf-8") as out:
            json.dump({"servers": {name: {"command": sys.executable, "args": [
                TINY, "--notes", os.path.join(self.directory, name + ".txt")]} for name in ("one", "two")}}, out)
        self.stderr = None
        self.listener = Listener(self.policy, self.records, [], "--servers", self.servers)
        self.addCleanup(self.stopped, self.listener)

    def test_prefixed_tools_one_policy_and_a_record_naming_each_server(self) -> None:
        async def scenario(session: Any) -> Any:
            listing = await session.list_tools()
            return ([tool.name for tool in listing.tools],
                    texts(await session.call_tool("two__echo", {"text": "b"})),
                    texts(await session.call_tool("one__echo", {"text": "a"})),
                    texts(await session.call_tool("one__write_note", {"text": "no"})))

        self.assertEqual(self.sdk(scenario), (
            ["one__echo", "two__echo"],
            (False, ['echo {"text": "b"}']),
            (False, ['echo {"text": "a"}']),
            (True, ["toolreplay: tool not allowed: one__write_note"])))
        [record] = self.record_files()
        with open(record, encoding="utf-8") as lines:
            rows = [json.loads(line) for line in lines]
        self.assertEqual([(row["tool"], row["meta"]["outcome"], row["meta"].get("x-server")) for row in rows], [
            ("two__echo", "ran", "two"), ("one__echo", "ran", "one"), ("one__write_note", "refused", "one")])
        self.assertEqual(run("verify", record), (0, "chain: intact\n", ""))

    def test_print_config_is_for_stdio_clients(self) -> None:
        self.assertEqual(run("mcp-proxy", "--policy", self.policy, "--listen", "0", "--records", self.records,
                             "--print-config", "vscode", "--servers", self.servers), (
            2, "", "error: --print-config prints a stdio client's configuration; an HTTP client is given the URL\n"))
