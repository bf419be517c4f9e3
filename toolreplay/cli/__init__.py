"""The command line: the only place that knows argparse, stdout/stderr and exit codes.

Each command module under `toolreplay.cli` has `register(subparsers)`, which adds its parsers and sets
`run(args, io) -> int` as their default. `main` turns every ToolReplayError into one `error: ...`
line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from toolreplay.cli._io import IO
from toolreplay.errors import ToolReplayError, UsageError

__all__ = ["main", "entry_point"]

# One module per family of commands; each adds its own subcommands (named here so that a run of one
# command imports only its own module: `replay` has no use for the evaluator or the importers).
_COMMAND_MODULES = {
    "toolreplay.cli.audit": ("version", "replay", "scope", "seal", "verify"),
    "toolreplay.cli.demo": ("demo",),
    "toolreplay.cli.evaluate": ("eval",),
    "toolreplay.cli.fleet": ("audit",),
    "toolreplay.cli.importing": ("import",),
}


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Build the argument parser: every command, or only the module that defines `command`."""
    parser = _Parser(prog="toolreplay", description="Audit, guard and evaluate the tool calls of AI agents.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subparsers.required = True
    modules = [name for name, commands in _COMMAND_MODULES.items() if command in commands]
    for name in modules or _COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None, io: IO | None = None) -> int:
    """Run one command; return its exit code (0 clean, 1 findings, 2 usage or input error)."""
    io = io or IO.from_sys()
    try:
        arguments = list(sys.argv[1:] if argv is None else argv)
        args = build_parser(arguments[0] if arguments else None).parse_args(arguments)
        code: int = args.run(args, io)
        return code
    except ToolReplayError as exc:
        io.stderr.write(f"error: {exc}\n")
        return 2
    except RecursionError:
        io.stderr.write("error: input nested too deeply\n")
        return 2
    except KeyboardInterrupt:
        io.stderr.write("error: interrupted\n")
        return 130
    except BrokenPipeError:
        return 1


def entry_point() -> None:
    """Console-script entry point for `toolreplay`."""
    sys.exit(main())
