"""What `toolreplay mcp-proxy -- URL` adds to a tools/call made to a remote server over Streamable HTTP.

    python benchmarks/mcp_http.py                  # 2,000 timed calls a setup
    python benchmarks/mcp_http.py --calls 500 --json

The server is tests/mcp_servers/http_server.py (the MCP Python SDK's MCPServer under uvicorn, on
127.0.0.1; answers as an event stream, or with `--json` as JSON bodies). The client is the SDK's
`ClientSession` both ways, in the same run, interleaved in rounds of 100 so both see the same load:

- direct: the SDK's Streamable HTTP client to the server;
- through the proxy: the SDK's stdio client to `python -m toolreplay mcp-proxy ... -- URL`, which
  POSTs to the same server (a policy that allows the tool, no record).

Each call (`lookup` with distinct arguments, one at a time) is timed from `call_tool` to its result.
The added latency is the proxy's percentile minus the direct one: what a client sees change when the
proxy is put in front of the server. It includes the SDK's stdio transport in place of its HTTP one,
which costs less per call, so a second pair of setups takes the clients' own costs out:

- direct, minimal: one httpx client POSTs each call and reads the event stream to its end (so that
  its connection is reused, as the proxy does);
- through the proxy, minimal: JSON-RPC lines written to the proxy's stdin and read from its stdout.

Needs the extra `toolreplay[http]` and the `mcp` package.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = os.path.join(ROOT, "tests", "mcp_servers", "http_server.py")
ROUND = 100


def percentile(times: list[float], fraction: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def timed(session: Any, first: int, count: int) -> list[float]:
    times = []
    for index in range(first, first + count):
        began = time.perf_counter()
        result = await session.call_tool("lookup", {"key": f"k{index}"})
        times.append(time.perf_counter() - began)
        if result.is_error:
            raise SystemExit(f"call failed: {result}")
    return times


async def measure(url: str, policy: str, calls: int) -> dict[str, list[float]]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "toolreplay", "mcp-proxy", "--policy", policy,
                                                                 "--", url], cwd=ROOT, env={"PYTHONPATH": ROOT})
    results: dict[str, list[float]] = {"direct": [], "proxy": []}
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as direct:
        await direct.initialize()
        async with stdio_client(params) as (pread, pwrite), ClientSession(pread, pwrite) as proxied:
            await proxied.initialize()
            await timed(direct, 0, 50)  # warm-up
            await timed(proxied, 0, 50)
            for first in range(0, calls, ROUND):
                count = min(ROUND, calls - first)
                results["direct"] += await timed(direct, first, count)
                results["proxy"] += await timed(proxied, first, count)
    return results


class LineClient:
    """JSON-RPC lines over the proxy's stdin and stdout."""

    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT,
                                        env={**os.environ, "PYTHONPATH": ROOT})
        self.ask(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                   "clientInfo": {"name": "bench", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        self.process.stdin.flush()

    def ask(self, message_id: int, method: str, params: Any) -> Any:
        self.send({"jsonrpc": "2.0", "id": message_id, "method": method, "params": params})
        assert self.process.stdout is not None
        while "id" not in (reply := json.loads(self.process.stdout.readline())):
            pass
        if "result" not in reply or reply["result"].get("isError"):
            raise SystemExit(f"call failed: {reply}")
        return reply["result"]

    def close(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.process.stdout.close()


class HttpClient:
    """One httpx client: each message POSTed, an event stream read to its answer."""

    def __init__(self, url: str) -> None:
        import httpx

        self.url = url
        self.client = httpx.Client(timeout=30)
        self.headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        response = self.client.post(url, headers=self.headers, json={
            "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
        self.headers.update({"mcp-session-id": response.headers["mcp-session-id"],
                             "mcp-protocol-version": "2025-11-25"})
        self.client.post(url, headers=self.headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})

    def ask(self, message_id: int, method: str, params: Any) -> Any:
        body = {"jsonrpc": "2.0", "id": message_id, "method": method, "params": params}
        with self.client.stream("POST", self.url, headers=self.headers, json=body) as response:
            if response.headers.get("content-type", "").startswith("application/json"):
                return json.loads(response.read())["result"]
            answer = None
            for line in response.iter_lines():  # to the stream's end, so that its connection is reused
                if answer is None and line.startswith("data:") and '"id"' in line:
                    reply = json.loads(line[5:])
                    if reply.get("id") == message_id:
                        answer = reply["result"]
        if answer is None:
            raise SystemExit("no answer")
        return answer

    def close(self) -> None:
        self.client.delete(self.url, headers=self.headers)
        self.client.close()


def timed_lines(client: LineClient | HttpClient, first: int, count: int) -> list[float]:
    times = []
    for index in range(first, first + count):
        began = time.perf_counter()
        client.ask(index + 1, "tools/call", {"name": "lookup", "arguments": {"key": f"k{index}"}})
        times.append(time.perf_counter() - began)
    return times


def measure_minimal(url: str, policy: str, calls: int) -> dict[str, list[float]]:
    direct = HttpClient(url)
    proxied = LineClient([sys.executable, "-m", "toolreplay", "mcp-proxy", "--policy", policy, "--", url])
    results: dict[str, list[float]] = {"direct": [], "proxy": []}
    try:
        timed_lines(direct, 0, 50)
        timed_lines(proxied, 0, 50)
        for first in range(0, calls, ROUND):
            count = min(ROUND, calls - first)
            results["direct"] += timed_lines(direct, first, count)
            results["proxy"] += timed_lines(proxied, first, count)
    finally:
        direct.close()
        proxied.close()
    return results


def report(title: str, results: dict[str, list[float]]) -> None:
    print(title)
    print("setup    p50 ms   p99 ms   mean ms")
    for name, times in results.items():
        print(f"{name:<8} {percentile(times, 0.5) * 1000:6.3f}  {percentile(times, 0.99) * 1000:7.3f}  "
              f"{statistics.fmean(times) * 1000:7.3f}")
    direct, proxied = results["direct"], results["proxy"]
    print(f"added    {(percentile(proxied, 0.5) - percentile(direct, 0.5)) * 1000:6.3f}  "
          f"{(percentile(proxied, 0.99) - percentile(direct, 0.99)) * 1000:7.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="timed calls a setup (default 2,000)")
    parser.add_argument("--json", action="store_true", help="the server answers with JSON bodies, not event streams")
    options = parser.parse_args()
    server = subprocess.Popen([sys.executable, SERVER, *(["--json"] if options.json else [])],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().split()[1])
        with tempfile.TemporaryDirectory() as directory:
            policy = os.path.join(directory, "policy.json")
            with open(policy, "w", encoding="utf-8") as out:
                json.dump({"agent": "bench", "allowed_tools": ["lookup"]}, out)
            url = f"http://127.0.0.1:{port}/mcp"
            sdk = asyncio.run(measure(url, policy, options.calls))
            minimal = measure_minimal(url, policy, options.calls)
    finally:
        server.terminate()
        server.wait()
    print(f"{options.calls} calls a setup, server answers as {'JSON' if options.json else 'event streams'}; "
          f"load average {os.getloadavg()[0]:.1f}")
    report("the SDK's ClientSession:", sdk)
    report("minimal clients:", minimal)


if __name__ == "__main__":
    main()
