"""What format 1.1's `meta` costs: `replay`, `seal` and `verify` on the same records with and without it.

    python benchmarks/meta.py [--records N] [--runs K] [--baseline TREE]

The records of `generate.py`, written twice: as generated (format 1.0) and with a `meta` on every
record as the guard's recorder writes it (`ts`, `duration_ms`, `call_id`, `turn`, `outcome`). Each
command runs on both, `--jobs 1` and the default, best of K interleaved runs (see run.py). Target
(issue 27): with `meta`, at most 1.10x the CPU seconds per byte of the same command without it (CPU
time, user + system of the command, moves less than wall time when other processes share the cores;
both are printed).

`--baseline TREE` (a checkout of an earlier commit, say `git worktree add /tmp/before 5f15175`) also
runs that tree's commands on the format-1.0 file, in the same rounds: records without `meta` must cost
what they cost before it (the ratio is printed, judged by the person reading it against the noise the
rounds show). Exit 0 when every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data")
sys.path.insert(0, HERE)

import generate  # noqa: E402
from run import LAUNCHER  # noqa: E402

TARGET = 1.10
COMMANDS = ("replay", "seal", "verify")


def _with_meta(source: str, target: str) -> None:
    """The same records with a recorder-like `meta` on each: one call a second, one turn per two calls."""
    with open(source, encoding="utf-8") as lines, open(target, "w", encoding="utf-8") as out:
        for number, line in enumerate(lines):
            record = json.loads(line)
            minutes, seconds = divmod(number, 60)
            hours, minutes = divmod(minutes, 60)
            record["meta"] = {"ts": f"2026-12-01T{hours % 24:02d}:{minutes:02d}:{seconds:02d}.{number % 1000:03d}Z",
                              "duration_ms": round(0.5 + number % 97 * 0.37, 3), "call_id": f"call_{number:08x}",
                              "turn": number // 2, "outcome": "ran"}
            out.write(json.dumps(record) + "\n")


def _files(records: int) -> dict[str, str]:
    os.makedirs(DATA, exist_ok=True)
    plain = os.path.join(DATA, f"session-{records}.jsonl")
    if not os.path.exists(plain):
        generate.write_session(records, plain)
    meta = os.path.join(DATA, f"session-{records}.meta.jsonl")
    if not os.path.exists(meta):
        _with_meta(plain, meta)
    files = {"plain": plain, "meta": meta}
    for name in ("plain", "meta"):
        sealed = os.path.join(DATA, f"session-{records}.{name}.sealed.jsonl")
        if not os.path.exists(sealed):
            subprocess.run([sys.executable, "-m", "toolreplay", "seal", files[name], "-o", sealed], cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=ROOT), check=True)
        files[name + ".sealed"] = sealed
    return files


def _cpu(tree: str, argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of `python -m toolreplay ARGV` run from `tree`."""
    done = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, sys.executable, "-m", "toolreplay", *argv],
                          cwd=tree, env=dict(os.environ, PYTHONPATH=tree), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True)
    seconds, cpu, _, _ = done.stdout.split()
    return float(seconds), float(cpu)


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table, return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline", metavar="TREE", help="an earlier checkout: its commands on the 1.0 file too")
    args = parser.parse_args(argv)
    files = _files(args.records)
    plan: list[tuple[str, str, str, str, list[str]]] = []  # tree label, command, jobs, file label, argv
    for command in COMMANDS:
        for jobs in ("1", "default"):
            flags = [] if jobs == "default" else ["--jobs", "1"]
            for label in ("plain", "meta"):
                path = files[label + ".sealed"] if command == "verify" else files[label]
                plan.append(("this", command, jobs, label, [command, *flags, path]))
                if args.baseline and label == "plain":
                    plan.append(("baseline", command, jobs, label, [command, *flags, path]))
    best: dict[tuple[str, str, str, str], list[tuple[float, float]]] = {}
    for round_number in range(1, args.runs + 1):
        for tree, command, jobs, label, command_argv in plan:
            sys.stderr.write(f"run {round_number}/{args.runs}: {tree} {command} --jobs {jobs} ({label})\n")
            best.setdefault((tree, command, jobs, label), []).append(
                _cpu(ROOT if tree == "this" else args.baseline, command_argv))
    size = {label: os.path.getsize(path) for label, path in files.items()}
    print(f"records: {args.records:,}; bytes: 1.0 {size['plain']:,}, 1.1 {size['meta']:,} "
          f"({size['meta'] / size['plain']:.2f}x); best of {args.runs}, wall seconds (CPU seconds)")
    print(f"{'command':<8} {'jobs':<8} {'1.0':>15} {'1.1':>15} {'CPU/byte 1.1/1.0':>17}"
          + (f" {'1.0 baseline':>15} {'1.0 CPU this/base':>18}" if args.baseline else ""))
    ok = True
    for command in COMMANDS:
        for jobs in ("1", "default"):
            plain = min(best[("this", command, jobs, "plain")])
            meta = min(best[("this", command, jobs, "meta")])
            bytes_plain = size["plain.sealed" if command == "verify" else "plain"]
            bytes_meta = size["meta.sealed" if command == "verify" else "meta"]
            ratio = (meta[1] / bytes_meta) / (plain[1] / bytes_plain)  # CPU: other processes move it less
            ok = ok and ratio <= TARGET
            line = (f"{command:<8} {jobs:<8} {plain[0]:7.2f} ({plain[1]:5.2f}) {meta[0]:7.2f} ({meta[1]:5.2f}) "
                    f"{ratio:13.2f} {'ok' if ratio <= TARGET else 'MISS'}")
            if args.baseline:
                base = min(best[("baseline", command, jobs, "plain")])
                line += f" {base[0]:7.2f} ({base[1]:5.2f}) {plain[1] / base[1]:18.2f}"
            print(line)
    print(f"target: with meta at most {TARGET:.2f}x the CPU seconds per byte without it: {'met' if ok else 'missed'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
