"""Approval receipts on the command line: `approve` (a person signs a request), `verify --approvers`."""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from typing import Any

from toolreplay.cli._io import IO
from toolreplay.errors import UsageError

__all__ = ["duration_seconds", "register", "verify_options", "verify_approvals"]

_EXIT_CODES = """exit codes:
  0  the receipt is written
  2  usage error (bad arguments, an expiry in the past, ssh-keygen failed), or a malformed request file"""

_DURATION = re.compile(r"([1-9][0-9]{0,8})([smhd])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _expiry(text: str, now_ns: int) -> int:
    """`--expires`: a duration from now (`90s`, `30m`, `8h`, `7d`) or a UTC time (`2026-12-02T08:00:00Z`)."""
    from toolreplay.audit.receipts import parse_expiry

    seconds = duration_seconds(text)
    if seconds is not None:
        return now_ns + seconds * 1_000_000_000
    try:
        when = parse_expiry(text)
    except ValueError:
        raise UsageError(f"--expires {text!r}: expected a duration (30m, 8h, 7d) or a UTC time like "
                         "2026-12-02T08:00:00Z") from None
    if when <= now_ns:
        raise UsageError(f"--expires {text}: that time has passed")
    return when


def duration_seconds(text: str) -> int | None:
    """The seconds of a duration (`90s`, `30m`, `8h`, `7d`); None when `text` is not one."""
    match = _DURATION.fullmatch(text)
    return None if match is None else int(match.group(1)) * _UNIT[match.group(2)]


def _run_approve(args: argparse.Namespace, io: IO) -> int:
    from toolreplay.audit.receipts import approve_request, format_expiry, read_request
    from toolreplay.audit.signers import SshSigner, check_key_name, find_ssh_keygen

    expires = _expiry(args.expires, time.time_ns())
    read_request(args.request)  # a malformed request is said before ssh-keygen is looked for
    find_ssh_keygen()
    signers = [SshSigner(check_key_name(name), key_file) for name, key_file in args.ssh_key]
    request, path = approve_request(args.request, signers, args.scope, expires, args.output)
    shown = json.dumps(request.args, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    tool = request.tool if re.fullmatch(r"[A-Za-z0-9_.:/-]+", request.tool) else json.dumps(request.tool)
    io.stdout.write(f"approved: {tool} {shown} ({args.scope}, until {format_expiry(expires)})\n"
                    f"receipt: {path}\n")
    return 0


def verify_options(parser: argparse.ArgumentParser) -> None:
    """Add `--approvers` and `--policy` to `verify`."""
    parser.add_argument("--approvers", metavar="ALLOWED_SIGNERS",
                        help="check that every write of the record ran with an approval receipt signed by a key of "
                             "this OpenSSH allowed_signers file, for that call, under --policy, used once")
    parser.add_argument("--policy", metavar="POLICY",
                        help="with --approvers: the policy the guard ran with (its write tools; its SHA-256)")


def verify_approvals(args: argparse.Namespace, io: IO) -> int:
    """`verify SEALED --approvers FILE --policy POLICY`: the chain's verdict and the receipts'."""
    from toolreplay.audit.api import session_file, verify_session
    from toolreplay.audit.checkpoint import Keys
    from toolreplay.audit.receipts import policy_digest, receipts_json, receipts_text, verify_receipts
    from toolreplay.audit.render import chain_json, chain_text
    from toolreplay.audit.signers import find_ssh_keygen, read_allowed_signers
    from toolreplay.format.records import read_session
    from toolreplay.policy.model import load_policy

    if args.checkpoint or args.previous or args.proof or args.report:
        raise UsageError("--approvers is checked alone: give no --checkpoint, --previous, --proof or --report")
    if not args.policy:
        raise UsageError("--approvers needs the policy the guard ran with: --policy POLICY")
    policy = load_policy(args.policy)
    digest = policy_digest(args.policy)
    keys = Keys(os.path.abspath(args.approvers), tuple(read_allowed_signers(args.approvers)))
    find_ssh_keygen()
    with session_file(args.sealed, io.stdin) as job:
        chain = verify_session(job.path, jobs=args.jobs, max_line=args.max_line_bytes).chain
        with open(job.path, "rb") as handle:
            report = verify_receipts(read_session(handle, job.display), keys, digest, policy.write_tools)
    if args.format == "json":
        document = {**json.loads(chain_json(chain)), "approvals": receipts_json(report)}
        io.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    else:
        io.stdout.write(chain_text(chain) + receipts_text(report))
    return 0 if chain.intact and report.verified else 1


def register(subparsers: Any) -> None:
    """Add `approve` to the command line."""
    parser = subparsers.add_parser(
        "approve", help="approve one held-back call: sign its request file into a receipt (on your own machine)",
        description="Sign the approval request the guard wrote for a call (REQUEST, NAME.request of its receipts "
                    "folder) with your OpenSSH key: the receipt (NAME.receipt beside it, or -o) lets that exact "
                    "call run once, or for its session, or always, until it expires. The guard checks it against "
                    "its allowed_signers file: a client cannot make one.",
        epilog=_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("request", metavar="REQUEST", help="the request file (NAME.request)")
    parser.add_argument("--ssh-key", nargs=2, action="append", required=True, metavar=("NAME", "KEY_FILE"),
                        help="sign with this OpenSSH key; NAME is your identity in the guard's allowed_signers")
    parser.add_argument("--scope", choices=("once", "session", "always"), default="once",
                        help="once: this call (default); session: identical calls of this session; always: "
                             "identical calls of any session")
    parser.add_argument("--expires", metavar="WHEN", default="1h",
                        help="a duration from now (30m, 8h, 7d) or a UTC time (2026-12-02T08:00:00Z); default 1h")
    parser.add_argument("-o", "--output", metavar="RECEIPT", help="write the receipt here (default: NAME.receipt)")
    parser.set_defaults(run=_run_approve)
