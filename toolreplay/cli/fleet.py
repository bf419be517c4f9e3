"""`toolreplay audit PATH...`: every session of a fleet, on this machine's cores or a Dask cluster.

Exit codes: 0 nothing found; 1 a finding or a broken chain in any session; 2 a usage error, or any
session or folder that could not be read (each is still reported, and named on stderr) unless
`--allow-unreadable` is given, in which case unreadable sessions are reported and do not count.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from toolreplay.audit.api import audit_many, mutator_set
from toolreplay.audit.engines import Engine, LocalEngine
from toolreplay.audit.fleet import SessionOptions
from toolreplay.audit.fleet_render import iter_fleet_json, iter_fleet_text
from toolreplay.cli import _checkpoint as checkpoint_cli
from toolreplay.cli._io import IO
from toolreplay.cli.audit import _positive_int, fail_on_option, max_line_option, output_whole
from toolreplay.errors import UsageError
from toolreplay.format.text import escape_text
from toolreplay.policy.model import load_policy
from toolreplay.report.pages import DETAILED_SESSIONS, fleet_report_page

__all__ = ["register"]

_EXIT_CODES = """exit codes:
  0  every session read, nothing found
  1  a finding, a broken chain or a failed checkpoint in any session, a call that ran against the
     policy, a call whose outcome is unknown (blocked, approved and shadow calls are information
     and count only with --fail-on KIND; with --state-aware, changed-after-write counts only with
     --count-changes)
  2  usage error, or a session or folder that could not be read (reported all the same;
     --allow-unreadable reports it without this exit code); files that are not regular files
     are skipped and do not change the exit code"""


def _options(args: argparse.Namespace) -> SessionOptions:
    policy = load_policy(args.policy) if args.policy else None
    render = args.format if args.format in ("text", "json") else None  # rendered by the workers
    return SessionOptions(mutator_set(args.mutator or (), args.mutators or ()), policy,
                          checkpoint_cli.trusted_keys(args), render, args.state_aware, args.max_line_bytes,
                          tables=args.format == "sqlite", count_changes=args.count_changes,
                          all_sessions=args.all_sessions, cite=args.cite, fail_on=frozenset(args.fail_on or ()))


def _engine(args: argparse.Namespace) -> Engine:
    if args.engine == "dask":
        if not args.scheduler:
            raise UsageError("--engine dask needs --scheduler ADDRESS (e.g. tcp://10.0.0.5:8786)")
        from toolreplay.audit.dask_engine import DaskEngine

        return DaskEngine(args.scheduler)
    if args.scheduler:
        raise UsageError("--scheduler is for --engine dask")
    return LocalEngine(args.jobs)


def _write(pieces: Iterable[str], output: str | None, io: IO) -> None:
    """To a file written whole (`toolreplay.format.output`: a device stays a device), or to stdout once the
    report is complete, so a run that fails half-way (a lost Dask scheduler, a killed worker) prints none of it."""
    with output_whole(output, io) as target:
        for piece in pieces:
            target.write(piece.encode("utf-8"))


def _run_audit(args: argparse.Namespace, io: IO) -> int:
    if args.format == "sqlite" and not args.output:
        raise UsageError("--format sqlite needs -o FILE (a database is written to a file, not to standard output)")
    if args.append:
        if args.format != "sqlite":
            raise UsageError("--append is for --format sqlite")
        from toolreplay.audit.fleet_sqlite import check_appendable

        check_appendable(args.output)  # before the audit: a file that is not one to add to is left untouched
    options = _options(args)
    run = audit_many(args.paths, options, _engine(args), top=DETAILED_SESSIONS if args.format == "html" else None)
    summary = run.summary
    if args.format == "sqlite":
        from toolreplay.audit.fleet_sqlite import write_fleet_sqlite

        write_fleet_sqlite(args.output, run.results, state_aware=options.state_aware,
                           policy_agent=None if options.policy is None else options.policy.agent, append=args.append)
    elif args.format == "html":
        _write(fleet_report_page(run), args.output, io)
    elif args.format == "json":
        _write(iter_fleet_json(run.results, summary), args.output, io)
    else:
        _write(iter_fleet_text(run.results, summary, args.all_sessions), args.output, io)
    for path, why in summary.skipped_listed:
        io.stderr.write(f"warning: {escape_text(path)}: skipped: {escape_text(why)}\n")
    if summary.skipped > len(summary.skipped_listed):
        io.stderr.write(f"... and {summary.skipped - len(summary.skipped_listed)} more skipped files\n")
    for message in summary.unreadable_listed:
        io.stderr.write(f"{'warning' if args.allow_unreadable else 'error'}: {escape_text(message)}\n")
    if summary.unreadable > len(summary.unreadable_listed):
        io.stderr.write(f"... and {summary.unreadable - len(summary.unreadable_listed)} more unreadable files\n")
    if summary.unverified:
        io.stderr.write(f"warning: {summary.unverified} checkpoint{'' if summary.unverified == 1 else 's'} not "
                        "verified: give --allowed-signers FILE or --hmac-key NAME SECRET_FILE to check them\n")
    if summary.unreadable and not args.allow_unreadable:
        return 2
    return 1 if summary.found else 0


def register(subparsers: Any) -> None:
    """Add the `audit` command to the command line."""
    parser = subparsers.add_parser("audit", help="audit many sessions: replay, scope and chains, with a summary",
                                   formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_EXIT_CODES)
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="session files, folders (every *.jsonl below) or glob patterns; in folders and "
                             "globs, only regular files are read (others are reported as skipped)")
    parser.add_argument("--policy", metavar="FILE", help="permission file: check every session's calls against it")
    parser.add_argument("--mutator", action="append", metavar="NAME", help="another tool that changes state")
    parser.add_argument("--mutators", action="append", metavar="FILE", help="file of mutator names, one a line")
    parser.add_argument("--state-aware", action="store_true",
                        help="replay as replay --state-aware: a change after a mutator is changed-after-write "
                             "(information, not counted), a change after an error retry-after-error")
    parser.add_argument("--count-changes", action="store_true",
                        help="with --state-aware: count changed-after-write as findings for the exit code")
    fail_on_option(parser)
    parser.add_argument("--format", choices=("text", "json", "html", "sqlite"), default="text",
                        help="report format (default: text); sqlite: a database of sessions, calls and findings "
                             "(with -o FILE)")
    parser.add_argument("--cite", action="store_true",
                        help="JSON report: each session's Merkle tree (size and root, as seal --tlog makes it), so "
                             "the verdict names the exact records it is about")
    parser.add_argument("--all-sessions", action="store_true",
                        help="text report: list every session (by default only those with something found, "
                             "unreadable or skipped)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE (atomically)")
    parser.add_argument("--append", action="store_true",
                        help="sqlite: add this run to the database FILE holds, without the sessions it holds "
                             "already (the same path and chain head)")
    parser.add_argument("--jobs", type=_positive_int, metavar="N",
                        help="local engine: sessions audited in N processes (default: one per core; 1 = in this one)")
    parser.add_argument("--engine", choices=("local", "dask"), default="local",
                        help="where sessions are audited: this machine (default) or a Dask cluster")
    parser.add_argument("--scheduler", metavar="ADDRESS", help="the Dask scheduler, e.g. tcp://10.0.0.5:8786")
    parser.add_argument("--allow-unreadable", action="store_true",
                        help="report unreadable sessions and folders without making the exit code 2")
    max_line_option(parser)
    checkpoint_cli.trust_options(parser)  # verify each SESSION.checkpoint beside a SESSION.jsonl with these keys
    parser.set_defaults(run=_run_audit)
