"""The core's own cost a call: the assembled guard deciding and recording one tools/call, in-process.

    python benchmarks/gate_call.py [--calls N] [--rounds R] [--against TREE] [--profile]

What every front end pays for the gate, without any transport: `build_guard` with a sealed record file,
a policy of a few rules, the gate of one session over a tool that answers at once with a ~500-byte
response, driven as the MCP router drives it (`Gate.handle` with a call id, a context and a `record_meta`
naming the server). Each call has distinct args (nothing is answered from a cache). Prints the CPU
(user+system of this process) and the wall time a call, per round and their medians, and the verdict
on the target: at most 40 µs of CPU a call (a tenth of issue 39's 0.4 ms for an HTTP hop), exit status 1
when missed. `--against TREE` runs the same rounds of another checkout (say the main branch's, in a
worktree) in turn with this one's, each round in a process of its own, and prints the ratio of the
medians. `--profile` prints cProfile's top functions of one more round instead. Every round writes a new
record in a temporary folder, removed at the end; each round's record is checked to verify.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("GATE_CALL_ROOT") or os.path.dirname(HERE)  # --against: the other tree's rounds
sys.path.insert(0, ROOT)

from toolreplay.guard.assembly import GuardConfig, build_guard  # noqa: E402
from toolreplay.policy.model import parse_policy  # noqa: E402

__all__ = ["POLICY", "TARGET_US", "run_round", "main"]

TARGET_US = 40.0

POLICY: dict[str, Any] = {
    "agent": "benchmark-agent",
    "allowed_tools": ["files__read_file", "files__search", "files__write_file"],
    "write_tools": ["files__write_file"],
    "rules": [
        {"id": "no-etc", "tools": ["files__read_file", "files__write_file"], "effect": "deny", "reason": "never /etc",
         "when": [{"arg": "path", "under": ["etc"]}]},
        {"id": "in-project", "tools": ["files__write_file"], "effect": "deny", "reason": "source folders only",
         "unless": [{"arg": "path", "regex": "project/(src|docs)/.+"}]},
        {"id": "search-size", "tools": ["files__search"], "effect": "deny", "reason": "short queries",
         "unless": [{"arg": "query", "max_length": 200}]},
    ],
}

_TEXT = "line of the file, as a server would send it back in a text content block; " * 6  # ~450 bytes


def _read_file(path: str, offset: int = 0) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": f"{path}@{offset}: {_TEXT}"}], "isError": False}


def _meta(tool: str) -> dict[str, Any]:
    return {"x-server": "files"}


def run_round(folder: str, calls: int, tag: str) -> tuple[float, float, str]:
    """One round of `calls` distinct calls into a new sealed record: (CPU µs a call, wall µs a call, its path)."""
    path = os.path.join(folder, f"round-{tag}.jsonl")
    guard = build_guard(GuardConfig(parse_policy(POLICY, "bench.json"), record=path))
    recorder = guard.open_record()
    gate = guard.gate({"files__read_file": _read_file}, recorder=recorder, record_meta=_meta)
    handle = gate.handle
    cpu0, wall0 = time.process_time_ns(), time.perf_counter_ns()
    for number in range(calls):
        answer = handle("files__read_file", {"path": f"project/src/module_{number}.py", "offset": number},
                        call_id=str(number), context=None)
        if answer.outcome != "ran":
            raise SystemExit(f"call {number}: {answer.outcome} {answer.response}")
    cpu, wall = time.process_time_ns() - cpu0, time.perf_counter_ns() - wall0
    recorder.close()
    return cpu / calls / 1000, wall / calls / 1000, path


def _verify(path: str) -> None:
    from toolreplay.audit.chain import verify_chain
    from toolreplay.format.records import read_session

    with open(path, "rb") as handle:
        report = verify_chain(read_session(handle, path))
    if not report.intact:
        raise SystemExit(f"the record does not verify: {report}")


def _one_round(calls: int) -> tuple[float, float]:
    """One warmed round in this process, its record verified: (CPU µs a call, wall µs a call)."""
    import toolreplay

    if not os.path.abspath(toolreplay.__file__).startswith(os.path.abspath(ROOT) + os.sep):
        raise SystemExit(f"toolreplay was imported from {toolreplay.__file__}, not from {ROOT}")
    with tempfile.TemporaryDirectory(prefix="gate-call-") as folder:
        run_round(folder, 500, "warm")
        cpu, wall, path = run_round(folder, calls, "timed")
        _verify(path)
    return cpu, wall


def _round_of(tree: str | None, calls: int) -> tuple[float, float]:
    """One round in a process of its own, of this checkout or of `tree`."""
    environment = dict(os.environ)
    environment.pop("GATE_CALL_ROOT", None)
    if tree is not None:
        environment["GATE_CALL_ROOT"] = os.path.abspath(tree)
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--one-round", "--calls", str(calls)],
                          env=environment, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"a round of {tree or 'this tree'} failed: {done.stderr.strip()}")
    cpu, wall = done.stdout.split()
    return float(cpu), float(wall)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", metavar="TREE", help="another checkout, run in turn with this one")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions of one round")
    parser.add_argument("--one-round", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.one_round:
        cpu, wall = _one_round(options.calls)
        print(f"{cpu:.3f} {wall:.3f}")
        return 0
    if options.profile:
        import cProfile
        import pstats

        with tempfile.TemporaryDirectory(prefix="gate-call-") as folder:
            run_round(folder, 500, "warm")
            profile = cProfile.Profile()
            profile.enable()
            run_round(folder, options.calls, "profile")
            profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        return 0
    mine: list[float] = []
    theirs: list[float] = []
    for number in range(options.rounds):
        if options.against is not None:
            cpu, wall = _round_of(options.against, options.calls)
            theirs.append(cpu)
            print(f"round {number + 1}, {options.against}: {cpu:.1f} µs CPU a call, {wall:.1f} µs wall "
                  f"(load average {os.getloadavg()[0]:.2f})")
        cpu, wall = _round_of(None, options.calls)
        mine.append(cpu)
        print(f"round {number + 1}, this tree: {cpu:.1f} µs CPU a call, {wall:.1f} µs wall "
              f"(load average {os.getloadavg()[0]:.2f})")
    median = statistics.median(mine)
    print(f"{options.calls} calls a round; median CPU a call: {median:.1f} µs this tree"
          + (f", {statistics.median(theirs):.1f} µs {options.against} "
             f"(x{median / statistics.median(theirs):.2f})" if theirs else ""))
    met = median <= TARGET_US
    print(f"target: at most {TARGET_US:.0f} µs of CPU a call: {'met' if met else 'MISSED'} ({median:.1f} µs)")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
