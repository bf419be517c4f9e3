"""The hook command: the guard as an agent's hooks (docs/hooks.md): Claude Code's, Gemini CLI's and Codex's, and
the HTTP hook endpoint (`hook serve`)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from toolreplay.cli._io import IO
from toolreplay.errors import UsageError
from toolreplay.format.text import escape_text

if TYPE_CHECKING:
    import argparse

__all__ = ["register", "run_plain_hook"]

_EXIT_CODES = """exit codes (Claude Code's hook contract):
  0  decided: PreToolUse prints its decision (allow, deny or ask) as JSON on stdout; other events print nothing
  2  the hook cannot decide or record (bad input, a policy that does not load, a record that cannot be
     written): one line on stderr; Claude Code blocks the tool call and shows the line to the model"""

_GEMINI_EXIT_CODES = """exit codes (Gemini CLI's hook contract):
  0  decided: BeforeTool prints its decision as JSON on stdout ({"decision": "allow"} or {"decision": "deny",
     "reason": ...}); a call the policy wants confirmed is denied (Gemini CLI hooks cannot ask); other events
     print nothing
  2  the hook cannot decide or record (bad input, a policy that does not load, a record that cannot be
     written): one line on stderr; Gemini CLI blocks the tool call (or hides its result, for AfterTool) and
     gives the line to the model"""

_CODEX_EXIT_CODES = """exit codes (Codex's hook contract):
  0  decided: a PreToolUse that is allowed prints nothing; a deny prints {"hookSpecificOutput":
     {"permissionDecision": "deny", ...}}; a call the policy wants confirmed is denied (Codex hooks cannot
     ask); a PermissionRequest about a call no PreToolUse allowed is denied, else the person decides
  2  the hook cannot decide or record (bad input, a policy that does not load, a record that cannot be
     written): one line on stderr; Codex blocks the tool call (PreToolUse, PermissionRequest) or gives the
     line to the model (PostToolUse)"""

_SERVE_EXIT_CODES = """exit codes:
  0  stopped (SIGINT or SIGTERM)
  2  cannot serve: a policy that does not load, a records folder that is missing, not private or served
     already, a port in use, a non-loopback --host without --allow-remote"""

# The agents the command serves (toolreplay.hooks.core.AGENTS has their profiles).
AGENTS = ("claude-code", "gemini-cli", "codex")


def run_plain_hook(arguments: Sequence[str], io: IO, agent: str = "claude-code") -> int | None:
    """Run `hook AGENT` (claude-code, gemini-cli or codex) when its arguments are plain (each option once, with a
    value that is not an option), without building the argument parser; None for anything else (help, --print-settings,
    a typo), which the full parser then handles and reports."""
    from toolreplay.hooks.protocol import plain_options  # the fast client's own reading of the same options

    options = plain_options([agent, *arguments])
    if options is None:
        return None
    return _run(SimpleNamespace(agent=agent, policy=options["--policy"], records=options["--records"],
                                redact_key=options.get("--redact-key"), inbox=options.get("--inbox"),
                                inbox_timeout=options.get("--inbox-timeout"), print_settings=False, install=None,
                                http=False, port=None), io)


def _run(args: argparse.Namespace | SimpleNamespace, io: IO) -> int:
    if args.policy is None or args.records is None:
        raise UsageError(f"hook {args.agent} needs --policy FILE and --records DIR")
    from toolreplay.hooks.core import AGENTS as PROFILES

    agent = PROFILES[args.agent]
    if args.inbox_timeout is not None and args.inbox is None:
        raise UsageError("--inbox-timeout needs --inbox DIR")
    if (args.http or args.port is not None) and not (args.print_settings or args.install is not None):
        raise UsageError(f"hook {args.agent}: --http and --port go with --print-settings or --install")
    if args.print_settings or args.install is not None:
        snippet = _snippet(args, agent)
        if args.print_settings:
            io.stdout.write(json.dumps(snippet, indent=2) + "\n")
            return 0
        added = _install(args.install, snippet)
        done = (f"added the hook to {len(added)} events ({', '.join(added)})" if added
                else "the hook is already there for every event")
        io.stdout.write(f"{escape_text(args.install)}: {done}\n")
        return 0
    from toolreplay.hooks.reply import fault_reply, reply_to_event

    try:
        data = io.stdin.read()
    except Exception as exc:  # noqa: BLE001 - any exit status but 0 and 2 lets the agent run the tool
        reply = fault_reply(exc)
    else:
        reply = reply_to_event(data, args.policy, args.records, args.redact_key, args.agent, args.inbox,
                               args.inbox_timeout)
    io.stdout.write(reply.stdout)
    io.stderr.write(reply.stderr)
    return reply.code


def _snippet(args: argparse.Namespace | SimpleNamespace, agent: Any) -> dict[str, Any]:
    """The hooks block for the agent's settings: the fast command, or with --http the HTTP endpoint."""
    import shlex
    import sys

    from toolreplay.hooks import core

    if args.http:
        if args.inbox is not None:
            raise UsageError(f"hook {args.agent}: --inbox goes with the command hook (`hook serve` has no inbox): "
                             "use --print-settings without --http")
        if agent is not core.CLAUDE_CODE:
            raise UsageError(f"hook {args.agent}: {agent.title} has no http hooks (its hooks run a command): use "
                             "--print-settings without --http")
        from toolreplay.hooks.http import DEFAULT_PORT, TOKEN_VARIABLE

        port = DEFAULT_PORT if args.port is None else args.port
        return core.http_settings_snippet(f"http://127.0.0.1:{port}/hook/{args.agent}", TOKEN_VARIABLE, agent)
    if args.port is not None:
        raise UsageError(f"hook {args.agent}: --port goes with --http")
    from toolreplay.hooks import client as hook_client

    policy, records = shlex.quote(args.policy), shlex.quote(args.records)
    # the fast command: Python without `site`, the hook server's client (docs/hooks.md)
    command = (f"{shlex.quote(sys.executable)} -S {shlex.quote(os.path.abspath(hook_client.__file__))} "
               f"{args.agent} --policy {policy} --records {records}")
    if args.redact_key is not None:
        command += f" --redact-key {shlex.quote(args.redact_key)}"
    if args.inbox is None:
        return core.settings_snippet(command, agent)
    try:
        wait = core.inbox_timeout(args.inbox_timeout)
    except core.HookError as exc:
        raise UsageError(str(exc)) from None
    command += f" --inbox {shlex.quote(args.inbox)}"
    if args.inbox_timeout is not None:
        command += f" --inbox-timeout {shlex.quote(args.inbox_timeout)}"
    return core.settings_snippet(command, agent, hook_seconds=core.hook_seconds(wait))


def _serve(args: argparse.Namespace, io: IO) -> int:
    """`hook serve`: the HTTP hook endpoint of one records folder, until SIGINT or SIGTERM."""
    import signal

    from toolreplay.guard.hosts import is_loopback
    from toolreplay.hooks.core import HookError
    from toolreplay.hooks.http import TOKEN_NAME, HookEndpoint

    if not is_loopback(args.host) and not args.allow_remote:
        raise UsageError(f"hook serve: --host {args.host} is not a loopback address: the hook endpoint would be "
                         "reachable from other machines (say --allow-remote if that is meant)")
    endpoint = HookEndpoint(args.records, args.policy, args.redact_key, args.host, args.port)
    try:
        endpoint.start()
    except HookError as exc:
        io.stderr.write(f"error: toolreplay hook serve: {escape_text(str(exc))}\n")
        return 2
    previous = [signal.signal(number, lambda *_: endpoint.stop()) for number in (signal.SIGINT, signal.SIGTERM)]
    try:
        io.stdout.write(f"listening on {endpoint.url}/hook/AGENT (token: "
                        f"{escape_text(os.path.join(endpoint.records, TOKEN_NAME))})\n")
        io.stdout.flush()
        endpoint.serve()
    finally:
        for number, handler in zip((signal.SIGINT, signal.SIGTERM), previous, strict=True):
            signal.signal(number, handler)
    return 0


def _hook_identity(hook: Any) -> Any:
    """What names a hook entry: its command, or its URL (an http hook)."""
    return (hook.get("command"), hook.get("url")) if isinstance(hook, dict) else None


def _install(path: str, snippet: dict[str, Any]) -> list[str]:
    """Merge the hooks block into the settings file at `path` (created when missing): every other setting and
    every other hook stays; an event that already runs this exact command is left alone. The file is
    written whole or not at all. The events it was added to."""
    from toolreplay.errors import InputError
    from toolreplay.format.output import write_atomically
    from toolreplay.format.strictjson import read_json_file

    settings: Any = read_json_file(path) if os.path.exists(path) else {}
    if not isinstance(settings, dict):
        raise InputError(path, None, "the settings file is not a JSON object")
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise InputError(path, None, '"hooks" is not an object')
    added = []
    for event, entries in snippet["hooks"].items():
        present = hooks.setdefault(event, [])
        if not isinstance(present, list):
            raise InputError(path, None, f'"hooks"."{event}" is not a list')
        wanted = _hook_identity(entries[0]["hooks"][0])
        if any(isinstance(group, dict) and isinstance(group.get("hooks"), list)
               and any(_hook_identity(hook) == wanted for hook in group["hooks"])
               for group in present):
            continue
        present.extend(entries)
        added.append(event)
    if added:
        with write_atomically(path) as output:
            output.write((json.dumps(settings, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    return added


def register(subparsers: Any) -> None:
    """Add the hook command to the command line."""
    import argparse

    parser = subparsers.add_parser("hook", help="guard and record an agent's tool calls from its hooks",
                                   epilog=_EXIT_CODES)
    agents = parser.add_subparsers(dest="agent", metavar="AGENT", parser_class=type(parser))
    agents.required = True
    helps = {"claude-code": ("Claude Code hooks: PreToolUse, PostToolUse, PostToolUseFailure, SessionEnd",
                             _EXIT_CODES),
             "gemini-cli": ("Gemini CLI hooks: BeforeTool, AfterTool, SessionEnd", _GEMINI_EXIT_CODES),
             "codex": ("Codex hooks: PreToolUse, PermissionRequest, PostToolUse", _CODEX_EXIT_CODES)}
    for name in AGENTS:
        help_line, epilog = helps[name]
        agent = agents.add_parser(
            name, help=help_line,
            usage=f"toolreplay hook {name} --policy POLICY --records DIR [--redact-key FILE] "
                  "[--inbox DIR [--inbox-timeout SECONDS]] [--print-settings | --install SETTINGS] "
                  "[--http [--port PORT]]",
            epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
        agent.add_argument("--policy", metavar="POLICY",
                           help="permission file (its root defaults to the project: cwd)")
        agent.add_argument("--records", metavar="DIR",
                           help="folder of the sealed records, one SESSION_ID.jsonl each")
        agent.add_argument("--redact-key", metavar="FILE",
                           help="the key (at least 16 bytes, kept off the record) for the policy's redact section: "
                                "secrets are replaced by a keyed hash before they are recorded")
        agent.add_argument("--inbox", metavar="DIR",
                           help="a call the policy wants confirmed waits in the approvals inbox of the records folder "
                                "DIR (usually --records' own), answered from `toolreplay serve DIR`, instead of being "
                                + ("asked by Claude Code" if name == "claude-code" else "denied"))
        agent.add_argument("--inbox-timeout", metavar="SECONDS",
                           help="with --inbox: deny a call nobody decided within SECONDS (default: 40, under the "
                                "agent's hook timeout)")
        mode = agent.add_mutually_exclusive_group()
        mode.add_argument("--print-settings", action="store_true",
                          help="print the settings.json hooks block that runs this command, and exit")
        mode.add_argument("--install", metavar="SETTINGS",
                          help="add that hooks block to the settings file SETTINGS (created if missing; every "
                               "other setting and hook kept; nothing added twice), and exit"
                               + ("; Codex's is ~/.codex/hooks.json" if name == "codex" else ""))
        agent.add_argument("--http", action="store_true",
                           help="with --print-settings or --install: the hooks post to `hook serve` (type http, "
                                "onFailure block) instead of running a command (Claude Code)")
        agent.add_argument("--port", metavar="PORT", type=_port, help="with --http: the port of `hook serve`")
        agent.set_defaults(run=_run)
    serve = agents.add_parser(
        "serve", help="the HTTP hook endpoint of a records folder (Claude Code http hooks)",
        usage="toolreplay hook serve --policy POLICY --records DIR [--redact-key FILE] [--port PORT] "
              "[--host HOST [--allow-remote]]",
        epilog=_SERVE_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--policy", metavar="POLICY", required=True,
                       help="permission file (its root defaults to each event's cwd)")
    serve.add_argument("--records", metavar="DIR", required=True, help="folder of the sealed records (private)")
    serve.add_argument("--redact-key", metavar="FILE", help="the key for the policy's redact section")
    serve.add_argument("--port", metavar="PORT", type=_port, default=None,
                       help="the port (default 47213; 0: any free one, printed)")
    serve.add_argument("--host", metavar="HOST", default="127.0.0.1", help="the address (default 127.0.0.1)")
    serve.add_argument("--allow-remote", action="store_true",
                       help="let --host be an address other machines can reach")
    serve.set_defaults(run=_run_serve)


def _run_serve(args: argparse.Namespace, io: IO) -> int:
    from toolreplay.hooks.http import DEFAULT_PORT

    if args.port is None:
        args.port = DEFAULT_PORT
    return _serve(args, io)


def _port(text: str) -> int:
    import argparse

    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}")
    return int(text)
