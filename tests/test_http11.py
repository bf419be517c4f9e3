"""The lean HTTP/1.1 client (toolreplay/mcp/http/http11.py) against a scripted server in this process: what it
writes, how it reads each body framing, keep-alive, and the exact failure for each malformed answer; then
the HTTP upstream over it, for an event stream the server drops mid-answer."""

from __future__ import annotations

import asyncio
import gzip
import http.server
import importlib.util
import json
import socketserver
import threading
import time
import unittest
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support import require
from toolreplay.mcp.http import http11
from toolreplay.mcp.wire import no_answer_reason

OK_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
HAVE_HTTPX = importlib.util.find_spec("httpx") is not None and importlib.util.find_spec("httpcore") is not None


class Scripted:
    """An HTTP server on 127.0.0.1 that answers the n-th request with `answers[n]` (bytes written as they are;
    `None`: the connection is closed without an answer) and keeps what it was sent."""

    def __init__(self, answers: list[bytes | None], close_after: bool = False) -> None:
        self.answers = list(answers)
        self.close_after = close_after
        self.requests: list[bytes] = []
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                self.requests.append(head + await reader.readexactly(length))
                answer = self.answers.pop(0)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


def exchange(answers: list[bytes | None], client: Callable[[http11.Pool], Awaitable[Any]],
             close_after: bool = False) -> tuple[Any, Scripted]:
    """Run `client` on a pool to a scripted server; what it returned, and the server."""
    script = Scripted(answers, close_after)

    async def main() -> Any:
        server = await asyncio.start_server(script.handle, "127.0.0.1", 0)
        pool = http11.Pool("127.0.0.1", server.sockets[0].getsockname()[1], connect_timeout=5)
        try:
            return await client(pool)
        finally:
            await pool.aclose()
            server.close()
            await server.wait_closed()

    return asyncio.run(main()), script


async def post(pool: http11.Pool, body: bytes = b"{}") -> tuple[int, str, dict[str, str], bytes]:
    response = await pool.request("POST", "/mcp?q=1", b"host: example\r\n", body)
    try:
        return response.status_code, response.reason_phrase, response.headers, await response.aread()
    finally:
        await response.aclose()


def failure(answer: bytes | None) -> str:
    """The failure a POST answered with `answer` (then the connection closed) ends in."""
    async def client(pool: http11.Pool) -> str:
        try:
            await post(pool)
        except http11.HttpFailure as exc:
            return f"{type(exc).__name__}: {exc}"
        return "no failure"
    return exchange([answer], client, close_after=True)[0]  # type: ignore[no-any-return]


class ExchangeTest(unittest.TestCase):
    def test_the_request_as_written_and_a_json_answer(self) -> None:
        answer = OK_HEAD + b"Mcp-Session-Id:  s-1 \r\ncontent-length: 7\r\n\r\n{\"a\":1}"
        got, script = exchange([answer], post)
        self.assertEqual(got, (200, "OK", {"content-type": "application/json", "mcp-session-id": "s-1",
                                           "content-length": "7"}, b'{"a":1}'))
        self.assertEqual(script.requests, [b"POST /mcp?q=1 HTTP/1.1\r\nhost: example\r\ncontent-length: 2\r\n\r\n{}"])

    def test_keep_alive_one_connection_for_calls_in_turn(self) -> None:
        answer = OK_HEAD + b"content-length: 2\r\n\r\n{}"

        async def three(pool: http11.Pool) -> list[bytes]:
            return [(await post(pool))[3] for _ in range(3)]

        got, script = exchange([answer] * 3, three)
        self.assertEqual((got, script.connections), ([b"{}"] * 3, 1))

    def test_send_now_writes_at_once_on_an_idle_connection_else_nothing(self) -> None:
        answer = OK_HEAD + b"content-length: 2\r\n\r\n{}"

        async def early(pool: http11.Pool) -> tuple[bool, bytes]:
            none = pool.send_now("POST", "/a", b"", b"{}")  # no connection yet: nothing is written
            await post(pool)
            sent = pool.send_now("POST", "/b", b"host: e\r\n", b"[]")
            assert sent is not None
            response = await pool.request("POST", "/b", b"", b"", sent=sent)
            body = await response.aread()
            await response.aclose()
            return none is None, body

        got, script = exchange([answer] * 2, early)
        self.assertEqual((got, script.connections), ((True, b"{}"), 1))
        self.assertEqual(script.requests[1], b"POST /b HTTP/1.1\r\nhost: e\r\ncontent-length: 2\r\n\r\n[]")

    def test_a_connection_the_server_closed_after_its_answer_is_not_used_again(self) -> None:
        connections: list[int] = []

        class Once(socketserver.BaseRequestHandler):
            def handle(self) -> None:  # one answer without "connection: close", then the connection is closed
                connections.append(1)
                data = b""
                while b"{}" not in data:
                    data += self.request.recv(4096)
                self.request.sendall(OK_HEAD + b"content-length: 2\r\n\r\n{}")

        server = socketserver.TCPServer(("127.0.0.1", 0), Once)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)

        async def two() -> list[Any]:
            pool = http11.Pool("127.0.0.1", server.server_address[1], connect_timeout=5)
            first = (await post(pool))[3]
            time.sleep(0.2)  # the server's end reaches this side; the event loop, held here, has not seen it
            seen = bool(pool._idle) and pool._idle[0].usable()  # (or found closed when it was given back)
            second = (await post(pool))[3]
            await pool.aclose()
            return [first, seen, second]

        self.assertEqual((asyncio.run(two()), len(connections)), ([b"{}", False, b"{}"], 2))

    def test_connection_close_and_a_body_to_the_end_of_the_connection(self) -> None:
        answer = OK_HEAD + b"connection: close\r\n\r\n{\"to\": \"the end\"}"

        async def two(pool: http11.Pool) -> list[bytes]:
            return [(await post(pool))[3] for _ in range(2)]

        got, script = exchange([answer, answer], two, close_after=True)
        self.assertEqual((got, script.connections), ([b'{"to": "the end"}'] * 2, 2))

    def test_chunks_extensions_trailers_and_text_as_it_comes(self) -> None:
        answer = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                  b"7;ext=1\r\ndata: \xc3\r\n5\r\n\xa9\n\n\r\n\r\n0\r\ntrailer: x\r\n\r\n")

        async def text(pool: http11.Pool) -> list[str]:
            response = await pool.request("POST", "/", b"", b"{}")
            parts = [part async for part in response.aiter_text()]
            await response.aclose()
            return parts

        self.assertEqual(exchange([answer], text)[0], ["data: ", "\u00e9\n\n\r\n"])

    def test_informational_answers_are_skipped_and_gzip_is_read(self) -> None:
        body = gzip.compress(b'{"zipped":true}')
        answer = (b"HTTP/1.1 100 Continue\r\n\r\n" + OK_HEAD + b"content-encoding: gzip\r\ncontent-length: "
                  + str(len(body)).encode() + b"\r\n\r\n" + body)
        self.assertEqual(exchange([answer], post)[0][3], b'{"zipped":true}')

    def test_lf_line_ends_and_no_body_for_204(self) -> None:
        got, _ = exchange([b"HTTP/1.1 204 No Content\nx-a: 1\n\n"], post)
        self.assertEqual(got, (204, "No Content", {"x-a": "1"}, b""))


def blocking(answers: list[bytes | None], client: Callable[[http11.LeanClient], Awaitable[Any]]) -> tuple[Any, Scripted]:
    """Run `client` on a LeanClient to a scripted server (whose loop runs here: a blocking read goes to a thread)."""
    script = Scripted(answers)

    async def main() -> Any:
        server = await asyncio.start_server(script.handle, "127.0.0.1", 0)
        lean = http11.LeanClient(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/mcp", connect_timeout=5)
        try:
            return await client(lean)
        finally:
            await lean.aclose()
            server.close()
            await server.wait_closed()

    return asyncio.run(main()), script


async def blocking_post(lean: http11.LeanClient) -> tuple[str, Any]:
    """POST from another thread: ("thread", body) when that thread read the answer, else ("loop", (status, headers,
    body)) as the loop read it, or ("loop", "Failure: message")."""
    exchange = lean.exchange("POST", {"x-call": "1"}, b"{}")
    assert exchange is not None
    body = await asyncio.to_thread(exchange.read_json)
    if body is not None:
        return "thread", body
    try:
        response = await exchange.resume()
        return "loop", (response.status_code, dict(response.headers), await response.aread())
    except http11.HttpFailure as exc:
        return "loop", f"{type(exc).__name__}: {exc}"


class BlockingExchangeTest(unittest.TestCase):
    """`LeanClient.exchange`: a request written from another thread than the loop's, on a blocking keep-alive
    connection; that thread reads a plain JSON answer, the loop every other one (from what came of it)."""

    def test_a_json_answer_is_read_by_the_sending_thread_on_one_kept_connection(self) -> None:
        answer = OK_HEAD + b"content-length: 7\r\n\r\n{\"a\":1}"

        async def two(lean: http11.LeanClient) -> list[tuple[str, Any]]:
            return [await blocking_post(lean), await blocking_post(lean)]

        got, script = blocking([answer, answer], two)
        self.assertEqual((got, script.connections), ([("thread", b'{"a":1}')] * 2, 1))
        self.assertEqual(script.requests[0], b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:" + script.requests[0].split(
            b"host: 127.0.0.1:")[1].split(b"\r\n")[0] + b"\r\naccept: */*\r\naccept-encoding: gzip, deflate\r\n"
            b"connection: keep-alive\r\nx-call: 1\r\ncontent-length: 2\r\n\r\n{}")

    def test_every_other_answer_is_read_by_the_loop_as_it_would_be(self) -> None:
        sse = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
               b"5\r\ndata:\r\n0\r\n\r\n")
        zipped = gzip.compress(b"{}")
        cases = [
            (sse, (200, {"content-type": "text/event-stream", "transfer-encoding": "chunked"}, b"data:")),
            (b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\nno", (404, {"content-length": "2"}, b"no")),
            (b"HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer\r\ncontent-length: 0\r\n\r\n",
             (401, {"www-authenticate": "Bearer", "content-length": "0"}, b"")),
            (OK_HEAD + b"content-encoding: gzip\r\ncontent-length: %d\r\n\r\n" % len(zipped) + zipped,
             (200, {"content-type": "application/json", "content-encoding": "gzip",
                    "content-length": str(len(zipped))}, b"{}")),
            (b"HTTP/1.1 200 OK\ncontent-type: application/json\ncontent-length: 2\n\n{}",
             (200, {"content-type": "application/json", "content-length": "2"}, b"{}")),
            (b"HTTP/1.1 100 Continue\r\n\r\n" + OK_HEAD + b"content-length: 2\r\n\r\n{}",
             (200, {"content-type": "application/json", "content-length": "2"}, b"{}")),
            (OK_HEAD + b"connection: close\r\ncontent-length: 2\r\n\r\n{}",
             (200, {"content-type": "application/json", "connection": "close", "content-length": "2"}, b"{}")),
        ]
        for answer, expected in cases:
            self.assertEqual(blocking([answer], blocking_post)[0], ("loop", expected), answer)

    def test_a_failure_is_the_loops_own(self) -> None:
        for answer, failure in (
                (None, "RemoteProtocolError: the server closed the connection without answering"),
                (b"HTTP/1.1 200 OK\r\ncontent-", "RemoteProtocolError: the server closed the connection mid-head"),
                (OK_HEAD + b"content-length: 10\r\n\r\n{}",
                 "RemoteProtocolError: the server closed the connection before the end of the body"),
                (b"ICY 200 OK\r\ncontent-length: 0\r\n\r\n", "RemoteProtocolError: the server sent a malformed status line")):
            async def main(script: Scripted) -> Any:
                server = await asyncio.start_server(script.handle, "127.0.0.1", 0)
                lean = http11.LeanClient(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/", connect_timeout=5)
                try:
                    return await blocking_post(lean)
                finally:
                    await lean.aclose()
                    server.close()

            self.assertEqual(asyncio.run(main(Scripted([answer], close_after=True))), ("loop", failure), answer)

    def test_abandoned_while_it_waits_for_the_answer(self) -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()  # never answers; reads until the client closes
            writer.close()

        async def main() -> tuple[bytes | None, float, int]:
            server = await asyncio.start_server(silent, "127.0.0.1", 0)
            lean = http11.LeanClient(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/", connect_timeout=5)
            exchange = lean.exchange("POST", {}, b"{}")
            assert isinstance(exchange, http11.BlockingExchange)
            asyncio.get_running_loop().call_later(0.2, exchange.abandon)
            began = time.monotonic()
            body = await asyncio.to_thread(exchange.read_json)
            waited = time.monotonic() - began
            kept = len(lean._exchanges) + len(lean._blocking_idle)
            await lean.aclose()
            server.close()
            return body, waited, kept

        body, waited, kept = asyncio.run(main())
        self.assertEqual((body, kept), (None, 0))
        self.assertLess(waited, 5)

    def test_no_server_no_exchange(self) -> None:
        with socketserver.TCPServer(("127.0.0.1", 0), socketserver.BaseRequestHandler) as server:
            port = server.server_address[1]
        self.assertIsNone(http11.LeanClient(f"http://127.0.0.1:{port}/", connect_timeout=5).exchange("POST", {}, b"{}"))


class MalformedAnswerTest(unittest.TestCase):
    def test_a_bad_status_line(self) -> None:
        for line in (b"HTTP/2 200 OK", b"HTTP/1.1 2000 OK", b"ICY 200 OK", b"HTTP/1.1 200 O\x01K"):
            self.assertEqual(failure(line + b"\r\ncontent-length: 0\r\n\r\n"),
                             "RemoteProtocolError: the server sent a malformed status line", line)

    def test_bad_header_lines(self) -> None:
        for line in (b"no colon", b"bad name: 1", b" folded: 1", b": no name"):
            self.assertEqual(failure(OK_HEAD + line + b"\r\ncontent-length: 0\r\n\r\n"),
                             "RemoteProtocolError: the server sent a malformed header line", line)

    def test_oversize_headers(self) -> None:
        many = b"".join(b"x-filler-%d: %s\r\n" % (index, b"v" * 100) for index in range(700))
        one = b"x-big: " + b"v" * (http11.MAX_HEAD + 10) + b"\r\n"
        for headers in (many, one):
            self.assertEqual(failure(OK_HEAD + headers + b"content-length: 0\r\n\r\n"),
                             "RemoteProtocolError: the server's response head exceeds 65536 bytes")

    def test_no_answer_and_a_head_cut_short(self) -> None:
        self.assertEqual(failure(None), "RemoteProtocolError: the server closed the connection without answering")
        self.assertEqual(failure(b"HTTP/1.1 200 OK\r\ncontent-"),
                         "RemoteProtocolError: the server closed the connection mid-head")

    def test_bodies_cut_short(self) -> None:
        self.assertEqual(failure(OK_HEAD + b"content-length: 10\r\n\r\n{}"),
                         "RemoteProtocolError: the server closed the connection before the end of the body")
        chunked = OK_HEAD + b"transfer-encoding: chunked\r\n\r\n"
        for cut in (b"5\r\nda", b"5\r\ndata!", b"5\r\ndata!\r\n", b"5"):
            self.assertEqual(failure(chunked + cut), "RemoteProtocolError: the server closed the connection "
                                                     "mid-chunk (an incomplete chunked body)", cut)

    def test_bad_chunks_and_framings(self) -> None:
        chunked = OK_HEAD + b"transfer-encoding: chunked\r\n\r\n"
        self.assertEqual(failure(chunked + b"zz\r\n"),
                         "RemoteProtocolError: a malformed chunked body (a bad chunk size)")
        self.assertEqual(failure(chunked + b"2\r\n{}XX0\r\n\r\n"),
                         "RemoteProtocolError: a malformed chunked body (no line end after a chunk)")
        self.assertEqual(failure(OK_HEAD + b"transfer-encoding: gzip, chunked\r\n\r\n"),
                         "RemoteProtocolError: unsupported transfer-encoding: gzip, chunked")
        self.assertEqual(failure(OK_HEAD + b"content-length: 2\r\ncontent-length: 3\r\n\r\n{}"),
                         "RemoteProtocolError: malformed content-length")
        self.assertEqual(failure(OK_HEAD + b"content-length: -2\r\n\r\n{}"),
                         "RemoteProtocolError: malformed content-length")
        self.assertEqual(failure(OK_HEAD + b"content-encoding: br\r\ncontent-length: 2\r\n\r\n{}"),
                         "RemoteProtocolError: unsupported content-encoding: br")

    def test_no_server(self) -> None:
        async def refused() -> str:
            with socketserver.TCPServer(("127.0.0.1", 0), socketserver.BaseRequestHandler) as server:
                port = server.server_address[1]
            pool = http11.Pool("127.0.0.1", port, connect_timeout=5)
            try:
                await pool.request("POST", "/", b"", b"{}")
            except http11.ConnectError as exc:
                return str(exc)
            return "connected"

        self.assertEqual(asyncio.run(refused()), "Connection refused")


class _Dropping(http.server.BaseHTTPRequestHandler):
    """A Streamable HTTP server whose answer to a call is an event stream cut mid-event, without event ids."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if "id" not in message:
            self.wfile.write(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
        elif message["method"] == "initialize":
            body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"protocolVersion": "2025-06-18"}})
            self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(body), body.encode()))
        else:
            self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
                             b"\r\n10\r\ndata: {\"jsonrpc\"")
            self.close_connection = True
        self.wfile.flush()


class _Answering(http.server.BaseHTTPRequestHandler):
    """A Streamable HTTP server answering `json` calls with a JSON body, others as an event stream; a
    notification's 202 comes after 0.3 s."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if "id" not in message:
            time.sleep(0.3)
            self.wfile.write(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
            return
        result = {"protocolVersion": "2025-06-18"} if message["method"] == "initialize" else {"n": message["id"]}
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
        if message.get("params", {}).get("name", "json") == "json":
            self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmcp-session-id: s\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(body), body))
        else:
            event = b"event: message\ndata: " + body + b"\n\n"
            self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(event), event))


class UpstreamOverLeanClientTest(unittest.TestCase):
    """HttpServer's POSTs to an http:// server go through the lean client; a stream dropped mid-answer is
    the proxy's lost answer (the gate's AnswerLost: an unknown outcome for a write)."""

    def setUp(self) -> None:
        require(HAVE_HTTPX, "httpx (pip install '.[http]' in a ToolReplay checkout)")

    def test_an_event_stream_dropped_mid_answer_is_a_lost_answer(self) -> None:
        from toolreplay.mcp.http.upstream import HttpServer

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Dropping)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        lines: list[bytes] = []
        said: list[str] = []
        arrived = threading.Condition()

        def on_line(line: bytes) -> None:
            with arrived:
                lines.append(line)
                arrived.notify_all()

        upstream = HttpServer(f"http://127.0.0.1:{server.server_address[1]}/mcp", say=said.append)
        upstream.start(on_line, lambda reason: None)
        upstream.send(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}\n'
                      b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
                      b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"send","arguments":{}}}\n')
        with arrived:
            self.assertTrue(arrived.wait_for(lambda: len(lines) == 2, timeout=10))
        upstream.close()
        reason = ("the event stream from the server failed: RemoteProtocolError: the server closed the connection "
                  "mid-chunk (an incomplete chunked body)")
        self.assertEqual(json.loads(lines[0])["result"], {"protocolVersion": "2025-06-18"})
        self.assertEqual((json.loads(lines[1])["id"], no_answer_reason(json.loads(lines[1]))), (2, reason))
        self.assertEqual(said, [reason])

    def test_on_a_shared_loop_no_thread_of_its_own(self) -> None:
        from toolreplay.mcp.http.upstream import HttpServer

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Dropping)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        loop = asyncio.new_event_loop()
        runner = threading.Thread(target=loop.run_forever, name="the-shared-loop", daemon=True)
        runner.start()
        self.addCleanup(loop.close)
        self.addCleanup(runner.join)
        self.addCleanup(loop.call_soon_threadsafe, loop.stop)
        where: list[str] = []
        arrived = threading.Event()

        def on_line(line: bytes) -> None:
            where.append(threading.current_thread().name)
            arrived.set()

        ended: list[str] = []
        upstream = HttpServer(f"http://127.0.0.1:{server.server_address[1]}/mcp", loop=loop)
        upstream.start(on_line, ended.append)
        upstream.send(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}\n')
        self.assertTrue(arrived.wait(10))
        self.assertEqual(upstream.close(), 0)
        self.assertEqual((where, ended, upstream._thread), (["the-shared-loop"], ["server closed the session"], None))
        self.assertTrue(loop.is_running())  # the loop is the listener's: it goes on

    def test_a_call_sent_from_the_calling_thread_is_read_there_unless_it_is_a_stream(self) -> None:
        from toolreplay.mcp.http.upstream import HttpServer

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answering)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        lines: list[tuple[str, Any]] = []
        arrived = threading.Condition()

        def on_line(line: bytes) -> None:
            with arrived:
                lines.append((threading.current_thread().name, json.loads(line)))
                arrived.notify_all()

        def call(number: int, name: str) -> bytes:
            return b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s"}}\n' % (number, name.encode())

        upstream = HttpServer(f"http://127.0.0.1:{server.server_address[1]}/mcp")
        upstream.start(on_line, lambda reason: None)
        self.addCleanup(upstream.close)
        upstream.send(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}\n')
        self.assertIsNone(upstream.send_call(call(2, "json"), json.loads(call(2, "json"))))  # the session opens first
        with arrived:
            self.assertTrue(arrived.wait_for(lambda: len(lines) == 1, timeout=10))
        upstream.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        self.assertIsNone(upstream.send_call(call(2, "json"), json.loads(call(2, "json"))))  # it goes first
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (upstream._queued or not (
                upstream._stream_opened is None or upstream._stream_opened.done())):  # the GET was answered (501)
            time.sleep(0.01)
        for number, name in ((3, "json"), (4, "sse")):
            pending = upstream.send_call(call(number, name), json.loads(call(number, name)))
            assert pending is not None
            pending.complete()
            with arrived:
                self.assertTrue(arrived.wait_for(lambda count=number - 1: len(lines) == count, timeout=10))
        self.assertEqual(lines[1:], [(threading.current_thread().name, {"jsonrpc": "2.0", "id": 3, "result": {"n": 3}}),
                                     ("mcp-http-upstream", {"jsonrpc": "2.0", "id": 4, "result": {"n": 4}})])


if __name__ == "__main__":
    unittest.main()
