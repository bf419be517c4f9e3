"""The console's speed targets (issue 41), against `toolreplay serve` run as its own process on loopback.

    python benchmarks/console.py [--sessions N] [--runs R]

Each run writes N sessions (default 20,000, three records each) into a fresh folder and starts the
console on them, then measures:

- listing: the first sessions page, and a filtered page deep in the list (`kind=blocked`, page 100),
  once the folder is indexed: target <= 1 s each (the baseline is the console's smallest answer,
  `/api/version`, measured in the same run);
- a new call: from a record appended to one session to the moment `/api/version` changes (what the page
  polls), polled every 10 ms; the page itself looks every 500 ms, so the worst case on screen is this
  plus 0.5 s plus one page fetch: target <= 1 s;
- an approval: from the POST of the inbox form to the moment the waiting call (`Inbox.ask`, in this
  process) has its answer: target <= 200 ms.

Every run's figures are printed; the machine's load moves them: re-run before believing a near miss.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any
from urllib.parse import urlencode

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from toolreplay.guard.inbox import Inbox, Request, pending_requests  # noqa: E402

LIST_TARGET, CALL_TARGET, APPROVAL_TARGET = 1.0, 1.0, 0.2
PAGE_POLL = 0.5  # the page's own interval (toolreplay/console/pages.py)


def write_sessions(folder: str, count: int) -> None:
    """`count` sessions of three records each (one in three with a blocked call), in 100 sub-folders."""
    for number in range(count):
        sub = os.path.join(folder, f"agent-{number % 100:02d}")
        os.makedirs(sub, exist_ok=True)
        lines = []
        for index in range(3):
            blocked = number % 3 == 0 and index == 2
            response = {"ok": False, "error": "confirmation declined"} if blocked else {"ok": True}
            lines.append(json.dumps({"index": index, "tool": "write_note" if blocked else "read_note",
                                     "args": {"n": number}, "response": response,
                                     "meta": {"ts": f"2026-12-01T{number // 3600 % 24:02d}:{number // 60 % 60:02d}:"
                                                    f"{number % 60:02d}.{index:03d}Z",
                                              "outcome": "refused" if blocked else "ran"}}))
        with open(os.path.join(sub, f"s{number:05d}.jsonl"), "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")


def start_console(folder: str) -> tuple[subprocess.Popen[bytes], int]:
    """`toolreplay serve FOLDER` on a free loopback port; the process and its port."""
    process = subprocess.Popen([sys.executable, "-m", "toolreplay", "serve", folder, "--listen", "127.0.0.1:0",
                                "--person", "bench"], cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert process.stderr is not None
    line = process.stderr.readline().decode("utf-8")
    found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    if found is None:
        process.kill()
        raise SystemExit(f"the console did not start: {line}")
    return process, int(found.group(1))


def request(port: int, method: str, target: str, body: bytes = b"",
            headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(method, target, body, headers or {})
        response = connection.getresponse()
        return response.status, response.read(), dict(response.getheaders())
    finally:
        connection.close()


def timed(port: int, target: str) -> float:
    start = time.perf_counter()
    status, _, _ = request(port, "GET", target)
    assert status == 200, (target, status)
    return time.perf_counter() - start


def wait_indexed(port: int, count: int, start: float) -> float:
    """Seconds from `start` until the sessions page says every session is indexed."""
    wanted = f"{count:,} sessions indexed".encode()
    while wanted not in request(port, "GET", "/")[1]:
        time.sleep(0.05)
    return time.perf_counter() - start


def new_call_latency(port: int, folder: str) -> float:
    version = json.loads(request(port, "GET", "/api/version")[1])["version"]
    path = os.path.join(folder, "agent-07", "s00007.jsonl")
    line = json.dumps({"index": 3, "tool": "read_note", "args": {"n": -1}, "response": {"ok": True},
                       "meta": {"ts": "2026-12-02T00:00:00.000Z", "outcome": "ran"}})
    start = time.perf_counter()
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
    while json.loads(request(port, "GET", "/api/version")[1])["version"] == version:
        time.sleep(0.01)
    return time.perf_counter() - start


def approval_latency(port: int, folder: str) -> float:
    inbox = Inbox(folder, timeout=60, front_end="benchmark")
    answer: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: answer.update(done=inbox.ask("write_note", {"text": "x"}),
                                                           at=time.perf_counter()))
    thread.start()
    waiting = None
    while waiting is None:
        waiting = next((item for item in pending_requests(folder) if isinstance(item, Request)), None)
        time.sleep(0.005)
    page = request(port, "GET", "/inbox")[1].decode("utf-8")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    form = urlencode({"csrf": csrf.group(1), "id": waiting.id, "decision": "approve:once"}).encode("ascii")
    start = time.perf_counter()
    status, _, _ = request(port, "POST", "/inbox/decide", form, {"Content-Type": "application/x-www-form-urlencoded"})
    thread.join(60)
    assert status == 303 and answer["done"].answer is True, (status, answer)
    return float(answer["at"] - start)


def run_once(count: int) -> dict[str, float]:
    folder = tempfile.mkdtemp(prefix="toolreplay-console-bench-")
    try:
        write_sessions(folder, count)
        started = time.perf_counter()
        process, port = start_console(folder)
        try:
            figures = {"started and indexed": wait_indexed(port, count, started)}
            figures["baseline"] = min(timed(port, "/api/version") for _ in range(5))
            figures["first page"] = min(timed(port, "/") for _ in range(3))
            figures["deep filtered page"] = min(timed(port, "/?kind=blocked&page=100") for _ in range(3))
            figures["new call (index)"] = new_call_latency(port, folder)
            figures["new call (on screen, worst)"] = (figures["new call (index)"] + PAGE_POLL
                                                      + figures["first page"])
            figures["approval"] = approval_latency(port, folder)
        finally:
            process.terminate()
            process.wait(10)
        return figures
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    targets = {"first page": LIST_TARGET, "deep filtered page": LIST_TARGET, "new call (on screen, worst)": CALL_TARGET,
               "approval": APPROVAL_TARGET}
    results = [run_once(args.sessions) for _ in range(args.runs)]
    print(f"console, {args.sessions:,} sessions, {args.runs} runs (seconds; target in brackets)")
    for name in results[0]:
        shown = "  ".join(f"{run[name]:8.3f}" for run in results)
        target = f"  [<= {targets[name]:g}]" if name in targets else ""
        ratio = ""
        if name in ("first page", "deep filtered page"):
            ratio = "  (" + " ".join(f"{run[name] / run['baseline']:.0f}x" for run in results) + " the baseline)"
        print(f"  {name:28} {shown}{target}{ratio}")
    missed = [name for name, target in targets.items() if any(run[name] > target for run in results)]
    print("all targets met" if not missed else "missed: " + ", ".join(missed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
