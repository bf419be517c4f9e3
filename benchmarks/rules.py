"""The cost of policy rules: a 10-rule policy for the generated session, and the Gate's per-call overhead.

    python benchmarks/rules.py [--calls N]     # the Gate figures alone

`run.py` uses `RULES_POLICY` for its `scope+rules` row (target: at most 1.5x name-only `scope` on
the same file) and prints `gate_overhead()` after its tables: microseconds per call for a bare
function call, the Gate without rules, and the Gate with the 10 rules, over the same calls (the
first N records of the generated session, each tool a fake that returns at once).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import generate  # noqa: E402

from toolreplay.guard.gate import Gate  # noqa: E402
from toolreplay.policy.model import parse_policy  # noqa: E402

__all__ = ["RULES_POLICY", "NAMES_POLICY", "gate_overhead", "format_gate_table", "main"]

_SAME_ORDER = [{"after": "get_order", "same": ["order_id"]}]
RULES_POLICY: dict[str, Any] = {
    "agent": "benchmark-agent",
    "allowed_tools": sorted(generate.READ_TOOLS + generate.WRITE_TOOLS),
    "write_tools": sorted(generate.WRITE_TOOLS),
    "rules": [
        {"id": "writes-in-project", "tools": ["write_file"], "effect": "deny", "reason": "source folders only",
         "unless": [{"arg": "path", "regex": "[a-z]+-[0-9]{6}/(src|docs|tests|lib|config|scripts)/.+"}]},
        {"id": "no-etc", "tools": ["write_file", "read_file"], "effect": "deny", "reason": "never /etc",
         "when": [{"arg": "path", "under": ["etc"]}]},
        {"id": "known-commands", "tools": ["run_command"], "effect": "ask", "reason": "unknown command",
         "unless": [{"arg": "command", "glob": ["git status*", "git diff*", "pytest*", "ruff *", "mypy *"]}]},
        {"id": "mail-domain", "tools": ["send_email"], "effect": "deny", "reason": "mail stays at example.com",
         "unless": [{"arg": "to", "regex": "[^@]+@example\\.com"}]},
        {"id": "mail-size", "tools": ["send_email"], "effect": "deny", "reason": "body at most 2,000 characters",
         "unless": [{"arg": "body", "max_length": 2000}]},
        {"id": "cancel-after-get", "tools": ["cancel_order"], "effect": "deny", "reason": "get the order first",
         "unless": _SAME_ORDER},
        {"id": "update-after-get", "tools": ["update_order"], "effect": "ask", "reason": "get the order first",
         "unless": _SAME_ORDER},
        {"id": "cabin", "tools": ["update_reservation"], "effect": "deny", "reason": "a known cabin",
         "unless": [{"arg": "cabin", "in": ["basic_economy", "economy", "business"]}]},
        {"id": "price-cap", "tools": ["search_products"], "effect": "deny", "reason": "at most 5,000",
         "when": [{"arg": "max_price", "gt": 5000}]},
        {"id": "search-budget", "tools": ["search"], "effect": "deny", "reason": "at most 1,000,000 searches",
         "unless": [{"count": "search", "max": 1000000}]},
    ],
}
NAMES_POLICY = {key: RULES_POLICY[key] for key in ("agent", "allowed_tools", "write_tools")}


def _calls(session: str, count: int) -> list[tuple[str, dict[str, Any]]]:
    calls = []
    with open(session, encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            calls.append((record["tool"], record["args"]))
            if len(calls) == count:
                break
    return calls


def _fake(**args: Any) -> dict[str, Any]:
    return {"ok": True}


def _approve(tool: str, args: dict[str, Any]) -> bool:
    return True


def _once(make: Any, calls: list[tuple[str, dict[str, Any]]]) -> float:
    step = make()
    start = time.perf_counter()
    for tool, args in calls:
        step(tool, args)
    return (time.perf_counter() - start) / len(calls) * 1e6


def gate_overhead(session: str, count: int = 20_000, rounds: int = 5) -> dict[str, float]:
    """Best microseconds per call: bare function call, Gate without rules, Gate with the 10 rules.

    The three run in interleaved rounds, so a burst of load on the machine hits each alike."""
    calls = _calls(session, count)
    tools = {tool: _fake for tool, _ in calls}
    names, rules = parse_policy(NAMES_POLICY), parse_policy(RULES_POLICY)

    def bare() -> Any:
        return lambda tool, args: tools[tool](**args)

    plan = {"function call": bare,
            "gate, no rules": lambda: Gate(tools, names, confirm=_approve).call,
            "gate, 10 rules": lambda: Gate(tools, rules, confirm=_approve).call}
    best = {name: float("inf") for name in plan}
    for _ in range(rounds):
        for name, make in plan.items():
            best[name] = min(best[name], _once(make, calls))
    return best


def format_gate_table(figures: dict[str, float], count: int) -> str:
    """The per-call table: µs per call and the difference to the gate without rules."""
    base = figures["gate, no rules"]
    lines = [f"Gate per call, {count:,} calls of the generated session, best of 5\n",
             f"{'what':<16} {'µs/call':>8} {'vs gate':>8}\n"]
    for name, micros in figures.items():
        delta = "-" if not name.startswith("gate") else f"{micros - base:+.1f}"
        lines.append(f"{name:<16} {micros:>8.1f} {delta:>8}\n")
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the Gate table for the first N records of the 200,000-record session (generated if missing)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args(argv)
    session = os.path.join(HERE, "data", "session-200000.jsonl")
    if not os.path.exists(session):
        os.makedirs(os.path.dirname(session), exist_ok=True)
        generate.write_session(200_000, session)
    sys.stdout.write(format_gate_table(gate_overhead(session, args.calls), args.calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
