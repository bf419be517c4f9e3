"""One Claude Code PreToolUse hook invocation: a new process, a 10-rule policy, the sealed record.

    python benchmarks/hook.py [--calls N] [--in-process]

Runs the hook N times (default 200) on one session, as Claude Code does for each tool call: a new process,
the hook JSON on stdin, the decision on stdout. The command is the one `toolreplay hook claude-code
--print-settings` registers: Python without `site` running the hook server's client, which hands the
event to the records folder's hook server (started by the first call, which handles its own event). With
`--in-process`, the command is `python -m toolreplay hook claude-code`, which decides in its own process
every time. Every call is a distinct `Bash` command (allowed, so its write intent is synced, and its
PostToolUse is sent too, untimed, so the record grows as a real session's does). The same number of
`python -c pass` and `python -S -c pass` runs, interleaved, give the interpreter's own start-up on the
same machine load. Prints p50 and p99 of each, in milliseconds of wall time and of CPU time (user +
system of the process: on a shared machine the wall time measures the load too; the server's CPU is not
the client's), against the targets of issue 30 (p50 <= 60 ms, p99 <= 120 ms of wall time for the hook);
exits 0 when they are met, 1 otherwise. The package is byte-compiled first, as an installed one is.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_P50_MS, TARGET_P99_MS = 60.0, 120.0

POLICY = {
    "agent": "bench",
    "allowed_tools": ["Bash", "Read", "Edit", "Write", "Glob", "Grep", "WebFetch", "mcp__db__query"],
    "write_tools": ["Write"],
    "rules": [
        {"id": "no-rm", "tools": ["Bash"], "effect": "deny", "reason": "no rm -rf",
         "when": [{"arg": "command", "glob": ["rm -rf*"]}]},
        {"id": "no-sudo", "tools": ["Bash"], "effect": "deny", "reason": "no sudo",
         "when": [{"arg": "command", "glob": ["sudo *"]}]},
        {"id": "push-asks", "tools": ["Bash"], "effect": "ask", "reason": "a person approves a push",
         "when": [{"arg": "command", "glob": ["git push*"]}]},
        {"id": "curl-asks", "tools": ["Bash"], "effect": "ask", "reason": "network from the shell",
         "when": [{"arg": "command", "regex": "(curl|wget) .*"}]},
        {"id": "src-only", "tools": ["Edit"], "effect": "deny", "reason": "edit only src/ and tests/",
         "unless": [{"arg": "file_path", "under": ["src", "tests"]}]},
        {"id": "no-env", "tools": ["Read"], "effect": "deny", "reason": "no .env",
         "when": [{"arg": "file_path", "glob": ["*.env", "*/.env"]}]},
        {"id": "docs-host", "tools": ["WebFetch"], "effect": "deny", "reason": "docs sites only",
         "unless": [{"arg": "url", "host": ["docs.python.org", "*.readthedocs.io"]}]},
        {"id": "short-query", "tools": ["mcp__db__query"], "effect": "deny", "reason": "query too long",
         "when": [{"arg": "sql", "min_length": 4000}]},
        {"id": "bash-budget", "tools": ["Bash"], "effect": "deny", "reason": "at most 10,000 commands",
         "unless": [{"count": "Bash", "max": 10000}]},
        {"id": "pace", "tools": ["*"], "effect": "deny", "reason": "at most 1,000 calls a minute",
         "unless": [{"rate": "*", "max": 1000, "seconds": 60}]},
    ],
}


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _timed(command: list[str], data: bytes | None, cwd: str | None) -> tuple[subprocess.CompletedProcess[bytes],
                                                                          float, float]:
    """Run one process; its result, wall milliseconds and CPU milliseconds (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, input=data, capture_output=True, cwd=cwd, check=False)
    wall = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return done, wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--in-process", action="store_true", help="time `python -m toolreplay hook claude-code`")
    options = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="toolreplay-hook-bench-")
    try:
        return _run(directory, options.calls, options.in_process)
    finally:
        shutil.rmtree(directory)  # the hook server sees its socket gone and ends


def _command(policy: str, records: str, in_process: bool) -> list[str]:
    if in_process:
        return [sys.executable, "-m", "toolreplay", "hook", "claude-code", "--policy", policy, "--records", records]
    done = subprocess.run([sys.executable, "-m", "toolreplay", "hook", "claude-code", "--policy", policy,
                           "--records", records, "--print-settings"], capture_output=True, check=True, cwd=ROOT)
    return shlex.split(json.loads(done.stdout)["hooks"]["PreToolUse"][0]["hooks"][0]["command"])


def _run(directory: str, calls: int, in_process: bool) -> int:
    records = os.path.join(directory, "records")
    os.mkdir(records)
    policy = os.path.join(directory, "policy.json")
    with open(policy, "w", encoding="utf-8") as out:
        json.dump(POLICY, out)
    assert len(POLICY["rules"]) == 10
    # as installed: the package's bytecode is compiled (PYTHONDONTWRITEBYTECODE would recompile every run)
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "toolreplay")], check=True,
                   capture_output=True)
    command = _command(policy, records, in_process)
    hook_ms, python_ms, hook_cpu, python_cpu, bare_ms = [], [], [], [], []
    for number in range(calls):
        payload = {"session_id": "bench", "transcript_path": "/dev/null", "cwd": directory,
                   "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Bash",
                   "tool_input": {"command": f"echo {number}"}, "tool_use_id": f"toolu_{number:05d}"}
        data = json.dumps(payload).encode()
        done, wall, cpu = _timed(command, data, ROOT)
        hook_ms.append(wall)
        hook_cpu.append(cpu)
        if done.returncode != 0 or b'"allow"' not in done.stdout:
            print(f"call {number}: unexpected answer {done.returncode} {done.stdout!r} {done.stderr!r}")
            return 1
        post = dict(payload, hook_event_name="PostToolUse", tool_response={"stdout": f"{number}\n"})
        subprocess.run(command, input=json.dumps(post).encode(), capture_output=True, cwd=ROOT, check=True)
        _, wall, cpu = _timed([sys.executable, "-c", "pass"], None, None)
        python_ms.append(wall)
        python_cpu.append(cpu)
        bare_ms.append(_timed([sys.executable, "-S", "-c", "pass"], None, None)[1])
    p50, p99 = _percentile(hook_ms, 0.5), _percentile(hook_ms, 0.99)
    print(f"PreToolUse hook, {calls} invocations, 10 rules, sealed record of {calls} calls at the end")
    print("  command: " + ("python -m toolreplay hook claude-code (in its own process)" if in_process else
                           "the --print-settings command (python -S, the hook server's client)"))
    print(f"  hook:          p50 {p50:6.1f} ms   p99 {p99:6.1f} ms   (target p50 <= {TARGET_P50_MS:.0f}, "
          f"p99 <= {TARGET_P99_MS:.0f})")
    print(f"  python -c pass: p50 {_percentile(python_ms, 0.5):6.1f} ms   p99 {_percentile(python_ms, 0.99):6.1f} ms")
    print(f"  python -S -c pass: p50 {_percentile(bare_ms, 0.5):6.1f} ms   p99 {_percentile(bare_ms, 0.99):6.1f} ms")
    print(f"  CPU time, hook: p50 {_percentile(hook_cpu, 0.5):6.1f} ms   p99 {_percentile(hook_cpu, 0.99):6.1f} ms;  "
          f"python -c pass: p50 {_percentile(python_cpu, 0.5):6.1f} ms   p99 {_percentile(python_cpu, 0.99):6.1f} ms")
    print(f"  load average at the end: {' '.join(f'{value:.2f}' for value in os.getloadavg())}")
    met = p50 <= TARGET_P50_MS and p99 <= TARGET_P99_MS
    print("  result: " + ("met" if met else "missed"))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
