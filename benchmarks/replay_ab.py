"""`replay` of several trees against each other and the floor, interleaved, every run printed.

    python benchmarks/replay_ab.py TREE [TREE...] [--records N] [--runs K] [--modes par,ser]

Each TREE is a checkout (say `git worktree add /tmp/before fb55afb`; `.` for this one). Every round runs
the floor (run.py's bare `json.loads` loop), then `replay` of each tree in each mode (`par`: the
default workers, `ser`: `--jobs 1`) on the same `generate.py` file, so a burst of load hits them alike.
Each run prints its wall seconds and its CPU seconds (user + system, from `os.wait4` on the command:
Linux counts in it the workers the command waited for), and that CPU split into the command's own
process and its workers (`getrusage` in the command, just before it exits). At the end, per tree and
mode, the best of the K runs and its ratio to the floor's best. On a machine shared with other work,
wall time measures the load as much as the code: compare CPU first.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from run import FLOOR_CODE, LAUNCHER, _ensure_files  # noqa: E402

# `python -m toolreplay ...` that also reports its own CPU and its waited-for children's on stderr.
COMMAND = """\
import resource, sys
from toolreplay.cli import main
code = main(sys.argv[1:])
own, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stderr.write(f"RUSAGE {own.ru_utime + own.ru_stime} {workers.ru_utime + workers.ru_stime}\\n")
sys.exit(code)
"""


def _run(tree: str, argv: list[str]) -> tuple[float, float, float, float, int]:
    """Wall and CPU seconds, the command's own and its workers' CPU seconds (NaN for the floor), exit code."""
    done = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, *argv], cwd=tree,
                          env=dict(os.environ, PYTHONPATH=tree), stdin=subprocess.DEVNULL,
                          capture_output=True, check=True)
    seconds, cpu, _, code = done.stdout.split()
    split = [line for line in done.stderr.decode().splitlines() if line.startswith("RUSAGE ")]
    own, workers = (float(part) for part in split[-1].split()[1:]) if split else (float("nan"), float("nan"))
    return float(seconds), float(cpu), own, workers, int(code)


def main(argv: list[str] | None = None) -> int:
    """Measure and print; exit 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--modes", default="par,ser")
    args = parser.parse_args(argv)
    session = _ensure_files(args.records)[0]
    plan = [("floor", HERE, [sys.executable, "-c", FLOOR_CODE, session])]
    for tree in args.trees:
        for mode in args.modes.split(","):
            jobs = ["--jobs", "1"] if mode == "ser" else []
            plan.append((f"{os.path.abspath(tree)} {mode}", os.path.abspath(tree),
                         [sys.executable, "-c", COMMAND, "replay", session, *jobs]))
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in plan}
    for round_number in range(1, args.runs + 1):
        for name, tree, command in plan:
            seconds, cpu, own, workers, code = _run(tree, command)
            runs[name].append((seconds, cpu))
            print(f"round {round_number} {name}: wall {seconds:.2f} cpu {cpu:.2f} (own {own:.2f}, workers "
                  f"{workers:.2f}) exit {code}", flush=True)
    floor_wall = min(wall for wall, _ in runs["floor"])
    floor_cpu = min(cpu for _, cpu in runs["floor"])
    print(f"\nbest of {args.runs}, {args.records:,} records")
    for name, kept in runs.items():
        wall, cpu = min(w for w, _ in kept), min(c for _, c in kept)
        print(f"{name}: wall {wall:.2f} ({wall / floor_wall:.2f}x)  cpu {cpu:.2f} ({cpu / floor_cpu:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
