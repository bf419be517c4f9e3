"""The checkpoint options of `seal` and `verify`: which keys sign, which keys verify, which files to check."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from toolreplay.errors import UsageError

if TYPE_CHECKING:
    from toolreplay.audit.chain import LinkFact
    from toolreplay.audit.checkpoint import CheckpointVerification, Keys, Signer

__all__ = ["seal_options", "verify_options", "seal_signers", "verify_with_checkpoints", "trust_options",
           "trusted_keys"]


def _hmac_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--hmac-key", nargs=2, action="append", metavar=("NAME", "SECRET_FILE"),
                        help=f"{what} with the HMAC-SHA256 secret in SECRET_FILE, under key name NAME (repeatable)")


def seal_options(parser: argparse.ArgumentParser) -> None:
    """Add `--checkpoint`, `--origin` and the signing keys to `seal`."""
    parser.add_argument("--checkpoint", metavar="FILE", help="also write a signed checkpoint of the chain to FILE")
    parser.add_argument("--origin", metavar="ORIGIN",
                        help="the log's name in the checkpoint, e.g. example.com/agent-7/run-42 (with --checkpoint)")
    parser.add_argument("--ssh-key", nargs=2, action="append", metavar=("NAME", "KEY_FILE"),
                        help="sign with an OpenSSH key (ssh-keygen -Y sign); NAME is the signer identity that "
                             "verifiers list in allowed_signers (repeatable)")
    _hmac_option(parser, "sign")
    parser.add_argument("--tlog", action="store_true",
                        help="with --checkpoint: write a C2SP tlog-checkpoint (the root of the Merkle tree over the "
                             "links, for `toolreplay prove`) instead of the hash chain's head")


def verify_options(parser: argparse.ArgumentParser) -> None:
    """Add `--checkpoint`, `--previous`, `--origin` and the verifying keys to `verify`."""
    parser.add_argument("--checkpoint", metavar="FILE", help="also check the chain against this signed checkpoint")
    parser.add_argument("--previous", metavar="FILE",
                        help="an older checkpoint of the same log: its head must still be in the chain at its size, "
                             "and the checkpoint must not be smaller")
    parser.add_argument("--report", metavar="REPORT",
                        help="check a report file against the checkpoint `seal --report` signed for it (no SEALED)")
    parser.add_argument("--proof", metavar="PROOF",
                        help="check a proof of `toolreplay prove` against --checkpoint (a tlog-checkpoint; a "
                             "consistency proof against --previous too), without the session: no SEALED")
    parser.add_argument("--origin", metavar="ORIGIN", help="the origin the checkpoint must name")
    trust_options(parser)


def trust_options(parser: argparse.ArgumentParser) -> None:
    """Add the keys that checkpoints are verified with: `--allowed-signers` and `--hmac-key`."""
    parser.add_argument("--allowed-signers", metavar="FILE",
                        help="OpenSSH allowed_signers file of the keys to trust (ssh-keygen -Y verify)")
    _hmac_option(parser, "verify")


def trusted_keys(args: argparse.Namespace) -> Keys | None:
    """The keys given by `--allowed-signers` and `--hmac-key`, read and checked; None when none is given.

    The allowed_signers path is made absolute, so a worker in another folder finds it."""
    from toolreplay.audit.checkpoint import Keys
    from toolreplay.audit.signers import find_ssh_keygen, read_allowed_signers, read_hmac_secret

    if not args.allowed_signers and not args.hmac_key:
        return None
    allowed = tuple(read_allowed_signers(args.allowed_signers)) if args.allowed_signers else ()
    if allowed:
        find_ssh_keygen()
    secrets = tuple(read_hmac_secret(name, path) for name, path in args.hmac_key or ())
    return Keys(os.path.abspath(args.allowed_signers) if args.allowed_signers else None, allowed, secrets)


def seal_signers(args: argparse.Namespace) -> list[Signer]:
    """The signers `seal` was given, checked before any work; none without `--checkpoint`."""
    keys = [*(args.ssh_key or ()), *(args.hmac_key or ())]
    if not args.checkpoint:
        if keys or args.origin or args.tlog:
            raise UsageError("--origin, --ssh-key, --hmac-key and --tlog go with --checkpoint FILE")
        return []
    # Imported only now: a seal without a checkpoint, like replay and scope, has no use for signing.
    from toolreplay.audit.checkpoint import check_origin
    from toolreplay.audit.signers import SshSigner, check_key_name, find_ssh_keygen, read_hmac_secret
    if not args.origin:
        raise UsageError("--checkpoint needs --origin ORIGIN (the name of this log)")
    check_origin(args.origin)
    if not keys:
        raise UsageError("--checkpoint needs a key to sign with: --ssh-key NAME KEY_FILE or --hmac-key NAME FILE")
    signers: list[Signer] = []
    for name, key_file in args.ssh_key or ():
        find_ssh_keygen()
        signers.append(SshSigner(check_key_name(name), key_file))
    signers += [read_hmac_secret(name, path) for name, path in args.hmac_key or ()]
    return signers


def seal_report(args: argparse.Namespace, signers: list[Signer]) -> int:
    """`seal --report REPORT --checkpoint FILE`: a tlog-checkpoint of one leaf, the report's SHA-256."""
    from toolreplay.audit.checkpoint import TLOG, format_checkpoint, write_atomically
    from toolreplay.audit.proofs import report_root

    if args.report is None:  # no SESSION and no --report: the usual argparse message
        args.seal_parser.error("the following arguments are required: SESSION")
    if args.session is not None or args.output:
        raise UsageError("--report signs a report file: give no SESSION and no -o")
    if not args.checkpoint:
        raise UsageError("--report needs --checkpoint FILE, --origin ORIGIN and a key to sign with")
    data = _read_whole(args.report)
    write_atomically(args.checkpoint, format_checkpoint(args.origin, 1, report_root(data), signers, TLOG))
    return 0


def _read_whole(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None


def verify_report(args: argparse.Namespace) -> tuple[str, bool]:
    """`verify --report REPORT --checkpoint FILE`: the report text and whether it verified."""
    from toolreplay.audit.checkpoint import read_checkpoint
    from toolreplay.audit.proofs import report_json, report_text
    from toolreplay.audit.proofs import verify_report as check_report

    if args.sealed is not None or args.proof or args.previous:
        raise UsageError("--report is checked alone: give no SEALED, --proof or --previous")
    if not args.checkpoint:
        raise UsageError("--report needs the checkpoint that sealed it: --checkpoint FILE")
    if not args.allowed_signers and not args.hmac_key:
        raise UsageError("--report needs the keys to trust: --allowed-signers FILE or --hmac-key NAME SECRET_FILE")
    data = _read_whole(args.report)
    checkpoint = read_checkpoint(args.checkpoint)
    keys = trusted_keys(args)
    assert keys is not None
    check = check_report(data, checkpoint, keys, origin=args.origin)
    render = report_json if args.format == "json" else report_text
    return render(check, args.report), check.verified


def verify_proof(args: argparse.Namespace) -> tuple[str, bool]:
    """`verify --proof`: read the proof, checkpoints and keys (any bad input stops here), check; the report
    (text or JSON, as `--format` says) and whether it verified."""
    from toolreplay.audit.checkpoint import read_checkpoint
    from toolreplay.audit.proofs import proof_report_json, proof_text, read_proof
    from toolreplay.audit.proofs import verify_proof as check_proof

    if args.sealed is not None:
        raise UsageError("--proof is checked without the session: give no SEALED file")
    if not args.checkpoint:
        raise UsageError("--proof needs the checkpoint it proves against: --checkpoint FILE")
    if not args.allowed_signers and not args.hmac_key:
        raise UsageError("--proof needs the keys to trust: --allowed-signers FILE or --hmac-key NAME SECRET_FILE")
    proof = read_proof(args.proof)
    checkpoint = read_checkpoint(args.checkpoint)
    previous = read_checkpoint(args.previous) if args.previous else None
    keys = trusted_keys(args)
    assert keys is not None
    report = check_proof(proof, args.proof, checkpoint, keys, previous=previous, origin=args.origin)
    return (proof_report_json(report) if args.format == "json" else proof_text(report)), report.verified


def verify_with_checkpoints(args: argparse.Namespace,
                            links: Callable[[], Iterable[LinkFact]]) -> CheckpointVerification:
    """Read the checkpoints and keys (any bad input stops here), then check them against the links."""
    from toolreplay.audit.checkpoint import read_checkpoint, verify_checkpoints

    if not args.checkpoint:
        raise UsageError("--previous, --origin, --allowed-signers and --hmac-key go with --checkpoint FILE")
    if not args.allowed_signers and not args.hmac_key:
        raise UsageError("--checkpoint needs the keys to trust: --allowed-signers FILE or --hmac-key NAME SECRET_FILE")
    checkpoint = read_checkpoint(args.checkpoint)
    previous = read_checkpoint(args.previous) if args.previous else None
    keys = trusted_keys(args)
    assert keys is not None
    return verify_checkpoints(links(), checkpoint, keys, previous=previous, origin=args.origin)
