"""`diff A B`: compare two recorded sessions, or two folders of them; exit 0 equal, 1 differ, 2 bad input."""

from __future__ import annotations

import argparse
from typing import Any

from toolreplay.audit.diff import diff_paths
from toolreplay.audit.render_diff import diff_json, diff_text
from toolreplay.cli._io import IO

__all__ = ["register"]


def _run_diff(args: argparse.Namespace, io: IO) -> int:
    diff = diff_paths(args.a, args.b)
    io.stdout.write(diff_json(diff) if args.format == "json" else diff_text(diff))
    return 0 if diff.equal else 1


def register(subparsers: Any) -> None:
    """Add `diff`."""
    parser = subparsers.add_parser(
        "diff", help="compare two sessions of the same task, call by call",
        description="Compare two sessions of the same task, call by call: align their calls (tool and\n"
                    "arguments, canonically) and report the first divergence, the calls only one session\n"
                    "made, and the same calls answered differently. Given two folders, compare every\n"
                    "session at the same path in both (two `eval --record` runs, case by case).",
        epilog="exit codes:\n  0  the sessions are equal (same calls, same order, same responses)\n"
               "  1  they differ\n  2  usage error, an unreadable or malformed session")
    parser.add_argument("a", metavar="A", help="a session file, or a folder of sessions")
    parser.add_argument("b", metavar="B", help="the session (or folder) to compare it with")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    parser.set_defaults(run=_run_diff)
