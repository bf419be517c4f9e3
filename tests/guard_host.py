"""A guarded Python host for the crash tests: the library Gate and SessionRecorder over two tools.

    python tests/guard_host.py POLICY RECORD NOTES [--mutator NAME]...

Reads one request a line on stdin (`{"tool": ..., "args": {...}}`) and writes the gate's response as
one JSON line. Its tools are those of tests/mcp_servers/tiny_server.py that the crash table uses:
`echo` and `write_note` (appends its canonical arguments to NOTES; with `"hang": true` it then sleeps,
so a test can kill the host while the write runs).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from toolreplay.guard import Gate, SessionRecorder
from toolreplay.policy.model import load_policy


def main() -> None:
    policy_path, record, notes, *rest = sys.argv[1:]
    mutators = [rest[i + 1] for i in range(0, len(rest), 2) if rest[i] == "--mutator"]

    def echo(**args: Any) -> dict[str, Any]:
        return {"text": "echo " + json.dumps(args, sort_keys=True)}

    def write_note(**args: Any) -> dict[str, Any]:
        with open(notes, "a", encoding="utf-8") as out:
            out.write(json.dumps(args, sort_keys=True) + "\n")
        if args.get("hang"):
            time.sleep(3600)
        return {"text": "write_note " + json.dumps(args, sort_keys=True)}

    with SessionRecorder.open(record, sealed=True) as recorder:
        gate = Gate({"echo": echo, "write_note": write_note}, load_policy(policy_path), recorder=recorder,
                    mutators=mutators)
        for line in sys.stdin:
            request = json.loads(line)
            sys.stdout.write(json.dumps(gate.call(request["tool"], request["args"])) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
