"""What the guard's state and recording cost per call, next to a bare function call in the same run.

    python benchmarks/guard_state.py [--calls N] [--dir DIR]

Rows: a bare call of the tool function; the gate without a recorder (distinct reads; one read
answered from the cache; distinct writes); the gate with a plain recorder in DIR (distinct reads:
one line appended and one identity check of the file per call; distinct writes: also an intent
synced to disk with fsync and settled). Best of 5 rounds, microseconds per call, and the ratio to the
bare call. The fsync row depends on DIR's storage far more than on ToolReplay.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from toolreplay.guard import Gate, SessionRecorder  # noqa: E402
from toolreplay.policy.model import Policy  # noqa: E402

POLICY = Policy("bench", frozenset({"get", "put"}), frozenset({"put"}))


def get(n: int) -> dict[str, int]:
    return {"n": n, "status": 1}


def put(n: int) -> dict[str, int]:
    return {"n": n, "ok": 1}


def _approve(tool: str, args: dict[str, int]) -> bool:
    return True


def _best(run: Callable[[int], None], calls: int, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        run(calls)
        best = min(best, time.perf_counter() - start)
    return best / calls * 1e6


def _gate(directory: str | None, name: str) -> tuple[Gate, SessionRecorder | None]:
    recorder = None
    if directory is not None:
        path = os.path.join(directory, name)
        if os.path.exists(path):
            os.unlink(path)
        recorder = SessionRecorder.open(path)
    return Gate({"get": get, "put": put}, POLICY, confirm=_approve, recorder=recorder), recorder


def _calls(tool: str, directory: str | None, name: str, same: bool = False) -> Callable[[int], None]:
    def run(calls: int) -> None:
        gate, recorder = _gate(directory, name)
        for n in range(calls):
            gate.call(tool, {"n": 0 if same else n})
        if recorder is not None:
            recorder.close()
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--dir", help="where the records go (default: a temporary folder)")
    options = parser.parse_args(argv)
    directory = options.dir or tempfile.mkdtemp()
    writes = max(1, options.calls // 10)  # each one syncs a file
    try:
        bare = _best(lambda calls: [get(n) for n in range(calls)] and None, options.calls)
        rows = [
            ("bare function call", bare),
            ("gate, distinct reads", _best(_calls("get", None, ""), options.calls)),
            ("gate, cached read", _best(_calls("get", None, "", same=True), options.calls)),
            ("gate, distinct writes", _best(_calls("put", None, ""), options.calls)),
            ("gate + recorder, distinct reads", _best(_calls("get", directory, "r.jsonl"), options.calls)),
            ("gate + recorder, distinct writes (fsync)", _best(_calls("put", directory, "w.jsonl"), writes)),
        ]
    finally:
        if options.dir is None:
            shutil.rmtree(directory)
    print(f"{'case':<42} {'us/call':>9} {'x bare':>8}")
    for name, micros in rows:
        print(f"{name:<42} {micros:>9.1f} {micros / bare:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
