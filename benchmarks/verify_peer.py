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

Every command runs on the same interpreter as the peer's: a fresh virtual environment (no packages, made
by `venv` from the interpreter running this script) over the same base Python, the trees on
`PYTHONPATH`. The peer is installed in one, as a user installs either tool; the base interpreter's own
site-packages may hold `.pth` files that run code at every start (one on the machine measured took
0.08 s of CPU a start, 5% of a `verify`), which neither tool's user pays and the peer's venv skips.

Each tree's modules are compiled once, before the first round (each command run, untimed, on the
first 100 lines of its file), into a temporary bytecode cache (`PYTHONPYCACHEPREFIX`) that its
commands then read, as an installed package's are (pip compiles a wheel's modules when it installs
it, the peer's among them): with `PYTHONDONTWRITEBYTECODE` set, a checkout would otherwise compile
its sources again in every run, about 0.03 s of each command's start-up. Issue 37's targets, judged
on the last TREE: `verify` and `seal` at most the peer's `verify`, `replay` at most 3x the floor;
exit 0 when all three are met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import venv

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


PEER_TARGET = 1.0  # verify and seal, CPU per core over the peer's verify
FLOOR_TARGET = 3.0  # replay --jobs 1 over the floor


def _bare_interpreter(where: str) -> str:
    """The python of a new virtual environment at `where` with nothing installed (as the peer's runs)."""
    venv.create(where, with_pip=False, symlinks=os.name != "nt")
    return os.path.join(where, "Scripts" if os.name == "nt" else "bin", "python")


def _tree_env(tree: str, cache: str | None) -> dict[str, str]:
    """The environment of a child in `tree`: its modules first on the path, read from `cache` when given."""
    env = dict(os.environ, PYTHONPATH=tree)
    if cache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache
    return env


def _cpu(argv: list[str], tree: str, cache: str | None = None) -> tuple[float, int]:
    """CPU seconds of one child (user + system, start-up included) and its exit code."""
    done = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, *argv], cwd=tree, env=_tree_env(tree, cache),
                          stdin=subprocess.DEVNULL, capture_output=True, check=True)
    _, cpu, _, code = done.stdout.split()
    return float(cpu), int(code)


def _verdict(best: dict[str, float], tree: str) -> list[tuple[str, float, float, bool]]:
    """Issue 37's three targets for one tree: (what, ratio, target, met)."""
    found = []
    for command, base, target in (("verify", "peer verify", PEER_TARGET), ("seal", "peer verify", PEER_TARGET),
                                  ("replay", "floor", FLOOR_TARGET)):
        ratio = best[f"{command} {tree}"] / best[base]
        found.append((f"{command} / {base}", ratio, target, ratio <= target))
    return found


def main(argv: list[str] | None = None) -> int:
    """Measure and print; exit 0 when the last tree meets every target, 1 otherwise."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="*", default=["."])
    parser.add_argument("--peer", default=shutil.which("agent-strace") or "agent-strace",
                        help="the agent-strace console script (default: the one on PATH)")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    session, sealed, _ = _ensure_files(args.records)
    store = _peer_store(args.peer, session, args.records)
    with tempfile.TemporaryDirectory(prefix="verify-peer-pyc-") as cache:
        python = _bare_interpreter(os.path.join(cache, "venv"))
        plan: list[tuple[str, str, list[str], str | None]] = [
            ("floor", HERE, [python, "-c", FLOOR_CODE, session], None),
            ("peer verify", HERE, [args.peer, "--trace-dir", store, "verify", SESSION_ID], None)]
        small = {path: os.path.join(cache, os.path.basename(path)) for path in (session, sealed)}
        for path, head in small.items():  # each command's first lines, to fill the cache with what it imports
            with open(path, "rb") as source, open(head, "wb") as out:
                out.writelines(itertools.islice(source, 100))
        for tree in args.trees:
            root = os.path.abspath(tree)
            tree_cache = os.path.join(cache, str(len(plan)))
            for name, command in (("verify", ["verify", "--jobs", "1", sealed]),
                                  ("seal", ["seal", "--jobs", "1", session]),
                                  ("replay", ["replay", "--jobs", "1", session])):
                argv = [python, "-m", "toolreplay", *command]
                _cpu([*argv[:-1], small[argv[-1]]], root, tree_cache)  # compiles into the cache; not timed
                plan.append((f"{name} {tree}", root, argv, tree_cache))
        runs: dict[str, list[float]] = {name: [] for name, *_ in plan}
        for round_number in range(1, args.rounds + 1):
            for name, tree, command, tree_cache in plan:
                cpu, code = _cpu(command, tree, tree_cache)
                runs[name].append(cpu)
                print(f"round {round_number} {name}: cpu {cpu:.2f} exit {code}", flush=True)
    best = {name: min(kept) for name, kept in runs.items()}
    scale = 100_000 / args.records
    print(f"\nbest of {args.rounds}, {args.records:,} records; CPU seconds per 100,000 records")
    print(f"{'command':<32} {'cpu s':>6} {'vs peer':>8} {'vs floor':>9}")
    for name, cpu in best.items():
        print(f"{name:<32} {cpu * scale:6.2f} {cpu / best['peer verify']:8.2f} {cpu / best['floor']:9.2f}")
    for tree in args.trees:
        print(f"\ntargets (issue 37), {tree}:")
        for what, ratio, target, ok in _verdict(best, tree):
            print(f"  {what:<22} {ratio:5.2f}  target <= {target:.2f}  {'met' if ok else 'MISSED'}")
    met = all(ok for *_, ok in _verdict(best, args.trees[-1]))
    print(f"\n{'all targets met' if met else 'targets missed'} ({args.trees[-1]})")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
