"""What `toolreplay mcp-proxy` adds to a tools/call, and its memory after many calls.

    python benchmarks/mcp_proxy.py                  # 2,000 timed calls a setup, RSS after 100,000 calls
    python benchmarks/mcp_proxy.py --calls 1000 --memory-calls 20000

The server is tests/mcp_servers/tiny_server.py (standard library, answers at once). The same calls
(`echo` with distinct arguments, one at a time, each timed from the request's write to the reply's
read) are made in the same run four ways: to the server directly, through the proxy, through the
proxy with `--no-restart` (without the layer that starts a server that ended again, which reads each
line to know the calls in flight), and through the proxy with `--record` (a sealed record, one line
written per call). The added latency is the proxy's
percentile minus the direct one. Memory is the proxy process's resident set (VmRSS) after the warm-up
and after the memory run. `echo` is a read, and reads are not held (the read cache is off by
default), so memory should not grow with distinct calls; a last run repeats one call, to show the
proxy's own per-call state does not grow either.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = [sys.executable, os.path.join(ROOT, "tests", "mcp_servers", "tiny_server.py")]


class Client:
    """A line-by-line MCP client over a child process's pipes."""

    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT,
                                        env={**os.environ, "PYTHONPATH": ROOT})
        self.next_id = 0
        self.ask("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                "clientInfo": {"name": "bench", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        self.process.stdin.flush()

    def ask(self, method: str, params: Any) -> Any:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert self.process.stdout is not None
        reply = json.loads(self.process.stdout.readline())
        if reply.get("id") != self.next_id or "result" not in reply:
            raise SystemExit(f"unexpected reply: {reply}")
        return reply["result"]

    def timed_calls(self, count: int, start: int, distinct: bool = True) -> list[float]:
        """Seconds per call of `count` echo calls, each distinct or all the same."""
        times = []
        for index in range(start, start + count):
            began = time.perf_counter()
            text = f"call {index}" if distinct else "the same call"
            result = self.ask("tools/call", {"name": "echo", "arguments": {"text": text}})
            times.append(time.perf_counter() - began)
            if result.get("isError"):
                raise SystemExit(f"call refused: {result}")
        return times

    def rss_kib(self) -> int:
        with open(f"/proc/{self.process.pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise SystemExit("no VmRSS")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def percentile(times: list[float], fraction: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per setup (at least 1,000)")
    parser.add_argument("--memory-calls", type=int, default=100_000, help="calls before the memory reading")
    args = parser.parse_args()
    directory = tempfile.mkdtemp()
    policy = os.path.join(directory, "policy.json")
    with open(policy, "w", encoding="utf-8") as out:
        json.dump({"agent": "bench", "allowed_tools": ["echo"]}, out)
    proxy = [sys.executable, "-m", "toolreplay", "mcp-proxy", "--policy", policy]
    # --no-restart: what the restart layer (it reads each line to know the calls in flight) costs
    setups = {"direct": TINY, "proxy": [*proxy, "--", *TINY],
              "proxy --no-restart": [*proxy, "--no-restart", "--", *TINY],
              "proxy --record": [*proxy, "--record", os.path.join(directory, "record.jsonl"), "--", *TINY]}
    clients = {name: Client(command) for name, command in setups.items()}
    for client in clients.values():
        client.timed_calls(200, 0)  # warm-up
    # Rounds of 100 calls a setup, in turn, so they all see the same machine load.
    times: dict[str, list[float]] = {name: [] for name in clients}
    for round_start in range(200, 200 + args.calls, 100):
        for name, client in clients.items():
            times[name] += client.timed_calls(min(100, 200 + args.calls - round_start), round_start)
    direct50, direct99 = percentile(times["direct"], 0.5), percentile(times["direct"], 0.99)
    print(f"calls per setup: {args.calls} (python {sys.version.split()[0]}, {os.cpu_count()} cores)")
    print(f"{'setup':<20}{'p50 ms':>9}{'p99 ms':>9}{'added p50':>11}{'added p99':>11}")
    for name, measured in times.items():
        p50, p99 = percentile(measured, 0.5), percentile(measured, 0.99)
        print(f"{name:<20}{p50 * 1e3:>9.3f}{p99 * 1e3:>9.3f}{(p50 - direct50) * 1e3:>11.3f}"
              f"{(p99 - direct99) * 1e3:>11.3f}")
    print("mean ms: " + ", ".join(f"{name} {statistics.fmean(t) * 1e3:.3f}" for name, t in times.items()))
    clients.pop("direct").close()
    clients["proxy, one call repeated"] = Client(setups["proxy"])
    for name, client in clients.items():
        distinct = not name.endswith("repeated")
        done = 200 + args.calls
        if not distinct:
            client.timed_calls(done, 0, distinct)  # the same count of calls as the others before the reading
        before = client.rss_kib()
        began = time.perf_counter()
        client.timed_calls(args.memory_calls, done, distinct)
        elapsed = time.perf_counter() - began
        after = client.rss_kib()
        print(f"{name}: RSS {before / 1024:.1f} MiB after {done:,} calls, {after / 1024:.1f} MiB after "
              f"{done + args.memory_calls:,} ({(after - before) * 1024 / args.memory_calls:.0f} bytes a call; "
              f"{args.memory_calls / elapsed:,.0f} calls/s)")
        client.close()


if __name__ == "__main__":
    main()
