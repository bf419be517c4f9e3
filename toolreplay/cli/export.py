"""`export otel SESSION [-o FILE] [--with-content]`: a session as an OpenTelemetry trace (OTLP JSON)."""

from __future__ import annotations

import argparse
from typing import Any

from toolreplay.cli._io import IO
from toolreplay.cli.importing import write_file
from toolreplay.errors import UsageError
from toolreplay.format.records import STDIN_NAME, check_meta, open_input, ts_nanoseconds
from toolreplay.importers.otel_export import export_otel

__all__ = ["register"]


def _run_export(args: argparse.Namespace, io: IO) -> int:
    shown = STDIN_NAME if args.session == "-" else args.session
    with open_input(args.session, io.stdin) as handle:
        data = export_otel(handle, shown, args.with_content, _start(args.start))
    if args.output is None:
        io.write_bytes(data)
        return 0
    try:
        write_file(args.output, data.decode("utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    return 0


def _start(value: str | None) -> int:
    if value is None:
        return 0
    try:
        check_meta({"ts": value})
    except ValueError:
        raise UsageError(f"--start must be an RFC 3339 time in UTC ending in Z (2026-12-01T16:00:00Z), "
                         f"got {value!r}") from None
    return ts_nanoseconds(value)


def register(subparsers: Any) -> None:
    """Add `export otel SESSION [-o FILE] [--with-content]`."""
    exits = ("exit codes:\n  0  the export was written\n"
             "  2  usage error, or a session that is not valid: nothing is written")
    parser = subparsers.add_parser("export", help="write a session in another format", epilog=exits)
    formats = parser.add_subparsers(dest="target", metavar="TARGET", parser_class=type(parser))
    formats.required = True
    otel = formats.add_parser(
        "otel",
        help="an OpenTelemetry trace (OTLP JSON), one execute_tool span per call",
        description="Write SESSION as an OpenTelemetry trace (OTLP JSON): one execute_tool span per record, "
                    "ids derived from the session (same session, same bytes).",
        epilog=exits,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    otel.add_argument("session", metavar="SESSION", help="session file (plain or sealed); - for standard input")
    otel.add_argument("-o", "--output", metavar="FILE", help="write the export to FILE (atomically)")
    otel.add_argument(
        "--with-content",
        action="store_true",
        help="include arguments and results (gen_ai.tool.call.arguments/result); they may hold sensitive data",
    )
    otel.add_argument(
        "--start",
        metavar="TIME",
        help="where records without meta.ts begin: an RFC 3339 time in UTC (2026-12-01T16:00:00Z); each such "
             "record starts where the one before it ended; default the Unix epoch",
    )
    otel.set_defaults(run=_run_export)
