"""mcp-proxy in front of a remote MCP server over Streamable HTTP, with real components: the MCP SDK's
stdio client (or raw JSON-RPC lines) on the client side, and behind the proxy the SDK's MCPServer
(formerly FastMCP, tests/mcp_servers/http_server.py) under uvicorn, `@modelcontextprotocol/server-everything`
in its streamableHttp mode, and a scripted HTTP server (standard library) for the faults a real server
does not make on demand: a dropped event stream resumed with Last-Event-ID, an expired session, an
HTTP error, a body that is not JSON, the server's own stream.
"""

from __future__ import annotations

import asyncio
import http.server
import importlib.util
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support import require, size_of, wait_for
from tests.test_cli import run
from tests.test_mcp_proxy import Proxy, call, initialize
from tests.test_mcp_real import EVERYTHING, HAVE_EVERYTHING, HAVE_SDK, TOOLS, approve, run_client, texts

INTEGRATION_TIER = True  # the integration tier (tests/unit.py leaves this module out)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HTTP_SERVER = os.path.join(ROOT, "tests", "mcp_servers", "http_server.py")
HAVE_HTTP = all(importlib.util.find_spec(name) is not None for name in ("httpx", "uvicorn", "starlette"))
TOKEN = "tr-test-token-5f1c9a"  # a credential: must reach the server and nothing else


def start_http_server(test: unittest.TestCase, *args: str, env: dict[str, str] | None = None) -> tuple[str, Any]:
    """tests/mcp_servers/http_server.py on a port of its choosing; its URL and process (stopped at cleanup).
    The server is the MCP Python SDK's: a test that starts it needs the SDK, whatever else it checked."""
    require(HAVE_SDK, "the MCP Python SDK (pip install mcp)")
    process = subprocess.Popen([sys.executable, HTTP_SERVER, *args], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    test.addCleanup(stop, process)
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    test.assertTrue(line.startswith("port "), line)
    return f"http://127.0.0.1:{int(line.split()[1])}/mcp", process


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _cancelled_as_it_runs(call: Callable[[Any, int, str, dict[str, Any]], Any], http: Any, other: Any, url: str,
                          headers: dict[str, str], number: int, began: str) -> dict[str, Any]:
    """A `slow` call (id `number`) made by client `other`, cancelled by `http` once the server began it (it
    added a line to `began`, its `--began` file; a fixed wait was too short on a loaded machine):
    {"answer": what `other` got} once it got one (within 20 s), else {}."""
    held: dict[str, Any] = {}
    before = size_of(began)
    waiting = threading.Thread(target=lambda: held.update(answer=call(other, number, "slow", {"seconds": 10})))
    waiting.start()
    wait_for(lambda: size_of(began) != before, "the server to begin the slow call")
    http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/cancelled",
                                          "params": {"requestId": number}})
    waiting.join(timeout=20)
    return held


def read_records(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as record:
        return [json.loads(line) for line in record]


class HttpWorkspace(unittest.TestCase):
    def setUp(self) -> None:
        require(HAVE_HTTP, "httpx, uvicorn and starlette (pip install '.[http]' in a ToolReplay checkout)")
        self.directory = os.path.realpath(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.directory)
        self.record = os.path.join(self.directory, "record.jsonl")
        self.notes = os.path.join(self.directory, "notes.txt")

    def write_policy(self, policy: dict[str, Any]) -> str:
        path = os.path.join(self.directory, "policy.json")
        with open(path, "w", encoding="utf-8") as out:
            json.dump(policy, out)
        return path

    def raw_proxy(self, url: str, *extra: str, rules: dict[str, Any]) -> Proxy:
        """The proxy over `url`, spoken to in raw lines; initialized."""
        proxy = Proxy(self.directory, *extra, rules=rules, server=[url])
        self.addCleanup(proxy.kill)
        self.assertEqual(proxy.ask(initialize())["result"]["protocolVersion"], "2025-11-25")
        proxy.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return proxy

    def notes_written(self) -> list[str]:
        if not os.path.exists(self.notes):
            return []
        with open(self.notes, encoding="utf-8") as notes:
            return notes.read().splitlines()


HTTP_POLICY = {"agent": "http", "allowed_tools": ["lookup", "write_note", "fail", "chatty"],
               "write_tools": ["write_note"]}


class McpServerOverHttpTest(HttpWorkspace):
    """The SDK's MCPServer (FastMCP) over Streamable HTTP behind the proxy, the SDK's client in front."""

    def setUp(self) -> None:
        require(HAVE_SDK, "the MCP Python SDK (pip install mcp)")
        super().setUp()

    def test_listing_calls_refusals_confirmation_and_the_record(self) -> None:
        url, _ = start_http_server(self, "--notes", self.notes)
        policy = self.write_policy(HTTP_POLICY)

        async def scenario(session: Any) -> Any:
            listing = await session.list_tools()
            return ([tool.name for tool in listing.tools],
                    texts(await session.call_tool("lookup", {"key": "k"})),
                    texts(await session.call_tool("delete_all", {})),
                    texts(await session.call_tool("write_note", {"text": "hello"})),
                    texts(await session.call_tool("fail", {})),
                    texts(await session.call_tool("chatty", {"text": "c"})),
                    texts(await session.call_tool("write_note", {"text": "hello"})))

        approve.messages.clear()  # type: ignore[attr-defined]
        value, stderr = run_client(["--policy", policy, "--record", self.record], [url], scenario, elicit=approve)
        self.assertEqual(value, (
            ["lookup", "write_note", "fail", "chatty"],
            (False, ["value of k"]),
            (True, ["toolreplay: tool not allowed: delete_all"]),
            (False, ["noted hello"]),
            (True, ["Error executing tool fail"]),
            (False, ["chatty c"]),
            (False, ["noted hello"])))  # the identical write is answered by the first: it ran once
        self.assertEqual(self.notes_written(), ["hello"])
        self.assertEqual(len(approve.messages), 1)  # type: ignore[attr-defined]
        self.assertNotIn("toolreplay mcp-proxy:", stderr)
        records = read_records(self.record)
        self.assertEqual([(r["tool"], r["meta"]["outcome"]) for r in records], [
            ("lookup", "ran"), ("delete_all", "refused"), ("write_note", "ran"), ("fail", "ran"), ("chatty", "ran"),
            ("write_note", "cached")])
        self.assertEqual(run("verify", self.record), (0, "chain: intact\n", ""))
        self.assertEqual(run("replay", self.record), (1, (
            "calls: 6\ndivergence: none\nfindings: 1\n"
            "index 5: redundant-call: tool 'write_note' repeats the identical call at index 2 "
            "with no state change between them\n"), ""))

    def test_a_refused_write_never_reaches_the_server(self) -> None:
        url, _ = start_http_server(self, "--notes", self.notes, "--json")  # JSON bodies rather than event streams

        async def scenario(session: Any) -> Any:
            return (texts(await session.call_tool("write_note", {"text": "no"})),
                    texts(await session.call_tool("lookup", {"key": "j"})))

        value, _ = run_client(["--policy", self.write_policy(HTTP_POLICY), "--record", self.record], [url], scenario)
        self.assertEqual(value, ((True, ["toolreplay: confirmation required"]), (False, ["value of j"])))
        self.assertEqual(self.notes_written(), [])

    def test_a_token_in_a_header_reaches_the_server_and_nothing_else(self) -> None:
        env = {"TOOLREPLAY_TEST_TOKEN": TOKEN}
        url, _ = start_http_server(self, "--notes", self.notes, "--require-token", "TOOLREPLAY_TEST_TOKEN", env=env)
        os.environ["TOOLREPLAY_TEST_TOKEN"] = TOKEN
        self.addCleanup(os.environ.pop, "TOOLREPLAY_TEST_TOKEN")
        # without the header the server refuses: the client gets the proxy's error, which names no header
        proxy = Proxy(self.directory, "--header-env", "X-Other=TOOLREPLAY_TEST_TOKEN", rules=HTTP_POLICY,
                      server=[url])
        self.addCleanup(proxy.kill)
        self.assertEqual(proxy.ask(initialize()), {"jsonrpc": "2.0", "id": 0, "error": {
            "code": -32000, "message": "toolreplay: the server answered HTTP 401 Unauthorized",
            "data": {"toolreplay": "refused"}}})
        code, rest, stderr = proxy.close()
        self.assertEqual((code, rest, stderr), (0, b"", "toolreplay mcp-proxy: the server answered HTTP 401 "
                                                        "Unauthorized\n"))
        # with it, calls run; the last one leaves a write of unknown outcome, so the intents file stays
        proxy = self.raw_proxy(url, "--header", "Authorization: Bearer ${TOOLREPLAY_TEST_TOKEN}",
                               "--mutator", "write_and_die", rules={
                                   **HTTP_POLICY, "allowed_tools": [*HTTP_POLICY["allowed_tools"], "write_and_die"]})
        self.assertEqual(proxy.ask(call(1, "lookup", key=TOKEN))["result"]["content"][0]["text"],
                         f"value of {TOKEN}")  # the model may say it: the record holds what the model said
        self.assertEqual(proxy.ask(call(2, "fail"))["result"]["isError"], True)
        self.assertEqual(proxy.ask(call(3, "write_and_die", text="x"))["result"]["isError"], True)
        code, rest, stderr = proxy.close()
        self.assertEqual((code, rest), (0, b""))
        self.assertTrue(stderr.startswith("toolreplay mcp-proxy: the event stream from the server failed: "), stderr)
        self.assertNotIn(TOKEN, stderr)
        with open(self.record, encoding="utf-8") as record:
            # the lookup's args, its text and structured result; never the header
            self.assertEqual(record.read().count(TOKEN), 3)
        with open(self.record + ".intents", encoding="utf-8") as intents:
            text = intents.read()
        self.assertIn("write_and_die", text)
        self.assertNotIn(TOKEN, text)
        self.assertEqual(run("verify", self.record), (0, "chain: intact\n", ""))

    def test_a_long_answer_holds_back_no_other_call(self) -> None:
        url, _ = start_http_server(self)
        proxy = self.raw_proxy(url, rules={"allowed_tools": ["slow", "lookup"], "write_tools": []})
        proxy.send(call(1, "slow", seconds=3))
        started = time.monotonic()
        proxy.send(call(2, "lookup", key="k"))
        self.assertEqual(proxy.recv()["id"], 2)
        self.assertLess(time.monotonic() - started, 2.5)
        self.assertEqual(proxy.recv()["result"]["content"], [{"type": "text", "text": "slept 3.0"}])
        self.assertEqual(proxy.close()[:2], (0, b""))

    def test_the_server_dying_mid_write_is_an_unknown_outcome(self) -> None:
        url, server = start_http_server(self, "--notes", self.notes)
        proxy = self.raw_proxy(url, "--mutator", "write_and_die", rules={
            **HTTP_POLICY, "allowed_tools": [*HTTP_POLICY["allowed_tools"], "write_and_die"]})
        self.assertEqual(proxy.ask(call(1, "lookup", key="a"))["result"]["isError"], False)
        reply = proxy.ask(call(2, "write_and_die", text="maybe"))
        text = reply["result"]["content"][0]["text"]
        self.assertTrue(reply["result"]["isError"])
        self.assertTrue(text.startswith("toolreplay: outcome unknown: the event stream from the server failed: "), text)
        self.assertTrue(text.endswith("; whether the write took effect is unknown"), text)
        self.assertEqual(server.wait(timeout=10), 3)
        self.assertEqual(self.notes_written(), ["maybe"])  # it did take effect: only a person can tell
        retry = proxy.ask(call(3, "write_and_die", text="maybe"))["result"]["content"][0]["text"]
        self.assertTrue(retry.startswith("toolreplay: outcome unknown: an identical write_and_die call started"), retry)
        after = proxy.ask(call(4, "lookup", key="b"))["result"]["content"][0]["text"]
        self.assertTrue(after.startswith("toolreplay: ConnectionError: the connection to the server failed: "), after)
        code, rest, stderr = proxy.close()
        self.assertEqual((code, rest), (0, b""))
        said = stderr.splitlines()
        self.assertEqual(len(said), 2, stderr)
        self.assertTrue(said[0].startswith("toolreplay mcp-proxy: the event stream from the server failed: "), said)
        self.assertTrue(said[1].startswith("toolreplay mcp-proxy: the connection to the server failed: "), said)
        self.assertEqual([(r["tool"], r["meta"]["outcome"]) for r in read_records(proxy.record)], [
            ("lookup", "ran"), ("write_and_die", "unknown"), ("write_and_die", "refused"), ("lookup", "ran")])
        self.assertEqual(run("verify", proxy.record), (0, "chain: intact\n", ""))
        with open(proxy.record + ".intents", encoding="utf-8") as intents:  # kept until a person resolves it
            self.assertIn("write_and_die", intents.read())


class EverythingOverHttpTest(HttpWorkspace):
    """@modelcontextprotocol/server-everything in its streamableHttp mode (node)."""

    def setUp(self) -> None:
        require(HAVE_SDK, "the MCP Python SDK (pip install mcp)")
        require(HAVE_EVERYTHING, f"@modelcontextprotocol/server-everything under {TOOLS} and node "
                                 "(.ci/install.d/30-mcp.sh)")
        super().setUp()
        port = free_port()
        self.server = subprocess.Popen(["node", EVERYTHING, "streamableHttp"], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, env={**os.environ, "PORT": str(port)})
        self.addCleanup(stop, self.server)
        assert self.server.stderr is not None
        while b"listening on port" not in (line := self.server.stderr.readline()):
            self.assertTrue(line, "server-everything did not start")
        self.url = f"http://127.0.0.1:{port}/mcp"

    def test_listing_allowed_refused_verify_and_replay(self) -> None:
        policy = self.write_policy({"agent": "everything", "allowed_tools": ["echo", "get-sum"], "write_tools": []})

        async def scenario(session: Any) -> Any:
            listing = await session.list_tools()
            return (sorted(tool.name for tool in listing.tools),
                    texts(await session.call_tool("echo", {"message": "hi"})),
                    texts(await session.call_tool("get-env", {})),
                    texts(await session.call_tool("get-sum", {"a": 2, "b": 3})),
                    texts(await session.call_tool("echo", {"message": "hi"})))

        value, stderr = run_client(["--policy", policy, "--record", self.record], [self.url], scenario)
        self.assertEqual(value, (["echo", "get-sum"], (False, ["Echo: hi"]),
                                 (True, ["toolreplay: tool not allowed: get-env"]),
                                 (False, ["The sum of 2 and 3 is 5."]), (False, ["Echo: hi"])))
        self.assertNotIn("toolreplay mcp-proxy:", stderr)
        self.assertEqual([(r["tool"], r["meta"]["outcome"]) for r in read_records(self.record)], [
            ("echo", "ran"), ("get-env", "refused"), ("get-sum", "ran"), ("echo", "ran")])
        self.assertEqual(run("verify", self.record), (0, "chain: intact\n", ""))
        self.assertEqual(run("replay", self.record), (1, (
            "calls: 4\ndivergence: none\nfindings: 1\n"
            "index 3: redundant-call: tool 'echo' repeats the identical call at index 0 "
            "with no state change between them\n"), ""))


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a stream the proxy closed while the handler still wrote to it


class _Scripted(http.server.BaseHTTPRequestHandler):
    """A Streamable HTTP server that misbehaves as the test says (`server.script`)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_DELETE(self) -> None:  # noqa: N802
        self.server.seen.append(("DELETE", {k.lower(): v for k, v in self.headers.items()}))  # type: ignore[attr-defined]
        self.reply(204, b"", "text/plain")

    def do_GET(self) -> None:  # noqa: N802
        self.server.seen.append(("GET", {k.lower(): v for k, v in self.headers.items()}))  # type: ignore[attr-defined]
        self.server.script.get(self)  # type: ignore[attr-defined]

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append(("POST", {k.lower(): v for k, v in self.headers.items()}))  # type: ignore[attr-defined]
        if body.get("method") == "initialize":
            result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                      "serverInfo": {"name": "scripted", "version": "1"}}
            self.reply(200, json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": result}).encode(),
                       "application/json", {"Mcp-Session-Id": "s-1"})
        elif "id" not in body:
            self.reply(202, b"", "text/plain")
        else:
            self.server.script.post(self, body)  # type: ignore[attr-defined]

    def reply(self, status: int, body: bytes, kind: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def stream(self, events: list[str], close: bool, hold: float = 0) -> None:
        """An event stream of `events` (each a whole event's text); with `close`, cut without an end; with
        `hold`, kept open that many seconds."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in events:
            data = event.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        time.sleep(hold)
        if close:
            self.close_connection = True
            self.wfile.write(b"5\r\nda")  # a chunk cut short: the connection drops mid-answer
            self.wfile.flush()
            return
        self.wfile.write(b"0\r\n\r\n")


def result(message_id: Any, text: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": message_id,
                       "result": {"content": [{"type": "text", "text": text}], "isError": False}})


class Script:
    """The scripted server's answers: override `post` and `get`."""

    def post(self, handler: _Scripted, body: dict[str, Any]) -> None:
        handler.reply(200, result(body["id"], "ok").encode(), "application/json")

    def get(self, handler: _Scripted) -> None:
        handler.reply(405, b"", "text/plain")


class ScriptedServerTest(HttpWorkspace):
    """Faults on demand, from a scripted HTTP server in this process."""

    def serve(self, script: Script) -> str:
        server = _QuietServer(("127.0.0.1", 0), _Scripted)
        server.daemon_threads = True
        server.script = script  # type: ignore[attr-defined]
        server.seen = []  # type: ignore[attr-defined]
        self.seen: list[tuple[str, dict[str, str]]] = server.seen  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        return f"http://127.0.0.1:{server.server_address[1]}/mcp?key=query-secret"

    def start(self, script: Script, *extra: str) -> Proxy:
        return self.raw_proxy(self.serve(script), *extra, rules={"allowed_tools": ["lookup", "send"],
                                                                   "write_tools": []})

    def test_headers_session_and_protocol_version_and_delete(self) -> None:
        proxy = self.start(Script(), "--header", "Authorization: Bearer " + TOKEN)
        self.assertEqual(proxy.ask(call(1, "lookup"))["result"]["content"][0]["text"], "ok")
        self.assertEqual(proxy.close(), (0, b"", ""))
        methods = [(method, headers.get("mcp-session-id"), headers.get("mcp-protocol-version"),
                    headers.get("authorization"), headers.get("accept")) for method, headers in self.seen]
        bearer = "Bearer " + TOKEN
        self.assertEqual(methods[:2] + sorted(methods[2:4], key=str) + methods[4:], [
            ("POST", None, None, bearer, "application/json, text/event-stream"),  # initialize
            ("POST", "s-1", "2025-11-25", bearer, "application/json, text/event-stream"),  # initialized
            ("GET", "s-1", "2025-11-25", bearer, "text/event-stream"),  # 405: no stream of its own
            ("POST", "s-1", "2025-11-25", bearer, "application/json, text/event-stream"),  # the call (concurrent)
            ("DELETE", "s-1", "2025-11-25", bearer, "text/event-stream")])
        with open(proxy.record, encoding="utf-8") as record:
            self.assertNotIn(TOKEN, record.read())

    def test_posts_carry_the_clients_default_headers_and_the_servers_cookies(self) -> None:
        # POSTs skip httpx's client layers while no cookie is set: they still carry its User-Agent, and a
        # cookie the server sets (a load balancer's sticky session) goes with every later request
        class Cookies(Script):
            def post(self, handler: _Scripted, body: dict[str, Any]) -> None:
                handler.reply(200, result(body["id"], "ok").encode(), "application/json",
                              {"Set-Cookie": "sticky=b2; Path=/"} if body["id"] == 1 else None)

        proxy = self.start(Cookies())
        for number in (1, 2, 3):
            self.assertEqual(proxy.ask(call(number, "lookup"))["result"]["content"][0]["text"], "ok")
        self.assertEqual(proxy.close(), (0, b"", ""))
        posts = [(headers.get("user-agent", "").split("/")[0], headers.get("cookie"))
                 for method, headers in self.seen if method == "POST"]
        self.assertEqual(posts, [("python-httpx", None)] * 3 + [("python-httpx", "sticky=b2")] * 2)

    def test_a_dropped_answer_is_resumed_with_last_event_id(self) -> None:
        class Resumable(Script):
            def post(self, handler: _Scripted, body: dict[str, Any]) -> None:
                note = json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                                   "params": {"level": "info", "data": "half way"}})
                handler.stream(["id: e1\nretry: 10\ndata:\n\n", f"id: e2\ndata: {note}\n\n"], close=True)

            def get(self, handler: _Scripted) -> None:
                if handler.headers.get("Last-Event-ID") == "e2":
                    handler.stream([f"id: e3\ndata: {result(1, 'resumed')}\n\n"], close=False)
                else:
                    handler.reply(405, b"", "text/plain")

        proxy = self.start(Resumable())
        proxy.send(call(1, "lookup"))
        self.assertEqual(proxy.recv()["method"], "notifications/message")
        self.assertEqual(proxy.recv()["result"]["content"][0]["text"], "resumed")
        self.assertEqual(proxy.close(), (0, b"", ""))
        self.assertIn(("GET", "e2"), [(method, headers.get("last-event-id")) for method, headers in self.seen])

    def test_http_errors_and_bodies_that_are_not_json(self) -> None:
        class Faulty(Script):
            def post(self, handler: _Scripted, body: dict[str, Any]) -> None:
                name = body["params"]["arguments"]["fault"]
                if name == "500":
                    handler.reply(500, b"<html>oops</html>", "text/html")
                elif name == "jsonrpc":  # a JSON-RPC error at an HTTP error status: the server's own answer
                    handler.reply(400, json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                        "code": -32602, "message": "bad params"}}).encode(), "application/json")
                elif name == "other":  # an answer to another request: the client's still gets one
                    handler.reply(200, result(99, "not yours").encode(), "application/json")
                elif name == "html":
                    handler.reply(200, b"<html>not json</html>", "application/json")
                elif name == "event":
                    handler.stream(["data: {not json\n\n"], close=False)
                else:
                    handler.stream([], close=False)  # ends without an answer and without ids

        proxy = self.start(Faulty(), "--mutator", "send")
        answers = {fault: proxy.ask(call(index, "send" if fault == "500" else "lookup", fault=fault))
                   for index, fault in enumerate(["500", "jsonrpc", "other", "html", "event", "empty"], 1)}
        self.assertEqual({fault: (reply["result"]["content"][0]["text"] if "result" in reply else reply["error"])
                          for fault, reply in answers.items()}, {
            "500": "toolreplay: outcome unknown: the server answered HTTP 500 Internal Server Error; whether the "
                   "write took effect is unknown",
            "jsonrpc": {"code": -32602, "message": "bad params"},
            "other": "toolreplay: ConnectionError: the server's answer holds no reply to the request",
            "html": "toolreplay: ConnectionError: the server's answer is not JSON",
            "event": "toolreplay: ConnectionError: the server's event stream holds a message that is not JSON "
                     "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
            "empty": "toolreplay: ConnectionError: the server ended the event stream before it answered"})
        code, rest, stderr = proxy.close()
        self.assertEqual((code, rest), (0, b""))
        self.assertEqual(stderr.splitlines(), [
            "toolreplay mcp-proxy: the server answered HTTP 500 Internal Server Error",
            "toolreplay mcp-proxy: dropped a response from the server to no request sent to it",
            "toolreplay mcp-proxy: the server's answer holds no reply to the request",
            "toolreplay mcp-proxy: the server's answer is not JSON",
            "toolreplay mcp-proxy: the server's event stream holds a message that is not JSON (Expecting property "
            "name enclosed in double quotes: line 1 column 2 (char 1))",
            "toolreplay mcp-proxy: the server ended the event stream before it answered"])
        self.assertEqual([r["meta"]["outcome"] for r in read_records(proxy.record)],
                         ["unknown", "ran", "ran", "ran", "ran", "ran"])
        self.assertEqual(run("verify", proxy.record), (0, "chain: intact\n", ""))

    def test_an_expired_session_ends_the_proxy_with_no_restart(self) -> None:
        class Expiring(Script):
            def post(self, handler: _Scripted, body: dict[str, Any]) -> None:
                handler.reply(404, b"session not found", "text/plain")

        proxy = self.start(Expiring(), "--no-restart")  # else it is reconnected (test_a_lone_server_url_is_reconnected_...)
        reply = proxy.ask(call(1, "lookup"))
        self.assertEqual(reply["result"]["content"][0]["text"], "toolreplay: ConnectionError: the server's session "
                                                                "expired (HTTP 404 for its session id)")
        self.assertEqual(proxy.line(), b"")  # the proxy ended the session
        self.assertEqual(proxy.close(), (1, b"", "toolreplay mcp-proxy: the server's session expired (HTTP 404 for "
                                                 "its session id)\n"))  # the server ended with a failure
        self.assertEqual(run("verify", proxy.record), (0, "chain: intact\n", ""))

    def test_the_servers_own_stream_reaches_the_client(self) -> None:
        class Talking(Script):
            def get(self, handler: _Scripted) -> None:
                note = json.dumps({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
                handler.stream([f"id: g1\ndata: {note}\n\n"], close=False, hold=30)  # the test ends first

        proxy = self.start(Talking())
        self.assertEqual(proxy.recv(), {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        reply = proxy.ask(call(1, "lookup"))
        self.assertEqual(reply.get("result", {}).get("content"), [{"type": "text", "text": "ok"}], reply)
        self.assertEqual(proxy.close()[:2], (0, b""))

    def test_the_servers_own_stream_is_resumed_after_a_drop(self) -> None:
        class Dropping(Script):
            def get(self, handler: _Scripted) -> None:
                after = handler.headers.get("Last-Event-ID")
                note = json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                                   "params": {"level": "info", "data": f"after {after}"}})
                if after is None:
                    handler.stream([f"id: g1\nretry: 10\ndata: {note}\n\n"], close=True)
                else:
                    handler.stream([f"id: g2\ndata: {note}\n\n"], close=False, hold=30)

        proxy = self.start(Dropping())
        self.assertEqual(proxy.recv()["params"]["data"], "after None")
        self.assertEqual(proxy.recv()["params"]["data"], "after g1")
        reply = proxy.ask(call(1, "lookup"))
        self.assertEqual(reply.get("result", {}).get("content"), [{"type": "text", "text": "ok"}], reply)
        self.assertEqual(proxy.close()[:2], (0, b""))


def lost_in_flight(ended: str) -> list[tuple[bool, list[str]]]:
    """What a call in flight when the server's session expired may get: its own POST's 404 says so, or the
    proxy's event stream to the server met the 404 first and the session's end answered it (`ended`); the
    two race, and both say the server did not answer it."""
    return [(True, ["toolreplay: ConnectionError: the server's session expired (HTTP 404 for its session id)"]),
            (True, [f"toolreplay: ConnectionError: {ended}"])]


async def across_a_restart(session: Any, tool: str, answer: Callable[[Any, str], Awaitable[Any]],
                           restart: Callable[[], None]) -> tuple[Any, Any, Any]:
    """A call's answer before the server restarts (`restart`), one in flight as it does, and one once `tool`
    is listed again."""
    before = await answer(session, "a")
    restart()
    lost = await answer(session, "b")
    for _ in range(100):
        if [listed.name for listed in (await session.list_tools()).tools] == [tool]:
            break
        await asyncio.sleep(0.1)
    return before, lost, await answer(session, "c")


class HttpBothSidesTest(HttpWorkspace):
    """HTTP on both sides (`--listen` in front of a server URL), and a URL among `--servers`."""

    def setUp(self) -> None:
        require(HAVE_SDK, "the MCP Python SDK (pip install mcp)")
        super().setUp()
        self.records = os.path.join(self.directory, "records")

    def records_of(self) -> list[dict[str, Any]]:
        [name] = [name for name in os.listdir(self.records) if name.endswith(".jsonl")]
        return read_records(os.path.join(self.records, name))

    def test_the_clients_authorization_reaches_the_server_and_nothing_else(self) -> None:
        from tests.test_mcp_http_listen import Listener, session_run

        env = {"TOOLREPLAY_TEST_TOKEN": TOKEN}
        url, _ = start_http_server(self, "--notes", self.notes, "--require-token", "TOOLREPLAY_TEST_TOKEN", env=env)
        listener = Listener(self.write_policy(HTTP_POLICY), self.records, [url])

        async def scenario(session: Any) -> Any:
            return ([tool.name for tool in (await session.list_tools()).tools],
                    texts(await session.call_tool("lookup", {"key": "k"})),
                    texts(await session.call_tool("delete_all", {})))

        value = asyncio.run(session_run(listener.url, scenario, headers={"Authorization": f"Bearer {TOKEN}"}))
        self.assertEqual(value, (["lookup", "write_note", "fail", "chatty"], (False, ["value of k"]),
                                 (True, ["toolreplay: tool not allowed: delete_all"])))
        code, stderr = listener.stop()
        self.assertEqual(code, 0, stderr)
        self.assertNotIn(TOKEN, stderr)
        self.assertEqual([(r["tool"], r["meta"]["outcome"]) for r in self.records_of()],
                         [("lookup", "ran"), ("delete_all", "refused")])
        for name in os.listdir(self.records):
            with open(os.path.join(self.records, name), encoding="utf-8") as record:
                self.assertNotIn(TOKEN, record.read())

    def test_oauth_passes_through_the_listener(self) -> None:
        """A server that requires a bearer token and publishes its protected resource metadata (the SDK's own
        OAuth resource server): its 401 reaches the client as HTTP, naming the listener's metadata, which is
        the server's with the listener's URL; the token then passes unchanged, and is never recorded."""
        import httpx

        from tests.test_mcp_http_listen import Listener, session_run

        url, _ = start_http_server(self, "--notes", self.notes, "--oauth", "TOOLREPLAY_TEST_TOKEN",
                                   env={"TOOLREPLAY_TEST_TOKEN": TOKEN})
        listener = Listener(self.write_policy(HTTP_POLICY), self.records, [url])
        self.addCleanup(lambda: listener.process.poll() is not None or listener.stop())  # a failed assertion too
        base = listener.url[:-len("/mcp")]
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        post_headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        with httpx.Client() as http:
            refused = [http.post(listener.url, json=initialize, headers={**post_headers, **extra})
                       for extra in ({}, {"authorization": "Bearer wrong-token"})]
            metadata = http.get(base + "/.well-known/oauth-protected-resource/mcp")
            root = http.get(base + "/.well-known/oauth-protected-resource")
        for answer in refused:
            self.assertEqual((answer.status_code, answer.headers.get("www-authenticate"),
                              answer.headers.get("mcp-session-id")), (401, (
                                  'Bearer error="invalid_token", error_description="Authentication required", '
                                  f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"'), None))
        self.assertEqual((metadata.status_code, metadata.json(), root.json()), (200, {
            "resource": listener.url, "authorization_servers": ["https://auth.example/"], "scopes_supported": [],
            "bearer_methods_supported": ["header"]}, metadata.json()))

        async def scenario(session: Any) -> Any:
            return texts(await session.call_tool("lookup", {"key": "k"}))

        value = asyncio.run(session_run(listener.url, scenario, headers={"Authorization": f"Bearer {TOKEN}"}))
        self.assertEqual(value, (False, ["value of k"]))
        code, stderr = listener.stop()
        self.assertEqual(code, 0, stderr)
        self.assertNotIn(TOKEN, stderr)
        self.assertEqual([(r["tool"], r["meta"]["outcome"]) for r in self.records_of()], [("lookup", "ran")])
        for name in os.listdir(self.records):
            with open(os.path.join(self.records, name), encoding="utf-8") as record:
                self.assertNotIn(TOKEN, record.read())

    def test_a_server_url_among_several_servers_is_reconnected_when_its_session_is_gone(self) -> None:
        """The HTTP server restarts (a new process on the same port): the proxy's session there is unknown
        to it (404), the call in flight gets the proxy's answer, and a new session is opened after 1 s."""
        from mcp.shared.exceptions import MCPError

        url, server = start_http_server(self, "--notes", self.notes)
        port = url.split(":")[2].split("/")[0]
        servers = os.path.join(self.directory, "servers.json")
        with open(servers, "w", encoding="utf-8") as out:
            json.dump({"servers": {"remote": {"url": url}}}, out)
        policy = self.write_policy({"agent": "both", "allowed_tools": ["remote__lookup"]})

        async def answer(session: Any, key: str) -> Any:
            try:
                return texts(await session.call_tool("remote__lookup", {"key": key}))
            except MCPError as exc:
                return str(exc)

        def restart() -> None:
            stop(server)
            start_http_server(self, "--notes", self.notes, "--port", port)

        async def scenario(session: Any) -> Any:
            return await across_a_restart(session, "remote__lookup", answer, restart)

        value, stderr = run_client(["--policy", policy, "--servers", servers], [], scenario)
        self.assertEqual((value[0], value[2]), ((False, ["value of a"]), (False, ["value of c"])))
        self.assertIn(value[1], lost_in_flight("the server 'remote' ended before it answered"))
        self.assertEqual(stderr, (
            "toolreplay mcp-proxy: server 'remote' ended (server exited): it is started again\n"
            "toolreplay mcp-proxy: server 'remote' is back (started again): its tools are listed again\n"))

    def test_a_lone_server_url_is_reconnected_when_its_session_is_gone(self) -> None:
        """As among several servers, for the one server URL after --: the call in flight gets the proxy's
        answer, the proxy opens a new session (the client's initialize) after 1 s, and the session goes on."""
        url, server = start_http_server(self, "--notes", self.notes)
        port = url.split(":")[2].split("/")[0]
        policy = self.write_policy({"agent": "remote", "allowed_tools": ["lookup"]})

        async def answer(session: Any, key: str) -> Any:
            return texts(await session.call_tool("lookup", {"key": key}))

        def restart() -> None:
            stop(server)
            start_http_server(self, "--notes", self.notes, "--port", port)

        async def scenario(session: Any) -> Any:
            return await across_a_restart(session, "lookup", answer, restart)

        value, stderr = run_client(["--policy", policy, "--record", self.record], [url], scenario)
        self.assertEqual((value[0], value[2]), ((False, ["value of a"]), (False, ["value of c"])))
        self.assertIn(value[1], lost_in_flight("the server ended before it answered"))
        self.assertEqual(stderr, (
            "toolreplay mcp-proxy: the server's session expired (HTTP 404 for its session id)\n"
            "toolreplay mcp-proxy: the server ended (server exited): it is started again\n"
            "toolreplay mcp-proxy: the server is back (started again): its tools are listed again\n"))
        self.assertEqual([(r["tool"], r["meta"]["outcome"]) for r in read_records(self.record)],
                         [("lookup", "ran"), ("lookup", "ran"), ("lookup", "ran")])

    def test_a_call_the_worker_reads_itself_is_cancelled_and_the_next_goes_on(self) -> None:
        """With JSON answers the call's own task POSTs it and reads its answer itself (a plain read in the
        listener's loop; LoopPathTest has the worker's way too): a cancellation while the server runs it ends
        the client's POST at once and records the call cancelled; the next call is answered."""
        import httpx

        from tests.test_mcp_http_listen import Listener

        slow_began = os.path.join(self.directory, "began.txt")
        url, _ = start_http_server(self, "--notes", self.notes, "--json", "--began", slow_began)
        policy = self.write_policy({"agent": "http", "allowed_tools": ["lookup", "slow"]})
        listener = Listener(policy, self.records, [url])
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}

        def call(http: httpx.Client, number: int, name: str, arguments: dict[str, Any]) -> Any:
            message = {"jsonrpc": "2.0", "id": number, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}}
            return http.post(listener.url, json=message, headers=headers).json()

        with httpx.Client(timeout=30) as http, httpx.Client(timeout=30) as other:
            opened = http.post(listener.url, headers=headers, json={
                "jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
            headers["mcp-session-id"] = opened.headers["mcp-session-id"]
            headers["mcp-protocol-version"] = "2025-06-18"
            http.post(listener.url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
            first = call(http, 1, "lookup", {"key": "a"})
            began = time.monotonic()
            held = _cancelled_as_it_runs(call, http, other, listener.url, headers, 2, slow_began)
            waited = time.monotonic() - began
            last = call(http, 3, "lookup", {"key": "b"})
        code, stderr = listener.stop()
        self.assertEqual(code, 0, stderr)
        self.assertEqual((first["result"]["content"][0]["text"], last["result"]["content"][0]["text"]),
                         ("value of a", "value of b"))
        self.assertEqual(held["answer"], {"jsonrpc": "2.0", "id": 2, "error": {"code": -32800,
                                                                             "message": "Request cancelled"}})
        self.assertLess(waited, 5)
        self.assertEqual([(r["tool"], r["meta"]["outcome"], r["response"].get("error")) for r in self.records_of()],
                         [("lookup", "ran", None),
                          ("slow", "cancelled", "cancelled: the client cancelled the call while the server ran it"),
                          ("lookup", "ran", None)])

    def test_a_server_url_among_several_servers(self) -> None:
        from tests.test_mcp_http_listen import Listener, session_run
        from tests.test_mcp_real import TINY

        url, _ = start_http_server(self, "--notes", self.notes)
        servers = os.path.join(self.directory, "servers.json")
        with open(servers, "w", encoding="utf-8") as out:
            json.dump({"servers": {"remote": {"url": url}, "local": {"command": sys.executable, "args": [TINY]}}}, out)
        policy = self.write_policy({"agent": "both", "allowed_tools": ["remote__lookup", "local__echo"]})
        listener = Listener(policy, self.records, [], "--servers", servers)

        async def scenario(session: Any) -> Any:
            return ([tool.name for tool in (await session.list_tools()).tools],
                    texts(await session.call_tool("remote__lookup", {"key": "k"})),
                    texts(await session.call_tool("local__echo", {"text": "e"})))

        self.assertEqual(asyncio.run(session_run(listener.url, scenario)), (
            ["remote__lookup", "local__echo"], (False, ["value of k"]), (False, ['echo {"text": "e"}'])))
        code, stderr = listener.stop()
        self.assertEqual(code, 0, stderr)
        self.assertEqual([(r["tool"], r["meta"]["outcome"], r["meta"]["x-server"]) for r in self.records_of()],
                         [("remote__lookup", "ran", "remote"), ("local__echo", "ran", "local")])


class LoopPathTest(HttpWorkspace):
    """A plain read behind a listener whose upstream is a URL runs in the listener's event loop (`Router._loop_call`:
    no worker thread); it must leave the record a worker leaves, byte for byte, a cancelled call included."""

    def session(self, records: str, url: str, began: str, worker: bool) -> tuple[list[Any], int, bytes]:
        """Four calls (one ran, one refused, one the server fails, one cancelled as it ran), then one more, in a
        listener in this process (its gate's clocks fixed); the answers, the calls run in the loop, the record."""
        from unittest import mock

        import httpx

        from toolreplay.mcp.http.listen import HttpListener
        from toolreplay.mcp.http.upstream import HttpServer
        from toolreplay.mcp.router import Router
        from toolreplay.policy.model import Policy

        class FixedTime:  # the gate's clock for `duration_ms`: every call takes no time
            @staticmethod
            def perf_counter() -> float:
                return 1.0

        in_loop = []
        loop_call = Router._loop_call

        def counted(router: Router, context: Any) -> bool:
            started = not worker and loop_call(router, context)
            in_loop.append(started)
            return started

        policy = Policy(agent="loop", allowed_tools=frozenset({"lookup", "fail", "slow"}))
        listener = HttpListener(lambda headers: HttpServer(url, loop=listener.loop), policy, records=records,
                                diagnostics=io.StringIO())
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}

        def call(http: httpx.Client, number: int, name: str, arguments: dict[str, Any]) -> Any:
            # a notification still with the session's feeder (the client has its 202 already) would send the
            # call the feeder's way, to a worker, in its turn: the count is of calls that came to an idle session
            wait_for(lambda: not any(session.client._feeding for session in list(listener._sessions.values())),
                     "the session's feeder to be idle")
            return http.post(listener.url, headers=headers, json={
                "jsonrpc": "2.0", "id": number, "method": "tools/call",
                "params": {"name": name, "arguments": arguments}}).json()

        with mock.patch("toolreplay.guard.gate.time", FixedTime), mock.patch.object(Router, "_loop_call", counted):
            listener.start()
            with httpx.Client(timeout=30) as http, httpx.Client(timeout=30) as other:
                opened = http.post(listener.url, headers=headers, json={
                    "jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "t", "version": "1"}}})
                headers["mcp-session-id"] = opened.headers["mcp-session-id"]
                headers["mcp-protocol-version"] = "2025-06-18"
                [session] = listener._sessions.values()
                session.proxy._gate._wall_clock = lambda: 1_700_000_000_000_000_000
                http.post(listener.url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
                answers = [call(http, 1, "lookup", {"key": "a"}), call(http, 2, "delete_all", {}),
                           call(http, 3, "fail", {})]
                held = _cancelled_as_it_runs(call, http, other, listener.url, headers, 4, began)
                answers += [held.get("answer"), call(http, 5, "lookup", {"key": "b"})]
            listener.close()
        [name] = [name for name in os.listdir(records) if name.endswith(".jsonl")]
        with open(os.path.join(records, name), "rb") as record:
            return answers, sum(in_loop), record.read()

    def test_a_read_in_the_loop_leaves_the_record_a_worker_leaves(self) -> None:
        began = os.path.join(self.directory, "began.txt")
        url, _ = start_http_server(self, "--notes", self.notes, "--json", "--began", began)
        loop = self.session(os.path.join(self.directory, "loop"), url, began, worker=False)
        workers = self.session(os.path.join(self.directory, "workers"), url, began, worker=True)
        self.assertEqual((loop[1], workers[1]), (5, 0))  # every call in the loop, then every call on a worker
        self.assertEqual(loop[0], workers[0])
        self.assertEqual(loop[0][0]["result"]["content"][0]["text"], "value of a")
        self.assertEqual(loop[0][3], {"jsonrpc": "2.0", "id": 4, "error": {"code": -32800,
                                                                         "message": "Request cancelled"}})
        self.assertEqual(loop[2], workers[2])
        records = [json.loads(line) for line in loop[2].splitlines()]
        self.assertEqual([(r["tool"], r["meta"]["outcome"], r["response"].get("error")) for r in records], [
            ("lookup", "ran", None), ("delete_all", "refused", "tool not allowed: delete_all"),
            ("fail", "ran", None),
            ("slow", "cancelled", "cancelled: the client cancelled the call while the server ran it"),
            ("lookup", "ran", None)])


if __name__ == "__main__":
    unittest.main()
