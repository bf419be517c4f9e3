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

What the client set up on the server's session is set up again on the new one (`ClientSetup`, shared
with `MultiServer`): after `notifications/initialized`, its last logging level and each resource it
subscribed to are sent again under ids of the proxy's; a refusal is said on the diagnostics.

The client does not know the server it answers ended: its late answer to a request of an end that
ended is dropped (said on the diagnostics), and a request of the new end that reuses such an id
reaches the client under an id of the proxy's, so the two answers cannot be told apart wrongly.

Lines pass through unchanged, byte for byte; only the replies to the proxy's own requests (the
restart's `initialize` and what is set up again) are kept from the client, and a line is written anew
only when an id in it is the proxy's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TextIO

from toolreplay.errors import UsageError
from toolreplay.format.text import escape_text
from toolreplay.mcp.transport import UNPARSED, LineHandler, MessageHandler, ServerEnd, say_to
from toolreplay.mcp.wire import dump_message, id_key, key_id, no_answer_error, not_sent_error, parse_message

__all__ = ["RESENT", "RESTART_BACKOFF", "Backoff", "ClientSetup", "RestartingServer", "list_changed", "restart_request",
           "start_later", "withdrawn"]

RESTART_BACKOFF = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)  # seconds before each restart of a server that ended, in a row
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
# the client's requests whose effect lives in the server's session, set up again on a restarted server
RESENT = frozenset({"resources/subscribe", "resources/unsubscribe", "logging/setLevel"})
_FORGOTTEN = 1024  # ids of requests of ended ends remembered, so that a late answer to one is dropped
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


def withdrawn(request_ids: Iterable[Any]) -> list[bytes]:
    """The cancellations the client is sent, on behalf of a server that ended, of that server's requests it has
    not answered (a question to a person, a sampling request): nobody is left to take the answer."""
    return [dump_message({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {
        "requestId": request_id, "reason": "the server that asked ended"}}) for request_id in request_ids]


class ClientSetup:
    """What the client set up on one server's session, to be set up again on the server started after it
    ended: each resource the server accepted its subscription to (and not unsubscribed since) and the last
    logging level it accepted. Not locked: its owner calls it under its own lock."""

    def __init__(self) -> None:
        self._pending: dict[str, tuple[str, str]] = {}  # id key of a request at the server -> (method, URI or level)
        self._subscribed: dict[str, None] = {}  # the URIs, in the order subscribed
        self._level: str | None = None
        self._own: dict[str, tuple[str, str]] = {}  # id key of a request sent again -> (method, URI or level)

    def sent(self, key: str, method: str, params: Any) -> None:
        """The client sent a request of a `RESENT` method, with id key `key`: an unsubscribe counts at once
        (whatever the server answers, the client wants no more updates), the others once accepted."""
        value = params.get("level" if method == "logging/setLevel" else "uri") if isinstance(params, dict) else None
        if not isinstance(value, str):
            return
        if method == "resources/unsubscribe":
            self._subscribed.pop(value, None)
            for pending in [pending for pending, asked in self._pending.items()
                            if asked == ("resources/subscribe", value)]:
                del self._pending[pending]  # a subscription accepted after this is not kept
            return
        self._pending[key] = (method, value)

    def answered(self, key: str, message: dict[str, Any]) -> None:
        """The server answered the client's request `key`: an accepted subscription or level is kept."""
        if not self._pending:
            return
        asked = self._pending.pop(key, None)
        if asked is None or not isinstance(message.get("result"), dict):
            return
        method, value = asked
        if method == "logging/setLevel":
            self._level = value
        else:
            self._subscribed[value] = None

    def again(self, generation: int) -> list[bytes]:
        """The requests that set it all up again on the server's `generation`-th end, under ids of the proxy's
        (`toolreplay-restart-G-N`): the level first, then each subscription. The requests the ended end
        left unanswered are forgotten."""
        self._pending.clear()
        self._own.clear()
        asked = ([("logging/setLevel", self._level)] if self._level is not None else []) + [
            ("resources/subscribe", uri) for uri in self._subscribed]
        lines = []
        for number, (method, value) in enumerate(asked, 1):
            own = f"toolreplay-restart-{generation}-{number}"
            self._own[id_key(own)] = (method, value)
            params = {"level": value} if method == "logging/setLevel" else {"uri": value}
            lines.append(dump_message({"jsonrpc": "2.0", "id": own, "method": method, "params": params}))
        return lines

    def own_answer(self, key: str, message: dict[str, Any]) -> str | None:
        """None when `key` is not the id of a request sent again; else the answer is the proxy's, and this
        is what to say about it ("" when accepted; a refusal is forgotten, not sent again)."""
        if not self._own:
            return None
        asked = self._own.pop(key, None)
        if asked is None:
            return None
        if isinstance(message.get("result"), dict):
            return ""
        method, value = asked
        error = message.get("error")
        why = error.get("message") if isinstance(error, dict) else None
        why = escape_text(str(why)) if why is not None else "no result"
        if method == "logging/setLevel":
            self._level = None
            return f"refused the logging level '{escape_text(value)}' again ({why})"
        self._subscribed.pop(value, None)
        return (f"refused the subscription to '{escape_text(value)}' again ({why}): its updates no longer reach "
                "the client")


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
        self._asked: set[str] = set()  # ids (as the client has them) of the server's own requests, not answered yet
        self._stale: OrderedDict[str, None] = OrderedDict()  # those of ends that ended: late answers are dropped
        self._renamed: dict[str, Any] = {}  # an id of the proxy's for a request whose id is stale -> the server's
        self._renamed_back: dict[str, Any] = {}  # the server's id key of such a request -> the proxy's id
        self._renames = 0
        self._setup = ClientSetup()
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
        late = 0  # the client's answers to requests of an end that ended: dropped
        changed: dict[int, Any] = {}  # index -> the item as the server is sent it (None: dropped)
        with self._lock:
            serving = self._serving
            for index, item in enumerate(items):
                if not isinstance(item, dict):
                    continue
                method = item.get("method")
                if method == "notifications/cancelled":
                    params = item.get("params")  # a cancelled request may never be answered: not waited for
                    if isinstance(params, dict) and "requestId" in params:
                        self._inflight.pop(id_key(params["requestId"]), None)
                if "id" not in item:
                    continue
                if method is None:  # the client's answer to a request of the server
                    answer = self._answer_of(id_key(item["id"]), item)
                    if answer is not item:
                        changed[index] = answer
                        late += answer is None
                    continue
                if method in RESENT:
                    self._setup.sent(id_key(item["id"]), method, item.get("params"))
                elif method == "initialize":
                    self._initialize = item
                if serving and isinstance(method, str):
                    self._inflight[id_key(item["id"])] = (item["id"], method)
        for _ in range(late):  # it answers a server that ended, not the one serving now (whose ids may be the same)
            self._say("dropped a response from the client to a request of the server that ended")
        if changed:
            kept = [changed.get(index, item) for index, item in enumerate(items)]
            kept = [item for item in kept if item is not None]
            if not kept:
                return
            message = kept if isinstance(message, list) else kept[0]
            line = dump_message(message)
        if serving:
            self._to_server(line)
            return
        for item in items:  # the server is down: requests answered here, notifications and answers dropped
            if isinstance(item, dict) and isinstance(item.get("method"), str) and "id" in item:
                self._deliver(dump_message(_while_down(item)))

    def _answer_of(self, key: str, answer: dict[str, Any]) -> dict[str, Any] | None:
        """The client's answer with id key `key` as the server is sent it: under the server's own id when the
        proxy renamed its request, None when it answers an end that ended (hold the lock)."""
        if key in self._asked:
            self._asked.discard(key)
            if key in self._renamed:
                server_id = self._renamed.pop(key)
                self._renamed_back.pop(id_key(server_id), None)
                return {**answer, "id": server_id}
            return answer
        if key in self._stale:
            del self._stale[key]
            return None
        return answer  # to no request: the server says so, as without restarts

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
        items = message if isinstance(message, list) else [message]
        back: dict[str, Any] | None = None
        said: list[str] = []
        changed: dict[int, Any] = {}  # index -> the item as the client is sent it (None: the proxy's own)
        with self._lock:
            for index, item in enumerate(items):
                if not isinstance(item, dict):
                    continue
                if "id" not in item:
                    if self._renamed_back and item.get("method") == "notifications/cancelled":
                        changed[index] = self._cancelled_renamed(item)  # the server withdraws a renamed request
                    continue
                key = id_key(item["id"])
                if "method" in item:  # the server's own request to the client
                    if key in self._stale:  # the client may yet answer the ended end's request of that id
                        changed[index] = {**item, "id": self._rename(key, item["id"])}
                    else:
                        self._asked.add(key)
                    continue
                if self._restart_id is not None and key == id_key(self._restart_id):
                    back, changed[index] = item, None
                    continue
                own = self._setup.own_answer(key, item)
                if own is not None:  # to a request the proxy sent again
                    changed[index] = None
                    if own:
                        said.append(own)
                    continue
                asked = self._inflight.pop(key, None)
                if asked is None:
                    continue
                if asked[1] in RESENT:
                    self._setup.answered(key, item)
                result = item.get("result")
                if asked[1] == "initialize" and isinstance(result, dict):
                    capabilities = result.get("capabilities")
                    self._capabilities = capabilities if isinstance(capabilities, dict) else {}
        for text in said:
            self._say("the server " + text)
        if changed:
            kept = [changed.get(index, item) for index, item in enumerate(items)]
            kept = [item for item in kept if item is not None]
            if kept:
                message = kept if isinstance(message, list) else kept[0]
                self._deliver(dump_message(message), message)
        else:
            self._deliver(line, message)
        if back is not None:
            self._restarted(back.get("result"))

    def _rename(self, key: str, server_id: Any) -> str:
        """An id of the proxy's for the server's request whose id `key` a request of an ended end had (hold
        the lock)."""
        self._renames += 1
        own = f"toolreplay-restart-{self._generation}-asks-{self._renames}"
        while id_key(own) in self._asked or id_key(own) in self._stale:
            own += "+"
        self._asked.add(id_key(own))
        self._renamed[id_key(own)] = server_id
        self._renamed_back[key] = own
        return own

    def _cancelled_renamed(self, notification: dict[str, Any]) -> dict[str, Any]:
        """The server's cancellation of its own request, under the id the client has it by (hold the lock)."""
        params = notification.get("params")
        if not isinstance(params, dict) or "requestId" not in params:
            return notification
        own = self._renamed_back.get(id_key(params["requestId"]))
        return notification if own is None else {**notification, "params": {**params, "requestId": own}}

    def _server_gone(self, reason: str) -> None:
        """The server ended: its requests in flight are answered here; it is started again, or the session ends."""
        with self._lock:
            if self._closing:
                return
            reinitializing = self._restart_id is not None
            waiting = list(self._inflight.values())
            self._inflight.clear()
            asked = [key_id(key) for key in sorted(self._asked)]  # sorted: the same order every time
            for key in self._asked:
                self._stale[key] = None
            while len(self._stale) > _FORGOTTEN:
                self._stale.popitem(last=False)
            self._asked.clear()
            self._renamed.clear()
            self._renamed_back.clear()
            self._serving, self._restart_id = False, None
            delay = self._backoff.next_delay() if self._initialize is not None else None
            capabilities = self._capabilities
        if delay is not None and self._on_restart is not None:  # before any answer lets the client call again
            self._on_restart()
        for message_id, _ in waiting:  # a call may have run: the router records a write's outcome as unknown
            self._deliver(dump_message(no_answer_error(message_id, "the server ended before it answered")))
        for data in withdrawn(asked):
            self._deliver(data)
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
            again = self._setup.again(self._generation)
        for data in again:  # the client's logging level and subscriptions: their answers are the proxy's
            self._to_server(data)
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
