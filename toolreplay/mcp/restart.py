"""A server that ends is started again: the backoff, the restart's `initialize`, and `RestartingServer`.

The pieces are shared by the two ways the proxy reaches servers. `MultiServer` (the servers file)
restarts each of its servers with them; `RestartingServer` is one server (a command after `--`, or one
URL) behind a `ServerEnd` that outlives it:

- the server's calls in flight when it ends are answered with the proxy's `no_answer_error` (the
  router then records a read as failed and a write as of unknown outcome); the client gets
  `notifications/tools/list_changed`;
- after `backoff[i]` seconds for the i-th attempt in a row, a new end is made and sent the client's
  own `initialize` (under an id of the proxy's own), then `notifications/initialized`; the client gets
  `notifications/tools/list_changed` again (and the prompts' and resources' when the server offers them);
- while it is down, a request is answered by the proxy: a listing as empty, a ping, anything else with
  `Internal error: the server has ended; it is being started again`; notifications are dropped;
- a server that ends before the client's `initialize` reached it, or after the last attempt, ends the
  session as a server without restarts would.

Lines pass through unchanged, byte for byte; only the replies to the proxy's own `initialize` are kept
from the client.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from toolreplay.errors import UsageError
from toolreplay.format.text import escape_text
from toolreplay.mcp.transport import UNPARSED, LineHandler, MessageHandler, ServerEnd, say_to
from toolreplay.mcp.wire import dump_message, id_key, no_answer_error, not_sent_error, parse_message

__all__ = ["RESTART_BACKOFF", "Backoff", "RestartingServer", "list_changed", "restart_request", "start_later"]

RESTART_BACKOFF = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)  # seconds before each restart of a server that ended, in a row
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
# what a listing of a server that is down holds: method -> the result's array
_EMPTY_LISTINGS = {"tools/list": "tools", "prompts/list": "prompts", "resources/list": "resources",
                   "resources/templates/list": "resourceTemplates"}


class Backoff:
    """The delays before the restarts in a row of one server: the next one, until none is left."""

    def __init__(self, delays: Sequence[float] = RESTART_BACKOFF) -> None:
        self._delays = tuple(delays)
        self._attempt = 0

    def next_delay(self) -> float | None:
        """The delay before the next attempt (counted as made), or None when every attempt was made."""
        if self._attempt >= len(self._delays):
            return None
        self._attempt += 1
        return self._delays[self._attempt - 1]

    def reset(self) -> None:
        """The server is back: the next time it ends, the attempts start again from the first delay."""
        self._attempt = 0


def start_later(delay: float, target: Callable[..., None], *args: Any) -> threading.Timer:
    """Run `target(*args)` on its own daemon thread after `delay` seconds."""
    timer = threading.Timer(delay, target, args=args)
    timer.daemon = True
    timer.start()
    return timer


def restart_request(initialize: Mapping[str, Any], generation: int) -> tuple[str, bytes]:
    """The client's own `initialize`, for the `generation`-th end of a server, under an id of the proxy's."""
    own = f"toolreplay-restart-{generation}"
    return own, dump_message({**initialize, "id": own})


def list_changed(capabilities: Mapping[str, Any]) -> list[bytes]:
    """What tells the client a server's listings changed: its tools always, its prompts and resources when
    its `initialize` result offered them."""
    return [dump_message({"jsonrpc": "2.0", "method": f"notifications/{what}/list_changed"})
            for what in ("tools", "prompts", "resources")
            if what == "tools" or isinstance(capabilities.get(what), dict)]


class RestartingServer:
    """One server, started again when it ends (see the module's docstring); a `ServerEnd`."""

    def __init__(self, make: Callable[[], ServerEnd], *, diagnostics: TextIO | None = None,
                 backoff: Sequence[float] = RESTART_BACKOFF, on_restart: Callable[[], None] | None = None) -> None:
        """`make` makes a new end of the server (for its first start and each restart); `diagnostics`
        receives the lines said; `on_restart` is called when the server ended and will be started again
        (the pins forget what its old listing verified)."""
        self._make = make
        self._diagnostics = diagnostics
        self._backoff = Backoff(backoff)
        self._on_restart = on_restart
        self._lock = threading.Lock()
        self._writing = threading.Lock()
        self._diag_lock = threading.Lock()
        self._on_line: LineHandler | None = None
        self._on_message: MessageHandler | None = None  # start_parsed: the router, given what was parsed here
        self._on_ended: Callable[[str], None] | None = None
        self._server: ServerEnd | None = None
        self._generation = 0
        self._serving = False  # False from the server's end until a restart of it answered initialize
        self._initialize: dict[str, Any] | None = None  # the client's, sent again to a restarted server
        self._inflight: dict[str, tuple[Any, str]] = {}  # the client's requests at the server -> (id, method)
        self._asked: set[str] = set()  # ids of the server's own requests to the client, not answered yet
        self._stale: set[str] = set()  # those of an end that ended: the client's late answers are dropped
        self._restart_id: str | None = None  # the id of the proxy's initialize to a restarted server
        self._capabilities: dict[str, Any] = {}
        self._closing = False
        self._ended = False

    # -- ServerEnd ----------------------------------------------------------------------------------

    def start(self, on_line: LineHandler, on_ended: Callable[[str], None]) -> None:
        """Start the server; one that cannot be started is a UsageError (nothing is started again)."""
        self._on_line, self._on_ended = on_line, on_ended
        server = self._make()
        with self._lock:
            self._server = server
            self._serving = True
        server.start(self._line_handler(0), self._end_handler(0))

    def start_parsed(self, on_message: MessageHandler, on_ended: Callable[[str], None]) -> None:
        """`start`, each server line handed on with its message as parsed here (the router need not parse it)."""
        self._on_message = on_message
        self.start(on_message, on_ended)

    def send_parsed(self, line: bytes, message: Any) -> None:
        """`send` of one whole line whose message the caller parsed already (it is read, not changed)."""
        self._from_client(line if line.endswith(b"\n") else line + b"\n", message)

    def send(self, data: bytes) -> None:
        """Pass each line on to the server; while it is down, the proxy answers requests itself."""
        for line in data.split(b"\n"):
            if line.strip():
                self._from_client(line + b"\n")

    def close(self) -> int:
        """Close the server (no restart after this); its exit status."""
        with self._lock:
            self._closing = True
            server = self._server
        status = server.close() if server is not None else 0
        self._end("server exited")
        return status

    # -- client to server ---------------------------------------------------------------------------

    def _from_client(self, line: bytes, message: Any = UNPARSED) -> None:
        if message is UNPARSED:
            try:
                message = parse_message(line)
            except (ValueError, RecursionError):
                message = None  # not the proxy's to judge: the server answers it
        items = message if isinstance(message, list) else [message]
        late = False
        with self._lock:
            serving = self._serving
            for item in items:
                if isinstance(item, dict) and item.get("method") == "notifications/cancelled":
                    params = item.get("params")  # a cancelled request may never be answered: not waited for
                    if isinstance(params, dict) and "requestId" in params:
                        self._inflight.pop(id_key(params["requestId"]), None)
                if not isinstance(item, dict) or "id" not in item:
                    continue
                method = item.get("method")
                if method == "initialize":
                    self._initialize = item
                if serving and isinstance(method, str):
                    self._inflight[id_key(item["id"])] = (item["id"], method)
                elif serving and method is None:  # the client's answer to the server's own request
                    key = id_key(item["id"])
                    late = item is message and key in self._stale and key not in self._asked
                    self._asked.discard(key)
                    self._stale.discard(key)
        if late:  # it answers a server that ended, not the one serving now (whose ids may be the same)
            return
        if serving:
            self._to_server(line)
            return
        for item in items:  # the server is down: requests answered here, notifications and answers dropped
            if isinstance(item, dict) and isinstance(item.get("method"), str) and "id" in item:
                self._deliver(dump_message(_while_down(item)))

    def _to_server(self, data: bytes) -> None:
        with self._writing:
            server = self._server
            if server is None:
                return
            try:
                server.send(data)
            except OSError:
                if self._serving:  # else it ended meanwhile, and its end says so
                    self._say("the server no longer reads its input")

    # -- server to client ---------------------------------------------------------------------------

    def _line_handler(self, generation: int) -> LineHandler:
        return lambda line: self._from_server(line) if self._generation == generation else None

    def _end_handler(self, generation: int) -> Callable[[str], None]:
        return lambda reason: self._server_gone(reason) if self._generation == generation else None

    def _from_server(self, line: bytes) -> None:
        try:
            message = parse_message(line)
        except (ValueError, RecursionError):
            self._deliver(line)  # the router says so and answers the server
            return
        back: dict[str, Any] | None = None
        with self._lock:
            for item in message if isinstance(message, list) else [message]:
                if not isinstance(item, dict) or "id" not in item:
                    continue
                key = id_key(item["id"])
                if "method" in item:  # the server's own request to the client
                    self._asked.add(key)
                    continue
                if self._restart_id is not None and key == id_key(self._restart_id):
                    back = item
                    continue
                asked = self._inflight.pop(key, None)
                result = item.get("result")
                if asked is not None and asked[1] == "initialize" and isinstance(result, dict):
                    capabilities = result.get("capabilities")
                    self._capabilities = capabilities if isinstance(capabilities, dict) else {}
        if back is not None:
            self._restarted(back.get("result"))
            return
        self._deliver(line, message)

    def _server_gone(self, reason: str) -> None:
        """The server ended: its requests in flight are answered here; it is started again, or the session ends."""
        with self._lock:
            if self._closing:
                return
            reinitializing = self._restart_id is not None
            waiting = list(self._inflight.values())
            self._inflight.clear()
            self._stale |= self._asked
            self._asked.clear()
            self._serving, self._restart_id = False, None
            delay = self._backoff.next_delay() if self._initialize is not None else None
            capabilities = self._capabilities
        if delay is not None and self._on_restart is not None:  # before any answer lets the client call again
            self._on_restart()
        for message_id, _ in waiting:  # a call may have run: the router records a write's outcome as unknown
            self._deliver(dump_message(no_answer_error(message_id, "the server ended before it answered")))
        if delay is None:  # never initialized (as without restarts: nothing said), or every attempt made
            if self._initialize is not None:
                self._say(f"the server ended ({escape_text(reason)}) and was not started again: the session ends")
            self._end(reason)
            return
        if not reinitializing:
            self._say(f"the server ended ({escape_text(reason)}): it is started again")
            for data in list_changed(capabilities):
                self._deliver(data)
        start_later(delay, self._start_again)

    # -- restarts -----------------------------------------------------------------------------------

    def _start_again(self) -> None:
        """A new end of the server, sent the client's initialize; `_restarted` takes it back into service."""
        with self._lock:
            if self._closing:
                return
            old = self._server
            self._generation += 1
            generation = self._generation
        if old is not None:
            old.close()
        try:
            server = self._make()
            server.start(self._line_handler(generation), self._end_handler(generation))
        except (UsageError, OSError) as exc:
            self._say(f"the server could not be started again: {escape_text(str(exc))}")
            self._retry_or_give_up()
            return
        with self._lock:
            closing = self._closing
            if not closing:
                self._server = server
                self._restart_id, data = restart_request(self._initialize or {}, generation)
        if closing:  # the session ended while it started: it is not left running
            server.close()
            return
        self._to_server(data)

    def _retry_or_give_up(self) -> None:
        with self._lock:
            delay = None if self._closing else self._backoff.next_delay()
        if delay is not None:
            start_later(delay, self._start_again)
            return
        self._say("the server was not started again: the session ends")
        self._end("server exited")

    def _restarted(self, result: Any) -> None:
        """The restarted server answered initialize: it serves again, and the client is told to list again."""
        if not isinstance(result, dict):
            self._say("the server failed to initialize again")
            with self._lock:
                self._restart_id = None
                self._generation += 1  # its end is not a new death; the next attempt closes it (not its own thread)
            self._retry_or_give_up()
            return
        capabilities = result.get("capabilities")
        with self._lock:
            self._capabilities = capabilities if isinstance(capabilities, dict) else {}
            offered = self._capabilities
        self._to_server(dump_message(INITIALIZED))
        with self._lock:
            self._serving, self._restart_id = True, None
            self._backoff.reset()
        self._say("the server is back (started again): its tools are listed again")
        for data in list_changed(offered):
            self._deliver(data)

    # -- to the client ------------------------------------------------------------------------------

    def _deliver(self, data: bytes, message: Any = UNPARSED) -> None:
        """A line to the router, on the thread that has it: a server's lines in the order they came, the
        proxy's own after the last line of the end they are about (no thread of its own: the router's
        words on stderr come in the same order as without restarts)."""
        if self._on_message is not None:
            self._on_message(data, message)
            return
        assert self._on_line is not None
        self._on_line(data)

    def _end(self, reason: str) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
        assert self._on_ended is not None
        self._on_ended(reason)

    def _say(self, text: str) -> None:
        if self._diagnostics is not None:
            say_to(self._diagnostics, self._diag_lock, text)


def _while_down(request: dict[str, Any]) -> dict[str, Any]:
    """The proxy's answer to a request while the server is down: an empty listing, a ping's, else an error."""
    method = request["method"]
    if method in _EMPTY_LISTINGS:
        return {"jsonrpc": "2.0", "id": request["id"], "result": {_EMPTY_LISTINGS[method]: []}}
    if method == "ping":
        return {"jsonrpc": "2.0", "id": request["id"], "result": {}}
    return not_sent_error(request["id"], "the server has ended; it is being started again")
