"""The audit commands: version, replay, scope, seal, verify."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from toolreplay import __version__
from toolreplay.audit.chain import GENESIS, LinkFact, line_digest, link_fact, seal_fact, seal_facts, verify_link_facts
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
from toolreplay.errors import InputError, UsageError
from toolreplay.format.chunks import read_facts, usable_cores
from toolreplay.format.output import Output, write_atomically
from toolreplay.format.records import MAX_LINE_BYTES, STDIN_NAME, TornLineError, line_too_long

if TYPE_CHECKING:  # imported by the commands that use them: `seal` and `verify` start faster without
    from toolreplay.audit.fleet import SessionJob
    from toolreplay.audit.scope import ScopeReport
    from toolreplay.policy.model import Policy

__all__ = ["register", "read_mutators_file", "max_line_option"]


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
        hint = args.session != "-"  # standard input is read from a copy: no hint naming the copy
        report = _html_page(args, io, "replay", lambda path: audit(_read(path, extract, args, io, hint=hint), mutators))
        return 1 if counted_findings(report, args.count_changes) else 0
    report = audit(_read(args.session, extract, args, io), mutators)
    _emit(iter_replay_json(report) if args.format == "json" else iter_replay_text(report), args.output, io)
    return 1 if counted_findings(report, args.count_changes) else 0


_END = object()


def _read(path: str, extract: Any, args: argparse.Namespace, io: IO, links: bool = False,
          hint: bool = True) -> Iterator[Any]:
    """`read_facts` with the command's options. An input error before the first record, in a file that looks
    like a log `import` reads, ends with a hint to import it (unless `hint` is False)."""
    facts = read_facts(path, extract, links=links, jobs=args.jobs, stdin=io.stdin, max_line=args.max_line_bytes)
    try:
        first = next(facts, _END)
    except InputError as exc:
        if not hint:
            raise
        raise _with_import_hint(exc, path, args.max_line_bytes) from None
    if first is _END:
        return
    yield first
    yield from facts


def _with_import_hint(exc: InputError, path: str, max_line: int) -> InputError:
    if path == "-" or exc.line is None or exc.message == line_too_long(max_line):
        return exc
    from toolreplay.importers.sniff import sniff_log_format

    fmt = sniff_log_format(path)
    if fmt is None:
        return exc
    what = "chat messages" if fmt == "auto" else f"a log in the {fmt} format"
    message = (f"{exc.message} (this looks like {what}, not a session: convert it with "
               f"'toolreplay import {fmt} {shlex.quote(path)} -o SESSION.jsonl')")
    if isinstance(exc, TornLineError):
        return TornLineError(exc.path, exc.line, message, exc.size)
    return InputError(exc.path, exc.line, message)


def _emit(pieces: Iterable[str], path: str | None, io: IO) -> None:
    """A report to stdout, or to the file `-o` names, written whole or not at all."""
    if not path:
        io.stdout.writelines(pieces)
        return
    with write_atomically(path) as output:
        for piece in pieces:
            output.write(piece.encode("utf-8"))


def _run_mutators(args: argparse.Namespace, io: IO) -> int:
    from toolreplay.audit.mutators import MutatorEvidence, collect_evidence, propose_mutators
    from toolreplay.audit.replay import DEFAULT_MUTATORS, state_fact

    known: set[str] = set(DEFAULT_MUTATORS)
    for path in args.mutators or ():
        known.update(read_mutators_file(path))
    evidence = MutatorEvidence()
    for session in args.sessions:
        collect_evidence(_read(session, state_fact, args, io), evidence)
    io.stdout.write(mutators_text(propose_mutators(evidence, known), len(args.sessions)))
    return 0


def _run_scope(args: argparse.Namespace, io: IO) -> int:
    from toolreplay.policy.model import load_policy

    policy = load_policy(args.scope)
    if args.format == "html":
        hint = args.session != "-"  # standard input is read from a copy: no hint naming the copy
        scope = _html_page(args, io, "scope", lambda path: _scope_report(path, policy, args, io, hint), policy.agent)
        return 1 if scope.findings else 0
    report = _scope_report(args.session, policy, args, io)
    _emit(iter_scope_json(report) if args.format == "json" else iter_scope_text(report), args.output, io)
    return 1 if report.findings else 0


def _scope_report(path: str, policy: Policy, args: argparse.Namespace, io: IO, hint: bool = True) -> ScopeReport:
    from toolreplay.audit.scope import audit_rule_facts, audit_tool_facts, rule_fact_extractor, tool_fact

    if policy.rules:
        return audit_rule_facts(_read(path, rule_fact_extractor(policy), args, io, hint=hint), policy)
    return audit_tool_facts(_read(path, tool_fact, args, io, hint=hint), policy)


def _html_page(args: argparse.Namespace, io: IO, command: str, run: Any, agent: str | None = None) -> Any:
    """Write the HTML page of one session's report; return the report `run(path)` made."""
    from toolreplay.audit.detail import SESSION_LIMITS, build_detail
    from toolreplay.report.pages import session_page

    with _session_file(args.session, io) as job:
        report = run(job.path)
        detail = build_detail(job, report.calls, getattr(report, "divergence", None), report.findings,
                              SESSION_LIMITS)
    _emit(session_page(detail, command, agent), args.output, io)
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
    facts = _read(args.session, seal_fact, args, io)
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
    torn: list[TornLineError] = []

    def links() -> Iterator[LinkFact]:
        try:
            yield from _read(args.sealed, link_fact, args, io, links=True)
        except TornLineError as exc:  # a write cut short by a crash: verify the links before it, and say so
            torn.append(exc)

    if args.checkpoint or args.previous or args.origin or args.allowed_signers or args.hmac_key:
        result = checkpoint_cli.verify_with_checkpoints(args, links)
        text = checkpoint_json(result) if args.format == "json" else checkpoint_text(result)
        ok = result.ok
    else:
        report = verify_link_facts(links())
        text = chain_json(report) if args.format == "json" else chain_text(report)
        ok = report.intact
    if torn:
        text = torn_json(text, torn[0].size) if args.format == "json" else text + torn_text(torn[0].size)
    io.stdout.write(text)
    return 0 if ok and not torn else 1


def _format_option(parser: argparse.ArgumentParser, html: bool = False) -> None:
    choices = ("text", "json", "html") if html else ("text", "json")
    parser.add_argument("--format", choices=choices, default="text", help="report format (default: text)")


def _output_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE (atomically)")


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
    _format_option(parser, html=True)
    _output_option(parser)
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
