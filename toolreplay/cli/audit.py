"""The audit commands: version, replay, scope, seal, verify."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from toolreplay import __version__
from toolreplay.audit.chain import GENESIS, line_digest, link_fact, seal_fact, seal_facts, verify_link_facts
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
)
from toolreplay.cli import _checkpoint as checkpoint_cli
from toolreplay.cli._io import IO
from toolreplay.errors import InputError, UsageError
from toolreplay.format.chunks import read_facts, usable_cores
from toolreplay.format.output import Output, write_atomically
from toolreplay.format.records import STDIN_NAME

if TYPE_CHECKING:  # imported by the commands that use them: `seal` and `verify` start faster without
    from toolreplay.audit.fleet import SessionJob
    from toolreplay.audit.scope import ScopeReport
    from toolreplay.policy.model import Policy

__all__ = ["register", "read_mutators_file"]


def read_mutators_file(path: str) -> list[str]:
    """Tool names from a mutators file: one per line, `#` comments and blank lines ignored."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().split("\n")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(path, None, "not valid UTF-8") from None
    names = []
    for lineno, line in enumerate(lines, 1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        if any(ch.isspace() for ch in name):
            raise InputError(path, lineno, f"a tool name has no white space: {name!r}")
        names.append(name)
    return names


def _run_version(args: argparse.Namespace, io: IO) -> int:
    io.stdout.write(f"toolreplay {__version__}\n")
    return 0


def _run_replay(args: argparse.Namespace, io: IO) -> int:
    from toolreplay.audit.replay import (
        DEFAULT_MUTATORS,
        audit_call_facts,
        audit_state_facts,
        call_fact,
        counted_findings,
        state_fact,
    )

    mutators = set(DEFAULT_MUTATORS) | set(args.mutator or ())
    for path in args.mutators or ():
        mutators.update(read_mutators_file(path))
    audit: Any = audit_state_facts if args.state_aware else audit_call_facts
    extract: Any = state_fact if args.state_aware else call_fact
    if args.format == "html":
        report = _html_page(args.session, io, "replay", lambda path: audit(read_facts(path, extract, jobs=args.jobs),
                                                                         mutators))
        return 1 if counted_findings(report, args.count_changes) else 0
    report = audit(read_facts(args.session, extract, jobs=args.jobs, stdin=io.stdin), mutators)
    io.stdout.writelines(iter_replay_json(report) if args.format == "json" else iter_replay_text(report))
    return 1 if counted_findings(report, args.count_changes) else 0


def _run_mutators(args: argparse.Namespace, io: IO) -> int:
    from toolreplay.audit.mutators import MutatorEvidence, collect_evidence, propose_mutators
    from toolreplay.audit.replay import DEFAULT_MUTATORS, state_fact

    known: set[str] = set(DEFAULT_MUTATORS)
    for path in args.mutators or ():
        known.update(read_mutators_file(path))
    evidence = MutatorEvidence()
    for session in args.sessions:
        collect_evidence(read_facts(session, state_fact, jobs=args.jobs, stdin=io.stdin), evidence)
    io.stdout.write(mutators_text(propose_mutators(evidence, known), len(args.sessions)))
    return 0


def _run_scope(args: argparse.Namespace, io: IO) -> int:
    from toolreplay.policy.model import load_policy

    policy = load_policy(args.scope)
    if args.format == "html":
        scope = _html_page(args.session, io, "scope", lambda path: _scope_report(path, policy, args.jobs, io),
                           policy.agent)
        return 1 if scope.findings else 0
    report = _scope_report(args.session, policy, args.jobs, io)
    io.stdout.writelines(iter_scope_json(report) if args.format == "json" else iter_scope_text(report))
    return 1 if report.findings else 0


def _scope_report(path: str, policy: Policy, jobs: int | None, io: IO) -> ScopeReport:
    from toolreplay.audit.scope import audit_rule_facts, audit_tool_facts, rule_fact_extractor, tool_fact

    if policy.rules:
        return audit_rule_facts(read_facts(path, rule_fact_extractor(policy), jobs=jobs, stdin=io.stdin), policy)
    return audit_tool_facts(read_facts(path, tool_fact, jobs=jobs, stdin=io.stdin), policy)


def _html_page(session: str, io: IO, command: str, run: Any, agent: str | None = None) -> Any:
    """Write the HTML page of one session's report; return the report `run(path)` made."""
    from toolreplay.audit.detail import SESSION_LIMITS, build_detail
    from toolreplay.report.pages import session_page

    with _session_file(session, io) as job:
        report = run(job.path)
        detail = build_detail(job, report.calls, getattr(report, "divergence", None), report.findings,
                              SESSION_LIMITS)
    io.stdout.writelines(session_page(detail, command, agent))
    return report


@contextmanager
def _session_file(path: str, io: IO) -> Iterator[SessionJob]:
    """The session as a file that can be read twice (the page needs the calls behind the findings).

    Standard input is copied to a temporary file first, and errors still name `<stdin>`."""
    from toolreplay.audit.fleet import SessionJob

    if path != "-":
        yield SessionJob(path, path)
        return
    with tempfile.TemporaryDirectory(prefix="toolreplay-") as folder:
        copy = os.path.join(folder, "stdin.jsonl")
        with open(copy, "wb") as handle:
            shutil.copyfileobj(io.stdin, handle, 1 << 20)
        try:
            yield SessionJob(copy, STDIN_NAME)
        except InputError as exc:
            raise InputError(STDIN_NAME, exc.line, exc.message) from None


def _run_seal(args: argparse.Namespace, io: IO) -> int:
    # The chain is complete (and its checkpoint signed) before any byte reaches the output: an input
    # error on any line, or a failed signature, leaves none.
    signers = checkpoint_cli.seal_signers(args)
    facts = read_facts(args.session, seal_fact, jobs=args.jobs, stdin=io.stdin)
    lines: Iterable[bytes] = seal_facts(facts)
    tally = _Tally(lines) if signers else None
    with output_whole(args.output, io) as output:
        for line in tally or lines:
            output.write(line)
        checkpoint = _sign(args, tally, signers)
    if checkpoint is not None:
        from toolreplay.audit.checkpoint import write_atomically as write_checkpoint

        write_checkpoint(args.checkpoint, checkpoint)
    return 0


def _sign(args: argparse.Namespace, tally: _Tally | None, signers: Any) -> bytes | None:
    """The signed checkpoint of the chain just written, when signers were given."""
    if tally is None:
        return None
    from toolreplay.audit.checkpoint import format_checkpoint

    checkpoint: bytes = format_checkpoint(args.origin, tally.count, tally.head, signers)
    return checkpoint


class _Tally:
    """Passes link lines through, counting them and keeping the last digest (the chain's head)."""

    def __init__(self, lines: Iterable[bytes]) -> None:
        self._lines = lines
        self.count = 0
        self.head = GENESIS

    def __iter__(self) -> Iterator[bytes]:
        line = b""
        for line in self._lines:  # noqa: B007 - the last line is the head
            self.count += 1
            yield line
        if self.count:
            self.head = line_digest(line)


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
    if args.checkpoint or args.previous or args.origin or args.allowed_signers or args.hmac_key:
        result = checkpoint_cli.verify_with_checkpoints(
            args, lambda: read_facts(args.sealed, link_fact, links=True, jobs=args.jobs, stdin=io.stdin))
        io.stdout.write(checkpoint_json(result) if args.format == "json" else checkpoint_text(result))
        return 0 if result.ok else 1
    report = verify_link_facts(read_facts(args.sealed, link_fact, links=True, jobs=args.jobs, stdin=io.stdin))
    io.stdout.write(chain_json(report) if args.format == "json" else chain_text(report))
    return 0 if report.intact else 1


def _format_option(parser: argparse.ArgumentParser, html: bool = False) -> None:
    choices = ("text", "json", "html") if html else ("text", "json")
    parser.add_argument("--format", choices=choices, default="text", help="report format (default: text)")


def _positive_int(text: str) -> int:
    """A positive worker count; more than the cores this process may use is taken as that many."""
    if not text.isascii() or not text.isdigit() or len(text) > 12 or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}")
    return min(int(text), usable_cores())


def _jobs_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=_positive_int, metavar="N",
                        help="worker processes for large files (default: one per core, at most 8; "
                             "at most one per core; 1 = no workers)")


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
    _format_option(parser, html=True)
    _jobs_option(parser)
    parser.set_defaults(run=_run_scope)

    parser = subparsers.add_parser("seal", help="write the session as a hash-linked chain")
    parser.add_argument("session", metavar="SESSION", help="session file; - for standard input")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the chain to FILE (atomically)")
    _jobs_option(parser)
    checkpoint_cli.seal_options(parser)
    parser.set_defaults(run=_run_seal)

    parser = subparsers.add_parser("verify", help="check a sealed file's hash chain")
    parser.add_argument("sealed", metavar="SEALED", help="sealed file; - for standard input")
    _format_option(parser)
    _jobs_option(parser)
    checkpoint_cli.verify_options(parser)
    parser.set_defaults(run=_run_verify)
