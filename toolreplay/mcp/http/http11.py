"""A lean HTTP/1.1 client on asyncio (standard library only): the MCP upstream's `HttpClient` for an
http:// server reached directly.

httpx with httpcore, anyio and h11 spends most of the proxy's time a call on its layers (pools with cancel
scopes, a parser in pure Python built for every case); a POST of one JSON-RPC message and its answer need
little of it. `Pool` keeps keep-alive connections to one origin (TCP_NODELAY, one request at a time on
each, a new connection when every one is busy), writes each request in one piece, and reads the answer
with a small strict parser: the status line, the header lines (at most `MAX_HEAD` bytes, CRLF or LF line
ends, no obsolete line folding), then a body framed by Content-Length, by chunks, or by the end of the
connection, decoded from gzip or deflate when the server compressed it. `LeanClient` is the
`HttpClient` over a `Pool`: the headers httpx would send, and the cookies the server sets sent back
(the standard library's cookie jar, as httpx keeps them).

Every failure is an `HttpFailure` (named as httpx names its errors: ConnectError, ReadError,
RemoteProtocolError...) whose message holds no header value and no URL.
"""

from __future__ import annotations

import asyncio
import codecs
import email.message
import http.cookiejar
import os
import re
import select
import socket
import threading
import urllib.request
import zlib
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any
from urllib.parse import quote, urlsplit

from toolreplay.format.http1 import MAX_HEAD, HeadError, keeps_alive, parse_fields
from toolreplay.mcp.http.client import Answer, Exchange, HttpClient, HttpFailure, Later

__all__ = ["MAX_HEAD", "BlockingExchange", "ConnectError", "HttpFailure", "LeanClient", "Pool", "ReadError",
           "ReadTimeout", "RemoteProtocolError", "Response", "Sent"]

_READ = 64 * 1024  # bytes read at a time from a body
_STATUS = re.compile(r"HTTP/1\.([01]) ([0-9]{3})(?: ([^\x00-\x08\x0a-\x1f\x7f]*))?")
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")


class ConnectError(HttpFailure):
    """No connection to the server."""


class ReadError(HttpFailure):
    """The connection failed while the answer was read."""


class RemoteProtocolError(HttpFailure):
    """The server's answer is not HTTP/1.1 as this client reads it, or it stopped before its end."""


class ReadTimeout(HttpFailure):
    """No answer within the request's deadline."""


_PEEK_NOW = int(socket.MSG_PEEK | getattr(socket, "MSG_DONTWAIT", 0))  # (an int: or-ing the flags costs a call)


def _idle_and_open(sock: socket.socket) -> bool:
    """Whether an idle blocking connection is still open, nothing having come on it since its last answer
    (its end, or anything else, would be there to read)."""
    if not hasattr(socket, "MSG_DONTWAIT"):
        return True
    try:
        sock.recv(1, _PEEK_NOW)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


class _Connection:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def seen_closed(self) -> bool:
        """Whether the event loop has seen the connection close (either side), without asking the socket."""
        return self.writer.transport.is_closing() or self.reader.at_eof()

    def usable(self) -> bool:
        """Idle and still open: the server has not closed it, nor has anything come on it since its last
        answer (as httpcore checks: an end the event loop has not seen yet is found by polling the socket)."""
        if self.seen_closed():
            return False
        sock = self.writer.get_extra_info("socket")
        if sock is None or not hasattr(select, "poll"):
            return True
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return not poller.poll(0)

    def close(self) -> None:
        self.writer.transport.abort()


class Response:
    """One answer; its body is read by `aread` or `aiter_text`, and `aclose` gives the connection back (or
    closes it when the body was not read to its end)."""

    def __init__(self, pool: Pool, connection: _Connection, status: int, reason: str,
                 raw_headers: list[tuple[str, str]], keep: bool, head_only: bool) -> None:
        self._pool = pool
        self._connection: _Connection | None = connection
        self.status_code = status
        self.reason_phrase = reason
        self.raw_headers = raw_headers  # (lowercase name, value), as they came
        self.headers: dict[str, str] = {}  # lowercase name -> value (repeated headers joined with ", ")
        for name, value in raw_headers:
            self.headers[name] = f"{self.headers[name]}, {value}" if name in self.headers else value
        self._keep = keep
        self._remaining = 0  # bytes left of the body (Content-Length) or of the current chunk
        self._mode = "none" if head_only else self._framing()
        self._decoder = self._decoding()
        self._done = self._mode == "none" or (self._mode == "length" and self._remaining == 0)

    def _framing(self) -> str:
        codings = self.headers.get("transfer-encoding")
        if codings is not None:
            if codings.strip().lower() != "chunked":
                raise RemoteProtocolError(f"unsupported transfer-encoding: {codings[:40]}")
            return "chunked"
        length = self.headers.get("content-length")
        if length is None:
            self._keep = False
            return "close"
        values = {value.strip() for value in length.split(",")}
        if len(values) != 1 or not next(iter(values)).isdigit() or len(next(iter(values))) > 18:
            raise RemoteProtocolError("malformed content-length")
        self._remaining = int(next(iter(values)))
        return "length"

    def _decoding(self) -> Any:
        coding = self.headers.get("content-encoding", "identity").strip().lower()
        if coding in ("identity", ""):
            return None
        if coding == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        if coding == "deflate":
            return _Deflate()
        raise RemoteProtocolError(f"unsupported content-encoding: {coding[:40]}")

    async def aread(self) -> bytes:
        """The whole body."""
        if self._mode == "length" and self._decoder is None and not self._done:
            connection = self._take()
            try:
                data = await connection.reader.readexactly(self._remaining)
            except asyncio.IncompleteReadError:
                self._fail(connection)
                raise RemoteProtocolError("the server closed the connection before the end of the body") from None
            except OSError as exc:
                self._fail(connection)
                raise ReadError(_os_error(exc)) from None
            self._remaining = 0
            self._finish(connection)
            return data
        return b"".join([part async for part in self.aiter_bytes()])

    async def aiter_text(self) -> AsyncIterator[str]:
        """The body as text (UTF-8; what is not UTF-8 becomes U+FFFD), as it arrives."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        async for part in self.aiter_bytes():
            text = decoder.decode(part)
            if text:
                yield text
        text = decoder.decode(b"", final=True)
        if text:
            yield text

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body, decoded, as it arrives."""
        while not self._done:
            part = await self._next()
            if self._decoder is not None:
                part = self._decoder.decompress(part)
                if self._done:
                    part += self._decoder.flush()
            if part:
                yield part

    async def aclose(self) -> None:
        """Give the connection back to the pool when the body was read whole, else close it."""
        connection, self._connection = self._connection, None
        if connection is not None:
            if self._done and self._keep:
                self._pool._give_back(connection)
            else:
                connection.close()

    # -- reading the body ---------------------------------------------------------------------------

    def _take(self) -> _Connection:
        if self._connection is None:
            raise ReadError("the response was closed")
        return self._connection

    def _finish(self, connection: _Connection) -> None:
        self._done = True
        if not self._keep:
            self._connection = None
            connection.close()

    def _fail(self, connection: _Connection) -> None:
        self._done = True
        self._keep = False
        self._connection = None
        connection.close()

    async def _next(self) -> bytes:
        """The next piece of the body (raw); the end is marked by `_done`."""
        connection = self._take()
        reader = connection.reader
        try:
            if self._mode == "length":
                part = await reader.read(min(self._remaining, _READ))
                if not part:
                    raise RemoteProtocolError("the server closed the connection before the end of the body")
                self._remaining -= len(part)
                if not self._remaining:
                    self._finish(connection)
                return part
            if self._mode == "close":
                part = await reader.read(_READ)
                if not part:
                    self._finish(connection)
                return part
            return await self._next_chunk(connection)
        except HttpFailure:
            self._fail(connection)
            raise
        except asyncio.IncompleteReadError:
            self._fail(connection)
            raise RemoteProtocolError("the server closed the connection mid-chunk (an incomplete chunked body)") \
                from None
        except (asyncio.LimitOverrunError, ValueError):
            self._fail(connection)
            raise RemoteProtocolError("a malformed chunked body (a line too long)") from None
        except OSError as exc:
            self._fail(connection)
            raise ReadError(_os_error(exc)) from None

    async def _next_chunk(self, connection: _Connection) -> bytes:
        reader = connection.reader
        if self._remaining == 0:
            line = (await reader.readuntil(b"\n")).rstrip(b"\r\n")
            size = line.split(b";", 1)[0].strip()
            if not _CHUNK_SIZE.fullmatch(size):
                raise RemoteProtocolError("a malformed chunked body (a bad chunk size)")
            self._remaining = int(size, 16)
            if self._remaining == 0:  # the last chunk: trailers (ignored) up to an empty line
                trailers = 0
                while (line := await reader.readuntil(b"\n")) not in (b"\r\n", b"\n"):
                    trailers += len(line)
                    if trailers > MAX_HEAD:
                        raise RemoteProtocolError(f"the trailers exceed {MAX_HEAD} bytes")
                self._finish(connection)
                return b""
        part = await reader.read(min(self._remaining, _READ))
        if not part:
            raise asyncio.IncompleteReadError(b"", None)
        self._remaining -= len(part)
        if self._remaining == 0 and await reader.readuntil(b"\n") not in (b"\r\n", b"\n"):
            raise RemoteProtocolError("a malformed chunked body (no line end after a chunk)")
        return part


class _Deflate:
    """`deflate` as servers send it: a zlib stream, or (some servers) raw deflate data."""

    def __init__(self) -> None:
        self._first = True
        self._decompressor = zlib.decompressobj()

    def decompress(self, data: bytes) -> bytes:
        if self._first and data:
            self._first = False
            try:
                return self._decompressor.decompress(data)
            except zlib.error:
                self._decompressor = zlib.decompressobj(-zlib.MAX_WBITS)
        return self._decompressor.decompress(data)

    def flush(self) -> bytes:
        return self._decompressor.flush()


class Sent:
    """A request `Pool.send_now` wrote; its answer is still to be read."""

    __slots__ = ("connection",)

    def __init__(self, connection: _Connection) -> None:
        self.connection = connection


class Pool:
    """Keep-alive connections to one http:// origin; `request` sends one request on an idle one (or a new
    one). Every coroutine runs on one event loop."""

    def __init__(self, host: str, port: int, *, connect_timeout: float = 30.0) -> None:
        self._host = host
        self._port = port
        self._connect_timeout = connect_timeout
        self._idle: list[_Connection] = []
        self._busy: set[_Connection] = set()
        self._closed = False

    async def request(self, method: str, target: str, headers: bytes, body: bytes = b"", *,
                      sent: Sent | None = None) -> Response:
        """Send `method target` with `headers` (each `Name: value\\r\\n`, Host among them; Content-Length is
        added) and `body`, unless `send_now` sent them already (`sent`); the answer once its head came, its
        body not read yet."""
        if sent is None:
            connection = await self._connection()
            self._busy.add(connection)
            self._write(connection, method, target, headers, body)
        else:
            connection = sent.connection
        try:
            await connection.writer.drain()
            response = await read_response(self, connection, head_only=method == "HEAD")
        except BaseException:
            self._busy.discard(connection)
            connection.close()
            raise
        return response

    def send_now(self, method: str, target: str, headers: bytes, body: bytes = b"") -> Sent | None:
        """Write the request at once (no turn of the loop before it leaves) on an idle connection; None, with
        nothing written, when no connection is idle. Its answer is then read by `request(..., sent=...)`."""
        while self._idle and not self._closed:
            connection = self._idle.pop()
            if connection.usable():
                self._busy.add(connection)
                self._write(connection, method, target, headers, body)
                return Sent(connection)
            connection.close()
        return None

    @staticmethod
    def _write(connection: _Connection, method: str, target: str, headers: bytes, body: bytes) -> None:
        connection.writer.write(_request_bytes(method, target, headers, body))

    async def adopt(self, sock: socket.socket, received: bytes) -> Response:
        """The answer to a request written on `sock` from another thread, read here (on the loop) from what that
        thread `received` of it already and the rest; the connection then serves this pool."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_HEAD, loop=loop)
        if received:
            reader.feed_data(received)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        try:
            transport, _ = await loop.create_connection(lambda: protocol, sock=sock)
        except OSError as exc:
            sock.close()
            raise ReadError(_os_error(exc)) from None
        connection = _Connection(reader, asyncio.StreamWriter(transport, protocol, reader, loop))
        self._busy.add(connection)
        try:
            return await read_response(self, connection)
        except BaseException:
            self._busy.discard(connection)
            connection.close()
            raise

    async def aclose(self) -> None:
        """Close every connection (an answer still being read fails)."""
        self._closed = True
        for connection in [*self._idle, *self._busy]:
            connection.close()
        self._idle.clear()
        self._busy.clear()

    async def _connection(self) -> _Connection:
        if self._closed:
            raise ConnectError("the client is closed")
        while self._idle:
            connection = self._idle.pop()
            if connection.usable():
                return connection
            connection.close()
        try:
            async with asyncio.timeout(self._connect_timeout):
                reader, writer = await asyncio.open_connection(self._host, self._port, limit=MAX_HEAD)
        except TimeoutError:
            raise ConnectError(f"no connection within {self._connect_timeout:g} s") from None
        except OSError as exc:
            raise ConnectError(_os_error(exc)) from None
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # a request goes in one write, but an answer's acknowledgement must not wait either
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(reader, writer)

    def _give_back(self, connection: _Connection) -> None:
        """An answer read whole: its connection waits for the next request (which polls it first: `usable`)."""
        self._busy.discard(connection)
        if self._closed or connection.seen_closed():
            connection.close()
        else:
            self._idle.append(connection)


async def read_response(pool: Pool, connection: _Connection, head_only: bool = False) -> Response:
    """Read an answer's head from `connection` (informational 1xx answers skipped)."""
    while True:
        status, reason, headers, keep = await _read_head(connection.reader)
        if status >= 200 or status == 101:
            break
    no_body = head_only or status in (204, 304) or status < 200
    return Response(pool, connection, status, reason, headers, keep, no_body)


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, str, list[tuple[str, str]], bool]:
    lines: list[str] = []
    size = 0
    try:
        while True:
            line = await reader.readuntil(b"\n")
            size += len(line)
            if size > MAX_HEAD:
                raise RemoteProtocolError(f"the server's response head exceeds {MAX_HEAD} bytes")
            if line in (b"\r\n", b"\n"):
                if lines:
                    break
                continue  # empty lines before a status line are tolerated (RFC 9112 2.2)
            lines.append(line.rstrip(b"\r\n").decode("latin-1"))
    except asyncio.IncompleteReadError as exc:
        if not lines and not exc.partial:
            raise RemoteProtocolError("the server closed the connection without answering") from None
        raise RemoteProtocolError("the server closed the connection mid-head") from None
    except asyncio.LimitOverrunError:
        raise RemoteProtocolError(f"the server's response head exceeds {MAX_HEAD} bytes") from None
    except OSError as exc:
        raise ReadError(_os_error(exc)) from None
    return _parse_head(lines)


def _parse_head(lines: list[str]) -> tuple[int, str, list[tuple[str, str]], bool]:
    """A response head's lines (no line ends): its status, reason, headers (lowercase names) and whether the
    connection stays open after it."""
    match = _STATUS.fullmatch(lines[0])
    if match is None:
        raise RemoteProtocolError("the server sent a malformed status line")
    try:
        headers = parse_fields(lines[1:])
    except HeadError:
        raise RemoteProtocolError("the server sent a malformed header line") from None
    return int(match.group(2)), match.group(3) or "", headers, keeps_alive(match.group(1), headers)


def _request_bytes(method: str, target: str, headers: bytes, body: bytes) -> bytes:
    """A request as it goes on the wire, in one piece (Content-Length added)."""
    head = f"{method} {target} HTTP/1.1\r\n".encode("ascii") + headers
    if body or method in ("POST", "PUT", "PATCH"):
        head += b"content-length: %d\r\n" % len(body)
    return head + b"\r\n" + body


def _os_error(exc: OSError) -> str:
    """The error in words, without the address (asyncio's connect errors name it)."""
    if isinstance(exc, socket.gaierror) or not exc.errno or exc.errno < 0:
        return exc.strerror or type(exc).__name__
    return os.strerror(exc.errno)


# Characters a request target holds as they are (RFC 3986: unreserved, sub-delims, ":", "@", "/", "?", and
# "%" of an escape already made); any other is percent-encoded, as httpx sends them.
_TARGET_SAFE = "-._~!$&'()*+,;=:@/?%"


class _CookieAnswer:
    """An answer's headers as the standard library's cookie jar reads a response's."""

    __slots__ = ("_message",)

    def __init__(self, headers: list[tuple[str, str]]) -> None:
        self._message = email.message.Message()
        for name, value in headers:
            if name == "set-cookie":
                self._message[name] = value

    def info(self) -> email.message.Message:
        return self._message


class BlockingExchange:
    """A request written on a blocking keep-alive connection by a thread other than the loop's (a router's
    worker), which reads a plain JSON answer itself; any other answer, and any failure, is read on the loop by
    the same code as every answer (`resume`: the connection, and what came of the answer, go to the pool)."""

    __slots__ = ("_client", "_lock", "_reading", "_received", "_sock", "abandoned")

    def __init__(self, client: LeanClient, sock: socket.socket) -> None:
        self._client = client
        self._sock: socket.socket | None = sock
        self._received = b""
        self._lock = threading.Lock()  # the socket is closed once, and shut down only while it is being read
        self._reading = False
        self.abandoned = False

    def read_json(self) -> bytes | None:
        """The body of a 200 application/json answer (Content-Length, no coding, kept alive); else None."""
        with self._lock:
            sock = self._sock
            if sock is None or self.abandoned:
                return None
            self._reading = True
        try:
            body = self._read(sock)
        finally:
            with self._lock:
                self._reading = False
        if self.abandoned:
            self._drop()
            return None
        return body

    def _read(self, sock: socket.socket) -> bytes | None:
        received = b""
        try:
            while (end := received.find(b"\r\n\r\n")) < 0:
                if len(received) > MAX_HEAD:
                    break
                part = sock.recv(_READ)
                if not part:
                    break
                received += part
            if end < 0:  # the head is too large, or the connection ended: the loop says which
                return self._leave(received)
            lines = received[:end].decode("latin-1").split("\r\n")
            if not lines[0] or any("\n" in line or "\r" in line for line in lines):  # LF line ends: the loop's
                return self._leave(received)
            status, _, headers, keep = _parse_head(lines)
            named = dict(headers)
            length = named.get("content-length", "")
            if (status != 200 or not keep or len(named) != len(headers) or not length.isdigit() or len(length) > 18
                    or named.get("content-type", "").partition(";")[0].strip().lower() != "application/json"
                    or "transfer-encoding" in named or named.get("content-encoding", "identity") != "identity"):
                return self._leave(received)
            size = end + 4 + int(length)
            while len(received) < size:
                part = sock.recv(max(_READ, size - len(received)))
                if not part:
                    return self._leave(received)
                received += part
        except (RemoteProtocolError, OSError):
            return self._leave(received)
        if "set-cookie" in named:
            self._client._keep_cookies(headers)
        if len(received) > size:  # more came than the answer (nothing was asked): the connection is not used again
            self._drop()
        else:
            with self._lock:
                self._sock = None
            self._client._forget_blocking(self)
            self._client._give_back_blocking(sock)
        return received[end + 4:size]

    def resume(self) -> Awaitable[Answer]:
        """On the loop: the answer `read_json` left, read by the pool."""
        return Later(self._resume)

    async def _resume(self) -> Response:
        with self._lock:
            sock, self._sock = self._sock, None
        self._client._forget_blocking(self)
        if sock is None:
            raise ReadError("the response was closed")
        return await self._client._adopted(sock, self._received)

    def abandon(self) -> None:
        """The answer is not wanted: a read waiting for it ends; the connection is closed."""
        self.abandoned = True
        with self._lock:
            sock = self._sock
            if sock is None:
                return
            if self._reading:  # the reading thread closes it
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
        self._drop()

    def _leave(self, received: bytes) -> bytes | None:
        """None: the answer is left for `resume`, with what came of it."""
        self._received = received
        return None

    def _drop(self) -> None:
        with self._lock:
            sock, self._sock = self._sock, None
        self._client._forget_blocking(self)
        if sock is not None:
            sock.close()


class LeanClient(HttpClient):
    """Requests to one http:// URL (without a user part) over a `Pool`: with the headers httpx sends (Host,
    Accept, Accept-Encoding: the codings read here, Connection, the `user_agent` given), and the cookies the
    server set."""

    def __init__(self, url: str, *, connect_timeout: float = 30.0, user_agent: str | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.username or parts.password:
            raise ValueError("the lean client reaches http:// URLs without a user part")
        host = parts.hostname.encode("idna").decode("ascii")
        port = parts.port or 80
        shown = f"[{host}]" if ":" in host else host
        self._url = url
        self._target = quote((parts.path or "/") + (f"?{parts.query}" if parts.query else ""), safe=_TARGET_SAFE)
        self._defaults = {"host": shown if port == 80 else f"{shown}:{port}", "accept": "*/*",
                          "accept-encoding": "gzip, deflate", "connection": "keep-alive"}
        if user_agent:
            self._defaults["user-agent"] = user_agent
        self._pool = Pool(host, port, connect_timeout=connect_timeout)
        self._address = (host, port)
        self._connect_timeout = connect_timeout
        self._cookies = http.cookiejar.CookieJar()
        self._head: tuple[Any, bytes] = (None, b"")  # (what the header lines depend on, their bytes)
        # the blocking connections of `exchange` (other threads than the loop's): idle ones, and those in use
        self._blocking_lock = threading.Lock()
        self._blocking_idle: list[socket.socket] = []
        self._exchanges: set[BlockingExchange] = set()
        self._closed = False

    def send(self, method: str, headers: Mapping[str, str], body: bytes = b"", *,
             timeout: float | None = None) -> Awaitable[Answer]:
        """On an idle connection the request is written at the call; else when the answer is awaited."""
        head = self._header_lines(headers)
        sent = self._pool.send_now(method, self._target, head, body) if timeout is None else None
        return Later(lambda: self._answer(method, head, body, timeout, sent))

    def exchange(self, method: str, headers: Mapping[str, str], body: bytes = b"") -> Exchange | None:
        """On an idle blocking connection, or a new one; None (nothing sent) when none could be had or the
        request could not be written on it."""
        data = _request_bytes(method, self._target, self._header_lines(headers), body)
        with self._blocking_lock:
            if self._closed:
                return None
            idle = self._blocking_idle
            sock = None
            while idle:
                candidate = idle.pop()
                if _idle_and_open(candidate):
                    sock = candidate
                    break
                candidate.close()
        if sock is None:
            try:
                sock = socket.create_connection(self._address, timeout=self._connect_timeout)
            except OSError:
                return None  # `send` connects again and names the failure as the loop's requests do
            sock.settimeout(None)
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.sendall(data)
        except OSError:  # the server had closed it (nothing of the request was read): sent again by `send`
            sock.close()
            return None
        exchange = BlockingExchange(self, sock)
        with self._blocking_lock:
            if self._closed:
                exchange.abandon()
            self._exchanges.add(exchange)
        return exchange

    async def aclose(self) -> None:
        with self._blocking_lock:
            self._closed = True
            idle, self._blocking_idle = self._blocking_idle, []
            exchanges = list(self._exchanges)
        for sock in idle:
            sock.close()
        for exchange in exchanges:
            exchange.abandon()
        await self._pool.aclose()

    def _give_back_blocking(self, sock: socket.socket) -> None:
        with self._blocking_lock:
            if not self._closed:
                self._blocking_idle.append(sock)
                return
        sock.close()

    def _forget_blocking(self, exchange: BlockingExchange) -> None:
        with self._blocking_lock:
            self._exchanges.discard(exchange)

    async def _adopted(self, sock: socket.socket, received: bytes) -> Response:
        return self._kept(await self._pool.adopt(sock, received))

    def _kept(self, response: Response) -> Response:
        """`response`, its cookies kept."""
        if "set-cookie" in response.headers:
            self._keep_cookies(response.raw_headers)
        return response

    def _keep_cookies(self, headers: list[tuple[str, str]]) -> None:
        self._cookies.extract_cookies(_CookieAnswer(headers),  # type: ignore[arg-type]
                                      urllib.request.Request(self._url))

    async def _answer(self, method: str, head: bytes, body: bytes, timeout: float | None,
                      sent: Sent | None) -> Response:
        if timeout is None:
            response = await self._pool.request(method, self._target, head, body, sent=sent)
        else:
            try:
                async with asyncio.timeout(timeout):
                    response = await self._pool.request(method, self._target, head, body, sent=sent)
            except TimeoutError:
                raise ReadTimeout(f"no answer within {timeout:g} s") from None
        return self._kept(response)

    def _header_lines(self, headers: Mapping[str, str]) -> bytes:
        """The request's header lines, each `name: value\\r\\n`; made again only when they change."""
        merged = {**self._defaults, **headers, "accept-encoding": self._defaults["accept-encoding"]}
        if len(self._cookies) and "cookie" not in headers:  # a Cookie header given wins, as with httpx
            request = urllib.request.Request(self._url)
            self._cookies.add_cookie_header(request)
            cookie = request.get_header("Cookie")
            if cookie:
                merged["cookie"] = cookie
        key = tuple(merged.items())
        if self._head[0] != key:
            text = "".join(f"{name}: {value}\r\n" for name, value in merged.items())
            self._head = (key, text.encode("utf-8"))
        return self._head[1]
