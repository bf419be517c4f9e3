"""The MCP commands: mcp-proxy (guard and record a stdio or remote MCP server) and mcp-pins (review pinned tools)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from toolreplay.audit.signers import read_secret_file
from toolreplay.cli._io import IO
from toolreplay.errors import UsageError
from toolreplay.format.text import escape_text
from toolreplay.guard.assembly import GuardConfig, build_guard
from toolreplay.mcp.config import CLIENTS, client_config
from toolreplay.mcp.pins import ToolPins, accept_pending, pending_path, read_pins
from toolreplay.mcp.proxy import McpProxy
from toolreplay.mcp.restart import RestartingServer
from toolreplay.mcp.servers import SEPARATOR, MultiServer, ServerConfig, read_servers, server_factories
from toolreplay.mcp.transport import StdioServer

if TYPE_CHECKING:
    import asyncio

    from toolreplay.mcp.transport import ServerEnd

__all__ = ["register"]

_STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")
_PROXY_EXIT_CODES = """exit codes:
  0  the session ended: the client closed the connection, or a signal (SIGTERM, SIGINT, SIGHUP);
     with --listen: a signal ended every session
  1  the server ended on its own with a failure and was not started again (--no-restart, or its restarts
     failed; a server URL: its session expired, the connection failed)
  2  usage error (bad arguments, an unreadable policy, pins, approvals or record file, a server that cannot
     start)"""
_PINS_EXIT_CODES = """exit codes:
  0  done; for show: nothing waits for review
  1  show: tool definitions wait for review (accept them with: toolreplay mcp-pins accept PINS)
  2  usage error (bad arguments, an unreadable pins file)"""


def _run_proxy(args: argparse.Namespace, io: IO) -> int:
    command = args.server[1:] if args.server[:1] == ["--"] else args.server
    if args.servers is not None and command:
        raise UsageError("mcp-proxy takes --servers FILE or a server command after --, not both")
    if args.servers is None and not command:
        raise UsageError("mcp-proxy needs the server command after --, or --servers FILE")
    configs = read_servers(args.servers) if args.servers is not None else None
    headers = _headers(command, args)
    if args.listen is not None:
        return _run_listener(args, command, configs, headers, io)
    for flag, value in (("--records", args.records), ("--token-file", args.token_file),
                        ("--listen-public", args.listen_public or None), ("--allow-origin", args.allow_origin),
                        ("--listen-head-timeout", args.listen_head_timeout),
                        ("--listen-max-connections", args.listen_max_connections)):
        if value is not None:
            raise UsageError(f"{flag} needs --listen")
    guard = build_guard(_guard_config(args, record=args.record))  # a malformed file: the proxy does not start
    if args.print_config:  # what would start now starts from the client too
        io.stdout.write(client_config(args.print_config, guard.policy.agent if args.name is None else args.name,
                                      sys.executable, _proxy_arguments(args, command)))
        return 0
    if args.name is not None:
        raise UsageError("--name is used with --print-config")
    pins = ToolPins(args.pins) if args.pins else None
    recorder = guard.open_record() if args.record else None
    try:
        upstream: list[str] | ServerEnd
        if configs is not None:  # started once every file given has been read and opened
            upstream = _several(args.servers, configs, io, restart=not args.no_restart, pins=pins)
        elif args.no_restart:
            upstream = _upstream(command, headers, io)
        else:  # a server that ends is started again, as a server of a servers file is
            upstream = RestartingServer(lambda: _server_end(_upstream(command, headers, io)), diagnostics=io.stderr,
                                        on_restart=None if pins is None else pins.forget)
        io.stdout.flush()
        proxy = McpProxy(upstream, guard, client_in=io.stdin, client_out=io.stdout.buffer,
                         diagnostics=io.stderr, recorder=recorder, pins=pins)
        previous = _on_stop_signals(lambda: proxy.stop("signal"))
        try:
            status = proxy.run()
        finally:
            for name, handler in previous.items():
                signal.signal(getattr(signal, name), handler)
    finally:
        if recorder is not None:
            recorder.close()
    return 0 if status == 0 or proxy.exit_reason != "server exited" else 1


def _guard_config(args: argparse.Namespace, *, record: str | None = None, records: str | None = None) -> GuardConfig:
    """The guard the options describe (built and validated once, by `build_guard`)."""
    if args.inbox_timeout is not None and not args.inbox:
        raise UsageError("--inbox-timeout needs --inbox DIR")
    return GuardConfig(args.policy, record=record, records=records, approvals=args.approvals or None,
                       redact_key=args.redact_key, pins=args.pins or None,
                       read_cache=args.read_cache and not args.no_read_cache, mutators=tuple(args.mutator or ()),
                       repeatable=tuple(args.repeatable or ()), approvers=args.approvers or None,
                       receipts=args.receipts or None, inbox=args.inbox or None,
                       inbox_timeout=300.0 if args.inbox_timeout is None else args.inbox_timeout)


def _proxy_arguments(args: argparse.Namespace, command: list[str]) -> list[str]:
    """The arguments that start this same proxy from anywhere: `-m toolreplay mcp-proxy`, the options given
    with absolute file paths (a client does not start in this folder), `--`, the server command as given."""
    found = ["-m", "toolreplay", "mcp-proxy", "--policy", os.path.abspath(args.policy)]
    for option, value in (("--record", args.record), ("--redact-key", args.redact_key), ("--pins", args.pins),
                          ("--approvals", args.approvals), ("--approvers", args.approvers),
                          ("--receipts", args.receipts), ("--inbox", args.inbox)):
        if value:
            found += [option, os.path.abspath(value)]
    for option, names in (("--mutator", args.mutator), ("--repeatable", args.repeatable), ("--header", args.header),
                          ("--header-env", args.header_env)):
        for name in names or ():
            found += [option, name]
    if args.inbox_timeout is not None:
        found += ["--inbox-timeout", repr(args.inbox_timeout)]
    if args.read_cache and not args.no_read_cache:
        found.append("--read-cache")
    if args.no_restart:
        found.append("--no-restart")
    if args.servers is not None:
        return [*found, "--servers", os.path.abspath(args.servers)]
    return [*found, "--", *command]
def _listen_address(text: str) -> tuple[str, int]:
    """`PORT`, `HOST:PORT` or `[IPV6]:PORT`; the host defaults to 127.0.0.1."""
    host, _, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not port.isdigit() or int(port) > 65535 or (":" in host and not text.startswith("[")):
        raise UsageError(f"--listen {text}: expected PORT or HOST:PORT")
    return host or "127.0.0.1", int(port)


def _run_listener(args: argparse.Namespace, command: list[str], configs: list[ServerConfig] | None,
                  headers: list[tuple[str, str]], io: IO) -> int:
    from toolreplay.guard.hosts import is_loopback
    from toolreplay.mcp.http.listen import DEFAULT_HEAD_TIMEOUT, DEFAULT_MAX_CONNECTIONS, HttpListener

    host, port = _listen_address(args.listen)
    if args.record is not None:
        raise UsageError("--listen records each session on its own: use --records DIR, not --record")
    if args.records is None:
        raise UsageError("--listen needs --records DIR (one sealed record per client session)")
    if not is_loopback(host) and not args.listen_public:
        raise UsageError(f"--listen {escape_text(host)}: not a loopback address; serving other machines needs "
                         "--listen-public and --token-file")
    if args.listen_public and args.token_file is None:
        raise UsageError("--listen-public needs --token-file FILE (a bearer token every request must carry)")
    token = read_secret_file(args.token_file) if args.token_file is not None else None
    if token is not None and len(token) < 16:
        raise UsageError(f"--token-file {args.token_file}: the token must be at least 16 bytes")
    if args.print_config:
        raise UsageError("--print-config prints a stdio client's configuration; an HTTP client is given the URL")
    if args.max_body < 1 or args.session_timeout <= 0:
        raise UsageError("--max-body and --session-timeout must be positive")
    head_timeout = DEFAULT_HEAD_TIMEOUT if args.listen_head_timeout is None else args.listen_head_timeout
    if not 0 < head_timeout <= 3600:
        raise UsageError(f"--listen-head-timeout {args.listen_head_timeout}: expected seconds, more than 0 and "
                         "at most 3600")
    max_connections = DEFAULT_MAX_CONNECTIONS if args.listen_max_connections is None else args.listen_max_connections
    if max_connections < 1:
        raise UsageError(f"--listen-max-connections {max_connections}: expected at least 1")
    if not args.path.startswith("/"):
        raise UsageError(f"--path {escape_text(args.path)}: a path starts with /")
    guard = build_guard(_guard_config(args, records=args.records))
    pins = ToolPins(args.pins) if args.pins else None

    # the client's Authorization (and the OAuth flow: 401s, the protected resource metadata) goes to a server URL,
    # unless --header gives one of its own or the listener wants a token of its own
    passes_authorization = configs is None and _is_url(command) and token is None and not any(
        name.lower() == "authorization" for name, _ in headers)

    def upstream(client_headers: Mapping[str, str]) -> ServerEnd:
        """Each client session's own server, or own set of servers. A server URL gets the client's
        `Authorization` header unchanged (unless --header gives one, or it is the proxy's own token)."""
        if configs is not None:
            return _several(args.servers, configs, io, restart=not args.no_restart, pins=pins)
        if not _is_url(command):
            return StdioServer(command)
        passed = [] if not passes_authorization else [
            ("Authorization", value) for name, value in client_headers.items() if name.lower() == "authorization"]
        # on the listener's event loop: each message crosses one thread fewer
        server = _upstream(command, [*headers, *passed], io, loop=listener.loop,
                           client_authorization=passes_authorization)
        assert not isinstance(server, list)
        return server

    listener = HttpListener(upstream, guard, records=args.records, diagnostics=io.stderr, host=host, port=port,
                            path=args.path, token=token, allowed_origins=args.allow_origin or (),
                            max_body=args.max_body, session_timeout=args.session_timeout, pins=pins,
                            head_timeout=head_timeout, max_connections=max_connections,
                            upstream=["--servers", os.path.abspath(args.servers)] if configs is not None else command,
                            resource=command[0] if passes_authorization else None)
    stop = threading.Event()
    previous = _on_stop_signals(stop.set)
    try:
        listener.start()
        try:
            io.stderr.write(f"listening on {listener.url}\n")
            io.stderr.flush()
            stop.wait()
        finally:
            listener.close()
    finally:
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)
    return 0
def _several(path: str, configs: list[ServerConfig], io: IO, *, restart: bool = True,
             pins: ToolPins | None = None) -> MultiServer:
    """The servers of a servers file behind one end; a server that ends is started again (with backoff)
    unless `restart` is False, and the pins verify its tools anew."""
    factories = server_factories(path, configs)
    return MultiServer({prefix: make() for prefix, make in factories.items()}, restart=factories if restart else None,
                       names={config.prefix: config.name for config in configs}, diagnostics=io.stderr,
                       on_restart=None if pins is None else lambda prefix: pins.forget(prefix + SEPARATOR))


def _server_end(server: list[str] | ServerEnd) -> ServerEnd:
    """A server command as the end that runs it."""
    return StdioServer(server) if isinstance(server, list) else server


def _is_url(command: list[str]) -> bool:
    """One http:// or https:// argument after --: a remote server over Streamable HTTP."""
    return len(command) == 1 and command[0].startswith(("http://", "https://"))


def _headers(command: list[str], args: argparse.Namespace) -> list[tuple[str, str]]:
    """The --header and --header-env headers for a server URL (values read from the environment)."""
    if not args.header and not args.header_env:
        return []
    if not _is_url(command):
        raise UsageError("--header and --header-env need a server URL (http:// or https://) after --")
    from toolreplay.mcp.http.upstream import parse_header

    headers = [parse_header(text, os.environ) for text in args.header or []]
    for text in args.header_env or []:
        name, equals, variable = text.partition("=")
        if not equals or not variable:
            raise UsageError("--header-env needs NAME=ENVVAR (the header's name, the variable holding its value)")
        headers.append(parse_header(f"{name}: ${{{variable}}}", os.environ, "--header-env"))
    return headers


def _upstream(command: list[str], headers: list[tuple[str, str]], io: IO, loop: asyncio.AbstractEventLoop | None = None,
              client_authorization: bool = False) -> list[str] | ServerEnd:
    """The server: one http:// or https:// argument is a remote server over Streamable HTTP (with
    `headers`, run on `loop` when given), anything else a command to run."""
    if not _is_url(command):
        return command
    # imported here: asyncio and the HTTP upstream cost every other command its start-up time
    from toolreplay.mcp.http.upstream import HttpServer

    lock = threading.Lock()

    def say(text: str) -> None:
        with lock:
            io.stderr.write("toolreplay mcp-proxy: " + escape_text(text) + "\n")
            io.stderr.flush()

    return HttpServer(command[0], headers=headers, say=say, loop=loop, client_authorization=client_authorization)


def _on_stop_signals(stop: Callable[[], None]) -> dict[str, Any]:
    """Let SIGTERM, SIGINT and SIGHUP end the session cleanly (only the main thread may set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for name in _STOP_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None:
            previous[name] = signal.signal(number, lambda signum, frame: stop())
    return previous


def _run_pins_show(args: argparse.Namespace, io: IO) -> int:
    pinned = read_pins(args.pins) if os.path.exists(args.pins) else {}
    pending_file = pending_path(args.pins)
    pending = read_pins(pending_file) if os.path.exists(pending_file) else {}
    for name in sorted(pinned):
        io.stdout.write(f"pinned {escape_text(name)} {pinned[name]['sha256'][:16]}\n")
    for name in sorted(pending):
        what = "changed" if name in pinned else "new"
        io.stdout.write(f"pending {escape_text(name)} {pending[name]['sha256'][:16]} ({what})\n")
    return 1 if pending else 0


def _run_pins_accept(args: argparse.Namespace, io: IO) -> int:
    accepted = accept_pending(args.pins, args.tool)
    if not accepted:
        io.stdout.write(f"nothing pending for {escape_text(args.pins)}\n")
    for check in accepted:
        io.stdout.write("accepted " + escape_text(check.describe()) + "\n")
    return 0


def register(subparsers: Any) -> None:
    """Add the MCP commands to the command line."""
    parser = subparsers.add_parser(
        "mcp-proxy", help="guard and record an MCP server (stdio, or remote over HTTP), or several, "
                             "for any MCP client",
        usage="toolreplay mcp-proxy --policy POLICY [--record FILE | --listen [HOST:]PORT --records DIR] "
              "[--pins FILE] [--approvals FILE] [--approvers ALLOWED_SIGNERS --receipts DIR] [--mutator NAME] "
              "[--repeatable NAME] [--read-cache] [--no-restart] "
              "[--print-config CLIENT [--name NAME]] [--header 'NAME: VALUE'] [--header-env NAME=ENVVAR] "
              "(-- SERVER_COMMAND [ARGS...] | -- URL | --servers FILE)",
        epilog=_PROXY_EXIT_CODES)
    parser.add_argument("--policy", required=True, metavar="POLICY", help="permission file")
    parser.add_argument("--record", metavar="FILE", help="append every tools/call to FILE as a sealed session")
    parser.add_argument("--redact-key", metavar="FILE",
                        help="the key (at least 16 bytes, kept off the record) for the policy's redact section: "
                             "secrets are replaced by a keyed hash before they are recorded or kept in --approvals")
    parser.add_argument("--pins", metavar="FILE", help="pin tool definitions in FILE; hide changed or new tools")
    parser.add_argument("--approvals", metavar="FILE",
                        help="approvals a person asked to remember (JSON Lines): a matching call is not asked again, "
                             "and a yes answered 'always' is added to FILE")
    parser.add_argument("--inbox", metavar="DIR",
                        help="when the client cannot ask a person (no elicitation), the call waits in the approvals "
                             "inbox of the records folder DIR, answered from `toolreplay serve DIR`")
    parser.add_argument("--inbox-timeout", metavar="SECONDS", type=float,
                        help="with --inbox: refuse a call nobody decided within SECONDS (default: 300)")
    parser.add_argument("--approvers", metavar="ALLOWED_SIGNERS",
                        help="with --receipts: a call that needs confirmation runs only with an approval receipt "
                             "signed by a key of this OpenSSH allowed_signers file (toolreplay approve); the client "
                             "is not asked")
    parser.add_argument("--receipts", metavar="DIR",
                        help="the folder where the proxy writes approval requests and finds their receipts")
    parser.add_argument("--print-config", choices=CLIENTS, metavar="CLIENT",
                        help="print the configuration that makes CLIENT start this proxy in front of the server, "
                             f"and exit (one of: {', '.join(CLIENTS)})")
    parser.add_argument("--name", metavar="NAME",
                        help="the server's name in the printed configuration (default: the policy's agent)")
    parser.add_argument("--mutator", action="append", metavar="NAME",
                        help="a tool that changes state without needing confirmation: runs once per identical "
                             "call and empties the read cache (may be given more than once)")
    parser.add_argument("--repeatable", action="append", metavar="NAME",
                        help="a tool that changes state and whose identical calls are each a new action (append, "
                             "send, insert): every call runs, confirmed on its own if it needs confirmation "
                             "(may be given more than once)")
    parser.add_argument("--read-cache", action="store_true",
                        help="answer a read identical to an earlier one from that one while no write has run since "
                             "(default: every read reaches the server)")
    # the default since the read cache became opt-in; still accepted so existing client configurations start
    parser.add_argument("--no-read-cache", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-restart", action="store_true",
                        help="end the session when the server ends (by default a server that ends while the client "
                             "is connected is started again, after 1, 2, 4, 8, 16 and 30 s)")
    parser.add_argument("--servers", metavar="FILE",
                        help="run the servers FILE names behind this one proxy, their tools named PREFIX__TOOL "
                             "(instead of a server command)")
    listen = parser.add_argument_group("serving clients over Streamable HTTP (needs the http extra)")
    listen.add_argument("--listen", metavar="[HOST:]PORT",
                        help="serve MCP clients over Streamable HTTP on HOST:PORT (host 127.0.0.1 by default); "
                             "every client session starts its own server")
    listen.add_argument("--records", metavar="DIR", help="with --listen: one sealed record per client session in DIR")
    listen.add_argument("--path", default="/mcp", help="the endpoint's path (default /mcp)")
    listen.add_argument("--listen-public", action="store_true",
                        help="allow a host that is not loopback (needs --token-file)")
    listen.add_argument("--token-file", metavar="FILE",
                        help="every request must carry Authorization: Bearer TOKEN, TOKEN the file's content")
    listen.add_argument("--allow-origin", action="append", metavar="ORIGIN",
                        help="a browser origin accepted besides loopback ones (may be given more than once)")
    listen.add_argument("--max-body", type=int, default=4 * 1024 * 1024, metavar="BYTES",
                        help="the largest request body accepted (default 4 MiB)")
    listen.add_argument("--session-timeout", type=float, default=1800.0, metavar="SECONDS",
                        help="end a session that sent no request for this long (default 1800)")
    listen.add_argument("--listen-head-timeout", type=float, metavar="SECONDS",
                        help="close a connection whose request head is not complete this long after it opened or "
                             "after its last answer (default 10)")
    listen.add_argument("--listen-max-connections", type=int, metavar="N",
                        help="serve at most N open connections at once; a request on one more is answered 503 "
                             "(default 100)")
    parser.add_argument("--header", action="append", metavar="'NAME: VALUE'",
                        help="an HTTP header sent with every request to a server URL (say Authorization); "
                             "${VAR} in VALUE is read from the environment; never recorded nor shown "
                             "(may be given more than once)")
    parser.add_argument("--header-env", action="append", metavar="NAME=ENVVAR",
                        help="an HTTP header whose value is the environment variable ENVVAR (may be given more "
                             "than once)")
    parser.add_argument("server", nargs=argparse.REMAINDER,
                        help="after --: the server command, or one http:// or https:// URL (Streamable HTTP; "
                             "needs pip install '.[http]' in a ToolReplay checkout)")
    parser.set_defaults(run=_run_proxy)

    parser = subparsers.add_parser("mcp-pins", help="review and accept pinned MCP tool definitions",
                                   epilog=_PINS_EXIT_CODES)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    actions.required = True
    show = actions.add_parser("show", help="list pinned tools and definitions waiting for review (exit 1 if any)")
    show.add_argument("pins", help="pins file")
    show.set_defaults(run=_run_pins_show)
    accept = actions.add_parser("accept", help="pin the definitions waiting for review")
    accept.add_argument("pins", help="pins file")
    accept.add_argument("--tool", action="append", metavar="NAME", help="accept only this tool (repeatable)")
    accept.set_defaults(run=_run_pins_accept)
