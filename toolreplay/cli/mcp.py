"""The MCP commands: mcp-proxy (guard and record a stdio or remote MCP server) and mcp-pins (review pinned tools)."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from typing import TYPE_CHECKING, Any

from toolreplay.audit.signers import read_secret_file
from toolreplay.cli._io import IO
from toolreplay.errors import UsageError
from toolreplay.format.text import escape_text
from toolreplay.guard.mcp_pins import ToolPins, accept_pending, pending_path, read_pins
from toolreplay.guard.mcp_proxy import McpProxy
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.policy.model import load_policy
from toolreplay.policy.redaction import MIN_KEY_BYTES, Redaction, Redactor

if TYPE_CHECKING:
    from toolreplay.guard.mcp_transport import ServerEnd

__all__ = ["register"]

_STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")
_PROXY_EXIT_CODES = """exit codes:
  0  the session ended: the client closed the connection, or a signal (SIGTERM, SIGINT, SIGHUP)
  1  the server ended on its own with a failure (a server URL: its session expired, the connection failed)
  2  usage error (bad arguments, an unreadable policy, pins or record file, a server that cannot start)"""
_PINS_EXIT_CODES = """exit codes:
  0  done; for show: nothing waits for review
  1  show: tool definitions wait for review (accept them with: toolreplay mcp-pins accept PINS)
  2  usage error (bad arguments, an unreadable pins file)"""


def _run_proxy(args: argparse.Namespace, io: IO) -> int:
    command = args.server[1:] if args.server[:1] == ["--"] else args.server
    if not command:
        raise UsageError("mcp-proxy needs the server command after --")
    server = _upstream(command, args, io)
    policy = load_policy(args.policy)
    pins = ToolPins(args.pins) if args.pins else None
    redactor = _redactor(policy.redact, args.redact_key, args.record)
    recorder = SessionRecorder.open(args.record, sealed=True, redactor=redactor) if args.record else None
    try:
        io.stdout.flush()
        proxy = McpProxy(server, policy, client_in=io.stdin, client_out=io.stdout.buffer,
                         diagnostics=io.stderr, recorder=recorder, pins=pins, mutators=args.mutator or (),
                         repeatable=args.repeatable or (), read_cache=args.read_cache and not args.no_read_cache)
        previous = _on_stop_signals(proxy)
        try:
            status = proxy.run()
        finally:
            for name, handler in previous.items():
                signal.signal(getattr(signal, name), handler)
    finally:
        if recorder is not None:
            recorder.close()
    return 0 if status == 0 or proxy.exit_reason != "server exited" else 1


def _upstream(command: list[str], args: argparse.Namespace, io: IO) -> list[str] | ServerEnd:
    """The server: one http:// or https:// argument is a remote server over Streamable HTTP (with the
    --header and --header-env headers), anything else a command to run."""
    given = (args.header or []) + (args.header_env or [])
    if len(command) != 1 or not command[0].startswith(("http://", "https://")):
        if given:
            raise UsageError("--header and --header-env need a server URL (http:// or https://) after --")
        return command
    # imported here: asyncio and the HTTP upstream cost every other command its start-up time
    from toolreplay.guard.mcp_http_upstream import HttpServer, parse_header

    headers = [parse_header(text, os.environ) for text in args.header or []]
    for text in args.header_env or []:
        name, equals, variable = text.partition("=")
        if not equals or not variable:
            raise UsageError("--header-env needs NAME=ENVVAR (the header's name, the variable holding its value)")
        headers.append(parse_header(f"{name}: ${{{variable}}}", os.environ, "--header-env"))
    lock = threading.Lock()

    def say(text: str) -> None:
        with lock:
            io.stderr.write("toolreplay mcp-proxy: " + escape_text(text) + "\n")
            io.stderr.flush()

    return HttpServer(command[0], headers=headers, say=say)


def _redactor(redaction: Redaction | None, key_path: str | None, record: str | None) -> Redactor | None:
    """The record's redactor: a policy with a `redact` section needs a key kept off the record (fail closed:
    without one nothing is recorded unredacted, the proxy does not start)."""
    if redaction is None:
        if key_path is not None:
            raise UsageError("--redact-key needs a policy with a \"redact\" section")
        return None
    if record is None:
        return None
    if key_path is None:
        raise UsageError("the policy's \"redact\" section needs --redact-key FILE (a key of at least "
                         f"{MIN_KEY_BYTES} bytes, kept off the record)")
    try:
        return Redactor(redaction, read_secret_file(key_path))
    except ValueError as exc:
        raise UsageError(f"--redact-key {key_path}: {exc}") from None


def _on_stop_signals(proxy: McpProxy) -> dict[str, Any]:
    """Let SIGTERM, SIGINT and SIGHUP end the session cleanly (only the main thread may set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for name in _STOP_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None:
            previous[name] = signal.signal(number, lambda signum, frame: proxy.stop("signal"))
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
        "mcp-proxy", help="guard and record an MCP server (stdio, or remote over HTTP) for any MCP client",
        usage="toolreplay mcp-proxy --policy POLICY [--record FILE] [--pins FILE] [--mutator NAME] "
              "[--repeatable NAME] [--read-cache] [--header 'NAME: VALUE'] [--header-env NAME=ENVVAR] "
              "-- SERVER_COMMAND [ARGS...] | URL",
        epilog=_PROXY_EXIT_CODES)
    parser.add_argument("--policy", required=True, metavar="POLICY", help="permission file")
    parser.add_argument("--record", metavar="FILE", help="append every tools/call to FILE as a sealed session")
    parser.add_argument("--redact-key", metavar="FILE",
                        help="the key (at least 16 bytes, kept off the record) for the policy's redact section: "
                             "secrets are replaced by a keyed hash before they are recorded")
    parser.add_argument("--pins", metavar="FILE", help="pin tool definitions in FILE; hide changed or new tools")
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
    parser.add_argument("--header", action="append", metavar="'NAME: VALUE'",
                        help="an HTTP header sent with every request to a server URL (say Authorization); "
                             "${VAR} in VALUE is read from the environment; never recorded nor shown "
                             "(may be given more than once)")
    parser.add_argument("--header-env", action="append", metavar="NAME=ENVVAR",
                        help="an HTTP header whose value is the environment variable ENVVAR (may be given more "
                             "than once)")
    parser.add_argument("server", nargs=argparse.REMAINDER,
                        help="after --: the server command, or one http:// or https:// URL (Streamable HTTP; "
                             "needs pip install 'toolreplay[http]')")
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
