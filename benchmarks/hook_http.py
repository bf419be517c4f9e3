"""Claude Code's hook events through the HTTP hook endpoint (`toolreplay hook serve`): no process per event.

    python benchmarks/hook_http.py [--events N] [--new-connection]

Starts `hook serve` on a free loopback port with benchmarks/hook.py's 10-rule policy, and posts N events
(default 500) of one session to it, as a `type: "http"` hook does: N/2 distinct `Bash` calls, each a
PreToolUse (allowed, so its write intent is synced before the answer) and its PostToolUse (the record of
the call written). Each event is timed from the request to the whole answer, over one keep-alive
connection (`--new-connection`: a connection per event). Two baselines, measured in the same run on the
same load, each on a records folder of its own: the hooks' core alone as the server runs it (the same events
handed to toolreplay.hooks.reply.reply_to_event in this process with a HookCache, kept between events), whose
ratio is what the HTTP endpoint adds; and the core as a process per event runs it (no cache: the policy and
the whole record read at every event). Prints p50 and p99 of
both in milliseconds, against the targets of issue 38 (p50 <= 2 ms, p99 <= 10 ms per event over 500 events),
and the load average before and after; exits 0 when they are met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from hook import POLICY  # noqa: E402 - benchmarks/hook.py, beside this file

from toolreplay.hooks.cache import HookCache  # noqa: E402 - after the path
from toolreplay.hooks.http import TOKEN_NAME  # noqa: E402
from toolreplay.hooks.reply import reply_to_event  # noqa: E402

TARGET_P50_MS, TARGET_P99_MS = 2.0, 10.0


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _events(directory: str, count: int) -> list[bytes]:
    events = []
    for number in range(count // 2):
        pre = {"session_id": "bench", "transcript_path": "/dev/null", "cwd": directory, "permission_mode": "default",
               "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": f"echo {number}"},
               "tool_use_id": f"toolu_{number:05d}"}
        post = dict(pre, hook_event_name="PostToolUse", tool_response={"stdout": f"{number}\n"})
        events += [json.dumps(pre).encode(), json.dumps(post).encode()]
    return events


def _private(path: str) -> str:
    os.mkdir(path, 0o700)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--new-connection", action="store_true", help="a new connection per event")
    options = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="toolreplay-hook-http-bench-")
    try:
        return _run(directory, options.events, options.new_connection)
    finally:
        shutil.rmtree(directory)


def _run(directory: str, count: int, new_connection: bool) -> int:
    policy = os.path.join(directory, "policy.json")
    with open(policy, "w", encoding="utf-8") as out:
        json.dump(POLICY, out)
    records, baseline = _private(os.path.join(directory, "records")), _private(os.path.join(directory, "core"))
    kept = _private(os.path.join(directory, "kept"))
    load_before = os.getloadavg()
    server = subprocess.Popen([sys.executable, "-m", "toolreplay", "hook", "serve", "--policy", policy, "--records",
                               records, "--port", "0"], stdout=subprocess.PIPE, cwd=ROOT)
    try:
        assert server.stdout is not None
        line = server.stdout.readline().decode()
        port = int(line.split("http://127.0.0.1:", 1)[1].split("/", 1)[0])
        with open(os.path.join(records, TOKEN_NAME), encoding="ascii") as handle:
            headers = {"Authorization": f"Bearer {handle.read().strip()}", "Content-Type": "application/json"}
        events = _events(directory, count)
        http_ms = _post_all(port, headers, events, new_connection)
        cache = HookCache()
        kept_ms = _core(events, policy, kept, cache)
        cache.close()  # the sessions' intent files it kept open
        core_ms = _core(events, policy, baseline, None)
    finally:
        server.terminate()
        server.wait()
    if http_ms is None or kept_ms is None or core_ms is None:
        return 1
    p50, p99 = _percentile(http_ms, 0.5), _percentile(http_ms, 0.99)
    kept50, kept99 = _percentile(kept_ms, 0.5), _percentile(kept_ms, 0.99)
    core50, core99 = _percentile(core_ms, 0.5), _percentile(core_ms, 0.99)
    print(f"hook events over HTTP, {len(events)} events ({len(events) // 2} PreToolUse + PostToolUse pairs), 10 rules, "
          f"{'a connection per event' if new_connection else 'one keep-alive connection'}")
    print(f"  http:  p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   (target p50 <= {TARGET_P50_MS:.0f}, "
          f"p99 <= {TARGET_P99_MS:.0f})")
    print(f"  kept:  p50 {kept50:6.2f} ms   p99 {kept99:6.2f} ms   (reply_to_event in this process, a HookCache)")
    print(f"  core:  p50 {core50:6.2f} ms   p99 {core99:6.2f} ms   (reply_to_event in this process, no cache)")
    print(f"  ratio http/kept: p50 {p50 / kept50:4.2f}   p99 {p99 / kept99:4.2f}")
    tenth = max(1, len(events) // 10)  # without a cache the core reads the session's record at every event
    print(f"  p50 of the first / last {tenth} events: http {_percentile(http_ms[:tenth], 0.5):.2f} / "
          f"{_percentile(http_ms[-tenth:], 0.5):.2f} ms, kept {_percentile(kept_ms[:tenth], 0.5):.2f} / "
          f"{_percentile(kept_ms[-tenth:], 0.5):.2f} ms, core {_percentile(core_ms[:tenth], 0.5):.2f} / "
          f"{_percentile(core_ms[-tenth:], 0.5):.2f} ms")
    print(f"  load average before: {' '.join(f'{value:.2f}' for value in load_before)}; after: "
          f"{' '.join(f'{value:.2f}' for value in os.getloadavg())} ({os.cpu_count()} CPUs)")
    met = p50 <= TARGET_P50_MS and p99 <= TARGET_P99_MS
    print("  result: " + ("met" if met else "missed"))
    return 0 if met else 1


def _core(events: list[bytes], policy: str, records: str, cache: HookCache | None) -> list[float] | None:
    """The milliseconds of each event handed to the hooks' core in this process (None: an unexpected answer)."""
    times = []
    for data in events:
        start = time.perf_counter()
        reply = reply_to_event(data, policy, records, None, "claude-code", cache=cache)
        times.append((time.perf_counter() - start) * 1000)
        if reply.code != 0:
            print(f"core: unexpected answer {reply}")
            return None
    return times


def _post_all(port: int, headers: dict[str, str], events: list[bytes], new_connection: bool) -> list[float] | None:
    times = []
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        for number, data in enumerate(events):
            if new_connection:
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            start = time.perf_counter()
            connection.request("POST", "/hook/claude-code", data, headers)
            response = connection.getresponse()
            body = response.read()
            times.append((time.perf_counter() - start) * 1000)
            if response.status != 200 or (number % 2 == 0 and b'"allow"' not in body):
                print(f"event {number}: unexpected answer {response.status} {body!r}")
                return None
    finally:
        connection.close()
    return times


if __name__ == "__main__":
    sys.exit(main())
