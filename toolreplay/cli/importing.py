"""`import FORMAT INPUT [-o FILE | --split DIR | --suite DIR]`: turn agent logs into sessions, or a suite."""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import tempfile
from collections.abc import Iterable
from typing import Any

from toolreplay.cli._io import IO
from toolreplay.errors import InputError, UsageError
from toolreplay.evaluation.from_logs import SUITE_FILE, suite_from_import
from toolreplay.format.output import write_atomically
from toolreplay.format.records import STDIN_NAME, open_input
from toolreplay.format.text import escape_text
from toolreplay.importers import FORMATS, ImportResult, Transcript, import_file

__all__ = ["register", "write_file"]


def write_file(path: str, text: str | Iterable[str]) -> None:
    """Write a text file (given whole or in pieces) whole or not at all."""
    with write_atomically(path) as output:
        for piece in [text] if isinstance(text, str) else text:
            output.write(piece.encode("utf-8"))


def _check_split_target(path: str, option: str = "--split") -> None:
    if os.path.isdir(path):
        if os.listdir(path):
            raise UsageError(
                f"{path}: directory exists and is not empty ({option} writes only into a new "
                "or empty directory)"
            )
    elif os.path.lexists(path):
        raise UsageError(f"{path}: exists and is not a directory")


def _write_split(path: str, result: ImportResult) -> None:
    _write_folder(path, ((f"{session.position:04d}.jsonl", session.lines()) for session in result.sessions))


def _write_folder(path: str, files: Iterable[tuple[str, Iterable[str]]], option: str = "--split") -> None:
    # Files go into a temporary sibling directory, renamed into place at the end: no half-filled folder.
    _check_split_target(path, option)
    parent = os.path.dirname(os.path.abspath(path))
    staging = tempfile.mkdtemp(dir=parent, prefix=".toolreplay-split-")
    try:
        for name, lines in files:
            target = os.path.join(staging, name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w", encoding="utf-8", newline="\n") as handle:
                handle.writelines(lines)
        for folder, _, _ in os.walk(staging):
            os.chmod(folder, 0o755)
        _check_split_target(path, option)
        if os.path.isdir(path):
            os.rmdir(path)
        os.rename(staging, path)
    finally:
        if os.path.isdir(staging):
            shutil.rmtree(staging)


def _write_sessions(args: argparse.Namespace, result: ImportResult, io: IO) -> None:
    if args.split is None and args.output is None:
        lines = result.sessions[0].lines()
        while chunk := "".join(itertools.islice(lines, 4096)):
            io.write_bytes(chunk.encode("utf-8"))
        return
    target = args.split if args.split is not None else args.output
    try:
        if args.split is not None:
            _write_split(args.split, result)
        else:
            write_file(args.output, result.sessions[0].lines())
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None


def _write_suite(args: argparse.Namespace, result: ImportResult, transcripts: list[Transcript], shown: str,
                 io: IO) -> None:
    suite = suite_from_import(result, transcripts)
    for line in suite.skipped:
        io.stderr.write(f"warning: {escape_text(shown)}: {line}\n")
    if not suite.cases:
        raise InputError(shown, None, "no conversation has both a user request and a final answer: no suite written")
    try:
        _write_folder(args.suite, suite.files, "--suite")
    except OSError as exc:
        raise UsageError(f"cannot write {args.suite}: {exc.strerror or exc}") from None
    cases = f"{suite.cases} case{'s' if suite.cases != 1 else ''}"
    io.stderr.write(f"suite: {escape_text(os.path.join(args.suite, SUITE_FILE))}: {cases}, "
                    f"the longest with {suite.longest} calls (eval --max-steps {max(suite.longest, 1)} or more)\n")


def _run_import(args: argparse.Namespace, io: IO) -> int:
    if args.suite is not None:
        return _run_suite_import(args, io)
    if args.split is not None:
        _check_split_target(args.split)
    if args.mutators_out is not None and args.input == "-":
        raise UsageError("--mutators-out reads the log twice: give a log file, not standard input")
    shown = STDIN_NAME if args.input == "-" else args.input
    with open_input(args.input, io.stdin) as handle:
        result = import_file(handle, args.format, shown)
    if args.split is None and len(result.sessions) != 1:
        raise UsageError(
            f"{shown} holds {len(result.sessions)} conversations; use --split DIR to write one "
            "session per conversation"
        )
    if args.format == "auto":
        io.stderr.write(f"detected format: {result.format}\n")
    _write_sessions(args, result, io)
    if args.mutators_out is not None:
        from toolreplay.importers.hints import hints_mutators_text, read_tool_hints

        with open_input(args.input) as handle:
            write_file(args.mutators_out, hints_mutators_text(read_tool_hints(handle)))
    for warning in result.warnings:
        io.stderr.write(f"warning: {escape_text(str(warning))}\n")
    return 0


def _run_suite_import(args: argparse.Namespace, io: IO) -> int:
    _check_split_target(args.suite, "--suite")
    if args.mutators_out is not None:
        raise UsageError("--mutators-out does not go with --suite")
    shown = STDIN_NAME if args.input == "-" else args.input
    transcripts: list[Transcript] = []
    with open_input(args.input, io.stdin) as handle:
        result = import_file(handle, args.format, shown, transcripts)
    if args.format == "auto":
        io.stderr.write(f"detected format: {result.format}\n")
    for warning in result.warnings:
        io.stderr.write(f"warning: {escape_text(str(warning))}\n")
    _write_suite(args, result, transcripts, shown, io)
    return 0


def register(subparsers: Any) -> None:
    """Add `import FORMAT INPUT [-o FILE | --split DIR]`."""
    parser = subparsers.add_parser(
        "import", help="turn an agent log into sessions",
        epilog="exit codes:\n  0  the sessions were written (warnings do not change it)\n"
               "  2  usage error, or a log that is not JSON or not the named format: nothing is written")
    parser.add_argument("format", metavar="FORMAT", choices=(*FORMATS, "auto"),
                        help="the log's format, one of " + ", ".join((*FORMATS, "auto")) + " (auto detects it)")
    parser.add_argument("input", metavar="INPUT", help="log file (JSON or JSON Lines); - for standard input")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("-o", "--output", metavar="FILE", help="write the session to FILE (atomically)")
    target.add_argument(
        "--split",
        metavar="DIR",
        help="write one session per conversation into DIR (new or empty): 0000.jsonl, ...",
    )
    target.add_argument("--suite", metavar="DIR",
                        help="write an evaluation suite into DIR (new or empty): suite.json, one cassette per "
                             "conversation, and recorded.json for the recorded agent")
    parser.add_argument("--mutators-out", metavar="FILE",
                        help="also write a mutators file from the log's tool hints (MCP tools/list annotations)")
    parser.set_defaults(run=_run_import)
