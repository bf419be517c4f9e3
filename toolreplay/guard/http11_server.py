"""A lean HTTP/1.1 server protocol for uvicorn (standard library only): the `--listen` endpoint's parser.

uvicorn runs an ASGI application over a protocol class of its choice: h11's (pure Python, a general
state machine that validates every event both ways) or httptools' (C, not installed with the `http`
extra). `ServerProtocol` takes h11's place under the same uvicorn server (which still binds, accepts,
shuts down gracefully and owns the connections): it reads a request's head with a small strict parser
(request line, header lines: CRLF or LF line ends, at most `MAX_HEAD` bytes, no obsolete line folding),
a body framed by Content-Length or by chunks, and writes a response's head and its first body part in
one send. It offers what the listener's ASGI application uses: keep-alive (HTTP/1.1; 1.0 closes),
pipelined requests answered in turn, `Expect: 100-continue`, a disconnect seen by `receive`, write
flow control, uvicorn's keep-alive timeout and graceful shutdown. A request it cannot read is answered
`400 Bad Request` (or `431` for a head over `MAX_HEAD`) and the connection closed; a request body that
does not end as framed closes it.
"""

from __future__ import annotations

import asyncio
import http
import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

__all__ = ["DISCONNECT_EXTENSION", "MAX_HEAD", "ServerProtocol"]

MAX_HEAD = 64 * 1024  # bytes of a request's line and headers, at most
# An ASGI scope extension: {"future": an asyncio future set when the request's client leaves before its answer
# ended}. An application waits on it rather than on a task reading `receive` for http.disconnect.
DISCONNECT_EXTENSION = "toolreplay.disconnected"
_HIGH_WATER = 64 * 1024  # request body bytes held before reading pauses
_REQUEST_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+) ([\x21-\x7e]+) HTTP/1\.([01])")
_NAME = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("ascii")


STATUS_LINE = {status: _status_line(status) for status in range(100, 600)}

App = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]],
                Callable[[dict[str, Any]], Awaitable[None]]], Awaitable[None]]


class BadRequest(Exception):
    """A request that cannot be read: its status and the text of the answer."""

    def __init__(self, text: str, status: int = 400) -> None:
        super().__init__(text)
        self.status = status


class ServerProtocol(asyncio.Protocol):
    """One connection, as uvicorn builds its protocols: `(config, server_state, app_state, _loop)`."""

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        if not config.loaded:
            config.load()
        self.app: App = config.loaded_app
        self.loop = _loop or asyncio.get_event_loop()
        self.timeout_keep_alive = config.timeout_keep_alive
        self.server_state = server_state
        self.connections: set[Any] = server_state.connections
        self.tasks: set[asyncio.Task[None]] = server_state.tasks
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.buffer = bytearray()
        self.cycle: _Cycle | None = None  # the request being answered
        self.reading_body = False  # the current request's body is still coming
        self.remaining = 0  # bytes left of its body (Content-Length), or of its current chunk
        self.chunked = False
        self.chunk_state = "size"  # chunked: "size", "data", "end" (the CRLF after data), "trailers"
        self.read_paused = False
        self.write_paused = False
        self.drained: asyncio.Event | None = None
        self.keep_alive_timer: asyncio.TimerHandle | None = None
        self.server: tuple[str, int] | None = None
        self.client: tuple[str, int] | None = None

    # -- asyncio.Protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.connections.add(self)
        self.transport = transport
        self.server = _address(transport.get_extra_info("sockname"))
        self.client = _address(transport.get_extra_info("peername"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self._cancel_keep_alive()
        if self.cycle is not None:
            if not self.cycle.response_complete:
                self.cycle.leave()
            self.cycle.message_event.set()
        self._resume_writing()

    def eof_received(self) -> bool | None:
        return None  # the transport closes; a request being answered sees the disconnect

    def data_received(self, data: bytes) -> None:
        self._cancel_keep_alive()
        self.buffer += data
        try:
            self._advance()
        except BadRequest as exc:
            self._refuse(exc)

    def pause_writing(self) -> None:
        self.write_paused = True
        self.drained = asyncio.Event()

    def resume_writing(self) -> None:
        self._resume_writing()

    # -- uvicorn's server --------------------------------------------------------------------------

    def shutdown(self) -> None:
        """The server is stopping: close an idle connection; a busy one closes after its response."""
        if self.cycle is None or self.cycle.response_complete:
            self.transport.close()
        else:
            self.cycle.keep_alive = False

    # -- reading requests --------------------------------------------------------------------------

    def _advance(self) -> None:
        """Read what the buffer holds: the current request's body, then (once it is answered) the next."""
        if self.reading_body:
            self._read_body()
        if self.cycle is None or self.cycle.response_complete:
            if not self.reading_body and self.buffer:
                self._read_head()
                if self.reading_body:
                    self._read_body()
        if len(self.buffer) > MAX_HEAD + _HIGH_WATER and not self.read_paused:  # a client far ahead of us
            self.read_paused = True
            self.transport.pause_reading()

    def _read_head(self) -> None:
        end = self.buffer.find(b"\r\n\r\n")
        lf = self.buffer.find(b"\n\n")
        if lf != -1 and (end == -1 or lf < end):
            end, size = lf, 2
        else:
            size = 4
        if end == -1:
            if len(self.buffer) > MAX_HEAD:
                raise BadRequest("Request Header Fields Too Large", 431)
            return
        if end > MAX_HEAD:
            raise BadRequest("Request Header Fields Too Large", 431)
        head = bytes(self.buffer[:end])
        del self.buffer[:end + size]
        lines = head.lstrip(b"\r\n").split(b"\n")
        match = _REQUEST_LINE.fullmatch(lines[0].rstrip(b"\r"))
        if match is None:
            raise BadRequest("Invalid HTTP request line")
        headers: list[tuple[bytes, bytes]] = []
        length: bytes | None = None
        coding: bytes | None = None
        connection = b""
        expect = False
        for line in lines[1:]:
            name, colon, value = line.rstrip(b"\r").partition(b":")
            if not colon or not _NAME.fullmatch(name):
                raise BadRequest("Invalid HTTP header line")
            value = value.strip(b" \t")
            if _BAD_VALUE.search(value):
                raise BadRequest("Invalid HTTP header value")
            name = name.lower()
            headers.append((name, value))
            if name == b"content-length":
                if length is not None and length != value:
                    raise BadRequest("Invalid Content-Length")
                length = value
            elif name == b"transfer-encoding":
                coding = value.lower() if coding is None else coding + b", " + value.lower()
            elif name == b"connection":
                connection += b"," + value.lower()
            elif name == b"expect" and value.lower() == b"100-continue":
                expect = True
        method, target, minor = match.group(1).decode("ascii"), match.group(2), match.group(3)
        if coding is not None:
            if coding != b"chunked" or length is not None:
                raise BadRequest("Unsupported Transfer-Encoding")
            self.chunked, self.chunk_state, self.remaining = True, "size", 0
        else:
            if length is not None and (not length.isdigit() or len(length) > 18):
                raise BadRequest("Invalid Content-Length")
            self.chunked, self.remaining = False, int(length or b"0")
        tokens = {token.strip() for token in connection.split(b",")}
        keep_alive = b"keep-alive" in tokens if minor == b"0" else b"close" not in tokens
        raw_path, _, query = target.partition(b"?")
        path = raw_path.decode("latin-1")
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
                 "http_version": "1." + minor.decode("ascii"), "server": self.server, "client": self.client,
                 "scheme": "http", "method": method, "root_path": "", "path": unquote(path) if "%" in path else path,
                 "raw_path": raw_path, "query_string": query, "headers": headers}
        self.cycle = _Cycle(self, scope, keep_alive, expect)
        self.reading_body = True
        task = self.loop.create_task(self.cycle.run(self.app))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _read_body(self) -> None:
        cycle = self.cycle
        assert cycle is not None
        if self.chunked:
            self._read_chunks(cycle)
        elif self.remaining:
            part = self.buffer[:self.remaining]
            del self.buffer[:self.remaining]
            self.remaining -= len(part)
            self._body(cycle, bytes(part))
        if not self.chunked and not self.remaining:
            self.reading_body = False
            cycle.more_body = False
            cycle.message_event.set()

    def _read_chunks(self, cycle: _Cycle) -> None:
        while self.buffer:
            if self.chunk_state == "data":
                part = self.buffer[:self.remaining]
                del self.buffer[:self.remaining]
                self.remaining -= len(part)
                self._body(cycle, bytes(part))
                if self.remaining:
                    return
                self.chunk_state = "end"
                continue
            end = self.buffer.find(b"\n")
            if end == -1:
                if len(self.buffer) > MAX_HEAD:
                    raise BadRequest("Invalid chunked body")
                return
            line = bytes(self.buffer[:end]).rstrip(b"\r")
            del self.buffer[:end + 1]
            if self.chunk_state == "end":
                if line:
                    raise BadRequest("Invalid chunked body")
                self.chunk_state = "size"
            elif self.chunk_state == "size":
                size = line.split(b";", 1)[0].strip()
                if not _CHUNK_SIZE.fullmatch(size):
                    raise BadRequest("Invalid chunked body")
                self.remaining = int(size, 16)
                self.chunk_state = "data" if self.remaining else "trailers"
            elif not line:  # the end of the trailers: the body is whole
                self.reading_body = False
                cycle.more_body = False
                cycle.message_event.set()
                return

    def _body(self, cycle: _Cycle, part: bytes) -> None:
        if part and not cycle.response_complete:
            cycle.body += part
            if len(cycle.body) > _HIGH_WATER and not self.read_paused:
                self.read_paused = True
                self.transport.pause_reading()
            cycle.message_event.set()

    def _refuse(self, error: BadRequest) -> None:
        """Answer a request that cannot be read, and close the connection."""
        self.reading_body = False
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.leave()  # its body did not end as framed: the request is abandoned
            self.cycle.message_event.set()
            self.transport.close()
            return
        text = str(error).encode("ascii")
        self.transport.write(STATUS_LINE[error.status] + b"content-type: text/plain; charset=utf-8\r\n"
                             b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(text), text))
        self.transport.close()

    # -- after a response ----------------------------------------------------------------------------

    def resume_reading(self) -> None:
        if self.read_paused and not self.transport.is_closing():
            self.read_paused = False
            self.transport.resume_reading()

    def response_complete(self) -> None:
        """The response ended: read the next request (pipelined) or wait for one, at most the keep-alive
        timeout."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.resume_reading()
        if self.reading_body:
            return  # the request's body still comes (it is read and dropped with the connection's next data)
        if self.buffer:
            try:
                self._advance()
            except BadRequest as exc:
                self._refuse(exc)
        else:
            self.keep_alive_timer = self.loop.call_later(self.timeout_keep_alive, self._idle_too_long)

    def _idle_too_long(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def _cancel_keep_alive(self) -> None:
        if self.keep_alive_timer is not None:
            self.keep_alive_timer.cancel()
            self.keep_alive_timer = None

    def _resume_writing(self) -> None:
        self.write_paused = False
        if self.drained is not None:
            self.drained.set()
            self.drained = None


class _Cycle:
    """One request and its response: the ASGI `receive` and `send`."""

    def __init__(self, protocol: ServerProtocol, scope: dict[str, Any], keep_alive: bool, expect: bool) -> None:
        self.protocol = protocol
        self.scope = scope
        self.keep_alive = keep_alive
        self.waiting_for_continue = expect
        self.message_event = asyncio.Event()
        self.gone: asyncio.Future[None] = protocol.loop.create_future()
        scope["extensions"] = {DISCONNECT_EXTENSION: {"future": self.gone}}
        self.body = bytearray()
        self.more_body = True
        self.disconnected = False
        self.response_started = False
        self.response_complete = False
        self.chunked = False
        self.expected = 0  # body bytes still to send (Content-Length)
        self.head: bytes | None = None  # a response's head, sent with its first body part or at the next turn

    def leave(self) -> None:
        """The client left before the response ended."""
        self.disconnected = True
        if not self.gone.done():
            self.gone.set_result(None)

    async def run(self, app: App) -> None:
        try:
            await app(self.scope, self.receive, self.send)
        except Exception:  # noqa: BLE001  (a bug in the application: the client gets a 500, or the connection ends)
            if not self.response_started and not self.disconnected:
                self.keep_alive = False
                await self.send({"type": "http.response.start", "status": 500, "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"21")]})
                await self.send({"type": "http.response.body", "body": b"Internal Server Error"})
            else:
                self.protocol.transport.close()
            return
        if not self.response_complete and not self.disconnected:
            self.protocol.transport.close()  # the application ended without (finishing) a response

    async def receive(self) -> dict[str, Any]:
        protocol = self.protocol
        if self.waiting_for_continue and not protocol.transport.is_closing():
            protocol.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.waiting_for_continue = False
        if not self.disconnected and not self.response_complete:
            protocol.resume_reading()
            await self.message_event.wait()
            self.message_event.clear()
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        message = {"type": "http.request", "body": bytes(self.body), "more_body": self.more_body}
        self.body = bytearray()
        return message

    async def send(self, message: dict[str, Any]) -> None:
        protocol = self.protocol
        if protocol.write_paused and not self.disconnected and protocol.drained is not None:
            await protocol.drained.wait()
        if self.disconnected:
            return
        if not self.response_started:
            if message["type"] != "http.response.start":
                raise RuntimeError(f"expected http.response.start, not {message['type']}")
            self.response_started = True
            self.waiting_for_continue = False
            status = message["status"]
            content = [STATUS_LINE[status]]
            close = False
            length: int | None = None
            for name, value in [*protocol.server_state.default_headers, *message.get("headers", [])]:
                if not _NAME.fullmatch(name) or _BAD_VALUE.search(value):
                    raise RuntimeError("an invalid response header")
                name = name.lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection" and b"close" in value.lower():
                    close = True
                content.append(b"%s: %s\r\n" % (name, value))
            if close:
                self.keep_alive = False
            elif not self.keep_alive:
                content.append(b"connection: close\r\n")
            head_only = self.scope["method"] == "HEAD" or status in (204, 304)
            if length is None and not head_only:
                self.chunked = True
                content.append(b"transfer-encoding: chunked\r\n")
            self.expected = 0 if head_only else (length or 0)
            content.append(b"\r\n")
            self.head = b"".join(content)
            protocol.loop.call_soon(self._flush_head)
            return
        if self.response_complete:
            raise RuntimeError(f"{message['type']} after the response ended")
        if message["type"] != "http.response.body":
            raise RuntimeError(f"expected http.response.body, not {message['type']}")
        body = message.get("body", b"")
        more = message.get("more_body", False)
        if self.scope["method"] == "HEAD":
            body = b""
        elif self.chunked:
            body = (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + (b"" if more else b"0\r\n\r\n")
        else:
            if len(body) > self.expected:
                raise RuntimeError("a response body longer than its Content-Length")
            self.expected -= len(body)
        if self.head is not None:
            body, self.head = self.head + body, None
        if body:
            protocol.transport.write(body)
        if not more:
            if self.expected:
                raise RuntimeError("a response body shorter than its Content-Length")
            self.response_complete = True
            self.message_event.set()
            if not self.keep_alive:
                protocol.transport.close()
            else:
                protocol.response_complete()

    def _flush_head(self) -> None:
        head, self.head = self.head, None
        if head is not None and not self.protocol.transport.is_closing():
            self.protocol.transport.write(head)


def _address(info: Any) -> tuple[str, int] | None:
    if isinstance(info, tuple) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return None
