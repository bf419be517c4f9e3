"""Serving the guarded MCP server to clients over Streamable HTTP (MCP transport revisions 2025-03-26 to 2025-11-25).

`HttpListener` is an HTTP server (uvicorn, a raw ASGI application, over uvicorn's httptools protocol:
llhttp, Node.js's HTTP parser, in C; h11's when httptools is not installed) on one endpoint path, `/mcp`
by default. Every client
session gets its own `McpProxy` (router, gate and its own sealed `SessionRecorder`) and its own
upstream `ServerEnd` from a factory, which is handed the headers of the session's `initialize` request
(so an HTTP upstream can pass the client's `Authorization` on; a stdio server ignores them), and which
may run an HTTP upstream on the listener's own event loop (`HttpListener.loop`).
`HttpClient` is the session's `ClientEnd`: it turns each POST into a line for the router and takes the
router's lines back to where they belong:

- a response goes to the POST that carried its request id (one JSON body, or the end of that POST's
  SSE stream when the client accepts `text/event-stream`);
- a request or notification from the proxy or the server goes, while the call it belongs to is open,
  on that call's SSE stream (the proxy's own confirmation question, progress for a token the call
  gave); otherwise on the only open call's stream, else on the GET stream, else it waits for the GET
  stream (at most `_BACKLOG` messages, the oldest dropped first).

Sessions end by DELETE, when idle for `session_timeout` seconds, when their server exits, or when
the listener closes; each then closes its proxy and server and seals its record. The sessions of
one `upstream` share one intent file in the records folder (`intents_name`): a write cut short by a
crash is refused, as an outcome unknown, by every later session of that upstream. Every SSE event has an
id (`S-N`: the session's stream S, its event N); a client whose stream dropped resumes it with a GET
carrying `Last-Event-ID`, from what is kept of it (REPLAY_EVENTS events of a stream, RESUMABLE_STREAMS
streams of a session whose client went).

uvicorn and httptools are optional dependencies (the `http` extra): imported when a listener starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import io
import json
import os
import queue
import secrets
import socket
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TextIO, cast
from urllib.parse import urlsplit

from toolreplay.errors import UsageError
from toolreplay.format.canonical import canonical_bytes
from toolreplay.guard.assembly import Guard, GuardConfig, build_guard
from toolreplay.guard.hosts import is_loopback
from toolreplay.guard.intents import IntentFile
from toolreplay.guard.recorder import SessionRecorder, open_shared_intents
from toolreplay.mcp.confirm import question_text
from toolreplay.mcp.http.oauth import METADATA_PREFIX, MetadataError, fetch_metadata, metadata_path, rewrite_challenge
from toolreplay.mcp.pins import ToolPins
from toolreplay.mcp.proxy import McpProxy
from toolreplay.mcp.router import BATCH_VERSIONS
from toolreplay.mcp.transport import UNPARSED, Ended, LineHandler, MessageHandler, ServerEnd, say_to
from toolreplay.mcp.wire import INVALID_REQUEST, PARSE_ERROR, dump_message, id_key, key_id, parse_message
from toolreplay.policy.model import Policy

__all__ = ["DEFAULT_HEAD_TIMEOUT", "DEFAULT_MAX_BODY", "DEFAULT_MAX_CONNECTIONS", "DEFAULT_PATH",
           "DEFAULT_SESSION_TIMEOUT", "HttpClient", "HttpListener", "ServerFactory", "intents_name",
           "record_name"]

DEFAULT_PATH = "/mcp"
DEFAULT_MAX_BODY = 4 * 1024 * 1024
DEFAULT_SESSION_TIMEOUT = 1800.0
DEFAULT_HEAD_TIMEOUT = 10.0  # seconds from a connection (or the end of its last answer) to its request's full head
DEFAULT_MAX_CONNECTIONS = 100  # open connections served at once; one more is answered 503
KNOWN_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
INTERNAL_ERROR = -32603
_BACKLOG = 1000  # messages kept for a GET stream that is not open
REPLAY_EVENTS = 256  # events of a stream kept for a client resuming it with Last-Event-ID
RESUMABLE_STREAMS = 16  # streams of a session whose client went, kept to be resumed (the oldest goes first)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

# The headers of the session's initialize request (lowercase names) -> the session's upstream.
ServerFactory = Callable[[Mapping[str, str]], ServerEnd]



def record_name(session_id: str) -> str:
    """The file name of a session's record: the first 16 hex digits of the SHA-256 of its session id (the id
    itself lets its holder act in the session, so it stays off the disk)."""
    return hashlib.sha256(session_id.encode("ascii")).hexdigest()[:16] + ".jsonl"


def intents_name(upstream: Iterable[str]) -> str:
    """The file name of the intent file the sessions of one upstream share: `upstream-` and the first 16 hex
    digits of the SHA-256 of the upstream (the server command, or `[URL]`, or `["--servers", FILE]`) as
    canonical JSON, `.intents`."""
    return "upstream-" + hashlib.sha256(canonical_bytes(list(upstream))).hexdigest()[:16] + ".intents"


def _error_body(code: int, text: str, message_id: Any = None) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": message_id, "error": {"code": code, "message": text}},
                      separators=(",", ":")).encode("utf-8")


class _HttpError(Exception):
    """A request answered with an HTTP error status and a JSON-RPC error body (id null)."""

    def __init__(self, status: int, text: str, code: int = INVALID_REQUEST,
                 headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
        super().__init__(text)
        self.status, self.text, self.code, self.headers = status, text, code, list(headers)


class _Stream:
    """Where messages for one HTTP response go: a POST awaiting its responses, or the GET stream.

    Written from any thread (`put`), read by the response's task in the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sse: bool, ids: set[str] | None = None,
                 requests: list[dict[str, Any]] | None = None, number: int = 0) -> None:
        self.loop = loop
        self.number = number  # its event ids are `NUMBER-N`, N counting from 1
        self.sent = 0  # events written (or kept for a client that went)
        self.history: deque[tuple[int, bytes]] = deque(maxlen=REPLAY_EVENTS)  # the last events, to replay
        self.parked = False  # its client went mid-stream: what comes waits (bounded) for a resumption
        self.sse = sse
        self.ids = ids if ids is not None else set()  # ids still to be answered on it
        self.requests = requests or []  # the requests it carried (to find the call a question is about)
        self.items: deque[tuple[bytes | None, bool]] = deque()  # what came and is not written yet
        self.waiter: asyncio.Future[None] | None = None  # the response's task, waiting for an item
        self.open = True  # False once its client went or it ended
        self._staged: deque[tuple[bytes | None, bool]] = deque()  # put from other threads, not yet on the loop
        self._thread = threading.get_ident()  # the loop's (a stream is made on it)

    def put(self, data: bytes | None, last: bool = False) -> None:
        """One message for the response (`last`: nothing follows it), or None: the response ends."""
        self.stage(data, last)
        self.send_staged()

    def stage(self, data: bytes | None, last: bool = False) -> None:
        """`put`, but the loop learns of it only at `send_staged`: staged under a lock, the messages keep its
        order, and the system call that wakes the loop is made after the lock is let go (the loop, woken, would
        wait for it)."""
        self._staged.append((data, last or data is None))

    def send_staged(self) -> None:
        """Hand what was staged to the loop: at once on the loop's own thread (a call run in the loop), else by a
        wake-up of the loop (a system call)."""
        if threading.get_ident() == self._thread:
            self._take_staged()
        else:
            self.loop.call_soon_threadsafe(self._take_staged)

    def _take_staged(self) -> None:
        while self._staged:
            self._push(self._staged.popleft())

    def _push(self, item: tuple[bytes | None, bool]) -> None:
        if self.parked and len(self.items) >= REPLAY_EVENTS:
            self.items.popleft()  # bounded while nobody reads: the oldest is dropped
        self.items.append(item)
        self._wake()

    def event(self, data: bytes) -> bytes:
        """`data` as the stream's next SSE event, with its id, kept for a resumption."""
        self.sent += 1
        event = f"id: {self.number}-{self.sent}\nevent: message\ndata: ".encode() + data.rstrip(b"\n") + b"\n\n"
        self.history.append((self.sent, event))
        return event

    def _wake(self, *_: Any) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def get(self, gone: asyncio.Future[None]) -> tuple[bytes | None, bool] | None:
        """The next item, or None once `gone` is done (the client went) with nothing left to write; one future
        a wait, rather than a task and `asyncio.wait` (a tenth of the listener's time a call went to those)."""
        while not self.items:
            if gone.done():
                return None
            self.waiter = self.loop.create_future()
            gone.add_done_callback(self._wake)
            try:
                await self.waiter
            finally:
                gone.remove_done_callback(self._wake)
                self.waiter = None
        return self.items.popleft()


class HttpClient:
    """One HTTP session's client end: POSTed messages in, the router's lines out to the right response."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._on_line: MessageHandler | None = None
        self._on_ended: Ended | None = None
        self._started = threading.Event()
        self._feed: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._feeding = 0  # lines handed to the feeder and not yet through the router
        self._pending: dict[str, _Stream] = {}  # request id key -> the POST awaiting its response
        self._posts: list[_Stream] = []  # open SSE POST streams, oldest first
        self._progress: dict[str, _Stream] = {}  # progress tokens (as JSON) -> the POST that gave them
        self._asked: dict[str, _Stream] = {}  # the proxy's question ids -> the stream that carried them
        self._get: _Stream | None = None
        self._backlog: deque[bytes] = deque(maxlen=_BACKLOG)
        self._closed = False
        self.version: str | None = None  # the negotiated protocol version
        self._initialize_key: str | None = None

    # -- the ClientEnd protocol -------------------------------------------------------------------

    def start(self, on_line: LineHandler, on_ended: Ended) -> None:
        """One feeder thread hands the POSTed lines to `on_line` in the order they came."""
        self.start_parsed(lambda line, message=UNPARSED, /: on_line(line), on_ended)

    def start_parsed(self, on_message: MessageHandler, on_ended: Ended) -> None:
        """`start`; a lone tools/call handed on at once (`submit(direct=True)`) goes with its message, parsed
        already (the router parses it once, not twice)."""
        self._on_line, self._on_ended = on_message, on_ended
        threading.Thread(target=self._run_feed, name="mcp-http-feed", daemon=True).start()
        self._started.set()

    def send(self, data: bytes) -> None:
        """Route each line to its stream (never blocks; a message with nowhere to go is dropped)."""
        for line in data.splitlines():
            if line.strip():
                self._route(line)

    def send_parsed(self, data: bytes, message: Any) -> None:
        """`send` of one line whose message the router has parsed already (it is not parsed again)."""
        line = data.rstrip(b"\r\n")
        if line.strip():
            self._route(line, message)

    def close(self) -> None:
        """End every open response: a request still unanswered gets an error saying the session ended."""
        with self._lock:
            self._closed = True
            streams = {id(stream): stream for stream in [*self._pending.values(), *self._posts]}
            pending = list(self._pending.items())
            self._pending.clear()
            self._posts.clear()
            get, self._get = self._get, None
        for key, stream in pending:
            if stream.open:
                message_id = key_id(key)
                stream.put(_error_body(INTERNAL_ERROR, "the session ended before the request was answered",
                                       message_id))
        for stream in streams.values():
            stream.put(None)
        if get is not None:
            get.put(None)
        self._feed.put(None)

    # -- from the HTTP side (the loop) --------------------------------------------------------------

    def end(self, reason: str) -> None:
        """The client ended the session (DELETE) or it expired: the proxy stops."""
        if self._on_ended is not None:
            self._on_ended(reason)

    def submit(self, line: bytes, stream: _Stream | None, direct: bool = False, message: Any = UNPARSED) -> None:
        """Hand one POSTed message (or batch) to the router; `stream` awaits the responses to its requests.

        The feeder thread hands it on, since the router may write to the server, which can block; a lone
        tools/call (`direct`), which the router only queues for a worker, is handed on at once when nothing
        waits for the feeder (one thread switch less)."""
        if stream is not None:
            with self._lock:
                closed = self._closed
                if not closed:
                    for key in stream.ids:
                        self._pending[key] = stream
            if closed:  # the session ended (its server exited) as this request came: nothing will answer it
                for key in stream.ids:
                    stream.put(_error_body(INTERNAL_ERROR, "the session ended before the request was answered",
                                           key_id(key)))
                stream.put(None)
                return
            with self._lock:
                if stream.sse:
                    self._posts.append(stream)
                for request in stream.requests:
                    token = _progress_token(request)
                    if token is not None:
                        self._progress[token] = stream
                    if request.get("method") == "initialize":
                        self._initialize_key = id_key(request["id"])
        with self._lock:
            direct = direct and self._feeding == 0
            if not direct:
                self._feeding += 1
        if direct:
            assert self._on_line is not None
            self._on_line(line, message)
        else:
            self._feed.put(line)

    def in_flight(self, key: str) -> bool:
        """Whether a request with this id key awaits its response on an open POST."""
        with self._lock:
            stream = self._pending.get(key)
            return stream is not None and stream.open

    def detach(self, stream: _Stream) -> None:
        """A response ended (answered, or its client went): nothing more is sent on it."""
        with self._lock:
            stream.open = False
            if stream in self._posts:
                self._posts.remove(stream)
            for token in [token for token, owner in self._progress.items() if owner is stream]:
                del self._progress[token]
            if self._get is stream:
                self._get = None

    def cancelled(self, request_id: Any) -> None:
        """The client cancelled a request: its POST ends with an error (no response will come for it)."""
        with self._lock:
            stream = self._pending.pop(id_key(request_id), None)
            if stream is not None:
                stream.ids.discard(id_key(request_id))
        if stream is not None and stream.open:
            stream.put(_error_body(-32800, "Request cancelled", request_id), last=not stream.ids)

    def answered(self, request_id: Any) -> None:
        """The client answered a request: if it was the proxy's question, where it went is forgotten."""
        with self._lock:
            self._asked.pop(id_key(request_id), None)

    def park(self, stream: _Stream) -> None:
        """The client of `stream` went, to resume it perhaps: it still gets the answers and progress of its own
        requests, not the messages that belong to no call (they go to another stream, or wait for the GET)."""
        with self._lock:
            if stream in self._posts:
                self._posts.remove(stream)
            if self._get is stream:
                self._get = None

    def open_get(self, stream: _Stream) -> bool:
        """Make `stream` the session's GET stream and send it what waited; False when one is open."""
        with self._lock:
            if self._get is not None or self._closed:
                return False
            self._get = stream
            waiting = list(self._backlog)
            self._backlog.clear()
        for data in waiting:
            stream.put(data)
        return True

    @property
    def started(self) -> threading.Event:
        """Set once the proxy has started the server and this end."""
        return self._started

    # -- routing ----------------------------------------------------------------------------------

    def _run_feed(self) -> None:
        while (line := self._feed.get()) is not None:
            assert self._on_line is not None
            self._on_line(line)
            with self._lock:
                self._feeding -= 1

    def _route(self, line: bytes, message: Any = UNPARSED) -> None:
        if message is UNPARSED:
            try:
                message = parse_message(line)
            except (ValueError, RecursionError):
                return  # the router writes only JSON; a server's malformed line never reaches here
        data = line + b"\n"
        if isinstance(message, list):  # a batch's replies, together
            keys = [id_key(item["id"]) for item in message if isinstance(item, dict) and "id" in item]
            self._answer(keys, data)
            return
        if not isinstance(message, dict):
            return
        if "method" not in message:
            if "id" in message:
                self._note_version(message)
                self._answer([id_key(message["id"])], data)
            return
        with self._lock:
            target = self._target(message)
            if target is None:
                self._backlog.append(data)
                return
            if message.get("method") == "elicitation/create" and "id" in message:
                self._asked[id_key(message["id"])] = target
            target.stage(data)  # under the lock: the messages of one stream keep their order
        target.send_staged()

    def _note_version(self, message: dict[str, Any]) -> None:
        if self._initialize_key is not None and id_key(message["id"]) == self._initialize_key:
            result = message.get("result")
            version = result.get("protocolVersion") if isinstance(result, dict) else None
            self.version = version if isinstance(version, str) else None

    def _answer(self, keys: list[str], data: bytes) -> None:
        """A response (or a batch of them): to the POST awaiting it; the POST ends once it has all its answers."""
        with self._lock:
            stream = next((self._pending[key] for key in keys if key in self._pending), None)
            if stream is None:
                return  # its POST is gone (the client left, or cancelled it): dropped, as the spec allows
            for key in keys:
                if self._pending.get(key) is stream:
                    del self._pending[key]
                stream.ids.discard(key)
            if not stream.open:
                return
            stream.stage(data, last=not stream.ids)  # (as in `_route`)
        stream.send_staged()

    def _target(self, message: dict[str, Any]) -> _Stream | None:
        """Where a message of the proxy's or the server's goes (called under the lock): the open SSE POST of
        the call it is about (a progress token, the proxy's question, its withdrawal), else the only open SSE
        POST, else the GET stream, else the oldest open SSE POST; None: it waits for the GET stream."""
        method, params = message.get("method"), message.get("params")
        params = params if isinstance(params, dict) else {}
        if method == "notifications/progress":
            token = params.get("progressToken")
            stream = self._progress.get(json.dumps(token, sort_keys=True))
            if stream is not None and stream.open:
                return stream
        if method == "notifications/cancelled" and "requestId" in params:
            stream = self._asked.pop(id_key(params["requestId"]), None)
            if stream is not None and stream.open:
                return stream
        if method == "elicitation/create" and str(message.get("id", "")).startswith("toolreplay-confirm-"):
            for stream in self._posts:
                if any(_asks_about(request, params.get("message")) for request in stream.requests):
                    return stream
        if len(self._posts) == 1:  # the only call in flight: what the server sends now is about it
            return self._posts[0]
        if self._get is not None:
            return self._get
        return self._posts[0] if self._posts else None


def _progress_token(request: dict[str, Any]) -> str | None:
    params = request.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if isinstance(meta, dict) and "progressToken" in meta:
        return json.dumps(meta["progressToken"], sort_keys=True)
    return None


def _asks_about(request: dict[str, Any], text: Any) -> bool:
    """Whether the proxy's question `text` is about this tools/call request."""
    params = request.get("params")
    if request.get("method") != "tools/call" or not isinstance(params, dict):
        return False
    name, args = params.get("name"), params.get("arguments", {})
    return isinstance(name, str) and isinstance(args, dict) and question_text(name, args) == text


class _Tagged(io.TextIOBase):
    """The diagnostics stream of one session: each line of the proxy's says which session it is about."""

    def __init__(self, out: TextIO, lock: threading.Lock, tag: str) -> None:
        super().__init__()
        self._out, self._lock, self._tag = out, lock, tag

    def write(self, text: str) -> int:
        prefix = "toolreplay mcp-proxy: "
        if text.startswith(prefix):
            text = prefix + self._tag + ": " + text[len(prefix):]
        with self._lock:
            self._out.write(text)
            self._out.flush()
        return len(text)

    def flush(self) -> None:
        """Each write is flushed already."""

    def writable(self) -> bool:
        """A diagnostics stream is written."""
        return True


class _Session:
    """One client session: its id, client end, proxy, record, and the thread that runs the proxy."""

    def __init__(self, session_id: str, client: HttpClient, proxy: McpProxy, recorder: SessionRecorder,
                 loop: asyncio.AbstractEventLoop, upstream: ServerEnd | None = None) -> None:
        self.id = session_id
        self.upstream = upstream  # its server end (an HTTP upstream's challenges and authorization)
        self.authorization: str | None = None  # the client's last Authorization header, passed on
        self.client = client
        self.proxy = proxy
        self.recorder = recorder
        self.busy = 0  # HTTP requests of this session being served
        self.last_seen = time.monotonic()
        self.ended = asyncio.Event()
        self.failure: str | None = None  # why the server could not start
        self.streams = 0  # SSE streams numbered so far (event ids name their stream)
        self.resumable: OrderedDict[int, _Stream] = OrderedDict()  # streams whose client went, by number
        self.thread = threading.Thread(target=self._run, args=(loop,), name="mcp-http-session", daemon=True)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            self.proxy.run()
        except UsageError as exc:
            self.failure = str(exc)
        finally:
            self.recorder.close()
            self.client.close()
            try:
                loop.call_soon_threadsafe(self.ended.set)
            except RuntimeError:  # the loop is closed: nobody waits
                pass


class HttpListener:
    """The HTTP endpoint: `start`, then `close` (every session ended, every record sealed)."""

    def __init__(self, factory: ServerFactory, guard: Guard | Policy, *, records: str, diagnostics: TextIO,
                 host: str = "127.0.0.1", port: int = 0, path: str = DEFAULT_PATH, token: bytes | None = None,
                 allowed_origins: Iterable[str] = (), max_body: int = DEFAULT_MAX_BODY,
                 session_timeout: float = DEFAULT_SESSION_TIMEOUT, pins: ToolPins | None = None,
                 head_timeout: float = DEFAULT_HEAD_TIMEOUT, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 upstream: Iterable[str] | None = None, resource: str | None = None) -> None:
        """Nothing listens before `start`. `guard` is the assembled guard every session's proxy is built from
        (a bare Policy: a guard of it and nothing else); `records` is the folder of the sessions' records
        (created when missing); `token`, when given, is required on every request as `Authorization:
        Bearer TOKEN`; `allowed_origins` are origins (`https://app.example`) accepted besides loopback
        ones; `pins` are the pins every session checks tools against (one file for the process). A
        connection whose request head is not complete `head_timeout` seconds after it opened (or after its
        last answer began to wait for the next request) is closed; over `max_connections` open connections,
        a request is answered 503. `upstream` names what the factory serves (its command, `[URL]`): the
        sessions' write intents then live in one file of the records folder (`intents_name`), which
        outlives a crash; without it each session's intents are beside its record, and no later session
        reads them. `resource`: the server URL whose OAuth flow is passed through (its 401/403 as HTTP, its
        protected resource metadata served under the listener's URL, each request's Authorization passed
        on; toolreplay.mcp.http.oauth)."""
        self._factory = factory
        self._guard = guard if isinstance(guard, Guard) else build_guard(GuardConfig(guard, records=records))
        self._pins = pins
        self._records = records
        self._diagnostics = diagnostics
        self._diag_lock = threading.Lock()
        self.host = "127.0.0.1" if host == "localhost" else host
        self.port = port
        self.path = path
        self._token = token
        self._origins = frozenset(origin.rstrip("/").lower() for origin in allowed_origins)
        self._max_body = max_body
        self._timeout = session_timeout
        self._head_timeout = head_timeout
        self._max_connections = max_connections
        self._upstream = None if upstream is None else list(upstream)
        self._resource = resource
        self._metadata_source: str | None = None  # the server's metadata URL, as its 401 named it
        self._intents: IntentFile | None = None
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._closing = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The listener's event loop (on a thread of its own) once started: a session's HTTP upstream may run on it."""
        return self._loop

    @property
    def url(self) -> str:
        """The endpoint's URL."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{self.path}"

    def start(self) -> None:
        """Bind, start serving in a thread, return once it accepts requests; a port that cannot be bound
        (or a records folder that cannot be made) is a UsageError."""
        try:
            import uvicorn
        except ImportError:
            raise UsageError("--listen needs uvicorn: pip install '.[http]' in a ToolReplay checkout") from None
        try:
            os.makedirs(self._records, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create {self._records}: {exc.strerror or exc}") from None
        if self._upstream is not None:  # an earlier listener's writes cut short are settled before any session
            self._intents = open_shared_intents(os.path.join(self._records, intents_name(self._upstream)))
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # accepted connections inherit it (Linux): without it a response's body waits for the ACK of its
            # headers, which the client delays by 40 ms
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.bind((self.host, self.port))
            sock.listen(1024)
        except OSError as exc:
            sock.close()
            self._close_intents()
            raise UsageError(f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}") from None
        self.port = sock.getsockname()[1]
        # uvicorn answers 503 once its connections (this one included) reach limit_concurrency: one more
        config = uvicorn.Config(self._app, log_level="critical", access_log=False, lifespan="off", ws="none",
                                interface="asgi3", proxy_headers=False,
                                http=_head_timed(_http_protocol(), self._head_timeout),
                                limit_concurrency=self._max_connections + 1, timeout_graceful_shutdown=3,
                                timeout_keep_alive=30)
        self._server = uvicorn.Server(config)
        ready = threading.Event()

        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            reaper = asyncio.ensure_future(self._expire_idle())
            ready.set()
            try:
                await self._server.serve(sockets=[sock])
            finally:
                reaper.cancel()

        self._thread = threading.Thread(target=asyncio.run, args=(serve(),), name="mcp-http-listener", daemon=True)
        self._thread.start()
        ready.wait()
        deadline = time.monotonic() + 30
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self._server.started:
            self._close_intents()
            raise UsageError(f"cannot listen on {self.host}:{self.port}: the HTTP server did not start")

    def close(self) -> None:
        """End every session (records sealed), then stop serving."""
        with self._lock:
            self._closing = True
            sessions = list(self._sessions.values())
        for session in sessions:
            session.proxy.stop("the listener is closing")
        for session in sessions:
            session.thread.join()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join()
        self._close_intents()

    def _close_intents(self) -> None:
        if self._intents is not None:
            self._intents.close()
            self._intents = None

    def say(self, text: str) -> None:
        """One line of the listener's own on the diagnostics stream."""
        say_to(self._diagnostics, self._diag_lock, text)

    # -- sessions -------------------------------------------------------------------------------------

    async def _open_session(self, headers: Mapping[str, str]) -> _Session:
        loop = asyncio.get_running_loop()
        session_id = secrets.token_urlsafe(24)
        name = record_name(session_id)
        path = os.path.join(self._records, name)
        recorder = self._guard.open_record(path, intents=self._intents)
        client = HttpClient(loop)
        try:
            upstream = self._factory(headers)
            diagnostics = cast(TextIO, _Tagged(self._diagnostics, self._diag_lock, "session " + name[:-6]))
            proxy = McpProxy(upstream, self._guard, client=client, diagnostics=diagnostics, recorder=recorder,
                             pins=self._pins, approvals=self._guard.session_approvals())
        except BaseException:
            recorder.close()
            raise
        session = _Session(session_id, client, proxy, recorder, loop, upstream)
        session.authorization = headers.get("authorization")
        session.thread.start()
        while not client.started.is_set() and session.thread.is_alive():
            await asyncio.sleep(0.002)  # the server starts (a process) in the session's thread
        if session.failure is not None or not client.started.is_set():
            await session.ended.wait()
            if os.path.getsize(path) == 0:  # nothing ran: no record is left behind
                os.remove(path)
            raise _HttpError(502, f"Bad Gateway: {session.failure or 'the server could not be started'}",
                             INTERNAL_ERROR)
        with self._lock:
            self._sessions[session_id] = session
        self.say(f"session {name[:-6]}: started, record {path}")
        loop.create_task(self._forget(session))
        return session

    async def _forget(self, session: _Session) -> None:
        await session.ended.wait()
        with self._lock:
            self._sessions.pop(session.id, None)
        path = os.path.join(self._records, record_name(session.id))
        with contextlib.suppress(OSError):
            if os.path.getsize(path) == 0:  # nothing ran (a client not yet authorized, say): no record is left
                os.remove(path)
        self.say(f"session {record_name(session.id)[:-6]}: ended ({session.proxy.exit_reason or 'stopped'})")

    async def _expire_idle(self) -> None:
        interval = max(0.05, min(self._timeout / 4, 5.0))
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            with self._lock:
                idle = [session for session in self._sessions.values()
                        if session.busy == 0 and now - session.last_seen > self._timeout]
            for session in idle:
                session.client.end("the session was idle")

    def _session(self, headers: Mapping[str, str]) -> _Session:
        session_id = headers.get("mcp-session-id")
        if not session_id:
            raise _HttpError(400, "Bad Request: missing Mcp-Session-Id header")
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None or session.ended.is_set():
            raise _HttpError(404, "Not Found: unknown or expired session")
        return session

    # -- HTTP ---------------------------------------------------------------------------------------

    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        try:
            if self._resource is not None and scope["path"] in (METADATA_PREFIX, metadata_path(self.path)):
                self._check_access(scope, headers, endpoint=False)
                if scope["method"] != "GET":
                    raise _HttpError(405, "Method Not Allowed", headers=[(b"allow", b"GET")])
                await self._metadata(send)
                return
            self._check_access(scope, headers)
            method = scope["method"]
            if method == "POST":
                await self._post(headers, receive, send)
                return
            if method not in ("GET", "DELETE"):
                raise _HttpError(405, "Method Not Allowed", headers=[(b"allow", b"GET, POST, DELETE")])
            session = self._session(headers)
            session.last_seen = time.monotonic()
            if method == "GET":
                await self._get(session, headers, receive, send)
            else:
                session.client.end("the client ended the session")
                await session.ended.wait()
                await _respond(send, 200, b"", session_id=session.id)
        except _HttpError as error:
            await _respond(send, error.status, _error_body(error.code, error.text), headers=error.headers,
                           content_type=b"application/json")

    async def _metadata(self, send: Send) -> None:
        """The server's protected resource metadata, with the listener's URL as its resource."""
        assert self._resource is not None
        try:
            body = await fetch_metadata(self._resource, self._metadata_source, self.url)
        except MetadataError as exc:
            self.say(str(exc))
            raise _HttpError(502, f"Bad Gateway: {exc}", INTERNAL_ERROR) from None
        await _respond(send, 200, body, content_type=b"application/json")

    def _challenged(self, session: _Session, stream: _Stream) -> tuple[int, list[tuple[bytes, bytes]]] | None:
        """The 401 or 403 the server answered the stream's one request with, and the headers passing it on."""
        if self._resource is None or len(stream.requests) != 1:
            return None
        challenge = getattr(session.upstream, "challenge", None)
        if challenge is None:
            return None
        found = challenge(stream.requests[0]["id"])
        if found is None:
            return None
        status, header = found
        base = self.url[:-len(self.path)] if self.url.endswith(self.path) else self.url
        rewritten, named = rewrite_challenge(header, base + metadata_path(self.path), self._resource)
        if named is not None:
            self._metadata_source = named
        return status, [(b"www-authenticate", rewritten.encode("latin-1", "replace"))]

    def _check_access(self, scope: Scope, headers: Mapping[str, str], endpoint: bool = True) -> None:
        if self._token is not None:
            scheme, _, token = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode("utf-8", "replace"),
                                                                     self._token):
                raise _HttpError(401, "Unauthorized: a valid bearer token is required",
                                 headers=[(b"www-authenticate", b"Bearer")])
        origin = headers.get("origin")
        if origin is not None and origin.rstrip("/").lower() not in self._origins:
            host = urlsplit(origin).hostname or ""
            if not is_loopback(host):
                raise _HttpError(403, "Forbidden: Origin not allowed")
        if is_loopback(self.host):  # DNS rebinding: a loopback listener answers only to loopback names
            host = headers.get("host", "")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if host and not is_loopback(name):
                raise _HttpError(403, "Forbidden: Host not allowed")
        if not endpoint:
            return
        if scope["path"] != self.path:
            raise _HttpError(404, "Not Found")
        version = headers.get("mcp-protocol-version")
        if version is not None and version not in KNOWN_VERSIONS:
            raise _HttpError(400, f"Bad Request: unsupported MCP-Protocol-Version: {version[:64]}")

    async def _post(self, headers: Mapping[str, str], receive: Receive, send: Send) -> None:
        media = headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json":
            raise _HttpError(415, "Unsupported Media Type: Content-Type must be application/json")
        accepts_json, accepts_sse = _accepts(headers.get("accept", ""))
        if not (accepts_json or accepts_sse):
            raise _HttpError(406, "Not Acceptable: the client must accept application/json")
        body = await self._read_body(headers, receive)
        try:
            message = parse_message(body)
        except (ValueError, RecursionError):
            raise _HttpError(400, "Parse error", PARSE_ERROR) from None
        items = message if isinstance(message, list) else [message]
        if not items or not all(isinstance(item, dict) for item in items):
            raise _HttpError(400, "Invalid Request: the body must be a JSON-RPC message")
        requests = [item for item in items if "method" in item and "id" in item]
        if "mcp-session-id" not in headers and len(items) == 1 and items[0].get("method") == "initialize" and requests:
            if self._closing:
                raise _HttpError(503, "Service Unavailable: the listener is closing", INTERNAL_ERROR)
            session = await self._open_session(headers)
        else:
            session = self._session(headers)
            authorization = headers.get("authorization")
            authorize = getattr(session.upstream, "authorize", None)
            if self._resource is not None and authorization and authorization != session.authorization and authorize:
                session.authorization = authorization  # a refreshed token: the server gets it from now on
                authorize(authorization)
            if isinstance(message, list) and session.client.version not in BATCH_VERSIONS:
                raise _HttpError(400, "Invalid Request: batches are not supported by the negotiated protocol "
                                      "version")
        session.busy += 1
        session.last_seen = time.monotonic()
        try:
            await self._deliver(session, body, message, items, requests, accepts_sse, receive, send)
        finally:
            session.busy -= 1
            session.last_seen = time.monotonic()

    async def _deliver(self, session: _Session, body: bytes, message: Any, items: list[dict[str, Any]],
                       requests: list[dict[str, Any]], sse: bool, receive: Receive, send: Send) -> None:
        client = session.client
        stripped = body.strip()
        line = dump_message(message) if b"\n" in stripped or b"\r" in stripped else stripped + b"\n"
        for item in items:
            params = item.get("params")
            if item.get("method") == "notifications/cancelled" and isinstance(params, dict) and "requestId" in params:
                client.cancelled(params["requestId"])
            elif "method" not in item and "id" in item:
                client.answered(item["id"])
        if not requests:  # notifications and responses only
            client.submit(line, None)
            await _respond(send, 202, b"", session_id=session.id)
            return
        keys = {id_key(request["id"]) for request in requests}
        if len(keys) < len(requests) or any(client.in_flight(key) for key in keys):
            raise _HttpError(400, "Invalid Request: the id is already used by a request in flight")
        session.streams += 1
        stream = _Stream(asyncio.get_running_loop(), sse, keys, requests, session.streams)
        client.submit(line, stream, direct=isinstance(message, dict) and message.get("method") == "tools/call",
                      message=message)
        await self._stream_out(session, stream, receive, send)

    async def _stream_out(self, session: _Session, stream: _Stream, receive: Receive, send: Send,
                          eager: bool = False, after: int | None = None) -> None:
        """Write what comes for `stream` until it ends or its client goes: as one JSON body when its answer is
        all there is, else (the client accepting it) as SSE events, started by the first message that is not
        the last (a question before the answer, progress) or at once when `eager` (the GET stream). The client
        leaving is seen as its connection's loss (`_connection_gone`). Each event has an id; a client that goes
        mid-stream may resume it (`after`: the last event it had), so the stream stays, bounded, until the
        session ends."""
        gone = _connection_gone(receive)
        watcher = None
        if gone is None:
            gone = watcher = asyncio.ensure_future(_disconnected(receive))
        streaming = False
        parked = False
        try:
            if eager:
                await self._start_sse(send, session)
                streaming = True
            if after is not None:
                for number, event in list(stream.history):
                    if number > after:
                        await send({"type": "http.response.body", "body": event, "more_body": True})
            parts: list[bytes] = []
            while True:
                item = await stream.get(gone)
                if item is None:  # the client went: the calls still run and are recorded
                    parked = streaming and stream.open and self._park(session, stream)
                    return
                data, last = item
                if data is not None:
                    if not streaming and not last and stream.sse:
                        await self._start_sse(send, session)
                        streaming = True
                    if streaming:
                        await send({"type": "http.response.body", "body": stream.event(data), "more_body": True})
                    else:
                        parts.append(data.rstrip(b"\n"))
                if last:
                    break
            if streaming:  # begun as 200: a 401 or 403 that came since is said only by the answer's text
                self._challenged(session, stream)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            body = parts[0] if len(parts) == 1 else b"[" + b",".join(parts) + b"]"
            challenged = self._challenged(session, stream)
            if challenged is None:
                await _respond(send, 200, body, session_id=session.id, content_type=b"application/json")
                return
            status, headers = challenged
            opening = stream.requests[0].get("method") == "initialize"
            if opening:  # not authorized: no session is opened (the client initializes again with a token)
                session.client.end("the server asked the client to authorize")
            await _respond(send, status, body, session_id=None if opening else session.id,
                           content_type=b"application/json", headers=headers)
        finally:
            if watcher is not None:
                watcher.cancel()
            if not parked:
                session.resumable.pop(stream.number, None)
                session.client.detach(stream)

    @staticmethod
    def _park(session: _Session, stream: _Stream) -> bool:
        """Keep a stream whose client went for a resumption; the oldest kept goes when there are too many. The
        GET stream stops taking messages (they wait for the next GET, as before it opened)."""
        stream.parked = True
        session.resumable[stream.number] = stream
        session.client.park(stream)
        while len(session.resumable) > RESUMABLE_STREAMS:
            _, oldest = session.resumable.popitem(last=False)
            session.client.detach(oldest)
        return True

    @staticmethod
    async def _start_sse(send: Send, session: _Session) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": _headers(
            b"text/event-stream", session.id, [(b"cache-control", b"no-cache, no-transform")])})

    async def _get(self, session: _Session, headers: Mapping[str, str], receive: Receive, send: Send) -> None:
        if not _accepts(headers.get("accept", ""))[1]:
            raise _HttpError(406, "Not Acceptable: the client must accept text/event-stream")
        last = headers.get("last-event-id")
        if last:
            await self._resume(session, last, receive, send)
            return
        session.streams += 1
        stream = _Stream(asyncio.get_running_loop(), True, number=session.streams)
        if not session.client.open_get(stream):
            raise _HttpError(409, "Conflict: the session already has a GET stream")
        await self._stream_out(session, stream, receive, send, eager=True)  # alone, it is idle

    async def _resume(self, session: _Session, last: str, receive: Receive, send: Send) -> None:
        """GET with Last-Event-ID: the stream that event was on, from the event after it (what is kept of it)."""
        number, _, count = last.strip().partition("-")
        stream = session.resumable.get(int(number)) if number.isdigit() and count.isdigit() else None
        if stream is None:
            raise _HttpError(400, "Bad Request: no stream of this session to resume from that Last-Event-ID")
        del session.resumable[stream.number]
        stream.parked = False
        if stream.ids or stream.requests:  # a POST's stream: its answers still come to it
            await self._stream_out(session, stream, receive, send, eager=True, after=int(count))
            return
        if not session.client.open_get(stream):  # the GET stream: what waited is sent after the replay
            session.resumable[stream.number] = stream
            raise _HttpError(409, "Conflict: the session already has a GET stream")
        await self._stream_out(session, stream, receive, send, eager=True, after=int(count))

    async def _read_body(self, headers: Mapping[str, str], receive: Receive) -> bytes:
        too_large = _HttpError(413, f"Payload Too Large: the body exceeds {self._max_body} bytes")
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self._max_body:
            raise too_large
        parts, size = [], 0
        while True:
            event = await receive()
            if event["type"] == "http.disconnect":
                raise _HttpError(400, "Bad Request: the client went before sending its body")
            chunk = event.get("body", b"")
            size += len(chunk)
            if size > self._max_body:
                raise too_large
            parts.append(chunk)
            if not event.get("more_body", False):
                return b"".join(parts)


def _http_protocol() -> str:
    """uvicorn's HTTP/1.1 protocol: httptools' (llhttp in C, installed by the `http` extra, as uvicorn's own
    `standard` extra does) when it is there, else h11's (pure Python: about 1 ms more a call)."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "h11"
    return "httptools"


class _JoinedWrites:
    """A connection's transport whose writes within one turn of the loop leave in one send: uvicorn writes a
    response's head and its body apart, two segments (TCP_NODELAY), each a system call that wakes the client."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self.gone: asyncio.Future[None] = loop.create_future()  # done once the connection is lost

    def write(self, data: bytes) -> None:
        if data:
            if not self._pending:
                self._loop.call_soon(self.flush)
            self._pending.append(data)

    def flush(self) -> None:
        """Send what was written (once a response is whole, it need not wait for the end of the turn)."""
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def lost(self) -> None:
        """The connection is lost: `gone` is done."""
        if not self.gone.done():
            self.gone.set_result(None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _head_timed(name: str, seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's protocol `name` over `_JoinedWrites`, closing a connection whose request head is not complete
    within `seconds` (uvicorn times out only an idle keep-alive connection, not a head sent slowly or never).
    The deadline starts when the connection opens and when data comes while no request is being served; it
    is armed only when a head is still incomplete, so a request whose head comes in one piece sets no timer."""
    if name == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    else:
        from uvicorn.protocols.http.h11_impl import H11Protocol as base  # type: ignore[assignment]

    class HeadTimed(base):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(cast(asyncio.Transport, _JoinedWrites(transport, self.loop)))
            self._deadline = self.loop.call_later(seconds, self._head_too_slow)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._awaiting_head():
                if self._deadline is None and not self.transport.is_closing():
                    self._deadline = self.loop.call_later(seconds, self._head_too_slow)
            elif self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def on_response_complete(self) -> None:
            # the whole answer leaves now, not after the rest of the turn (the ending of its task)
            cast(_JoinedWrites, self.transport).flush()
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            super().connection_lost(exc)
            cast(_JoinedWrites, self.transport).lost()

        def _awaiting_head(self) -> bool:
            return self.cycle is None or bool(self.cycle.response_complete)

        def _head_too_slow(self) -> None:
            self._deadline = None
            if self._awaiting_head() and not self.transport.is_closing():
                self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                self.transport.close()

    return HeadTimed


def _connection_gone(receive: Receive) -> asyncio.Future[None] | None:
    """The future that is done once the client's connection is lost, when `receive` is that of a request on
    this listener's protocol (`_head_timed`: uvicorn's request cycle over `_JoinedWrites`) whose reading is not
    paused; else None, and the caller watches `receive` for the disconnect (`_disconnected`: a task a
    request, 5-10% of the listener's CPU time a call). A paused connection (a body past uvicorn's high-water
    mark) is watched that way, because `receive` resumes its reading, without which no loss is seen. A request
    pipelined behind this one while it runs pauses the reading again (uvicorn's back-pressure): that client's
    loss is seen when the answer is written, as with the task alone (MCP clients do not pipeline)."""
    cycle = getattr(receive, "__self__", None)
    writes = getattr(cycle, "transport", None)
    if not isinstance(writes, _JoinedWrites) or getattr(getattr(cycle, "flow", None), "read_paused", True):
        return None
    return writes.gone


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _accepts(accept: str) -> tuple[bool, bool]:
    """Whether an Accept header takes JSON, and SSE (wildcards included)."""
    types = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    anything = "*/*" in types or not accept.strip()
    return (anything or "application/json" in types or "application/*" in types,
            anything or "text/event-stream" in types or "text/*" in types)


def _headers(content_type: bytes | None, session_id: str | None,
             extra: Iterable[tuple[bytes, bytes]] = ()) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", content_type)] if content_type else []
    if session_id is not None:
        headers.append((b"mcp-session-id", session_id.encode("ascii")))
    headers.extend(extra)
    return headers


async def _respond(send: Send, status: int, body: bytes, *, session_id: str | None = None,
                   content_type: bytes | None = None, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    length = (b"content-length", str(len(body)).encode("ascii"))
    await send({"type": "http.response.start", "status": status,
                "headers": _headers(content_type, session_id, [*headers, length])})
    await send({"type": "http.response.body", "body": body})
