"""The hook command: the guard as an agent's hooks (docs/hooks.md): Claude Code's and Gemini CLI's."""

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

# The agents the command serves (toolreplay.hooks.core.AGENTS has their profiles).
AGENTS = ("claude-code", "gemini-cli")


def run_plain_hook(arguments: Sequence[str], io: IO, agent: str = "claude-code") -> int | None:
    """Run `hook AGENT` (claude-code or gemini-cli) when its arguments are plain (each option once, with a
    value that is not an option), without building the argument parser; None for anything else (help, --print-settings,
    a typo), which the full parser then handles and reports."""
    from toolreplay.hooks.protocol import plain_options  # the fast client's own reading of the same options

    options = plain_options([agent, *arguments])
    if options is None:
        return None
    return _run(SimpleNamespace(agent=agent, policy=options["--policy"], records=options["--records"],
                                redact_key=options.get("--redact-key"), print_settings=False, install=None), io)


def _run(args: argparse.Namespace | SimpleNamespace, io: IO) -> int:
    if args.policy is None or args.records is None:
        raise UsageError(f"hook {args.agent} needs --policy FILE and --records DIR")
    from toolreplay.hooks.core import AGENTS as PROFILES

    agent = PROFILES[args.agent]
    if args.print_settings or args.install is not None:
        import shlex
        import sys

        from toolreplay.hooks import client as hook_client

        policy, records = shlex.quote(args.policy), shlex.quote(args.records)
        # the fast command: Python without `site`, the hook server's client (docs/hooks.md)
        command = (f"{shlex.quote(sys.executable)} -S {shlex.quote(os.path.abspath(hook_client.__file__))} "
                   f"{args.agent} --policy {policy} --records {records}")
        if args.redact_key is not None:
            command += f" --redact-key {shlex.quote(args.redact_key)}"
        from toolreplay.hooks.core import settings_snippet

        snippet = settings_snippet(command, agent)
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
        reply = reply_to_event(data, args.policy, args.records, args.redact_key, args.agent)
    io.stdout.write(reply.stdout)
    io.stderr.write(reply.stderr)
    return reply.code


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
        command = entries[0]["hooks"][0]["command"]
        if any(isinstance(group, dict) and isinstance(group.get("hooks"), list)
               and any(isinstance(hook, dict) and hook.get("command") == command for hook in group["hooks"])
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
             "gemini-cli": ("Gemini CLI hooks: BeforeTool, AfterTool, SessionEnd", _GEMINI_EXIT_CODES)}
    for name in AGENTS:
        help_line, epilog = helps[name]
        agent = agents.add_parser(
            name, help=help_line,
            usage=f"toolreplay hook {name} --policy POLICY --records DIR [--redact-key FILE] "
                  "[--print-settings | --install SETTINGS]",
            epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
        agent.add_argument("--policy", metavar="POLICY",
                           help="permission file (its root defaults to the project: cwd)")
        agent.add_argument("--records", metavar="DIR",
                           help="folder of the sealed records, one SESSION_ID.jsonl each")
        agent.add_argument("--redact-key", metavar="FILE",
                           help="the key (at least 16 bytes, kept off the record) for the policy's redact section: "
                                "secrets are replaced by a keyed hash before they are recorded")
        mode = agent.add_mutually_exclusive_group()
        mode.add_argument("--print-settings", action="store_true",
                          help="print the settings.json hooks block that runs this command, and exit")
        mode.add_argument("--install", metavar="SETTINGS",
                          help="add that hooks block to the settings file SETTINGS (created if missing; every "
                               "other setting and hook kept; nothing added twice), and exit")
        agent.set_defaults(run=_run)
