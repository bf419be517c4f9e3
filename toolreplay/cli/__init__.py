"""The command line: the only place that knows argparse, stdout/stderr and exit codes.

Each command module under `toolreplay.cli` has `register(subparsers)`, which adds its parsers and sets
`run(args, io) -> int` as their default. `main` turns every ToolReplayError into one `error: ...`
line on stderr and exit 2. The parser itself (argparse) lives in `toolreplay.cli._parser`, loaded by
the commands that need it: a hook, run once per tool call, parses its few options without it.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

from toolreplay.cli._io import IO
from toolreplay.errors import ToolReplayError, UsageError
from toolreplay.format.text import escape_text

__all__ = ["EXIT_CODES", "ArgumentError", "main", "entry_point"]

# One module per family of commands; each adds its own subcommands (named here so that a run of one
# command imports only its own module: `replay` has no use for the evaluator or the importers).
_COMMAND_MODULES = {
    "toolreplay.cli.audit": ("version", "replay", "mutators", "scope", "seal", "verify"),
    "toolreplay.cli.demo": ("demo",),
    "toolreplay.cli.diff": ("diff",),
    "toolreplay.cli.prove": ("prove",),
    "toolreplay.cli.evaluate": ("eval",),
    "toolreplay.cli.fleet": ("audit",),
    "toolreplay.cli.importing": ("import",),
    "toolreplay.cli.export": ("export",),
    "toolreplay.cli.mcp": ("mcp-proxy", "mcp-pins"),
    "toolreplay.cli.approvals": ("approvals",),
    "toolreplay.cli.receipts": ("approve",),
    "toolreplay.cli.hook": ("hook",),
    "toolreplay.cli.crosscheck": ("crosscheck",),
    "toolreplay.cli.serve": ("serve",),
}


EXIT_CODES = """exit codes:
  0  clean: no findings, an intact chain
  1  findings, or a broken chain
  2  usage error (bad arguments, a missing or unreadable file), malformed input, or a failure
     writing the output
  130 interrupted (Ctrl-C), 141 the reader closed the output pipe, 143 stopped by SIGTERM"""


class ArgumentError(UsageError):
    """Bad command-line arguments: the message, then the usage line and where to find help."""

    def __init__(self, message: str, usage: str, prog: str) -> None:
        super().__init__(message)
        self.usage = usage
        self.prog = prog


# Exit codes beyond 0, 1 and 2: a reader of the output went away (standard output is a closed pipe,
# as in `toolreplay replay big.jsonl | head -1`): 141, what a shell reports for a process ended by
# SIGPIPE, with nothing on stderr; stopped by Ctrl-C: 130; by SIGTERM: 143 (after cleaning up).
EXIT_BROKEN_PIPE = 141
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


def main(argv: Sequence[str] | None = None, io: IO | None = None) -> int:
    """Run one command; return its exit code (0 clean, 1 findings, 2 usage or input error, or an
    unwritable output; 141 when standard output is a closed pipe)."""
    io = io or IO.from_sys()
    try:
        arguments = list(sys.argv[1:] if argv is None else argv)
        if arguments[:1] == ["hook"] and arguments[1:2] in (["claude-code"], ["gemini-cli"], ["codex"]):
            from toolreplay.cli.hook import run_plain_hook  # a new process per tool call: spare it argparse

            plain = run_plain_hook(arguments[2:], io, arguments[1])
            if plain is not None:
                io.stdout.flush()
                return plain
        from toolreplay.cli._parser import build_parser, innermost

        parser = build_parser(arguments[0] if arguments else None)
        args, extra = parser.parse_known_args(arguments)
        if extra:  # name the (sub)command whose usage was not followed, not the top level
            innermost(parser, args).error("unrecognized arguments: " + " ".join(extra))
        code: int = args.run(args, io)
        io.stdout.flush()
        return code
    except ArgumentError as exc:
        io.stderr.write(f"error: {escape_text(str(exc))}\n{exc.usage}Try '{exc.prog} --help' for more information.\n")
        return 2
    except ToolReplayError as exc:
        io.stderr.write(f"error: {escape_text(str(exc))}\n")
        return 2
    except RecursionError:
        io.stderr.write("error: input nested too deeply\n")
        return 2
    except KeyboardInterrupt:
        io.stderr.write("error: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _discard_stdout(io)
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        # Files are checked where they are opened; an error without a file name is writing the report.
        if exc.filename is not None:
            io.stderr.write(f"error: {exc.filename}: {exc.strerror or exc}\n")
            return 2
        _discard_stdout(io)
        io.stderr.write(f"error: cannot write standard output: {exc.strerror or exc}\n")
        return 2


def _discard_stdout(io: IO) -> None:
    """Drop what could not be written, so that the interpreter's last flush does not fail again."""
    stdout = io.stdout
    try:
        fileno = stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fileno)
        os.close(devnull)
    except OSError:  # pragma: no cover - no null device: the interpreter reports the last flush
        pass


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(EXIT_TERMINATED)


def entry_point() -> None:
    """Console-script entry point for `toolreplay`: SIGTERM ends the command cleanly (temporary
    files removed, workers stopped), with exit code 143.

    After the Dask engine, the process ends without the interpreter's teardown of the Dask client's
    modules (about a thousand: 0.1-0.2 s, longer than a small audit's own work). By then the client is
    closed, every file is written and closed, and the output is flushed here; a flush that fails takes
    the usual way out, which reports it."""
    signal.signal(signal.SIGTERM, _terminate)
    code = main()
    if "distributed" in sys.modules:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed pipe or stream: let the interpreter report it as it always does
            pass
        else:
            os._exit(code)
    sys.exit(code)
