"""The argument parser of the command line: every command module's `register` adds its parsers."""

from __future__ import annotations

import argparse
import importlib
from typing import Any, NoReturn

from toolreplay import __version__
from toolreplay.cli import _COMMAND_MODULES, EXIT_CODES, ArgumentError

__all__ = ["build_parser", "innermost"]


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise ArgumentError(message, self.format_usage(), self.prog)


def _describe(subparsers: Any) -> None:
    """Give every subcommand's --help its one-line description and the exit codes."""
    helps = {action.dest: action.help for action in subparsers._choices_actions}
    for name, parser in subparsers.choices.items():
        if parser.description is None and helps.get(name):
            text = str(helps[name])
            parser.description = text[0].upper() + text[1:] + "."
        if parser.epilog is None:
            parser.epilog = EXIT_CODES
        parser.formatter_class = argparse.RawDescriptionHelpFormatter


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Build the argument parser: every command, or only the module that defines `command`."""
    parser = _Parser(prog="toolreplay", description="Audit, guard and evaluate the tool calls of AI agents.",
                     epilog=EXIT_CODES + "\n\nRun 'toolreplay COMMAND --help' for one command's arguments.",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"toolreplay {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subparsers.required = True
    modules = [name for name, commands in _COMMAND_MODULES.items() if command in commands]
    for name in modules or _COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    _describe(subparsers)
    return parser


def innermost(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the innermost subcommand that `args` selected (`export otel`, not `export`)."""
    while True:
        commands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = getattr(args, commands[0].dest, None) if commands else None
        if chosen is None:
            return parser
        parser = commands[0].choices[chosen]
