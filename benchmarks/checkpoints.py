"""What a signed checkpoint costs, measured against the same command without one, in the same run.

    python benchmarks/checkpoints.py [--records N] [--runs K]

`seal --checkpoint` (an ed25519 key through ssh-keygen) against `seal`, and `verify --checkpoint` (the
same key, then an HMAC secret) against `verify`, on the N-record file of benchmarks/run.py; then the
time of one checkpoint signature and one verification, in-process, which is what the recorder adds
every K records. Targets: each command with a checkpoint at most 1.3x the same command without, in wall time (a
checkpoint is one signature and a compare; the chain walk is the same). Needs ssh-keygen. Exit 0 when
every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import run  # noqa: E402

from toolreplay.audit.checkpoint import Keys, format_checkpoint, parse_checkpoint  # noqa: E402
from toolreplay.audit.signers import HmacKey, SshSigner, read_allowed_signers  # noqa: E402

__all__ = ["main"]

RATIO_TARGET = 1.3
ORIGIN = "example.com/benchmark"


def _keys(directory: str) -> tuple[str, str, str]:
    key = os.path.join(directory, "key")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bench", "-f", key], check=True)
    with open(key + ".pub", encoding="ascii") as handle:
        public = " ".join(handle.read().split()[:2])
    allowed = os.path.join(directory, "allowed_signers")
    with open(allowed, "w", encoding="ascii") as handle:
        handle.write(f"bench@example.com {public}\n")
    secret = os.path.join(directory, "secret")
    with open(secret, "wb") as handle:
        handle.write(os.urandom(32))
    return key, allowed, secret


def _per_call(action: object, repeat: int = 20) -> float:
    assert callable(action)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    """Measure, print a table of ratios, return 0 when every target is met."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    if shutil.which("ssh-keygen") is None:
        print("ssh-keygen is not installed")
        return 1
    session, sealed, _ = run._ensure_files(args.records)
    tool = [sys.executable, "-m", "toolreplay"]
    with tempfile.TemporaryDirectory() as directory:
        key, allowed, secret = _keys(directory)
        ssh_cp, hmac_cp = os.path.join(directory, "ssh.cp"), os.path.join(directory, "hmac.cp")
        for checkpoint, options in ((ssh_cp, ["--ssh-key", "bench@example.com", key]),
                                    (hmac_cp, ["--hmac-key", "bench", secret])):
            subprocess.run(tool + ["seal", session, "-o", os.path.join(directory, "s.jsonl"), "--checkpoint",
                                   checkpoint, "--origin", ORIGIN, *options], cwd=ROOT, check=True,
                           env=dict(os.environ, PYTHONPATH=ROOT))
        plan = [
            ("seal", "plain", tool + ["seal", session]),
            ("seal --checkpoint (ssh)", "plain", tool + ["seal", session, "--checkpoint", os.path.join(
                directory, "out.cp"), "--origin", ORIGIN, "--ssh-key", "bench@example.com", key]),
            ("verify", "sealed", tool + ["verify", sealed]),
            ("verify --checkpoint (ssh)", "sealed", tool + ["verify", sealed, "--checkpoint", ssh_cp,
                                                            "--allowed-signers", allowed]),
            ("verify --checkpoint (hmac)", "sealed", tool + ["verify", sealed, "--checkpoint", hmac_cp,
                                                             "--hmac-key", "bench", secret]),
        ]
        results = run.measure(plan, args.runs, f"{args.records} records")
        signer = SshSigner("bench@example.com", key)
        head = "ab" * 32
        sign_ssh = _per_call(lambda: format_checkpoint(ORIGIN, 1000, head, [signer]))
        note = parse_checkpoint(format_checkpoint(ORIGIN, 1000, head, [signer]), "cp")
        keys = Keys(allowed, tuple(read_allowed_signers(allowed)))
        verify_ssh = _per_call(lambda: keys.check(note))
        hmac_key = HmacKey("bench", b"0" * 32)
        sign_hmac = _per_call(lambda: format_checkpoint(ORIGIN, 1000, head, [hmac_key]), 200)
    base = {"seal": results[0], "verify": results[2]}
    failed = False
    print(f"{args.records} records, best of {args.runs} runs")
    print(f"{'command':28} {'seconds':>8} {'ratio':>6} {'CPU s':>7} {'CPU ratio':>9} {'peak MB':>8}")
    for m in results:
        ratio = m.seconds / base[m.name.split()[0]].seconds
        cpu_ratio = m.cpu_seconds / base[m.name.split()[0]].cpu_seconds
        ok = ratio <= RATIO_TARGET and m.exit_code == 0
        failed |= not ok
        print(f"{m.name:28} {m.seconds:8.2f} {ratio:6.2f} {m.cpu_seconds:7.2f} {cpu_ratio:9.2f} {m.peak_mb:8.1f}"
              + ("" if ok else "  FAILED"))
    print(f"one checkpoint, in-process: ssh-keygen sign {sign_ssh * 1000:.1f} ms, "
          f"ssh-keygen verify {verify_ssh * 1000:.1f} ms, HMAC sign {sign_hmac * 1e6:.0f} us")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
