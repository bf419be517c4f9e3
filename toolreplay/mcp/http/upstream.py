"""The MCP proxy's upstream over Streamable HTTP: a remote MCP server as a `ServerEnd`.

The MCP specification's Streamable HTTP transport (revisions 2025-03-26 to 2025-11-25): every message
the client sends is POSTed to one URL; the server answers a request with one JSON body or with an SSE
stream of messages that ends with the answer; notifications and responses get 202. The session id the
server gives at `initialize` (`Mcp-Session-Id`) and the negotiated protocol version
(`MCP-Protocol-Version`) go with every later request; a GET opens the stream of the server's own
messages (405: it has none); a dropped stream whose events had ids is resumed with `Last-Event-ID`;
DELETE ends the session.

The router sees what it sees with a stdio server: one compact JSON-RPC message a line. A request whose
answer will never come (the connection dropped mid-answer, an HTTP error, a body that is not JSON, a
session the server no longer knows) is answered by the proxy with `mcp_wire.no_answer_error`, which the
router turns into a failed read, or a write of unknown outcome.

Every request goes through one `client.HttpClient`, which `auto.open_client` chooses when the session
starts: the lean client of `http11` for an http:// server reached without a proxy, httpx (the extra
`toolreplay[http]`) for the rest. Its asyncio loop runs on a thread of its own (or on the `--listen`
listener's loop), so `send` only enqueues. Header values (credentials) are sent, never shown: no message
of this module holds a header value, nor the URL's query or user part.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import re
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from toolreplay.errors import UsageError
from toolreplay.mcp.http.auto import open_client
from toolreplay.mcp.http.client import Answer, Exchange, HttpClient, HttpFailure
from toolreplay.mcp.transport import UNPARSED, LineHandler, MessageHandler, PendingAnswer
from toolreplay.mcp.wire import dump_message, id_key, no_answer_error, parse_message

__all__ = ["HTTP_EXTRA", "MAX_EVENT", "HttpServer", "SseEvent", "SseParser", "SseTooLarge", "answered_ids",
           "compact_line", "is_http_url", "lost_answers", "parse_header"]

HTTP_EXTRA = "pip install '.[http]' in a ToolReplay checkout"

# Headers the transport itself sets: a --header may not replace them.
_OWN_HEADERS = frozenset({"accept", "content-type", "content-length", "host", "mcp-session-id",
                          "mcp-protocol-version", "last-event-id", "transfer-encoding", "connection"})
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

_T = TypeVar("_T")

RESUME_ATTEMPTS = 3  # reconnections of a dropped stream in a row, before its requests are given up
_RETRY_DEFAULT, _RETRY_MOST = 1.0, 5.0  # seconds between them: the server's `retry:`, at most _RETRY_MOST
# How long the first message after `notifications/initialized` waits for the server's own stream (GET) to be
# open: a server sends a request of its own (sampling, elicitation, roots) on that stream, and drops it when
# the stream is not open yet (the TypeScript SDK does), so a call POSTed before it would wait for ever.
STREAM_OPEN_WAIT = 5.0
MAX_EVENT = 16 * 1024 * 1024  # characters of one server-sent event (its data and any line not yet ended)
AUTH_STATUSES = (401, 403)  # the server asks the client to authorize (or for more scope): passed on as HTTP
_CHALLENGES_KEPT = 1024
_DRAIN_SECONDS = 5.0  # how long the rest of an answered stream is read before its connection is dropped


def is_http_url(argument: str) -> bool:
    """Whether a server argument names a remote server (http:// or https://) rather than a command."""
    return argument.startswith(("http://", "https://"))


def parse_header(text: str, environ: Mapping[str, str], option: str = "--header") -> tuple[str, str]:
    """`Name: value` as given to --header; `${VAR}` in the value is read from `environ`. The errors (which
    name `option`) never show the value: it may hold a credential."""
    name, colon, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not colon or not _TOKEN.fullmatch(name):
        raise UsageError(f"{option} needs \"Name: value\" (a header name, a colon, the value)")
    if name.lower() in _OWN_HEADERS:
        raise UsageError(f"{option} {name}: the proxy sets this header itself")

    def expand(match: re.Match[str]) -> str:
        variable = match.group(1)
        if variable not in environ:
            raise UsageError(f"{option} {name}: the environment variable {variable} is not set")
        return environ[variable]

    value = _ENV_REFERENCE.sub(expand, value)
    if any(char in value for char in "\r\n\0"):
        raise UsageError(f"{option} {name}: the value holds a line break or NUL")
    return name, value


def _shown(url: str) -> str:
    """The URL as messages show it: scheme, host, port and path; no user part, query or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


# -- the pieces without network: SSE, lines, answers ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched server-sent event: its data (lines joined by LF), type, and the last event id."""

    data: str
    event: str
    id: str | None


class SseTooLarge(ValueError):
    """An event (or a line) over MAX_EVENT characters: an endless or hostile stream."""


class SseParser:
    """The event-stream format of the HTML standard (server-sent events), fed text as it arrives; an event
    over `limit` characters is SseTooLarge (what was held of it is dropped)."""

    def __init__(self, limit: int = MAX_EVENT) -> None:
        self._limit = limit
        self._size = 0  # characters of the event being read
        self._pending = ""
        self._data: list[str] = []
        self._event = ""
        self.last_id: str | None = None  # the last event id seen (kept across events, as the standard says)
        self.retry: float | None = None  # the server's reconnection time, in seconds

    def feed(self, text: str) -> list[SseEvent]:
        """The events completed by `text` (lines end with CRLF, LF or CR)."""
        text = self._pending + text
        lines = re.split(r"\r\n|\r|\n", text)
        self._pending = lines.pop()
        if len(self._pending) + self._size > self._limit:
            self._pending, self._data, self._event, self._size = "", [], "", 0
            raise SseTooLarge(f"an event over {self._limit} characters")
        if self._pending.endswith("\r"):  # a CR whose LF may come in the next chunk
            lines.append(self._pending[:-1])
            self._pending = ""
        events = []
        for line in lines:
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._size += len(value) + 1
            if self._size > self._limit:
                self._data, self._event, self._size = [], "", 0
                raise SseTooLarge(f"an event over {self._limit} characters")
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id" and "\0" not in value:
            self.last_id = value
        elif field == "retry" and value.isdigit():
            self.retry = int(value) / 1000
        return None

    def _dispatch(self) -> SseEvent | None:
        data, event = self._data, self._event
        self._data, self._event, self._size = [], "", 0
        if not data:  # an event without data (a priming event that only sets the id) is not dispatched
            return None
        return SseEvent("\n".join(data), event or "message", self.last_id)


def compact_line(data: bytes) -> bytes:
    """One JSON text as one LF-terminated line. A raw CR or LF in valid JSON can only be whitespace
    between tokens (never inside a string), so it becomes a space: the message is otherwise unchanged.
    ValueError when `data` is not JSON."""
    return _compact(data)[0]


def _compact(data: bytes) -> tuple[bytes, Any]:
    """`compact_line` and the message it holds."""
    message = parse_message(data)  # strict: a raw control character inside a string is not JSON
    if b"\n" in data or b"\r" in data:
        data = data.replace(b"\r", b" ").replace(b"\n", b" ")
    return data.strip() + b"\n", message


def answered_ids(message: Any) -> list[str]:
    """The ids (as `id_key`) a server's message answers: a response, an error, or a batch of them."""
    items = message if isinstance(message, list) else [message]
    return [id_key(item["id"]) for item in items
            if isinstance(item, dict) and "id" in item and "method" not in item]


def request_ids(message: Any) -> dict[str, Any]:
    """The requests in a client's message (one or a batch): `id_key` -> the id as it came."""
    items = message if isinstance(message, list) else [message]
    return {id_key(item["id"]): item["id"] for item in items
            if isinstance(item, dict) and isinstance(item.get("method"), str) and "id" in item}


def lost_answers(waiting: Mapping[str, Any], reason: str, *, refused: bool = False) -> list[bytes]:
    """The proxy's error answers, one line each, for the requests still waiting (`id_key` -> id); `refused`: the
    server refused them before running them (a 401 or 403)."""
    return [compact_line(dump_message(no_answer_error(message_id, reason, refused=refused)))
            for message_id in waiting.values()]


class _Direct:
    """A request the router's worker POSTed itself (`HttpServer.send_call`), whose answer it reads: a plain JSON
    one goes to `answered` from that thread, any other to `elsewhere` (which has the loop read it)."""

    __slots__ = ("_answered", "_elsewhere", "_exchange", "_lock", "_state")

    def __init__(self, exchange: Exchange, answered: Callable[[bytes], None], elsewhere: Callable[[], None]) -> None:
        self._exchange, self._answered, self._elsewhere = exchange, answered, elsewhere
        self._lock = threading.Lock()
        self._state = "reading"  # then "abandoned", or "loop" once the loop reads the answer

    def complete(self) -> None:
        """A plain JSON answer is handed on from this thread; any other is read on the loop, as before."""
        body = self._exchange.read_json()
        with self._lock:
            if self._state == "abandoned":
                return
            if body is None:
                self._state = "loop"
        if body is None:
            self._elsewhere()
        else:
            self._answered(body)

    def abandon(self) -> None:
        """Nothing waits for the answer: unless the loop reads it already, it is not read (its connection is
        closed)."""
        with self._lock:
            if self._state != "reading":
                return
            self._state = "abandoned"
        self._exchange.abandon()


def _status_text(response: Answer) -> str:
    phrase = response.reason_phrase
    return f"HTTP {response.status_code}" + (f" {phrase}" if phrase else "")


# -- the server end ---------------------------------------------------------------------------------------


class _SessionExpired(Exception):
    """The server answered 404 to a request that carried its session id."""


class _Post:
    """One message on its way: its requests still waiting for an answer (`id_key` -> id)."""

    def __init__(self, body: bytes, waiting: dict[str, Any]) -> None:
        self.body = body
        self.waiting = waiting
        self.abandoned = False  # nothing waits for its answer (the call was cancelled): none is made up for it


class _Soon:
    """A request `HttpServer.send_soon` POSTed from the loop; the task of the call it belongs to reads its answer
    (`answer`), and `abandon` (from any thread) stops that reading: its connection is closed, and nothing is
    handed on for it (as `_Direct.abandon`)."""

    __slots__ = ("_loop", "_read", "_thread", "post", "task")

    def __init__(self, read: Callable[[_Soon], Awaitable[None]], post: _Post, loop: asyncio.AbstractEventLoop) -> None:
        self._read, self.post, self._loop = read, post, loop
        self._thread = threading.get_ident()  # the loop's
        self.task: asyncio.Task[Any] | None = None  # the task reading the answer, while it reads it

    async def answer(self) -> None:
        """Read the answer and hand it on (the end's `on_line`), as every answer is."""
        await self._read(self)

    def abandon(self) -> None:
        """From any thread: nothing waits for the answer any more."""
        if threading.get_ident() == self._thread:
            self._abandon()
            return
        try:
            self._loop.call_soon_threadsafe(self._abandon)
        except RuntimeError:  # the loop is closed: nothing reads the answer
            pass

    def _abandon(self) -> None:
        self.post.abandoned = True
        if self.task is not None:
            self.task.cancel()


class HttpServer:
    """A remote MCP server over Streamable HTTP, behind the `ServerEnd` protocol."""

    def __init__(self, url: str, *, headers: Iterable[tuple[str, str]] = (),
                 say: Callable[[str], None] | None = None, connect_timeout: float = 30.0,
                 loop: asyncio.AbstractEventLoop | None = None, client_authorization: bool = False) -> None:
        """`headers` go with every request (say `Authorization`); `say` receives the end's own messages
        (a stream given up, the session expired), which never hold a header value. `loop`: an event loop
        running on another thread (the `--listen` listener's) to run on rather than a thread of its own, so
        that each message crosses one thread fewer; the end's callbacks then run on that loop's thread.
        `client_authorization`: the `Authorization` header is the client's (`--listen` in front of this URL), and
        `authorize` replaces it when the client sends another (a refreshed token). Without httpx, a UsageError
        that names the extra."""
        if not is_http_url(url):
            raise UsageError(f"not an http:// or https:// URL: {_shown(url)}")
        try:
            import httpx  # noqa: F401  (imported here: the stdio proxy needs nothing beyond the standard library)
        except ImportError:
            raise UsageError(f"a server URL needs the http extra: {HTTP_EXTRA}") from None
        self._url = url
        self._headers = list(headers)
        self._say = say or (lambda text: None)
        self._connect_timeout = connect_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._shared = loop
        self._serving: concurrent.futures.Future[None] | None = None  # on the shared loop: the session's task
        self._loop_thread: int | None = None  # the thread running the shared loop, once the session's task runs
        self._thread: threading.Thread | None = None
        self._queue: asyncio.Queue[bytes | None] | None = None
        self._on_line: MessageHandler = lambda line, message=UNPARSED, /: None
        self._on_ended: Callable[[str], None] = lambda reason: None
        self._ended = threading.Event()
        self._closed = False
        self._failed = False
        self._session_id: str | None = None
        self._version: str | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._listening = False
        self._stream_opened: asyncio.Future[None] | None = None  # done once the GET's head came (or it failed)
        self._initializing: asyncio.Task[None] | None = None
        self._end_reason = "server closed the session"
        self._client: HttpClient | None = None  # made on the loop when the session starts
        self._client_authorization = client_authorization
        # request id key -> (status, WWW-Authenticate) of a 401 or 403 that answered it: `challenge` hands it to
        # the listener, which answers the client's HTTP request with them (the OAuth flow runs client to server)
        self._challenges: OrderedDict[str, tuple[int, str]] = OrderedDict()
        # lines queued for the loop and not yet dispatched (a notification: not yet POSTed): while any is, a
        # request is not sent from another thread (`send_call`), so the server sees the messages in order
        self._order = threading.Lock()
        self._queued = 0

    def challenge(self, request_id: Any) -> tuple[int, str] | None:
        """The 401 or 403 (status, WWW-Authenticate) the server answered the request with, once; else None."""
        return self._challenges.pop(id_key(request_id), None)

    def authorize(self, value: str) -> None:
        """The client's `Authorization` for the requests from now on (only when the header is the client's)."""
        if self._client_authorization:
            self._headers = [*((name, text) for name, text in self._headers if name.lower() != "authorization"),
                             ("Authorization", value)]

    # -- ServerEnd --------------------------------------------------------------------------------------

    def start(self, on_line: LineHandler, on_ended: Callable[[str], None]) -> None:
        """Start the loop thread (or the session's task on the shared loop); nothing is sent before the
        client's first message."""
        self.start_parsed(lambda line, message=UNPARSED, /: on_line(line), on_ended)

    def start_parsed(self, on_message: MessageHandler, on_ended: Callable[[str], None]) -> None:
        """`start`, each answer handed on with its message when it was parsed already (the router parses it
        once, not twice)."""
        self._on_line, self._on_ended = on_message, on_ended
        ready = threading.Event()
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if self._shared is not None and running is not self._shared:  # (called on it, it would wait for itself)
            self._loop = self._shared
            self._serving = asyncio.run_coroutine_threadsafe(self._serve(ready, shared=True), self._shared)
            self._serving.add_done_callback(lambda future: ready.set())  # cancelled before it ran
        else:
            self._thread = threading.Thread(target=self._run, args=(ready,), name="mcp-http-upstream", daemon=True)
            self._thread.start()
        ready.wait()

    def send(self, data: bytes) -> None:
        """Queue each line to be POSTed; never waits for the network. OSError once the end is closed."""
        loop, queue = self._loop, self._queue
        if loop is None or queue is None or self._closed or self._ended.is_set():
            raise OSError("the connection to the server is closed")
        for line in data.split(b"\n"):  # only LF ends a message (a CR may be whitespace within one)
            if line.strip():
                with self._order:
                    self._queued += 1
                try:
                    loop.call_soon_threadsafe(queue.put_nowait, line)
                except RuntimeError:  # the loop stopped
                    with self._order:
                        self._queued -= 1
                    raise OSError("the connection to the server is closed") from None

    def send_call(self, data: bytes, message: Any) -> PendingAnswer | None:
        """POST one request from the calling thread (the router's worker, which waits for its answer) on a
        blocking connection of the lean client, when nothing sent before it is still on its way; that thread
        then reads a plain JSON answer itself, and any other (an event stream, an HTTP error, a failure) is read
        on the loop as every answer is. None: not sent (the client cannot; `send` sends it)."""
        sent = self._post_at_once(data, message, lambda client, headers, body: client.exchange("POST", headers, body))
        if sent is None:
            return None
        post, headers, exchange = sent
        if exchange is None:
            return None
        return _Direct(exchange, lambda body: self._answer_json(body, post, False),
                       lambda: self._read_later(post, headers, exchange))

    def _post_at_once(self, data: bytes, message: Any, send: Callable[[HttpClient, dict[str, str], bytes], _T]
                      ) -> tuple[_Post, dict[str, str], _T] | None:
        """What `send_call` and `send_soon` share: POST one request with `send` (by the client's `exchange` or
        `send`), in order, when nothing sent before it is still on its way (the session it opens, the stream it
        waits for, a request queued); the request, its headers and what `send` gave. None: not sent."""
        client = self._client
        if client is None or self._closed or self._ended.is_set() or b"\n" in data.rstrip(b"\n"):
            return None
        with self._order:
            initializing, opened = self._initializing, self._stream_opened
            if (self._queued or (initializing is not None and not initializing.done())
                    or (opened is not None and not opened.done())):
                return None  # what came before it goes first
            post = _Post(data.strip(), request_ids(message))
            if not post.waiting:
                return None
            headers = self._request_headers(post=True)
            return post, headers, send(client, headers, post.body)

    def call_loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop this end runs on when it is another's (the `--listen` listener's) and the calling thread runs
        it: `send_soon` may be called; else None (a loop thread of its own, or another thread)."""
        return self._shared if self._loop_thread == threading.get_ident() else None

    def send_soon(self, data: bytes, message: Any) -> _Soon | None:
        """On `call_loop`: POST one request at once (the lean client writes it on an idle connection before this
        returns), when nothing sent before it is still on its way; its answer is read, as every answer is, by
        the caller's task awaiting `_Soon.answer` (no task of its own: no turn of the loop between the answer
        and the call it belongs to). None: not sent (`send` sends it, in its turn)."""
        sent = self._post_at_once(data, message, lambda client, headers, body: client.send("POST", headers, body))
        if sent is None:
            return None
        post, headers, answer = sent
        assert self._loop is not None
        return _Soon(functools.partial(self._read_soon, early=(headers, answer)), post, self._loop)

    async def _read_soon(self, soon: _Soon, early: tuple[dict[str, str], Awaitable[Answer]]) -> None:
        """`_Soon.answer`: read by the calling task, which the session's end cancels as it does its own tasks."""
        task = asyncio.current_task()
        assert task is not None
        soon.task = task
        self._tasks.add(task)
        try:
            await self._guarded(soon.post, False, early)
        finally:
            soon.task = None
            self._tasks.discard(task)

    def close(self) -> int:
        """End the session (DELETE), stop the loop thread; 1 when the connection failed, else 0."""
        self._closed = True
        loop, thread, serving = self._loop, self._thread, self._serving
        if loop is not None and serving is not None and not serving.done():
            try:
                loop.call_soon_threadsafe(self._queue.put_nowait, None)  # type: ignore[union-attr]
            except RuntimeError:
                pass
            try:
                serving.result(timeout=15)
            except (Exception, concurrent.futures.CancelledError):  # noqa: BLE001  (said already, or the loop stopped)
                pass
        if loop is not None and thread is not None and thread.is_alive():
            try:
                loop.call_soon_threadsafe(self._queue.put_nowait, None)  # type: ignore[union-attr]
            except RuntimeError:
                pass
            thread.join(timeout=15)
        return 1 if self._failed else 0

    # -- the loop thread --------------------------------------------------------------------------------

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(ready))
        finally:
            ready.set()
            loop.close()
            self._end()

    async def _serve(self, ready: threading.Event, shared: bool = False) -> None:
        if shared:
            self._loop_thread = threading.get_ident()
        try:
            await self._main(ready)
        except Exception as exc:  # noqa: BLE001  (a bug or an OS failure: the session ends, with the reason)
            self._failed = True
            self._say(f"the HTTP connection failed: {type(exc).__name__}")
            self._end_reason = "server exited"
        finally:
            ready.set()
            if self._shared is not None:
                self._end()

    def _end(self, reason: str | None = None) -> None:
        if not self._ended.is_set():
            self._ended.set()
            self._on_ended(reason or self._end_reason)

    async def _main(self, ready: threading.Event) -> None:
        self._queue = asyncio.Queue()
        ready.set()
        self._client = open_client(self._url, connect_timeout=self._connect_timeout)
        try:
            while (line := await self._queue.get()) is not None and not self._ended.is_set():
                try:
                    await self._dispatch(line)
                finally:
                    with self._order:
                        self._queued -= 1
        finally:
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            try:
                await self._delete()
            finally:
                await self._client.aclose()

    async def _dispatch(self, line: bytes) -> None:
        """A request is POSTed on a task of its own (a long answer holds back nothing); a notification or
        a response is POSTed before the next message, so the server sees them in the order sent."""
        try:
            message = parse_message(line)
        except (ValueError, RecursionError):
            message = None
        post = _Post(line.strip(), request_ids(message))
        initialize = isinstance(message, dict) and message.get("method") == "initialize"
        if self._initializing is not None:  # what follows `initialize` needs the session it opens
            await asyncio.shield(self._initializing)
            self._initializing = None
        if self._stream_opened is not None:  # ... and what follows `initialized`, the server's own stream
            await asyncio.wait([self._stream_opened], timeout=STREAM_OPEN_WAIT)
            self._stream_opened = None
        if initialize:
            self._initializing = asyncio.get_running_loop().create_task(self._guarded(post, True))
            self._tasks.add(self._initializing)
            self._initializing.add_done_callback(self._tasks.discard)
            return
        if not post.waiting:
            await self._guarded(post, initialize)
            if isinstance(message, dict) and message.get("method") == "notifications/initialized":
                self._start_listening()
            return
        # sent now: the lean client writes it at once on an idle connection (its task reads the answer a
        # turn of the loop later)
        headers = self._request_headers(post=True)
        early = (headers, self._http.send("POST", headers, post.body))
        task = asyncio.get_running_loop().create_task(self._guarded(post, initialize, early))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guarded(self, post: _Post, initialize: bool,
                       early: tuple[dict[str, str], Awaitable[Answer]] | None = None) -> None:
        """POST one message (`early`: its headers and its answer to come, sent already); whatever goes wrong,
        each of its requests still gets an answer (unless nothing waits for it any more: `_Soon.abandon`)."""
        try:
            await self._post(post, initialize, early)
        except _SessionExpired:
            self._expire(post)
        except HttpFailure as exc:
            self._failed = True
            self._give_up(post, f"the connection to the server failed: {exc.describe()}")
        except asyncio.CancelledError:
            if not post.abandoned:
                self._give_up(post, "the proxy closed the connection before the server answered")
            raise
        except Exception as exc:  # noqa: BLE001  (a bug: the requests still get an answer, the reason is said)
            self._give_up(post, f"the proxy failed while it read the answer: {type(exc).__name__}")

    def _read_later(self, post: _Post, headers: dict[str, str], exchange: Exchange) -> None:
        """The answer to a request `send_call` sent that is not a plain JSON one: read on the loop (from what
        came of it) by the code that reads every answer."""
        def start() -> None:
            task = asyncio.get_running_loop().create_task(self._guarded(post, False, (headers, exchange.resume())))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        if not self._closed:  # (closing, its connection was closed with the client's: as one the loop was reading)
            try:
                assert self._loop is not None
                self._loop.call_soon_threadsafe(start)
                return
            except RuntimeError:  # the loop stopped: the session is over
                pass
        exchange.abandon()
        self._give_up(post, "the proxy closed the connection before the server answered")

    @property
    def _http(self) -> HttpClient:
        assert self._client is not None, "the session has not started"
        return self._client

    async def _post(self, post: _Post, initialize: bool,
                    early: tuple[dict[str, str], Awaitable[Answer]] | None = None) -> None:
        if early is None:
            headers = self._request_headers(post=True, initialize=initialize)
            early = (headers, self._http.send("POST", headers, post.body))
        headers, answer = early
        sent_session = "mcp-session-id" in headers
        response = await answer
        try:
            status = response.status_code
            if status == 404 and sent_session:
                raise _SessionExpired()
            if status >= 300:
                await self._error_status(response, post)
                return
            if initialize:
                self._session_id = response.headers.get("mcp-session-id") or None
            if not post.waiting:  # a notification or a response: 202 Accepted (any 2xx will do)
                return
            kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
            if kind == "application/json":
                body = await response.aread()
                await response.aclose()  # first: handing the answer on wakes the router's worker
                self._answer_json(body, post, initialize)
            elif kind == "text/event-stream":
                await self._read_stream(response, post, initialize)
            elif status == 202:
                self._give_up(post, "the server accepted the request without answering it (HTTP 202)")
            else:
                self._give_up(post, f"the server answered with content type {kind or 'none'}, not JSON nor an "
                                    "event stream")
        finally:
            await response.aclose()

    async def _error_status(self, response: Answer, post: _Post) -> None:
        """An HTTP error: the JSON-RPC error in its body answers a lone request; else the proxy's own. A 401 or
        403 is kept for `challenge`, with its WWW-Authenticate, and its requests get the proxy's error saying the
        server refused them before running them (whatever its body says: the status says they did not run)."""
        if response.status_code in AUTH_STATUSES:
            self._keep_challenge(post, response)
        body = await response.aread()
        refused = response.status_code in AUTH_STATUSES  # it came before the server acted: nothing ran
        if post.waiting and len(post.waiting) == 1 and not refused:
            try:
                message = parse_message(body)
            except (ValueError, RecursionError, UnicodeDecodeError):
                message = None
            if isinstance(message, dict) and isinstance(message.get("error"), dict) and "result" not in message:
                message["id"] = next(iter(post.waiting.values()))  # a server may say `id: null`
                post.waiting.clear()
                self._on_line(dump_message(message))
                return
        if post.waiting:
            self._give_up(post, f"the server answered {_status_text(response)}", refused=refused)
        else:
            self._say(f"the server answered {_status_text(response)} to a notification or response")

    def _keep_challenge(self, post: _Post, response: Answer) -> None:
        """A 401 or 403 answered `post`'s requests: kept for `challenge`, with its WWW-Authenticate."""
        for key in post.waiting:
            self._challenges[key] = (response.status_code, response.headers.get("www-authenticate", ""))
        while len(self._challenges) > _CHALLENGES_KEPT:
            self._challenges.popitem(last=False)

    def _answer_json(self, body: bytes, post: _Post, initialize: bool) -> None:
        try:
            line, message = _compact(body)
        except (ValueError, RecursionError, UnicodeDecodeError):
            self._give_up(post, "the server's answer is not JSON")
            return
        self._deliver(line, post, initialize, message)
        self._give_up(post, "the server's answer holds no reply to the request")  # if any is left waiting

    def _deliver(self, line: bytes, post: _Post | None, initialize: bool = False, message: Any = None) -> None:
        """Hand one message to the router; note what it answers (and the version `initialize` agreed).
        `message` is the line's, when it was parsed already."""
        if message is None:
            message = parse_message(line)
        if post is not None:
            for key in answered_ids(message):
                post.waiting.pop(key, None)
        if initialize and isinstance(message, dict) and isinstance(message.get("result"), dict):
            version = message["result"].get("protocolVersion")
            self._version = version if isinstance(version, str) and _TOKEN.fullmatch(version) else None
        self._on_line(line, message)

    async def _read_stream(self, response: Answer | None, post: _Post, initialize: bool) -> None:
        """An answer as an event stream; resumed with Last-Event-ID when it drops after events with ids,
        RESUME_ATTEMPTS times at most."""
        parser = SseParser()
        attempts = 0
        failure = "the server ended the event stream before it answered"
        while True:
            if response is not None:
                try:
                    if await self._events(response, parser, post, initialize):
                        return
                    failure = "the server ended the event stream before it answered"
                except HttpFailure as exc:
                    failure = f"the event stream from the server failed: {exc.describe()}"
                except SseTooLarge as exc:
                    self._give_up(post, f"the server's event stream holds {exc}")
                    return
                except (ValueError, RecursionError) as exc:
                    self._give_up(post, f"the server's event stream holds a message that is not JSON ({exc})")
                    return
            if parser.last_id is None or attempts >= RESUME_ATTEMPTS:
                self._failed = True
                self._give_up(post, failure + (f" (resumed {attempts} times)" if attempts else ""))
                return
            attempts += 1
            await asyncio.sleep(min(parser.retry if parser.retry is not None else _RETRY_DEFAULT, _RETRY_MOST))
            response = await self._resume(parser.last_id)
            if response is not None and response.status_code in AUTH_STATUSES:  # trying again will not help
                self._keep_challenge(post, response)
                await response.aclose()
                self._give_up(post, f"the server answered {_status_text(response)} when its event stream was "
                                    "resumed")  # the requests reached the server: not refused before they ran
                return

    async def _events(self, response: Answer, parser: SseParser, post: _Post | None,
                      initialize: bool = False) -> bool:
        """Hand on the stream's events; True once every request of `post` is answered. The stream is then
        read to its end (the server ends it after the answer), for _DRAIN_SECONDS at most, so that its
        connection is kept for the next request rather than closed mid-body."""
        answered = False
        try:
            async with asyncio.timeout(None) as deadline:
                async for text in response.aiter_text():
                    for event in parser.feed(text):
                        if event.event != "message" or not event.data.strip():  # a priming event: only its id
                            continue
                        self._deliver(compact_line(event.data.encode("utf-8")), post, initialize)
                        if post is not None and not post.waiting and not answered:
                            answered = True
                            deadline.reschedule(asyncio.get_running_loop().time() + _DRAIN_SECONDS)
        except (TimeoutError, HttpFailure, ValueError, RecursionError):
            if not answered:
                raise
        finally:
            await response.aclose()
        return answered

    async def _resume(self, last_id: str) -> Answer | None:
        """GET the stream again from after `last_id`; None when the server would not (tried again later), its
        answer when that is a 401 or 403."""
        headers = self._request_headers(post=False)
        headers["last-event-id"] = last_id
        try:
            response = await self._http.send("GET", headers)
        except Exception:  # noqa: BLE001  (a failure of any kind: counted as a failed attempt)
            return None
        if response.status_code == 404 and self._session_id is not None:
            await response.aclose()
            raise _SessionExpired()
        if response.status_code in AUTH_STATUSES:  # the caller gives up (and keeps the challenge)
            return response
        if response.status_code != 200:
            await response.aclose()
            return None
        return response

    # -- the server's own stream (GET) --------------------------------------------------------------------

    def _start_listening(self) -> None:
        if self._listening or self._session_id is None:  # a server without sessions has no stream of its own
            return
        self._listening = True
        self._stream_opened = asyncio.get_running_loop().create_future()
        task = asyncio.get_running_loop().create_task(self._listen())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _listen(self) -> None:
        """The stream of the server's own messages, opened after `initialize`; 405 means it has none. A
        dropped stream is opened again (from its last event id), RESUME_ATTEMPTS failures in a row at most."""
        try:
            await self._listen_on()
        finally:
            self._stream_is_open()

    def _stream_is_open(self) -> None:
        """The GET's head came, or it never will: the messages held back for it go on."""
        if self._stream_opened is not None and not self._stream_opened.done():
            self._stream_opened.set_result(None)

    async def _listen_on(self) -> None:
        parser = SseParser()
        failures = 0
        while failures < RESUME_ATTEMPTS:
            if self._ended.is_set() or self._closed:  # the session expired meanwhile: no stream to open again
                return
            headers = self._request_headers(post=False)
            if parser.last_id is not None:
                headers["last-event-id"] = parser.last_id
            try:
                response = await self._http.send("GET", headers)
            except HttpFailure:
                failures += 1
                self._stream_is_open()
            else:
                self._stream_is_open()
                if self._ended.is_set() or self._closed:  # a POST's 404 ended the session while this GET went
                    await response.aclose()
                    return
                if response.status_code == 405:  # no stream of its own: nothing to listen to
                    await response.aclose()
                    return
                if response.status_code == 404 and "mcp-session-id" in headers:  # the session the GET named
                    await response.aclose()
                    self._expire(None)
                    return
                kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
                if response.status_code != 200 or kind != "text/event-stream":
                    await response.aclose()
                    self._say(f"the server refused its event stream ({_status_text(response)}); only answers "
                              "to requests will reach the client")
                    return
                delivered = parser.last_id
                try:
                    await self._events(response, parser, None)
                except HttpFailure:
                    pass
                except SseTooLarge as exc:
                    self._say(f"dropped {exc} from the server's event stream")
                except ValueError as exc:
                    self._say(f"dropped a message of the server's event stream that is not JSON ({exc})")
                failures = 0 if parser.last_id != delivered else failures + 1
            await asyncio.sleep(min(parser.retry if parser.retry is not None else _RETRY_DEFAULT, _RETRY_MOST))
        self._say(f"the server's event stream dropped {RESUME_ATTEMPTS} times in a row; its own messages "
                  "(notifications, requests not tied to a call) no longer reach the client")

    # -- endings ------------------------------------------------------------------------------------------

    def _give_up(self, post: _Post, reason: str, *, refused: bool = False) -> None:
        """Answer every request still waiting on `post` with the proxy's error, and say why once (`refused`: the
        server refused them before running them)."""
        if not post.waiting:
            return
        self._say(reason)
        lines = lost_answers(post.waiting, reason, refused=refused)
        post.waiting.clear()
        for line in lines:
            self._on_line(line)

    def _expire(self, post: _Post | None) -> None:
        """The server no longer knows the session: its requests fail, the session ends."""
        reason = "the server's session expired (HTTP 404 for its session id)"
        self._failed = True
        if post is not None:
            waiting = dict(post.waiting)
            post.waiting.clear()
            for line in lost_answers(waiting, reason):
                self._on_line(line)
        self._session_id = None
        self._say(reason)
        self._end("server exited")

    async def _delete(self) -> None:
        """End the session at the server (a 405 says it does not let clients end sessions)."""
        if self._session_id is None:
            return
        try:
            response = await self._http.send("DELETE", self._request_headers(post=False), timeout=5)
            await response.aclose()
        except Exception:  # noqa: BLE001  (the server is gone: nothing to end)
            return
        if response.status_code not in (200, 202, 204, 404, 405):
            self._say(f"the server did not end the session: {_status_text(response)}")

    def _request_headers(self, *, post: bool, initialize: bool = False) -> dict[str, str]:
        headers = {name.lower(): value for name, value in self._headers}
        headers["accept"] = "application/json, text/event-stream" if post else "text/event-stream"
        if post:
            headers["content-type"] = "application/json"
        if not initialize:
            if self._session_id is not None:
                headers["mcp-session-id"] = self._session_id
            if self._version is not None:
                headers["mcp-protocol-version"] = self._version
        return headers
