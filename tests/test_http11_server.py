"""The listener's HTTP/1.1 server protocol (toolreplay/guard/http11_server.py) on a loopback socket in this
process, with a small ASGI application: the exact bytes of each answer, how many writes they took, the
body framings, pipelining, keep-alive, and the answer to each malformed request."""

from __future__ import annotations

import asyncio
import unittest
from typing import Any

from toolreplay.guard.http11_server import ServerProtocol


class _Config:
    loaded = True
    timeout_keep_alive = 5

    def __init__(self, app: Any) -> None:
        self.loaded_app = app


class _State:
    def __init__(self) -> None:
        self.connections: set[Any] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.default_headers = [(b"server", b"t")]
        self.total_requests = 0


class _Recording:
    """A transport that keeps what each write held."""

    def __init__(self, transport: asyncio.Transport, writes: list[bytes]) -> None:
        self._transport = transport
        self._writes = writes

    def write(self, data: bytes) -> None:
        self._writes.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers with what it got: the method, path, query, a header and the body; `/sse` answers in two parts
    without a length; `/wait` answers once the client went (to the log) ."""
    body = b""
    while True:
        event = await receive()
        if event["type"] == "http.disconnect":
            LOG.append("disconnect before the body ended")
            return
        body += event["body"]
        if not event["more_body"]:
            break
    if scope["path"] == "/wait":
        LOG.append((await receive())["type"])
        return
    if scope["path"] == "/gone":
        future = scope["extensions"]["toolreplay.disconnected"]["future"]
        LOG.append(future.done())
        await future
        LOG.append("gone")
        return
    if scope["path"] == "/sse":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b"data: 2\n\n", "more_body": False})
        return
    if scope["path"] == "/crash":
        raise ValueError("a bug")
    headers = dict(scope["headers"])
    text = b"%s %s %s %s %s" % (scope["method"].encode(), scope["path"].encode(), scope["query_string"],
                                headers.get(b"x-a", b"-"), body)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(text)).encode())]})
    await send({"type": "http.response.body", "body": text})


LOG: list[Any] = []


def converse(*sends: bytes, pause: float = 0.05) -> tuple[bytes, list[bytes], bool]:
    """Send each part (a pause between), read until the server closes or is quiet; what came, the server's
    writes, and whether it closed the connection."""
    writes: list[bytes] = []

    async def main() -> tuple[bytes, list[bytes], bool]:
        loop = asyncio.get_running_loop()
        state = _State()

        class Recorded(ServerProtocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                super().connection_made(transport)
                self.transport = _Recording(self.transport, writes)  # type: ignore[assignment]

        server = await loop.create_server(lambda: Recorded(_Config(app), state, {}), "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        for part in sends:
            writer.write(part)
            await asyncio.sleep(pause)
        got, closed = b"", False
        while True:
            try:
                part = await asyncio.wait_for(reader.read(65536), 0.3)
            except TimeoutError:
                break
            if not part:
                closed = True
                break
            got += part
        writer.close()
        await asyncio.sleep(0.05)
        server.close()
        return got, writes, closed

    return asyncio.run(main())


def post(path: bytes, body: bytes, extra: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nhost: x\r\n%scontent-length: %d\r\n\r\n%s" % (path, extra, len(body), body)


def answer(text: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nserver: t\r\ncontent-length: %d\r\n\r\n%s" % (len(text), text)


class ServingTest(unittest.TestCase):
    def test_a_post_and_its_answer_in_one_write(self) -> None:
        got, writes, closed = converse(post(b"/mcp%20x?q=1", b"{}", b"X-A: v\r\n"))
        self.assertEqual((got, closed), (answer(b"POST /mcp x q=1 v {}"), False))
        self.assertEqual(writes, [got])

    def test_head_and_body_apart_lf_line_ends_and_keep_alive(self) -> None:
        request = post(b"/mcp", b'{"a":1}').replace(b"\r\n", b"\n")
        head, body = request.split(b"\n\n")
        got, _, closed = converse(head + b"\n\n", body, post(b"/2", b""))
        self.assertEqual((got, closed), (answer(b'POST /mcp  - {"a":1}') + answer(b"POST /2  - "), False))

    def test_pipelined_requests_are_answered_in_turn(self) -> None:
        got, _, _ = converse(post(b"/1", b"a") + post(b"/2", b"b") + b"GET /3 HTTP/1.1\r\nhost: x\r\n\r\n")
        self.assertEqual(got, answer(b"POST /1  - a") + answer(b"POST /2  - b") + answer(b"GET /3  - "))

    def test_a_chunked_request_body(self) -> None:
        head = b"POST /c HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
        got, _, _ = converse(head + b"3;x=y\r\nabc\r\n", b"2\r\nde\r\n0\r\nt: 1\r\n\r\n")
        self.assertEqual(got, answer(b"POST /c  - abcde"))

    def test_an_answer_without_length_is_chunked(self) -> None:
        got, writes, _ = converse(post(b"/sse", b""))
        self.assertEqual(got, b"HTTP/1.1 200 OK\r\nserver: t\r\ncontent-type: text/event-stream\r\ntransfer-encoding: "
                              b"chunked\r\n\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n")
        self.assertEqual(len(writes), 2)  # the head with the first event, then the last event and the end

    def test_http_1_0_and_connection_close_end_the_connection(self) -> None:
        for request in (post(b"/a", b"").replace(b"HTTP/1.1", b"HTTP/1.0"), post(b"/a", b"", b"Connection: close\r\n")):
            got, _, closed = converse(request)
            self.assertEqual((got, closed), (answer(b"POST /a  - ").replace(b"\r\n\r\n", b"\r\nconnection: close"
                                                                              b"\r\n\r\n", 1), True))

    def test_expect_100_continue(self) -> None:
        got, _, _ = converse(post(b"/e", b"", b"Expect: 100-continue\r\n"))
        self.assertEqual(got, b"HTTP/1.1 100 Continue\r\n\r\n" + answer(b"POST /e  - "))

    def test_the_application_sees_the_client_leave(self) -> None:
        LOG.clear()
        converse(post(b"/wait", b""))
        self.assertEqual(LOG, ["http.disconnect"])

    def test_the_disconnect_extension_is_set_when_the_client_leaves(self) -> None:
        LOG.clear()
        converse(post(b"/gone", b""))
        self.assertEqual(LOG, [False, "gone"])

    def test_a_failing_application_is_a_500(self) -> None:
        got, _, closed = converse(post(b"/crash", b""))
        self.assertEqual((got, closed), (b"HTTP/1.1 500 Internal Server Error\r\nserver: t\r\ncontent-type: text/plain; "
                                         b"charset=utf-8\r\ncontent-length: 21\r\nconnection: close\r\n\r\nInternal "
                                         b"Server Error", True))


def refusal(status: bytes, text: bytes) -> bytes:
    return (b"HTTP/1.1 %s\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\ncontent-length: "
            b"%d\r\n\r\n%s" % (status, len(text), text))


class MalformedRequestTest(unittest.TestCase):
    def test_bad_request_lines(self) -> None:
        for line in (b"POST /mcp HTTP/2", b"POST  /mcp HTTP/1.1", b"POST /mcp", b"P(ST /mcp HTTP/1.1", b"\x16\x03\x01"):
            got, _, closed = converse(line + b"\r\nhost: x\r\n\r\n")
            self.assertEqual((got, closed), (refusal(b"400 Bad Request", b"Invalid HTTP request line"), True), line)

    def test_bad_header_lines(self) -> None:
        for line in (b"no colon", b"bad name: 1", b" folded", b"x-a: a\x01b"):
            got, _, closed = converse(b"GET / HTTP/1.1\r\n" + line + b"\r\n\r\n")
            text = b"Invalid HTTP header value" if b"\x01" in line else b"Invalid HTTP header line"
            self.assertEqual((got, closed), (refusal(b"400 Bad Request", text), True), line)

    def test_an_oversize_head(self) -> None:
        many = b"".join(b"x-%d: %s\r\n" % (index, b"v" * 100) for index in range(700))
        for head in (b"GET / HTTP/1.1\r\n" + many + b"\r\n", b"GET / HTTP/1.1\r\nx-a: " + b"v" * 70000):
            got, _, closed = converse(head)
            self.assertEqual((got, closed), (refusal(b"431 Request Header Fields Too Large",
                                                     b"Request Header Fields Too Large"), True))

    def test_bad_framings(self) -> None:
        cases = [(b"content-length: x\r\n", b"Invalid Content-Length"),
                 (b"content-length: 1\r\ncontent-length: 2\r\n", b"Invalid Content-Length"),
                 (b"transfer-encoding: gzip\r\n", b"Unsupported Transfer-Encoding"),
                 (b"transfer-encoding: chunked\r\ncontent-length: 2\r\n", b"Unsupported Transfer-Encoding")]
        for headers, text in cases:
            got, _, closed = converse(b"POST / HTTP/1.1\r\n" + headers + b"\r\n")
            self.assertEqual((got, closed), (refusal(b"400 Bad Request", text), True), headers)

    def test_a_chunked_body_that_is_malformed_or_cut_short_ends_the_connection(self) -> None:
        head = b"POST /c HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
        for body in (b"zz\r\n", b"3\r\nabcX\r\n"):
            LOG.clear()
            got, _, closed = converse(head + body)
            self.assertEqual((got, closed, LOG), (b"", True, ["disconnect before the body ended"]), body)


if __name__ == "__main__":
    unittest.main()
