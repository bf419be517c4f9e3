"""Several MCP servers behind one proxy: the servers file, and `MultiServer`, one `ServerEnd` for them all.

The servers file (docs/mcp-proxy.md) names each server and how to reach it, in the shape of the
clients' own configuration files:

    {"servers": {"github": {"command": "npx", "args": ["-y", "..."], "env": {"TOKEN": "..."}},
                 "files": {"command": "python3", "args": ["server.py"], "prefix": "fs"},
                 "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "..."}}}}

Each server's tools and prompts are offered to the client as `PREFIX__NAME`, its resources and resource
templates as `PREFIX__URI` (the prefix is the server's name unless it gives one), so one policy, one pins
file and one record cover them all. `MultiServer` speaks MCP to every server and looks like one server to
the router: `initialize` and the listings fan out and are answered once, merged; a `tools/call`,
`prompts/get`, `resources/read` or `completion/complete` goes to the server its prefix names, with the
prefix stripped; `logging/setLevel` goes to every server that offers logging; a server's own requests
to the client get ids of the proxy's, so that two servers' ids cannot collide, and the client's answers
go back to the server that asked (an answer to a server that ended is dropped). A server that ends takes
only its own tools with it; started again, it is sent the client's logging level and subscriptions to
its resources again (toolreplay.mcp.restart.ClientSetup).
"""

from __future__ import annotations

import functools
import json
import os
import queue
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any, TextIO

from toolreplay import __version__
from toolreplay.errors import InputError, UsageError
from toolreplay.format.strictjson import read_json_file
from toolreplay.format.text import escape_text
from toolreplay.mcp.restart import (
    INITIALIZED,
    RESENT,
    RESTART_BACKOFF,
    Backoff,
    ClientSetup,
    list_changed,
    restart_request,
    start_later,
    withdrawn,
)
from toolreplay.mcp.transport import LineHandler, ServerEnd, StdioServer, say_to
from toolreplay.mcp.wire import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    dump_message,
    error_message,
    id_key,
    no_answer_error,
    not_sent_error,
    parse_message,
)

__all__ = ["MAX_PAGES", "NAME_LIMIT", "RESTART_BACKOFF", "SEPARATOR", "MultiServer", "ServerConfig", "http_server",
           "read_servers", "server_factories", "split_name", "start_servers"]

SEPARATOR = "__"
NAME_LIMIT = 128  # the longest tool name the MCP specification recommends (2025-11-25)
MAX_PAGES = 100  # pages of one server's tools/list followed per listing
PREFIX_RULE = 'letters, digits, "-" and "_", at most 32 characters, no "__", not ending in "_"'
_PREFIX = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_)){0,31}")
_SERVER_KEYS = ("command", "args", "env", "url", "headers", "prefix", "type")
_METHOD_NOT_FOUND, _INTERNAL_ERROR = -32601, -32603
_SET_LEVEL = "logging/setLevel"  # to every server that offers logging
_FORGOTTEN = 1024  # ids of cancelled requests remembered, so that a late reply is dropped without a word
# the listings that fan out: method -> (the result's array, the capability a server must offer to be asked,
# the key of each item that gets the prefix)
_LISTINGS = {"tools/list": ("tools", None, "name"), "prompts/list": ("prompts", "prompts", "name"),
             "resources/list": ("resources", "resources", "uri"),
             "resources/templates/list": ("resourceTemplates", "resources", "uriTemplate")}
# the requests that go to one server: method -> what they are called in errors, and where the prefixed name is
_ROUTED = {"tools/call": ("tool", ("name",)), "prompts/get": ("prompt", ("name",)),
           "resources/read": ("resource", ("uri",)), "resources/subscribe": ("resource", ("uri",)),
           "resources/unsubscribe": ("resource", ("uri",))}


@dataclass(frozen=True)
class ServerConfig:
    """One server of the servers file: `command` (the command and its args) with `env`, or `url` with
    `headers`; `line` is where its entry starts, for messages about it."""

    name: str
    prefix: str
    line: int
    command: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


def valid_prefix(prefix: str) -> bool:
    """Whether `prefix` may start tool names: `PREFIX__TOOL` splits back at its first `__`."""
    return _PREFIX.fullmatch(prefix) is not None and not prefix.endswith("_")


def split_name(name: str) -> tuple[str, str] | None:
    """`PREFIX__TOOL` as (PREFIX, TOOL), split at the first separator; None without one."""
    prefix, separator, tool = name.partition(SEPARATOR)
    return (prefix, tool) if separator and prefix and tool else None


# -- the servers file ---------------------------------------------------------------------------------


def read_servers(path: str) -> list[ServerConfig]:
    """Read and check a servers file; anything wrong is an InputError naming the line."""
    try:
        document = read_json_file(path)
    except InputError as exc:
        if exc.line is not None or not exc.message.startswith("duplicate key"):
            raise
        duplicates: list[int] = []
        with open(path, encoding="utf-8-sig") as handle:
            _key_lines(handle.read(), duplicates)
        raise InputError(path, duplicates[0] if duplicates else None, exc.message) from None
    with open(path, encoding="utf-8-sig") as handle:
        lines = _key_lines(handle.read())

    def fail(where: tuple[str | int, ...], message: str) -> InputError:
        return InputError(path, lines.get(where, 1), message)

    if not isinstance(document, dict):
        raise fail((), 'expected an object with "servers"')
    for key in document:
        if key != "servers":
            raise fail((key,), f'unknown key {json.dumps(key)} (expected "servers")')
    servers = document.get("servers")
    if not isinstance(servers, dict) or not servers:
        raise fail(("servers",), '"servers" must be an object naming at least one server')
    configs: list[ServerConfig] = []
    prefixes: dict[str, str] = {}
    for name, entry in servers.items():
        where = ("servers", name)
        quoted = json.dumps(name)
        if not isinstance(entry, dict):
            raise fail(where, f"server {quoted} must be an object")
        for key in entry:
            if key not in _SERVER_KEYS:
                raise fail((*where, key), f"server {quoted}: unknown key {json.dumps(key)}")
        def server_fail(key: str, text: str, where: tuple[str | int, ...] = where) -> InputError:
            return fail((*where, key) if key else where, text)

        config = _server(name, entry, lines.get(where, 1), server_fail)
        if config.prefix in prefixes:
            raise fail((*where, "prefix") if "prefix" in entry else where,
                       f"server {quoted}: prefix {json.dumps(config.prefix)} is already the prefix of server "
                       f"{json.dumps(prefixes[config.prefix])}")
        prefixes[config.prefix] = name
        configs.append(config)
    return configs


def _server(name: str, entry: dict[str, Any], line: int, fail: Callable[[str, str], InputError]) -> ServerConfig:
    quoted = json.dumps(name)
    if ("command" in entry) == ("url" in entry):
        raise fail("url" if "url" in entry else "", f'server {quoted} needs "command" or "url"'
                   if "url" not in entry else f'server {quoted} has both "command" and "url"; give one')
    kind = entry.get("type")
    if kind is not None and kind not in ("stdio", "http"):
        raise fail("type", f'server {quoted}: "type" must be "stdio" or "http" (as "command" or "url" says)')
    if kind is not None and (kind == "stdio") != ("command" in entry):
        raise fail("type", f'server {quoted}: "type" {json.dumps(kind)} does not go with '
                           f'{"command" if "command" in entry else "url"}')
    if "prefix" in entry:
        prefix = entry["prefix"]
        if not isinstance(prefix, str) or not valid_prefix(prefix):
            raise fail("prefix", f"server {quoted}: prefix {json.dumps(prefix)} is not valid ({PREFIX_RULE})")
    elif valid_prefix(name):
        prefix = name
    else:
        raise fail("", f'server {quoted}: the name is not a valid prefix ({PREFIX_RULE}); give a "prefix"')
    if "command" in entry:
        for key in ("headers",):
            if key in entry:
                raise fail(key, f'server {quoted}: "{key}" goes with "url", not "command"')
        command = entry["command"]
        if not isinstance(command, str) or not command:
            raise fail("command", f'server {quoted}: "command" must be a non-empty string')
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
            raise fail("args", f'server {quoted}: "args" must be an array of strings')
        env = entry.get("env")
        if env is not None and not _strings(env):
            raise fail("env", f'server {quoted}: "env" must be an object of strings')
        return ServerConfig(name, prefix, line, command=(command, *args), env=env)
    for key in ("args", "env"):
        if key in entry:
            raise fail(key, f'server {quoted}: "{key}" goes with "command", not "url"')
    url = entry["url"]
    if not isinstance(url, str) or not re.match(r"https?://[^/\s]", url):
        raise fail("url", f'server {quoted}: "url" must be an http:// or https:// URL')
    headers = entry.get("headers", {})
    if not _strings(headers):
        raise fail("headers", f'server {quoted}: "headers" must be an object of strings')
    return ServerConfig(name, prefix, line, url=url, headers=headers)


def _strings(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(item, str) for item in value.values())


def _key_lines(text: str, duplicates: list[int] | None = None) -> dict[tuple[str | int, ...], int]:
    """The line of every key (and array element) of a JSON text, by its path from the top; the lines of
    keys that repeat one of their object's go to `duplicates`."""
    found: dict[tuple[str | int, ...], int] = {(): 1}
    decoder = json.JSONDecoder()
    space = re.compile(r"[ \t\n\r]*")

    def skip(pos: int) -> int:
        return space.match(text, pos).end()  # type: ignore[union-attr]

    def value(pos: int, path: tuple[str | int, ...]) -> int:
        pos = skip(pos)
        opening = text[pos:pos + 1]
        if opening not in ("{", "["):
            return int(decoder.raw_decode(text, pos)[1])
        closing, index = ("}" if opening == "{" else "]"), 0
        pos = skip(pos + 1)
        if text[pos:pos + 1] == closing:
            return pos + 1
        while True:
            pos = skip(pos)
            line = text.count("\n", 0, pos) + 1
            if opening == "{":
                key, pos = scanstring(text, pos + 1)
                if (*path, key) in found and duplicates is not None:
                    duplicates.append(line)
                found[(*path, key)] = line
                pos = value(skip(pos) + 1, (*path, key))
            else:
                found[(*path, index)] = line
                pos = value(pos, (*path, index))
                index += 1
            pos = skip(pos)
            if text[pos:pos + 1] != ",":
                return pos + 1
            pos += 1

    value(0, ())
    return found


def http_server(url: str, headers: Mapping[str, str]) -> ServerEnd:
    """A server over Streamable HTTP (toolreplay.mcp.http.upstream, imported only when one is used);
    without the http extra, a UsageError that names it."""
    from toolreplay.mcp.http.upstream import HttpServer, parse_header

    # checked and expanded as --header is: ${VAR} is read from the environment, so no token need be in the file
    return HttpServer(url, headers=[parse_header(f"{name}: {value}", os.environ, "header")
                                    for name, value in headers.items()])


def start_servers(path: str, configs: list[ServerConfig]) -> dict[str, ServerEnd]:
    """The `ServerEnd` of each server, by prefix (nothing is started yet); a url entry without the HTTP
    upstream is an InputError at its line."""
    return {prefix: make() for prefix, make in server_factories(path, configs).items()}


def server_factories(path: str, configs: list[ServerConfig]) -> dict[str, Callable[[], ServerEnd]]:
    """What makes each server's `ServerEnd`, by prefix (for its first start and its restarts); a url entry
    without the HTTP upstream is an InputError at its line."""
    factories: dict[str, Callable[[], ServerEnd]] = {}
    for config in configs:
        if config.url is None:
            factories[config.prefix] = functools.partial(StdioServer, list(config.command), env=config.env)
            continue
        try:
            http_server(config.url, config.headers)  # checked now: a missing extra is said before anything starts
        except UsageError as exc:
            raise InputError(path, config.line, f"server {json.dumps(config.name)}: {exc}") from None
        factories[config.prefix] = functools.partial(http_server, config.url, config.headers)
    return factories


# -- the servers behind one ServerEnd -----------------------------------------------------------------


class _Fan:
    """A client request sent to several servers (initialize, a listing), answered once all answered."""

    def __init__(self, message: dict[str, Any], prefixes: list[str]) -> None:
        self.message = message
        self.waiting = set(prefixes)
        self.order = prefixes
        self.results: dict[str, dict[str, Any]] = {}  # prefix -> its result (initialize)
        self.items: dict[str, list[Any]] = {prefix: [] for prefix in prefixes}  # a listing, so far
        self.pages: dict[str, int] = {prefix: 0 for prefix in prefixes}


class _Restart:
    """The `initialize` a restarted server is sent, with the client's own parameters."""

    __slots__ = ("generation",)

    def __init__(self, generation: int) -> None:
        self.generation = generation


class _Call:
    """A client request sent to one server: its reply goes back as it came (a read's contents with their
    URIs prefixed, `prefix`)."""

    __slots__ = ("client_id", "prefix")

    def __init__(self, client_id: Any, prefix: str | None = None) -> None:
        self.client_id = client_id
        self.prefix = prefix


class MultiServer:
    """Several `ServerEnd`s, by prefix, behind one `ServerEnd` (see the module's docstring)."""

    def __init__(self, servers: Mapping[str, ServerEnd], *, names: Mapping[str, str] | None = None,
                 diagnostics: TextIO | None = None, restart: Mapping[str, Callable[[], ServerEnd]] | None = None,
                 backoff: Sequence[float] = RESTART_BACKOFF, on_restart: Callable[[str], None] | None = None) -> None:
        """`servers` by prefix, in the order listings show them; `names` gives each prefix the server's
        name (for the record and messages; default the prefix); `diagnostics` receives the lines said.
        `restart` makes a new end for a server that ended, started after `backoff[i]` seconds for the i-th
        attempt in a row (then no more; toolreplay.mcp.restart); `on_restart(prefix)` is called when a server
        ended and will be started again (the pins forget what its old listing verified)."""
        for prefix in servers:
            if not valid_prefix(prefix):
                raise ValueError(f"not a valid prefix: {prefix!r}")
        self._servers = dict(servers)
        self._names = {prefix: (names or {}).get(prefix, prefix) for prefix in servers}
        self._meta = {prefix: {"x-server": name} for prefix, name in self._names.items()}
        self._diagnostics = diagnostics
        self._lock = threading.Lock()
        self._writing = {prefix: threading.Lock() for prefix in servers}
        self._diag_lock = threading.Lock()
        self._up: queue.SimpleQueue[bytes | tuple[str] | None] = queue.SimpleQueue()
        self._deliverer: threading.Thread | None = None
        self._started: list[str] = []
        self._gone: set[str] = set()  # servers that ended or failed initialize: their tools are gone
        self._ended = False  # the on_ended sentinel is queued
        self._closing = False
        self._sent: dict[tuple[str, str], _Call | _Fan | _Restart] = {}  # (prefix, id key) -> what the reply answers
        self._cancelled: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._asked: dict[str, tuple[str, Any]] = {}  # our id key -> (prefix, the server's own id)
        self._asked_back: dict[tuple[str, str], Any] = {}  # (prefix, the server's id key) -> our id
        self._tokens: OrderedDict[str, str] = OrderedDict()  # progress tokens of servers' requests -> prefix
        self._counter = 0
        self._long_said: set[str] = set()
        self._capabilities: dict[str, dict[str, Any]] = {}  # prefix -> what it offered at initialize
        self._restart = dict(restart or {})
        self._on_restart = on_restart
        self._generation = {prefix: 0 for prefix in servers}  # a restarted server's end is the next generation
        self._backoffs = {prefix: Backoff(backoff) for prefix in servers}  # its restarts in a row
        self._restarting: set[str] = set()
        self._setups = {prefix: ClientSetup() for prefix in servers}  # the client's level and subscriptions, by server
        self._initialize: dict[str, Any] | None = None  # the client's initialize, sent again to a restarted server

    # -- ServerEnd ----------------------------------------------------------------------------------

    def start(self, on_line: LineHandler, on_ended: Callable[[str], None]) -> None:
        """Start every server; one that cannot be started stops those already started (a UsageError)."""
        self._deliverer = threading.Thread(target=self._deliver, args=(on_line, on_ended), name="mcp-multi-up",
                                           daemon=True)
        self._deliverer.start()
        for prefix, server in self._servers.items():
            try:
                server.start(self._line_handler(prefix, 0), self._end_handler(prefix, 0))
            except UsageError as exc:
                with self._lock:
                    self._ended = True  # as for one server that cannot start: no end is reported
                self._up.put(None)
                self.close()
                raise UsageError(f"server {json.dumps(self._names[prefix])}: {exc}") from None
            self._started.append(prefix)

    def send(self, data: bytes) -> None:
        """Route each line the router sends; never waits for a server's answer."""
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                message = parse_message(line)
            except (ValueError, RecursionError):
                self._answer(error_message(None, PARSE_ERROR, "Parse error"))
                continue
            for item in message if isinstance(message, list) else [message]:
                self._from_client(item, line + b"\n" if item is message else None)

    def close(self) -> int:
        """Close every server; the first failing exit status in the servers' order, else 0."""
        with self._lock:
            self._closing = True
        statuses = [self._servers[prefix].close() for prefix in list(self._started)]
        self._end()
        if self._deliverer is not None and self._deliverer is not threading.current_thread():
            self._deliverer.join(timeout=5)
        return next((status for status in statuses if status != 0), 0)

    # -- for the gate ---------------------------------------------------------------------------------

    @property
    def prefixes(self) -> frozenset[str]:
        """The servers' prefixes: the router names a resource read or prompt by the one its URI or name has."""
        return frozenset(self._servers)

    def record_meta(self, tool: str) -> Mapping[str, Any] | None:
        """The record's `x-server` of a call: the name of the server the tool's prefix names."""
        split = split_name(tool)
        return self._meta.get(split[0]) if split is not None else None

    # -- client to servers ----------------------------------------------------------------------------

    def _from_client(self, message: Any, line: bytes | None) -> None:
        if not isinstance(message, dict):
            self._answer(error_message(None, INVALID_REQUEST, "Invalid Request"))
            return
        method = message.get("method")
        if method is None and "id" in message:
            self._client_answer(message)
        elif not isinstance(method, str):
            if "id" in message:
                self._answer(error_message(message["id"], INVALID_REQUEST, "Invalid Request"))
        elif "id" not in message:
            self._client_notification(method, message, line)
        elif method == "initialize" or method in _LISTINGS:
            self._fan_out(message, line)
        elif method == _SET_LEVEL:
            self._set_level(message, line)
        elif method in _ROUTED:
            self._call(message)
        elif method == "completion/complete":
            self._complete(message)
        elif method == "ping":
            self._answer({"jsonrpc": "2.0", "id": message["id"], "result": {}})
        else:
            self._answer(error_message(message["id"], _METHOD_NOT_FOUND, f"Method not found: {method} (the proxy "
                                       "offers the tools, prompts and resources of its several servers)"))

    def _fan_out(self, message: dict[str, Any], line: bytes | None) -> None:
        params = message.get("params")
        listing = _LISTINGS.get(message["method"])
        if listing is not None and isinstance(params, dict) and params.get("cursor") is not None:
            self._answer(error_message(message["id"], INVALID_PARAMS, "Invalid params: unknown cursor (the "
                                       f"proxy lists every server's {listing[0]} in one page)"))
            return
        needs = listing[1] if listing is not None else None
        key = id_key(message["id"])
        with self._lock:
            if message["method"] == "initialize":
                self._initialize = message
            live = [prefix for prefix in self._servers if prefix not in self._gone
                    and (needs is None or needs in self._capabilities.get(prefix, {}))]
            fan = _Fan(message, live)
            for prefix in live:
                self._sent[(prefix, key)] = fan
        data = line or dump_message(message)
        for prefix in live:
            self._to_server(prefix, data)
        if not live:
            self._finish(fan)

    def _set_level(self, message: dict[str, Any], line: bytes | None) -> None:
        """logging/setLevel: to every server that offers logging, answered once all answered (Method not
        found when none does)."""
        key = id_key(message["id"])
        with self._lock:
            live = [prefix for prefix in self._servers if prefix not in self._gone
                    and isinstance(self._capabilities.get(prefix, {}).get("logging"), dict)]
            fan = _Fan(message, live)
            for prefix in live:
                self._sent[(prefix, key)] = fan
                self._setups[prefix].sent(key, _SET_LEVEL, message.get("params"))
        if not live:
            self._answer(error_message(message["id"], _METHOD_NOT_FOUND, f"Method not found: {_SET_LEVEL} (no "
                                       "server offers logging)"))
            return
        data = line or dump_message(message)
        for prefix in live:
            self._to_server(prefix, data)

    def _call(self, message: dict[str, Any]) -> None:
        """A request about one tool, prompt or resource: to the server its prefix names, the prefix taken off."""
        kind, (key,) = _ROUTED[message["method"]]
        params = message.get("params")
        name = params.get(key) if isinstance(params, dict) else None
        split = split_name(name) if isinstance(name, str) else None
        if split is None or split[0] not in self._servers:
            self._answer(error_message(message["id"], INVALID_PARAMS, f"Invalid params: no server has the {kind} "
                                       f"{json.dumps(name)}"))
            return
        assert isinstance(params, dict)
        self._send_one(message, split[0], {**params, key: split[1]}, message["method"] == "resources/read")

    def _complete(self, message: dict[str, Any]) -> None:
        """completion/complete: to the server of the prompt or resource template its `ref` names."""
        params = message.get("params")
        ref = params.get("ref") if isinstance(params, dict) else None
        kind = ref.get("type") if isinstance(ref, dict) else None
        key = {"ref/prompt": "name", "ref/resource": "uri"}.get(kind) if isinstance(kind, str) else None
        name = ref.get(key) if key is not None and isinstance(ref, dict) else None
        split = split_name(name) if isinstance(name, str) else None
        if split is None or split[0] not in self._servers:
            self._answer(error_message(message["id"], INVALID_PARAMS, "Invalid params: no server has the "
                                       f"{'prompt' if key == 'name' else 'resource'} {json.dumps(name)}"))
            return
        assert isinstance(params, dict) and isinstance(ref, dict) and key is not None
        self._send_one(message, split[0], {**params, "ref": {**ref, key: split[1]}})

    def _send_one(self, message: dict[str, Any], prefix: str, params: dict[str, Any], read: bool = False) -> None:
        with self._lock:
            gone = prefix in self._gone
            if message["method"] in RESENT:  # an unsubscribe counts even while the server is gone
                self._setups[prefix].sent(id_key(message["id"]), message["method"], params)
            if not gone:
                self._sent[(prefix, id_key(message["id"]))] = _Call(message["id"], prefix if read else None)
        if gone:
            self._answer(self._gone_error(message["id"], prefix))
            return
        self._to_server(prefix, dump_message({**message, "params": params}))

    def _client_answer(self, message: dict[str, Any]) -> None:
        """The client's answer to a server's request: its id back to the server's own."""
        with self._lock:
            asked = self._asked.pop(id_key(message["id"]), None)
            if asked is not None:
                self._asked_back.pop((asked[0], id_key(asked[1])), None)
        if asked is None:
            self._say("dropped a response from the client to no request of a server")
            return
        prefix, own_id = asked
        self._to_server(prefix, dump_message({**message, "id": own_id}))

    def _client_notification(self, method: str, message: dict[str, Any], line: bytes | None) -> None:
        params = message.get("params")
        data = line or dump_message(message)
        if method == "notifications/cancelled":
            if not isinstance(params, dict) or "requestId" not in params:
                return
            key = id_key(params["requestId"])
            with self._lock:
                targets = [prefix for prefix in self._servers if (prefix, key) in self._sent]
                for prefix in targets:
                    self._forget((prefix, key))
            for prefix in targets:
                self._to_server(prefix, data)
            return
        if method == "notifications/progress":  # about a server's request to the client
            token = params.get("progressToken") if isinstance(params, dict) else None
            with self._lock:
                owner = self._tokens.get(id_key(token))
            if owner is not None:
                self._to_server(owner, data)
            return
        with self._lock:
            live = [prefix for prefix in self._started if prefix not in self._gone]
        for prefix in live:  # notifications/initialized, roots/list_changed, and the rest: to every server
            self._to_server(prefix, data)

    def _forget(self, slot: tuple[str, str]) -> None:
        """A request the client cancelled: a late reply to it is dropped without a word (hold the lock)."""
        entry = self._sent.pop(slot, None)
        if isinstance(entry, _Fan):
            entry.waiting.discard(slot[0])
        self._cancelled[slot] = None
        while len(self._cancelled) > _FORGOTTEN:
            self._cancelled.popitem(last=False)

    # -- servers to the client ------------------------------------------------------------------------

    def _line_handler(self, prefix: str, generation: int) -> LineHandler:
        return lambda line: self._from_server(prefix, line) if self._generation[prefix] == generation else None

    def _end_handler(self, prefix: str, generation: int) -> Callable[[str], None]:
        return lambda reason: self._server_gone(prefix, reason) if self._generation[prefix] == generation else None

    def _from_server(self, prefix: str, line: bytes) -> None:
        try:
            message = parse_message(line)
        except (ValueError, RecursionError) as exc:
            self._say(f"malformed JSON from server {self._quoted(prefix)}: {exc}")
            self._to_server(prefix, dump_message(error_message(None, PARSE_ERROR, "Parse error")))
            return
        for item in message if isinstance(message, list) else [message]:
            self._server_message(prefix, item, line if item is message else None)

    def _server_message(self, prefix: str, message: Any, line: bytes | None) -> None:
        if not isinstance(message, dict):
            self._say(f"dropped a message from server {self._quoted(prefix)} that is not an object")
            return
        method = message.get("method")
        if method is None and "id" in message:
            self._server_answer(prefix, message, line)
        elif not isinstance(method, str):
            self._say(f"dropped a message from server {self._quoted(prefix)} with no method")
        elif "id" in message:
            self._server_request(prefix, message)
        elif method == "notifications/cancelled":  # the server withdraws its own request to the client
            params = message.get("params")
            if not isinstance(params, dict) or "requestId" not in params:
                return
            with self._lock:
                own = self._asked_back.pop((prefix, id_key(params["requestId"])), None)
                if own is not None:
                    self._asked.pop(id_key(own), None)
            if own is not None:
                self._up.put(dump_message({**message, "params": {**params, "requestId": own}}))
        elif method == "notifications/resources/updated":  # a subscribed resource changed: under its prefixed URI
            params = message.get("params")
            if isinstance(params, dict) and isinstance(params.get("uri"), str):
                self._up.put(dump_message({**message, "params": {**params, "uri": prefix + SEPARATOR + params["uri"]}}))
        else:  # tools/list_changed, progress (the client's own tokens), log messages
            self._up.put(line if line is not None else dump_message(message))

    def _server_request(self, prefix: str, message: dict[str, Any]) -> None:
        """A server's request to the client (elicitation, sampling, roots, ping), under an id of ours."""
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        with self._lock:
            self._counter += 1
            own = f"{prefix}{SEPARATOR}{self._counter}"
            self._asked[id_key(own)] = (prefix, message["id"])
            self._asked_back[(prefix, id_key(message["id"]))] = own
            if isinstance(meta, dict) and "progressToken" in meta:
                self._tokens[id_key(meta["progressToken"])] = prefix
                while len(self._tokens) > _FORGOTTEN:
                    self._tokens.popitem(last=False)
        self._up.put(dump_message({**message, "id": own}))

    def _server_answer(self, prefix: str, message: dict[str, Any], line: bytes | None) -> None:
        slot = (prefix, id_key(message["id"]))
        with self._lock:
            own = self._setups[prefix].own_answer(slot[1], message)
            entry = self._sent.pop(slot, None) if own is None else None
            late = entry is None and slot in self._cancelled
            if late:
                del self._cancelled[slot]
            if isinstance(entry, _Call) or (isinstance(entry, _Fan) and entry.message["method"] == _SET_LEVEL):
                self._setups[prefix].answered(slot[1], message)
        if own is not None:  # to a level or subscription sent again after a restart: the proxy's own
            if own:
                self._say(f"server {self._quoted(prefix)} {own}")
            return
        if entry is None:
            if not late:
                self._say(f"dropped a response from server {self._quoted(prefix)} to no request sent to it")
            return
        if isinstance(entry, _Restart):
            self._restarted(prefix, entry, message.get("result"))
            return
        if isinstance(entry, _Call):
            if entry.prefix is not None:
                message = _contents_prefixed(message, entry.prefix)
                line = None
            self._up.put(line if line is not None else dump_message(message))
            return
        result = message.get("result")
        if entry.message["method"] == _SET_LEVEL:
            self._level_set(entry, prefix, message)
        elif not isinstance(result, dict):
            error = message.get("error")
            text = error.get("message") if isinstance(error, dict) else None
            self._fan_failed(entry, prefix, str(text) if text is not None else "no result")
        elif entry.message["method"] == "initialize":
            entry.results[prefix] = result
            capabilities = result.get("capabilities")
            with self._lock:
                self._capabilities[prefix] = capabilities if isinstance(capabilities, dict) else {}
            self._fan_done(entry, prefix)
        else:
            self._listed(entry, prefix, result)

    def _level_set(self, fan: _Fan, prefix: str, message: dict[str, Any]) -> None:
        """One server's answer to the client's logging level: a refusal is kept, to answer with if all refused."""
        if isinstance(message.get("result"), dict):
            fan.results[prefix] = message["result"]
        else:
            error = message.get("error")
            fan.items[prefix] = [error if isinstance(error, dict) else {"message": "no result"}]
        self._fan_done(fan, prefix)

    def _listed(self, fan: _Fan, prefix: str, result: dict[str, Any]) -> None:
        """One page of a server's listing: kept under their prefixed names or URIs; the next page asked for."""
        array, _, key = _LISTINGS[fan.message["method"]]
        items = result.get(array)
        if not isinstance(items, list):
            self._fan_failed(fan, prefix, f'no "{array}" array')
            return
        for item in items:
            if isinstance(item, dict) and isinstance(item.get(key), str):
                fan.items[prefix].append({**item, key: prefix + SEPARATOR + item[key]})
        cursor = result.get("nextCursor")
        if cursor is None:
            self._fan_done(fan, prefix)
            return
        fan.pages[prefix] += 1
        if fan.pages[prefix] >= MAX_PAGES:
            self._fan_failed(fan, prefix, f"more than {MAX_PAGES} pages")
            return
        params = fan.message.get("params")
        with self._lock:
            self._counter += 1
            own = f"toolreplay-page-{self._counter}"  # a client's id in flight could not be told from it
            while (prefix, id_key(own)) in self._sent:
                own += "+"
            self._sent[(prefix, id_key(own))] = fan
        self._to_server(prefix, dump_message({"jsonrpc": "2.0", "id": own, "method": fan.message["method"], "params": {
            **(params if isinstance(params, dict) else {}), "cursor": cursor}}))

    def _fan_failed(self, fan: _Fan, prefix: str, why: str) -> None:
        fan.items[prefix] = []
        if fan.message["method"] in _LISTINGS:
            what = _LISTINGS[fan.message["method"]][0]
            what = {"resourceTemplates": "resource templates"}.get(what, what)
            self._say(f"server {self._quoted(prefix)} failed to list its {what}: {escape_text(why)}; they are left out")
        else:
            self._say(f"server {self._quoted(prefix)} failed to initialize: {escape_text(why)}; its tools are left "
                      "out of this session")
            with self._lock:
                self._gone.add(prefix)
        self._fan_done(fan, prefix)

    def _fan_done(self, fan: _Fan, prefix: str) -> None:
        with self._lock:
            fan.waiting.discard(prefix)
            complete = not fan.waiting
            if complete:
                fan.waiting.add("")  # answered once
        if complete:
            self._finish(fan)

    def _finish(self, fan: _Fan) -> None:
        """Answer the client's request with what every server answered."""
        client_id = fan.message["id"]
        if fan.message["method"] == _SET_LEVEL:
            self._answer_level(fan)
            return
        if fan.message["method"] in _LISTINGS:
            items = [item for prefix in fan.order for item in fan.items[prefix]]
            for tool in items if fan.message["method"] == "tools/list" else ():
                name = tool["name"]
                if len(name) > NAME_LIMIT and name not in self._long_said:
                    self._long_said.add(name)
                    self._say(f"tool '{escape_text(name)}' has a name of {len(name)} characters, longer than the "
                              f"{NAME_LIMIT} the MCP specification recommends: some clients refuse it")
            array = _LISTINGS[fan.message["method"]][0]
            self._up.put(dump_message({"jsonrpc": "2.0", "id": client_id, "result": {array: items}}))
            return
        answered = [prefix for prefix in fan.order if prefix in fan.results]
        if not answered:
            self._up.put(dump_message(error_message(client_id, _INTERNAL_ERROR, "Internal error: no server "
                                                    "answered initialize")))
            return
        versions = [version for prefix in answered
                    if isinstance(version := fan.results[prefix].get("protocolVersion"), str)]
        params = fan.message.get("params")
        asked = params.get("protocolVersion") if isinstance(params, dict) else None
        result: dict[str, Any] = {
            "protocolVersion": min(versions) if versions else asked,
            "capabilities": self._merged_capabilities(answered),
            "serverInfo": {"name": "toolreplay-mcp-proxy", "version": __version__}}
        instructions = [f"Tools named {prefix}{SEPARATOR}*: {text}" for prefix in answered
                        if isinstance(text := fan.results[prefix].get("instructions"), str) and text]
        if instructions:
            result["instructions"] = "\n\n".join(instructions)
        self._up.put(dump_message({"jsonrpc": "2.0", "id": client_id, "result": result}))

    def _answer_level(self, fan: _Fan) -> None:
        """Set, when one server took the level (each refusal said); else the first server's refusal."""
        client_id = fan.message["id"]
        refusals = [(prefix, fan.items[prefix][0]) for prefix in fan.order
                    if prefix not in fan.results and fan.items[prefix]]
        if not fan.results:
            first = refusals[0][1] if refusals else {"message": f"Internal error: no server answered {_SET_LEVEL}"}
            code = first.get("code")
            self._up.put(dump_message(error_message(client_id, code if isinstance(code, int) else _INTERNAL_ERROR,
                                                    str(first.get("message")))))
            return
        for prefix, error in refusals:
            self._say(f"server {self._quoted(prefix)} refused the logging level: "
                      f"{escape_text(str(error.get('message')))}")
        self._up.put(dump_message({"jsonrpc": "2.0", "id": client_id, "result": {}}))

    def _merged_capabilities(self, answered: list[str]) -> dict[str, Any]:
        """Tools always (their listing changes as servers end); prompts, resources (with `subscribe` when one
        server subscribes), completions and logging when one server offers them."""
        with self._lock:
            offered = [self._capabilities.get(prefix, {}) for prefix in answered]
        merged: dict[str, Any] = {"tools": {"listChanged": True}}
        if any(isinstance(caps.get("prompts"), dict) for caps in offered):
            merged["prompts"] = {"listChanged": True}
        resources = [caps["resources"] for caps in offered if isinstance(caps.get("resources"), dict)]
        if resources:
            merged["resources"] = {"listChanged": True, **({"subscribe": True} if any(
                item.get("subscribe") is True for item in resources) else {})}
        if any(isinstance(caps.get("completions"), dict) for caps in offered):
            merged["completions"] = {}
        if any(isinstance(caps.get("logging"), dict) for caps in offered):
            merged["logging"] = {}
        return merged

    def _server_gone(self, prefix: str, reason: str) -> None:
        """A server ended: its calls in flight are answered with an error, its tools leave the listing."""
        with self._lock:
            closing = self._closing
            was_gone = prefix in self._gone
            self._gone.add(prefix)
            mine = [slot for slot in self._sent if slot[0] == prefix]
            entries = [self._sent.pop(slot) for slot in mine]
            mine_asked = sorted(slot for slot in self._asked_back if slot[0] == prefix)  # sorted: one order every time
            asked = [self._asked_back.pop(slot) for slot in mine_asked]
            for own in asked:
                self._asked.pop(id_key(own), None)
            self._restarting.discard(prefix)  # a restarted server that ended before it was back: the next attempt
            restarting = not closing and self._schedule_restart(prefix)
            everyone = all(other in self._gone for other in self._servers) and not self._restarting
        if restarting and self._on_restart is not None:  # before any answer lets the client call again
            self._on_restart(prefix)
        if not closing:
            if not was_gone:
                self._say(f"server {self._quoted(prefix)} ended ({escape_text(reason)}): " + (
                    "it is started again" if restarting else "its tools are gone for the rest of the session"))
            for entry in entries:
                if isinstance(entry, _Call):  # it may have run: the router records a write's outcome as unknown
                    self._up.put(dump_message(no_answer_error(
                        entry.client_id, f"the server {self._quoted(prefix)} ended before it answered")))
            for data in withdrawn(asked):
                self._up.put(data)
            for fan in {id(entry): entry for entry in entries if isinstance(entry, _Fan)}.values():
                fan.items[prefix] = []
                self._fan_done(fan, prefix)
            if not everyone and not was_gone:
                with self._lock:
                    offered = self._capabilities.get(prefix, {})
                for data in list_changed(offered):
                    self._up.put(data)
        if everyone:
            self._end()

    # -- restarts -------------------------------------------------------------------------------------------

    def _schedule_restart(self, prefix: str) -> bool:
        """Start the server again after its backoff (hold the lock); False when it is not restarted."""
        if prefix not in self._restart or prefix in self._restarting or self._initialize is None:
            return False
        delay = self._backoffs[prefix].next_delay()
        if delay is None:
            return False
        self._restarting.add(prefix)
        start_later(delay, self._start_again, prefix)
        return True

    def _start_again(self, prefix: str) -> None:
        """A new end for the server, sent the client's initialize; `_restarted` takes it back into service."""
        with self._lock:
            if self._closing:
                self._restarting.discard(prefix)
                return
            old = self._servers[prefix]
            self._generation[prefix] += 1
            generation = self._generation[prefix]
        old.close()
        try:
            server = self._restart[prefix]()
            server.start(self._line_handler(prefix, generation), self._end_handler(prefix, generation))
        except (UsageError, OSError) as exc:
            self._say(f"server {self._quoted(prefix)} could not be started again: {escape_text(str(exc))}")
            self._retry_or_give_up(prefix)
            return
        with self._lock:
            closing = self._closing
            if not closing:
                self._servers[prefix] = server
        if closing:  # the session ended while it started: it is not left running
            server.close()
            return
        with self._lock:
            own, data = restart_request(self._initialize or {}, generation)
            self._sent[(prefix, id_key(own))] = _Restart(generation)
        self._to_server(prefix, data)

    def _retry_or_give_up(self, prefix: str) -> None:
        with self._lock:
            self._restarting.discard(prefix)
            again = not self._closing and self._schedule_restart(prefix)
            everyone = all(other in self._gone for other in self._servers) and not self._restarting
        if not again:
            self._say(f"server {self._quoted(prefix)} was not started again: its tools are gone for the rest of "
                      "the session")
        if everyone:
            self._end()

    def _restarted(self, prefix: str, entry: _Restart, result: Any) -> None:
        """The restarted server answered initialize: its tools (and prompts, resources) are back."""
        if not isinstance(result, dict):
            self._say(f"server {self._quoted(prefix)} failed to initialize again")
            with self._lock:  # on the server's own reader thread, which closing it would wait for:
                self._generation[prefix] += 1  # its end is not a new death; the next attempt closes it
            self._retry_or_give_up(prefix)
            return
        capabilities = result.get("capabilities")
        with self._lock:
            self._capabilities[prefix] = capabilities if isinstance(capabilities, dict) else {}
            offered = self._capabilities[prefix]
        self._to_server(prefix, dump_message(INITIALIZED))
        with self._lock:
            again = self._setups[prefix].again(entry.generation)
        for data in again:  # the client's level and subscriptions to its resources: their answers are the proxy's
            self._to_server(prefix, data)
        with self._lock:
            self._gone.discard(prefix)
            self._restarting.discard(prefix)
            self._backoffs[prefix].reset()
        self._say(f"server {self._quoted(prefix)} is back (started again): its tools are listed again")
        for data in list_changed(offered):
            self._up.put(data)

    def _gone_error(self, client_id: Any, prefix: str) -> dict[str, Any]:
        return not_sent_error(client_id, f"the server {self._quoted(prefix)} has ended")

    # -- writing ----------------------------------------------------------------------------------------

    def _to_server(self, prefix: str, data: bytes) -> None:
        with self._writing[prefix]:
            try:
                self._servers[prefix].send(data)
            except OSError:
                self._say(f"server {self._quoted(prefix)} no longer reads its input")

    def _answer(self, message: dict[str, Any]) -> None:
        """A reply of the proxy's own to the client (through the router, like the servers' lines)."""
        self._up.put(dump_message(message))

    def _end(self) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
        self._up.put(("server exited",))

    def _deliver(self, on_line: LineHandler, on_ended: Callable[[str], None]) -> None:
        """The one thread that hands lines to the router, in the order they came, then the end."""
        while True:
            item = self._up.get()
            if item is None:
                return
            if isinstance(item, tuple):
                on_ended(item[0])
                return
            on_line(item)

    def _quoted(self, prefix: str) -> str:
        return "'" + escape_text(self._names[prefix]) + "'"

    def _say(self, text: str) -> None:
        if self._diagnostics is not None:
            say_to(self._diagnostics, self._diag_lock, text)


def _contents_prefixed(message: dict[str, Any], prefix: str) -> dict[str, Any]:
    """A resources/read reply with each content's URI under the server's prefix, as the client named it."""
    result = message.get("result")
    contents = result.get("contents") if isinstance(result, dict) else None
    if not isinstance(result, dict) or not isinstance(contents, list):
        return message
    return {**message, "result": {**result, "contents": [
        {**item, "uri": prefix + SEPARATOR + item["uri"]} if isinstance(item, dict) and isinstance(item.get("uri"), str)
        else item for item in contents]}}
