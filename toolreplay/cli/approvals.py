"""The approvals command: show and revoke the approvals a person asked the guard to remember for good."""

from __future__ import annotations

import argparse
from typing import Any

from toolreplay.cli._io import IO
from toolreplay.guard.approvals import read_approvals, revoke_approval

__all__ = ["register"]

_EXIT_CODES = """exit codes:
  0  done
  2  usage error (bad arguments, an unknown approval id), or a malformed approvals file (PATH:LINE: ...)"""


def _run_list(args: argparse.Namespace, io: IO) -> int:
    approvals = read_approvals(args.file)
    io.stdout.write(f"approvals: {len(approvals)}\n")
    for approval in approvals:
        io.stdout.write(approval.describe() + "\n")
    return 0


def _run_revoke(args: argparse.Namespace, io: IO) -> int:
    approval = revoke_approval(args.file, args.id)
    io.stdout.write("revoked " + approval.describe() + "\n")
    return 0


def register(subparsers: Any) -> None:
    """Add the approvals command to the command line."""
    parser = subparsers.add_parser("approvals", help="show and revoke remembered approvals of write tools",
                                   epilog=_EXIT_CODES)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    actions.required = True
    listing = actions.add_parser("list", help="list the approvals of FILE, in file order")
    listing.add_argument("--file", required=True, metavar="FILE", help="approvals file (JSON Lines)")
    listing.set_defaults(run=_run_list)
    revoke = actions.add_parser("revoke", help="remove approval ID from FILE: its calls are asked again")
    revoke.add_argument("id", metavar="ID", help="the approval's id, as list shows it")
    revoke.add_argument("--file", required=True, metavar="FILE", help="approvals file (JSON Lines)")
    revoke.set_defaults(run=_run_revoke)
