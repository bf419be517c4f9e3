"""The hook command: the guard as an agent's hook (docs/hooks.md); today Claude Code's."""

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

# The options a hook invocation may give, each once with a value: parsed without argparse (the first two
# are needed).
_PLAIN_OPTIONS = ("--policy", "--records", "--redact-key")

_EXIT_CODES = """exit codes (Claude Code's hook contract):
  0  decided: PreToolUse prints its decision (allow, deny or ask) as JSON on stdout; other events print nothing
  2  the hook cannot decide or record (bad input, a policy that does not load, a record that cannot be
     written): one line on stderr; Claude Code blocks the tool call and shows the line to the model"""


def run_plain_hook(arguments: Sequence[str], io: IO) -> int | None:
    """Run `hook claude-code` when its arguments are plain (each option once, with a value that is not
    an option), without building the argument parser; None for anything else (help, --print-settings,
    a typo), which the full parser then handles and reports."""
    options: dict[str, str] = {}
    if len(arguments) % 2:
        return None
    for name, value in zip(arguments[::2], arguments[1::2], strict=True):
        if name not in _PLAIN_OPTIONS or name in options or value.startswith("-"):
            return None
        options[name] = value
    if "--policy" not in options or "--records" not in options:
        return None
    return _run_claude_code(SimpleNamespace(policy=options["--policy"], records=options["--records"],
                                            redact_key=options.get("--redact-key"), print_settings=False), io)


def _run_claude_code(args: argparse.Namespace | SimpleNamespace, io: IO) -> int:
    if args.policy is None or args.records is None:
        raise UsageError("hook claude-code needs --policy FILE and --records DIR")
    if args.print_settings:
        import shlex
        import sys

        from toolreplay.cli import hook_client

        policy, records = shlex.quote(args.policy), shlex.quote(args.records)
        # the fast command: Python without `site`, the hook server's client (docs/hooks.md)
        command = (f"{shlex.quote(sys.executable)} -S {shlex.quote(os.path.abspath(hook_client.__file__))} "
                   f"claude-code --policy {policy} --records {records}")
        if args.redact_key is not None:
            command += f" --redact-key {shlex.quote(args.redact_key)}"
        from toolreplay.guard.claude_hook import settings_snippet

        io.stdout.write(json.dumps(settings_snippet(command), indent=2) + "\n")
        return 0
    from toolreplay.guard.claude_hook import HookError, handle_hook

    try:
        answer = handle_hook(io.stdin.read(), args.policy, args.records, args.redact_key)
    except HookError as exc:  # fail closed: exit 2 blocks the call, and the model reads why
        io.stderr.write(f"error: toolreplay hook: {escape_text(str(exc))}\n")
        return 2
    output: Any = answer.output()
    if output is not None:
        io.stdout.write(json.dumps(output, ensure_ascii=True, sort_keys=True) + "\n")
    return 0


def register(subparsers: Any) -> None:
    """Add the hook command to the command line."""
    import argparse

    parser = subparsers.add_parser("hook", help="guard and record an agent's tool calls from its hooks",
                                   epilog=_EXIT_CODES)
    agents = parser.add_subparsers(dest="agent", metavar="AGENT", parser_class=type(parser))
    agents.required = True
    claude = agents.add_parser(
        "claude-code", help="Claude Code hooks: PreToolUse, PostToolUse, PostToolUseFailure, SessionEnd",
        usage="toolreplay hook claude-code --policy POLICY --records DIR [--redact-key FILE] [--print-settings]",
        epilog=_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    claude.add_argument("--policy", metavar="POLICY", help="permission file (its root defaults to the project: cwd)")
    claude.add_argument("--records", metavar="DIR", help="folder of the sealed records, one SESSION_ID.jsonl each")
    claude.add_argument("--redact-key", metavar="FILE",
                        help="the key (at least 16 bytes, kept off the record) for the policy's redact section: "
                             "secrets are replaced by a keyed hash before they are recorded")
    claude.add_argument("--print-settings", action="store_true",
                        help="print the settings.json hooks block that runs this command, and exit")
    claude.set_defaults(run=_run_claude_code)
