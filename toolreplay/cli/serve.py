"""The serve command: the console, a local web page over records folders with the approvals inbox."""

from __future__ import annotations

import argparse
import getpass
import os
from typing import TYPE_CHECKING, Any

from toolreplay.cli._io import IO
from toolreplay.errors import UsageError
from toolreplay.format.text import escape_text

if TYPE_CHECKING:
    from toolreplay.audit.signers import SshSigner

__all__ = ["register"]

_EXIT_CODES = """exit codes:
  0  stopped (Ctrl-C, SIGTERM)
  2  usage error (bad arguments, a folder that is not one, an address that cannot be served, a key that
     cannot sign)"""


_RECEIPT_EXPIRES = "1h"


def _address(text: str) -> tuple[str, int]:
    """`PORT`, `HOST:PORT` or `[IPV6]:PORT`; the host defaults to 127.0.0.1."""
    host, _, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not port.isdigit() or int(port) > 65535 or (":" in host and not text.startswith("[")):
        raise UsageError(f"--listen {text}: expected PORT or HOST:PORT")
    return host or "127.0.0.1", int(port)


def _person() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "console"


def _receipt_seconds(args: argparse.Namespace) -> int:
    from toolreplay.cli.receipts import duration_seconds

    seconds = duration_seconds(args.receipt_expires)
    if seconds is None:
        raise UsageError(f"--receipt-expires {escape_text(args.receipt_expires)}: expected a duration (30m, 8h, 7d)")
    if args.ssh_key is None and args.receipt_expires != _RECEIPT_EXPIRES:
        raise UsageError("--receipt-expires needs --ssh-key KEY")
    return seconds


def _signer(args: argparse.Namespace, person: str) -> SshSigner | None:
    """The key the console signs approval receipts with, as `person`; checked by signing once now."""
    if args.ssh_key is None:
        return None
    from toolreplay.audit.signers import SshSigner, check_key_name, find_ssh_keygen

    check_key_name(person, "--person (the name the receipts are signed as)")
    if not os.path.isfile(args.ssh_key):
        raise UsageError(f"--ssh-key {escape_text(args.ssh_key)}: not a file (an OpenSSH private key)")
    find_ssh_keygen()
    signer = SshSigner(person, args.ssh_key)
    signer.sign(b"toolreplay serve: can this key sign?\n")  # a key that cannot sign is said now, not at a click
    return signer


def _run(args: argparse.Namespace, io: IO) -> int:
    from toolreplay.audit.signers import read_secret_file
    from toolreplay.console.server import Console, serve
    from toolreplay.guard.hosts import is_loopback

    host, port = _address(args.listen)
    for folder in args.folders:
        if not os.path.isdir(folder):
            raise UsageError(f"{folder}: not a folder (serve takes records folders)")
    if not is_loopback(host) and not args.public:
        raise UsageError(f"--listen {escape_text(host)}: not a loopback address; serving other machines needs "
                         "--public and --token-file")
    if args.public and args.token_file is None:
        raise UsageError("--public needs --token-file FILE (a token every request must carry)")
    token = read_secret_file(args.token_file) if args.token_file is not None else None
    if token is not None and (len(token) < 16 or not token.isascii() or not token.isalnum()):
        raise UsageError(f"--token-file {args.token_file}: the token must be at least 16 letters and digits")
    for path in args.approvals or ():
        if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise UsageError(f"--approvals {path}: its folder does not exist")
    person = args.person or _person()
    receipt_seconds = _receipt_seconds(args)
    signer = _signer(args, person)
    console = Console(args.folders, database=args.db, approvals=args.approvals or (), person=person, token=token,
                      loopback=is_loopback(host), signer=signer, receipt_seconds=receipt_seconds)
    try:
        server = serve(console, host, port)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.listen}: {exc.strerror or exc}") from None
    shown_host = f"[{host}]" if ":" in host else host
    address = f"http://{shown_host}:{server.server_address[1]}/"
    io.stderr.write(f"toolreplay console at {address}" + ("?token=..." if token is not None else "")
                    + f" (deciding as {escape_text(console.person)}); Ctrl-C stops it\n")
    io.stderr.flush()
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        console.stop()
    return 0


def register(subparsers: Any) -> None:
    """Add the serve command to the command line."""
    parser = subparsers.add_parser("serve", help="a local web console over records folders: live sessions and the "
                                   "approvals inbox", epilog=_EXIT_CODES)
    parser.add_argument("folders", nargs="+", metavar="RECORDS_DIR", help="folders of records (*.jsonl below)")
    parser.add_argument("--db", metavar="FLEET.db", help="a fleet history (audit --format sqlite): list its sessions")
    parser.add_argument("--listen", default="127.0.0.1:8470", metavar="HOST:PORT",
                        help="where to serve (default 127.0.0.1:8470; port 0 picks a free one)")
    parser.add_argument("--public", action="store_true", help="allow a non-loopback --listen address (needs "
                        "--token-file)")
    parser.add_argument("--token-file", metavar="FILE", help="a token every request must carry (the page is opened "
                        "once with ?token=TOKEN, which sets a cookie)")
    parser.add_argument("--person", metavar="NAME", help="who decides in the inbox, as records name it (default: "
                        "the user name)")
    parser.add_argument("--approvals", action="append", metavar="FILE", help="an approvals file to list and revoke "
                        "from (repeatable)")
    parser.add_argument("--ssh-key", metavar="KEY", help="an OpenSSH private key of an approver (its name in the "
                        "guard's allowed_signers is --person): a call that runs only with an approval receipt is "
                        "approved by signing its receipt with it, as `toolreplay approve` does")
    parser.add_argument("--receipt-expires", metavar="DURATION", default=_RECEIPT_EXPIRES,
                        help="with --ssh-key: how long a receipt the console signs holds (30m, 8h, 7d; default 1h)")
    parser.set_defaults(run=_run)
