"""Time each audit command against the standard-library floor, measured in the same run.

    python benchmarks/run.py [--records N] [--big [N2]] [--quick] [--runs K]

The floor is a bare loop of `json.loads` over the lines of the same file, read in binary, in a
subprocess (so it pays the same interpreter start-up as the commands). Each command runs as
`python -m toolreplay ...` with stdout to /dev/null; the time is the best of K wall-clock runs (run
in interleaved rounds), the memory the child's peak resident set (its max RSS from os.wait4). The
CPU ratio (user + system time of the child) is printed too: it moves less than wall time when other
processes share the cores. `verify` reads the sealed file, so its ratio is to the floor
over that file. Targets (issue 2): on the N-record file `replay` and `scope` at most 2.5x the floor,
`seal` and `verify` at most 4x; on the big file (1,000,000 records, about 550 MB) a peak under
100 MB for every command. `scope+rules` is `scope` with the 10-rule policy of `rules.py`: at most
1.5x name-only `scope` on the same file (issue 8). After the tables, the Gate's cost per call with
and without the rules, next to a bare function call (`rules.gate_overhead`).
Exit 0 when every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data")
sys.path.insert(0, HERE)

import generate  # noqa: E402
import rules  # noqa: E402

__all__ = ["Measurement", "measure", "main"]

FLOOR_CODE = """\
import json, sys
loads = json.loads
with open(sys.argv[1], "rb") as handle:
    for line in handle:
        loads(line)
"""
# Linux carries a process's resident high-water mark into a child it forks, so a child forked from
# this script would report at least this script's peak. A minimal launcher (python -S, only os and
# time) forks the command instead: what it passes on (about 5 MB) is far below any Python command.
LAUNCHER = """\
import os, sys, time
null = os.open(os.devnull, os.O_WRONLY)
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.dup2(null, 1)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(time.perf_counter() - start, usage.ru_utime + usage.ru_stime, usage.ru_maxrss,
      os.waitstatus_to_exitcode(status))
"""
RATIO_TARGETS = {"replay": 2.5, "scope": 2.5, "seal": 4.0, "verify": 4.0}
RULES_TARGET = 1.5  # scope+rules over name-only scope
MEMORY_TARGET_MB = 100.0
EXPECTED_EXIT = {"floor": 0, "replay": 1, "scope": 1, "scope+rules": 1, "seal": 0, "verify": 0}


@dataclass(frozen=True)
class Measurement:
    """One command on one file: best wall and CPU time, highest peak memory, and the exit code."""

    name: str
    file: str
    seconds: float
    cpu_seconds: float
    peak_mb: float
    exit_code: int
    error: str


def _run_once(argv: list[str]) -> tuple[float, float, float, int, str]:
    """Run a child, stdout to /dev/null: wall and CPU seconds, peak RSS in MB, exit code, last stderr line."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    with tempfile.TemporaryFile() as err:
        done = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, *argv], cwd=ROOT, env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, check=True)
        err.seek(0)
        message = err.read().decode("utf-8", "replace").strip().splitlines()
    seconds, cpu, maxrss, code = done.stdout.split()
    scale = 1 / (1 << 20) if sys.platform == "darwin" else 1 / 1024  # ru_maxrss: bytes on macOS, KB on Linux
    return float(seconds), float(cpu), int(maxrss) * scale, int(code), message[-1] if message else ""


def measure(plan: list[tuple[str, str, list[str]]], runs: int, label: str) -> list[Measurement]:
    """Run the plan `runs` times, interleaved so a burst of load hits every command alike; keep the best."""
    samples: list[list[tuple[float, float, float, int, str]]] = [[] for _ in plan]
    for round_number in range(1, runs + 1):
        for (name, file, argv), kept in zip(plan, samples, strict=True):
            sys.stderr.write(f"{label}: run {round_number}/{runs}: {name} ({file})\n")
            kept.append(_run_once(argv))
    return [Measurement(name, file, min(r[0] for r in kept), min(r[1] for r in kept),
                        max(r[2] for r in kept), kept[-1][3], kept[-1][4])
            for (name, file, _), kept in zip(plan, samples, strict=True)]


def _write_if_changed(path: str, document: dict[str, object]) -> None:
    text = json.dumps(document, indent=1) + "\n"
    if not os.path.exists(path) or open(path, encoding="utf-8").read() != text:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)


def _ensure_files(records: int) -> tuple[str, str, str]:
    """The session, its sealed form and the read-only scope file, made when missing."""
    os.makedirs(DATA, exist_ok=True)
    session = os.path.join(DATA, f"session-{records}.jsonl")
    sealed = os.path.join(DATA, f"session-{records}.sealed.jsonl")
    scope = os.path.join(DATA, "scope-read.json")
    if not os.path.exists(session):
        sys.stderr.write(f"generating {os.path.relpath(session, ROOT)} ...\n")
        generate.write_session(records, session)
    if not os.path.exists(sealed):
        sys.stderr.write(f"sealing into {os.path.relpath(sealed, ROOT)} ...\n")
        subprocess.run([sys.executable, "-m", "toolreplay", "seal", session, "-o", sealed], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT), check=True)
    _write_if_changed(scope, {"agent": "benchmark-reader", "allowed_tools": sorted(generate.READ_TOOLS)})
    _write_if_changed(os.path.join(DATA, "policy-rules.json"), rules.RULES_POLICY)
    return session, sealed, scope


def _measure_all(records: int, runs: int) -> tuple[list[Measurement], str]:
    session, sealed, scope = _ensure_files(records)
    python = [sys.executable]
    tool = python + ["-m", "toolreplay"]
    plan = [
        ("floor", "plain", python + ["-c", FLOOR_CODE, session]),
        ("floor", "sealed", python + ["-c", FLOOR_CODE, sealed]),
        ("replay", "plain", tool + ["replay", session]),
        ("scope", "plain", tool + ["scope", session, scope]),
        ("scope+rules", "plain", tool + ["scope", session, os.path.join(DATA, "policy-rules.json")]),
        ("seal", "plain", tool + ["seal", session]),
        ("verify", "sealed", tool + ["verify", sealed]),
    ]
    return measure(plan, runs, f"{records} records"), session


def _file_line(records: int, path: str, runs: int) -> str:
    size = os.path.getsize(path) / 1e6
    return (f"{records:,} records: {os.path.relpath(path, ROOT)} ({size:.1f} MB), "
            f"best of {runs} run{'s' if runs > 1 else ''}\n")


def _status(m: Measurement, passed: bool) -> str:
    if m.exit_code != EXPECTED_EXIT[m.name]:
        return f"error (exit {m.exit_code}: {m.error})"
    return "pass" if passed else "miss"


def _floors(results: list[Measurement]) -> dict[str, Measurement]:
    return {m.file: m for m in results if m.name == "floor"}


def format_ratio_table(records: int, path: str, runs: int, results: list[Measurement]) -> tuple[str, bool]:
    """The ratio table: wall seconds and ratio to that file's floor, target, result; CPU ratio; peak MB."""
    floors = _floors(results)
    lines = [_file_line(records, path, runs),
             f"{'command':<11} {'file':<7} {'seconds':>8} {'ratio':>6} {'target':>7}  {'result':<6} "
             f"{'cpu s':>7} {'cpu ratio':>9} {'peak MB':>8}\n"]
    ok = True
    for m in results:
        floor = floors[m.file]
        ratio = m.seconds / floor.seconds
        target = RATIO_TARGETS.get(m.name)
        result = _status(m, target is None or ratio <= target)
        ok = ok and result == "pass"
        if target is None and result == "pass":
            result = "-"  # a floor has no target; it only fails when it does not run
        shown = "-" if target is None else f"<={target}x"
        lines.append(f"{m.name:<11} {m.file:<7} {m.seconds:>8.2f} {ratio:>6.2f} {shown:>7}  {result:<6} "
                     f"{m.cpu_seconds:>7.2f} {m.cpu_seconds / floor.cpu_seconds:>9.2f} {m.peak_mb:>8.1f}\n")
    by_name = {m.name: m for m in results}
    if "scope+rules" in by_name:
        ratio = by_name["scope+rules"].seconds / by_name["scope"].seconds
        cpu = by_name["scope+rules"].cpu_seconds / by_name["scope"].cpu_seconds
        passed = ratio <= RULES_TARGET
        ok = ok and passed
        lines.append(f"scope+rules / scope: {ratio:.2f} (target <={RULES_TARGET}x): {'pass' if passed else 'miss'}"
                     f"; cpu ratio {cpu:.2f}\n")
    return "".join(lines), ok


def format_memory_table(records: int, path: str, runs: int, results: list[Measurement]) -> tuple[str, bool]:
    """The memory table: seconds and ratio for information, peak MB against the 100 MB target, result."""
    floors = _floors(results)
    lines = [_file_line(records, path, runs),
             f"{'command':<11} {'file':<7} {'seconds':>8} {'ratio':>6} {'cpu ratio':>9} {'peak MB':>8} "
             f"{'target':>7}  result\n"]
    ok = True
    for m in results:
        floor = floors[m.file]
        is_floor = m.name == "floor"
        status = _status(m, is_floor or m.peak_mb < MEMORY_TARGET_MB)
        ok = ok and status == "pass"
        target = "-" if is_floor else f"<{MEMORY_TARGET_MB:.0f}"
        result = "-" if is_floor and status == "pass" else status
        lines.append(f"{m.name:<11} {m.file:<7} {m.seconds:>8.2f} {m.seconds / floor.seconds:>6.2f} "
                     f"{m.cpu_seconds / floor.cpu_seconds:>9.2f} {m.peak_mb:>8.1f} {target:>7}  {result}\n")
    return "".join(lines), ok


def main(argv: list[str] | None = None) -> int:
    """Generate what is missing, measure, print the tables; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="records for the ratio table")
    parser.add_argument("--big", type=int, nargs="?", const=1_000_000, default=None, metavar="N2",
                        help="also measure peak memory on an N2-record file (default 1,000,000)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 20,000 records, no big file")
    parser.add_argument("--runs", type=int, default=3, help="runs per command on the ratio file (best kept)")
    args = parser.parse_args(argv)
    records, big = (20_000, None) if args.quick else (args.records, args.big)
    results, path = _measure_all(records, args.runs)
    table, ok = format_ratio_table(records, path, args.runs, results)
    sys.stdout.write(table)
    calls = min(records, 20_000)
    sys.stdout.write("\n" + rules.format_gate_table(rules.gate_overhead(path, calls), calls))
    if big is not None:
        results, path = _measure_all(big, 1)
        table, big_ok = format_memory_table(big, path, 1, results)
        sys.stdout.write("\n" + table)
        ok = ok and big_ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
