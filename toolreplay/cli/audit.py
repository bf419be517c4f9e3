"""The audit commands: version, replay, scope, seal, verify."""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from toolreplay import __version__
from toolreplay.audit.api import (
    LinkReading,
    check_session,
    mutator_set,
    read_mutators_file,
    replay_session,
    scope_session,
    seal_session,
    session_file,
    verify_session,
)
from toolreplay.audit.render import (
    chain_json,
    chain_text,
    checkpoint_json,
    checkpoint_text,
    iter_replay_json,
    iter_replay_text,
    iter_scope_json,
    iter_scope_text,
    mutators_text,
    torn_json,
    torn_text,
)
from toolreplay.cli import _checkpoint as checkpoint_cli
from toolreplay.cli._io import IO
from toolreplay.cli.receipts import verify_options as receipts_options
from toolreplay.errors import UsageError
from toolreplay.format.chunks import usable_cores
from toolreplay.format.output import Output, write_atomically
from toolreplay.format.records import MAX_LINE_BYTES

if TYPE_CHECKING:  # imported by the commands that use them: `seal` and `verify` start faster without
    from toolreplay.audit.fleet import SessionJob

__all__ = ["register", "read_mutators_file", "max_line_option", "fail_on_option"]


def _run_version(args: argparse.Namespace, io: IO) -> int:
    io.stdout.write(f"toolreplay {__version__}\n")
    return 0


def _run_replay(args: argparse.Namespace, io: IO) -> int:
    from toolreplay.audit.replay import counted_findings

    mutators = mutator_set(args.mutator or (), args.mutators or ())
    if args.format == "html":
        with session_file(args.session, io.stdin) as job:
            hint = args.session != "-"  # standard input is read from a copy: no hint naming the copy
            report = replay_session(job.path, mutators=mutators, state_aware=args.state_aware, hint=hint,
                                    **_reading(args, io))
            _html_page(job, report, args, io, "replay")
    else:
        report = replay_session(args.session, mutators=mutators, state_aware=args.state_aware, **_reading(args, io))
        _emit(iter_replay_json(report) if args.format == "json" else iter_replay_text(report), args.output, io)
    return 1 if counted_findings(report, args.count_changes) else 0


def _reading(args: argparse.Namespace, io: IO) -> dict[str, Any]:
    """How the library reads a session for this command: workers, standard input, the line limit."""
    return {"jobs": args.jobs, "stdin": io.stdin, "max_line": args.max_line_bytes}


def _emit(pieces: Iterable[str], path: str | None, io: IO) -> None:
    """A report to stdout, or to the file `-o` names, written whole or not at all."""
    if not path:
        io.stdout.writelines(pieces)
        return
    with write_atomically(path) as output:
        for piece in pieces:
            output.write(piece.encode("utf-8"))


def _run_mutators(args: argparse.Namespace, io: IO) -> int:
    from toolreplay.audit.mutators import MutatorEvidence, evidence_check, propose_mutators

    known = mutator_set((), args.mutators or ())
    evidence = MutatorEvidence()
    check = evidence_check(evidence)
    for session in args.sessions:
        check_session(session, check, **_reading(args, io))
    io.stdout.write(mutators_text(propose_mutators(evidence, set(known)), len(args.sessions)))
    return 0


def _run_scope(args: argparse.Namespace, io: IO) -> int:
    from toolreplay.policy.model import load_policy

    policy = load_policy(args.scope)
    if args.format == "html":
        with session_file(args.session, io.stdin) as job:
            hint = args.session != "-"  # standard input is read from a copy: no hint naming the copy
            report = scope_session(job.path, policy, hint=hint, **_reading(args, io))
            _html_page(job, report, args, io, "scope", policy.agent)
    else:
        report = scope_session(args.session, policy, **_reading(args, io))
        fail_on = frozenset(args.fail_on or ())
        _emit(iter_scope_json(report, fail_on) if args.format == "json" else iter_scope_text(report, fail_on),
              args.output, io)
    return 1 if report.counted(frozenset(args.fail_on or ())) else 0


def _html_page(job: SessionJob, report: Any, args: argparse.Namespace, io: IO, command: str,
               agent: str | None = None) -> None:
    """Write the HTML page of one session's report."""
    from toolreplay.report.pages import session_report_page

    _emit(session_report_page(job, report, command, agent, getattr(args, "count_changes", False),
                              frozenset(getattr(args, "fail_on", None) or ())), args.output, io)


def _run_seal(args: argparse.Namespace, io: IO) -> int:
    # The chain is complete (and its checkpoint signed) before any byte reaches the output: an input
    # error on any line, or a failed signature, leaves none.
    signers = checkpoint_cli.seal_signers(args)
    if args.report is not None or args.session is None:
        return checkpoint_cli.seal_report(args, signers)
    chain = seal_session(args.session, origin=args.origin, signers=signers, tlog=args.tlog, **_reading(args, io))
    with output_whole(args.output, io) as output:
        output.write_all(chain)
        checkpoint = chain.checkpoint()
    if checkpoint is not None:
        from toolreplay.audit.checkpoint import write_atomically as write_checkpoint

        write_checkpoint(args.checkpoint, checkpoint)
    return 0


@contextmanager
def output_whole(path: str | None, io: IO) -> Iterator[Output]:
    """Yield an Output for `path` (written atomically) or, with no path, for stdout: the bytes go to an unnamed
    temporary file first and reach stdout only when the block ends without an error, so a command that fails
    half-way prints none of its output, and memory does not grow with it."""
    if path:
        with write_atomically(path) as output:
            yield output
        return
    with tempfile.TemporaryFile() as spool:  # unnamed where the platform allows: nothing to clean up
        output = Output(spool, "a temporary file")
        yield output
        output.flush()
        spool.seek(0)
        io.stdout.flush()
        _copy_to_stdout(spool, io)


def _copy_to_stdout(source: Any, io: IO) -> None:
    buffer = getattr(io.stdout, "buffer", None)
    if buffer is not None:
        shutil.copyfileobj(source, buffer, 1 << 20)
        buffer.flush()
    else:
        io.stdout.write(source.read().decode("utf-8"))


def _run_verify(args: argparse.Namespace, io: IO) -> int:
    if args.approvers:
        from toolreplay.cli.receipts import verify_approvals

        if args.sealed is None:
            args.verify_parser.error("the following arguments are required: SEALED")
        return verify_approvals(args, io)
    if args.policy:
        raise UsageError("--policy goes with --approvers ALLOWED_SIGNERS")
    if args.report:
        report, proven = checkpoint_cli.verify_report(args)
        io.stdout.write(report)
        return 0 if proven else 1
    if args.proof:
        report, proven = checkpoint_cli.verify_proof(args)
        io.stdout.write(report)
        return 0 if proven else 1
    if args.sealed is None:  # optional only for --proof: the usual argparse message otherwise
        args.verify_parser.error("the following arguments are required: SEALED")
    if args.checkpoint or args.previous or args.origin or args.allowed_signers or args.hmac_key:
        reading = LinkReading(args.sealed, **_reading(args, io))
        result = checkpoint_cli.verify_with_checkpoints(args, lambda: reading)
        text = checkpoint_json(result) if args.format == "json" else checkpoint_text(result)
        ok, torn = result.ok, None if reading.torn is None else reading.torn.size
    else:
        verified = verify_session(args.sealed, **_reading(args, io))
        text = chain_json(verified.chain) if args.format == "json" else chain_text(verified.chain)
        ok, torn = verified.chain.intact, verified.torn
    if torn is not None:
        text = torn_json(text, torn) if args.format == "json" else text + torn_text(torn)
    io.stdout.write(text)
    return 0 if ok and torn is None else 1


def _format_option(parser: argparse.ArgumentParser, html: bool = False) -> None:
    choices = ("text", "json", "html") if html else ("text", "json")
    parser.add_argument("--format", choices=choices, default="text", help="report format (default: text)")


def _output_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE (atomically)")


def fail_on_option(parser: argparse.ArgumentParser) -> None:
    """Add `--fail-on KIND`: an information kind (a call the guard blocked, one a person approved, a shadow
    decision) that makes the exit code 1 as a finding does."""
    from toolreplay.audit.findings import INFORMATION_KINDS

    parser.add_argument("--fail-on", action="append", choices=sorted(INFORMATION_KINDS), metavar="KIND",
                        help="count this information kind as a finding, for the totals and the exit code "
                             f"({', '.join(sorted(INFORMATION_KINDS))}; repeatable)")


def _positive_int(text: str) -> int:
    """A positive worker count; more than the cores this process may use is taken as that many."""
    if not text.isascii() or not text.isdigit() or len(text) > 12 or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}")
    return min(int(text), usable_cores())


def _jobs_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=_positive_int, metavar="N",
                        help="worker processes for large files (default: one per core, at most 8; "
                             "at most one per core; 1 = no workers)")
    max_line_option(parser)


def _byte_count(text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 15 or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive number of bytes, not {text!r}")
    return int(text)


def max_line_option(parser: argparse.ArgumentParser) -> None:
    """Add `--max-line-bytes N`: a longer line of a session is an input error (default 64 MiB)."""
    parser.add_argument("--max-line-bytes", type=_byte_count, default=MAX_LINE_BYTES, metavar="N",
                        help=f"a session line longer than N bytes is an input error (default: {MAX_LINE_BYTES}, "
                             "64 MiB)")


def register(subparsers: Any) -> None:
    """Add the audit commands to the command line."""
    parser = subparsers.add_parser("version", help="print the version")
    parser.set_defaults(run=_run_version)

    parser = subparsers.add_parser("replay", help="find redundant calls and non-determinism in a session")
    parser.add_argument("session", metavar="SESSION",
                        help="session file (JSON Lines, plain or sealed); - for standard input")
    parser.add_argument("--mutator", action="append", metavar="NAME", help="another tool that changes state")
    parser.add_argument("--mutators", action="append", metavar="FILE", help="file of mutator names, one a line")
    parser.add_argument("--state-aware", action="store_true",
                        help="compare each call with its most recent identical call: a change after a "
                             "mutator is changed-after-write (information), a change after an error "
                             "retry-after-error, anything else non-determinism")
    parser.add_argument("--count-changes", action="store_true",
                        help="with --state-aware: count changed-after-write as findings for the exit code")
    _format_option(parser, html=True)
    _output_option(parser)
    _jobs_option(parser)
    parser.set_defaults(run=_run_replay)

    parser = subparsers.add_parser(
        "mutators", help="propose candidate mutators from sessions, for review (nothing is applied)",
        description="Print the tools that look like they change state: a write verb in the name, or identical "
                    "calls whose responses changed after the tool ran. The output is a mutators file to review "
                    "and pass to `replay --mutators`. Exit codes: 0 done, 2 usage or input error.")
    parser.add_argument("sessions", nargs="+", metavar="SESSION", help="session files (plain or sealed)")
    parser.add_argument("--mutators", action="append", metavar="FILE",
                        help="mutators already declared, left out of the proposal")
    _jobs_option(parser)
    parser.set_defaults(run=_run_mutators)

    parser = subparsers.add_parser("scope", help="check each call against a policy file and its rules")
    parser.add_argument("session", metavar="SESSION", help="session file (plain or sealed); - for standard input")
    parser.add_argument("scope", metavar="POLICY", help="policy file: {\"agent\": ..., \"allowed_tools\": [...]}")
    fail_on_option(parser)
    _format_option(parser, html=True)
    _output_option(parser)
    _jobs_option(parser)
    parser.set_defaults(run=_run_scope)

    parser = subparsers.add_parser("seal", help="write the session as a hash-linked chain")
    parser.add_argument("session", metavar="SESSION", nargs="?", help="session file; - for standard input")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the chain to FILE (atomically)")
    parser.add_argument("--report", metavar="REPORT",
                        help="instead of a session: sign a report file whole (--checkpoint, a tlog-checkpoint of one "
                             "leaf, its SHA-256), for verify --report")
    _jobs_option(parser)
    checkpoint_cli.seal_options(parser)
    parser.set_defaults(run=_run_seal, seal_parser=parser)

    parser = subparsers.add_parser("verify", help="check a sealed file's hash chain")
    parser.add_argument("sealed", metavar="SEALED", nargs="?",
                        help="sealed file; - for standard input (none with --proof)")
    _format_option(parser)
    _jobs_option(parser)
    checkpoint_cli.verify_options(parser)
    receipts_options(parser)
    parser.set_defaults(run=_run_verify, verify_parser=parser)
