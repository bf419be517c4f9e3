"""ToolReplay's chain check per core against the peer's (agent-strace `verify`) on the same session.

    python benchmarks/verify_peer.py [TREE...] [--peer AGENT_STRACE] [--records N] [--rounds K]

The peer is agent-strace (0.103 when measured): `agent-strace verify` reads a session's
`events.ndjson` and, line by line, `json.loads` it and compares its `prev_hash` with the SHA-256 of
the previous raw line. Its session is made from `generate.py`'s: every record becomes the two events
its proxy and decorator write for a tool call, a `tool_call` (`data`: `tool_name`, `arguments`) and
its `tool_result` (`data`: `result`, the whole response, so both tools check the same content), each
line written by the peer's own `TraceEvent.to_json` and chained by its rule (`prev_hash` of the line
before). The conversion runs in the peer's interpreter (the one named on the `agent-strace` script's
first line), into `benchmarks/data/peer-N/` (git-ignored); `agent-strace verify` must report it
intact, or the script stops.

Each TREE (default `.`) is a ToolReplay checkout (say `git archive BASE | tar -x -C /tmp/before`).
Every round runs, in order: the floor (run.py's bare `json.loads` loop) over the plain session, the
peer's `verify`, then for each tree `verify --jobs 1` of the sealed file, `seal --jobs 1` of the
plain one and `replay --jobs 1` of the plain one, each a child process with stdout to /dev/null, so a
burst of load hits them alike. Each run's CPU seconds (user + system, `os.wait4` on the child, start-up
included) are printed; at the end, per command, the best of K rounds, per 100,000 records, and its
ratio to the peer's `verify` (per core: every command here runs on one) and to the floor.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from run import DATA, FLOOR_CODE, LAUNCHER, _ensure_files  # noqa: E402

# Run by the peer's interpreter: the peer's session of SESSION (the argv), in its store at STORE.
CONVERT = """\
import hashlib, json, sys
from agent_trace.models import EventType, SessionMeta, TraceEvent
from agent_trace.store import TraceStore
source, store_dir, session_id = sys.argv[1:4]
store = TraceStore(store_dir)
store.create_session(SessionMeta(session_id=session_id, started_at=1.0, agent_name="benchmark"))
path = store._session_file(session_id, "events.ndjson", "event stream")
previous = ""
with open(source, encoding="utf-8") as lines, open(path, "w", encoding="utf-8") as out:
    for number, line in enumerate(lines):
        record = json.loads(line)
        call = TraceEvent(event_type=EventType.TOOL_CALL, timestamp=1.0 + number, event_id=f"c{number:011d}",
                          session_id=session_id, data={"tool_name": record["tool"], "arguments": record["args"]},
                          tenant_id="")
        result = TraceEvent(event_type=EventType.TOOL_RESULT, timestamp=1.5 + number, event_id=f"r{number:011d}",
                            session_id=session_id, parent_id=call.event_id, duration_ms=1.0,
                            data={"result": record["response"]}, tenant_id="")
        for event in (call, result):
            event.prev_hash = hashlib.sha256(previous.encode()).hexdigest() if previous else ""
            previous = event.to_json()
            out.write(previous + "\\n")
"""
SESSION_ID = "benchmark"


def _peer_python(peer: str) -> str:
    """The interpreter of the agent-strace script (its #! line)."""
    with open(peer, "rb") as handle:
        first = handle.readline().decode().strip()
    if not first.startswith("#!"):
        raise SystemExit(f"{peer}: not a script with a #! line; pass the agent-strace console script")
    return first[2:].strip().split()[0]


def _peer_store(peer: str, session: str, records: int) -> str:
    """The peer's store holding the session's two-events-a-call form, made when missing and checked intact."""
    store = os.path.join(DATA, f"peer-{records}")
    events = os.path.join(store, SESSION_ID, "events.ndjson")
    if not os.path.exists(events):
        shutil.rmtree(store, ignore_errors=True)
        sys.stderr.write(f"converting into {os.path.relpath(store)} ...\n")
        subprocess.run([_peer_python(peer), "-c", CONVERT, session, store, SESSION_ID], check=True)
    done = subprocess.run([peer, "--trace-dir", store, "verify", SESSION_ID], capture_output=True, text=True)
    if done.returncode != 0 or "Chain intact" not in done.stdout:
        raise SystemExit(f"the peer does not find its session intact: {done.stdout}{done.stderr}")
    return store


def _cpu(argv: list[str], tree: str) -> tuple[float, int]:
    """CPU seconds of one child (user + system, start-up included) and its exit code."""
    done = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, *argv], cwd=tree,
                          env=dict(os.environ, PYTHONPATH=tree), stdin=subprocess.DEVNULL,
                          capture_output=True, check=True)
    _, cpu, _, code = done.stdout.split()
    return float(cpu), int(code)


def main(argv: list[str] | None = None) -> int:
    """Measure and print; exit 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="*", default=["."])
    parser.add_argument("--peer", default=shutil.which("agent-strace") or "agent-strace",
                        help="the agent-strace console script (default: the one on PATH)")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    session, sealed, _ = _ensure_files(args.records)
    store = _peer_store(args.peer, session, args.records)
    plan = [("floor", HERE, [sys.executable, "-c", FLOOR_CODE, session]),
            ("peer verify", HERE, [args.peer, "--trace-dir", store, "verify", SESSION_ID])]
    for tree in args.trees:
        root = os.path.abspath(tree)
        for name, command in (("verify", ["verify", "--jobs", "1", sealed]), ("seal", ["seal", "--jobs", "1", session]),
                              ("replay", ["replay", "--jobs", "1", session])):
            plan.append((f"{name} {tree}", root, [sys.executable, "-m", "toolreplay", *command]))
    runs: dict[str, list[float]] = {name: [] for name, _, _ in plan}
    for round_number in range(1, args.rounds + 1):
        for name, tree, command in plan:
            cpu, code = _cpu(command, tree)
            runs[name].append(cpu)
            print(f"round {round_number} {name}: cpu {cpu:.2f} exit {code}", flush=True)
    best = {name: min(kept) for name, kept in runs.items()}
    scale = 100_000 / args.records
    print(f"\nbest of {args.rounds}, {args.records:,} records; CPU seconds per 100,000 records")
    print(f"{'command':<32} {'cpu s':>6} {'vs peer':>8} {'vs floor':>9}")
    for name, cpu in best.items():
        print(f"{name:<32} {cpu * scale:6.2f} {cpu / best['peer verify']:8.2f} {cpu / best['floor']:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
