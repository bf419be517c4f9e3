"""Peak memory of `toolreplay import` against the size of the log (not a test; standard library only).

    python benchmarks/import_memory.py              # logs of 20 and 80 MB
    python benchmarks/import_memory.py 10 40 160    # other sizes, in MB

For each size it writes three logs into `benchmarks/data/` (git-ignored) and imports each once:

- `mcp-notes-N.jsonl`: MCP JSON Lines, 200 tool calls and the rest `notifications/message` log lines
  (streamed: the peak should not move with the file's size);
- `mcp-calls-N.jsonl`: MCP JSON Lines where every line is a call or its response (the records are
  kept, so the peak follows the calls: the least any import that returns the sessions can keep);
- `chat-N.json`: one JSON document, an OpenAI chat array (read whole: the peak is a multiple of the
  size, printed as `x size`).

The peak is the child's maximum resident set (from `os.wait4`, through `run.py`'s minimal launcher).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import ROOT, _run_once  # noqa: E402

DATA = os.path.join(ROOT, "benchmarks", "data")
MB = 1 << 20


def _write_lines(path: str, size: int, calls_only: bool) -> None:
    note = {"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "data": "x" * 900}}
    with open(path, "w", encoding="utf-8") as out:
        written, index = 0, 0
        while written < size:
            if calls_only or index < 200:
                request = {"jsonrpc": "2.0", "id": index, "method": "tools/call",
                           "params": {"name": "read_file", "arguments": {"path": f"/data/{index}.txt"}}}
                response = {"jsonrpc": "2.0", "id": index,
                            "result": {"content": [{"type": "text", "text": "y" * 400}]}}
                text = json.dumps(request) + "\n" + json.dumps(response) + "\n"
            else:
                text = json.dumps(note) + "\n"
            out.write(text)
            written += len(text)
            index += 1


def _write_document(path: str, size: int) -> None:
    with open(path, "w", encoding="utf-8") as out:
        out.write("[\n")
        written, index = 0, 0
        while written < size:
            messages = [
                {"role": "user", "content": "Look up order " + str(index) + " " + "z" * 300},
                {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{index}", "type": "function",
                 "function": {"name": "get_order", "arguments": json.dumps({"order_id": index})}}]},
                {"role": "tool", "tool_call_id": f"c{index}",
                 "content": json.dumps({"status": "shipped", "note": "w" * 200})},
            ]
            text = ("" if index == 0 else ",\n") + ",\n".join(json.dumps(m) for m in messages)
            out.write(text)
            written += len(text)
            index += 1
        out.write("\n]\n")


def main(argv: list[str]) -> int:
    sizes = [int(arg) for arg in argv] or [20, 80]
    os.makedirs(DATA, exist_ok=True)
    print(f"{'log':<24} {'MB':>6} {'format':<12} {'peak MB':>8} {'x size':>7}")
    for size in sizes:
        plans = [
            (f"mcp-notes-{size}.jsonl", "mcp", lambda p, s=size: _write_lines(p, s * MB, False)),
            (f"mcp-calls-{size}.jsonl", "mcp", lambda p, s=size: _write_lines(p, s * MB, True)),
            (f"chat-{size}.json", "openai-chat", lambda p, s=size: _write_document(p, s * MB)),
        ]
        for name, fmt, write in plans:
            path = os.path.join(DATA, name)
            if not os.path.exists(path):
                write(path)
            with tempfile.TemporaryDirectory() as tmp:
                target = os.path.join(tmp, "out.jsonl")
                _, _, peak, code, error = _run_once(
                    [sys.executable, "-m", "toolreplay", "import", fmt, path, "-o", target])
            if code != 0:
                print(f"{name}: exit {code}: {error}")
                return 1
            file_mb = os.path.getsize(path) / MB
            print(f"{name:<24} {file_mb:>6.1f} {fmt:<12} {peak:>8.1f} {peak / file_mb:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
