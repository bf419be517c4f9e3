"""`crosscheck TRANSCRIPT... --records DIR`: did every call the host ran pass the guard, and was every deny honoured?"""

from __future__ import annotations

import argparse
from typing import Any

from toolreplay.audit.crosscheck import crosscheck, render_json, render_text
from toolreplay.cli._io import IO

__all__ = ["register"]


def _run_crosscheck(args: argparse.Namespace, io: IO) -> int:
    report = crosscheck(args.transcripts, args.records)
    io.stdout.write(render_json(report) if args.format == "json" else render_text(report))
    return 1 if report.failed else 0


def register(subparsers: Any) -> None:
    """Add `crosscheck`."""
    parser = subparsers.add_parser(
        "crosscheck", help="compare a host's own transcripts with the guard's hook records",
        description="Compare a host's own transcripts (Claude Code transcripts, Codex rollouts, Gemini CLI\n"
                    "chat recordings) with the records `toolreplay hook` wrote for the same sessions\n"
                    "(DIR/SESSION_ID.jsonl): a call that ran and never passed the guard (bypassed), one that\n"
                    "ran after the guard denied it (ran-after-deny), one the guard allowed that the host never\n"
                    "shows (not-run), and a session without a record (no-record).",
        epilog="exit codes:\n  0  every call the host ran passed the guard, and no deny was ignored\n"
               "  1  a bypassed or ran-after-deny call\n"
               "  2  usage error, an unreadable or malformed transcript or record, or a transcript and a\n"
               "     record that are not the same session")
    parser.add_argument("transcripts", metavar="TRANSCRIPT", nargs="+", help="a host's transcript file")
    parser.add_argument("--records", metavar="DIR", required=True, help="the hook's records folder")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    parser.set_defaults(run=_run_crosscheck)
