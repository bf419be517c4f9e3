"""The behaviour table every framework adapter passes (tests/test_adapter_*.py): one scripted model, one policy.

Each step is one model turn asking for one tool call (with a fixed tool-call id); `answer` is what the
person says when the guard asks through the framework's approval mechanism (None: nobody is asked).
"""

from __future__ import annotations

import json
import os
import tempfile
import unittest
from dataclasses import dataclass
from typing import Any

from tests.support import require
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.format.records import read_session
from toolreplay.policy.model import Policy, parse_policy

__all__ = ["POLICY", "STEPS", "Step", "Tools", "TOOLS_SAW", "check_record", "policy", "steps", "write_policy"]


def policy(redelivers: bool = True) -> Policy:
    """The policy the table is written for (a fresh object: parse_policy validates it). A framework that never
    delivers a tool-call id twice (the Agents SDK drops a repeated `call_id` itself) plays the table without
    the redelivered step, so its budget is one step smaller."""
    return parse_policy(_policy(redelivers))


def _policy(redelivers: bool) -> dict[str, Any]:
    return {**POLICY, "limits": {"max_steps": 7 if redelivers else 6}}


POLICY: dict[str, Any] = {
    "agent": "shop",
    "allowed_tools": ["get_order", "cancel_order", "write_note"],
    "write_tools": ["cancel_order"],
    "rules": [{"id": "notes-in-docs", "tools": ["write_note"], "effect": "deny", "reason": "notes go under docs/",
               "unless": [{"arg": "path", "under": ["docs"]}]}],
    "limits": {"max_steps": 7},
}


@dataclass(frozen=True)
class Step:
    call_id: str
    tool: str
    args: dict[str, Any]
    response: dict[str, Any]  # what the record holds, and (in the framework's idiom) what the model gets
    answer: bool | None = None  # the approval given when the guard asks
    redelivered: bool = False  # the same tool call again (the same id)


STEPS = [
    Step("call_1", "get_order", {"order_id": 1}, {"order_id": 1, "status": "processing"}),
    Step("call_2", "refund", {"order_id": 1}, {"ok": False, "error": "tool not allowed: refund"}),
    Step("call_3", "write_note", {"path": "notes/todo.md", "text": "hi"},
         {"ok": False, "error": "denied by rule notes-in-docs: notes go under docs/"}),
    Step("call_4", "cancel_order", {"order_id": 1}, {"ok": True, "order_id": 1}, answer=True),
    Step("call_5", "cancel_order", {"order_id": 2}, {"ok": False, "error": "confirmation declined"}, answer=False),
    # the same tool call delivered again (a resumed run, a re-executed graph node): answered, not run, not asked
    Step("call_4", "cancel_order", {"order_id": 1}, {"ok": True, "order_id": 1}, redelivered=True),
    Step("call_6", "write_note", {"path": "docs/a.md", "text": "hi"}, {"ok": True, "path": "docs/a.md"}),
    Step("call_7", "get_order", {"order_id": 2}, {"ok": False, "error": "budget exceeded: max_steps"}),
]

# What the real tool functions saw, in order.
TOOLS_SAW = [("get_order", {"order_id": 1}), ("cancel_order", {"order_id": 1}),
             ("write_note", {"path": "docs/a.md", "text": "hi"})]



def steps(redelivers: bool = True) -> list[Step]:
    """The table as the framework plays it."""
    return [step for step in STEPS if redelivers or not step.redelivered]


class Tools:
    """The agent's real tools (plain functions a framework wraps); `saw` lists every call that ran."""

    def __init__(self) -> None:
        self.saw: list[tuple[str, dict[str, Any]]] = []

    def get_order(self, order_id: int) -> dict[str, Any]:
        """Look an order up."""
        self.saw.append(("get_order", {"order_id": order_id}))
        return {"order_id": order_id, "status": "processing"}

    def cancel_order(self, order_id: int) -> dict[str, Any]:
        """Cancel an order."""
        self.saw.append(("cancel_order", {"order_id": order_id}))
        return {"ok": True, "order_id": order_id}

    def refund(self, order_id: int) -> dict[str, Any]:
        """Refund an order."""
        self.saw.append(("refund", {"order_id": order_id}))
        return {"ok": True}

    def write_note(self, path: str, text: str) -> dict[str, Any]:
        """Write a note to a file."""
        self.saw.append(("write_note", {"path": path, "text": text}))
        return {"ok": True, "path": path}


def scope_report(redelivers: bool = True) -> tuple[int, str, str]:
    """What `scope` says of the record: everything forbidden was blocked, the approved cancel ran (exit 0)."""
    last = 7 if redelivers else 6
    return (0, f"calls: {last + 1}\nfindings: 0\ninformation: 5\n"
               "index 1: blocked: tool 'refund' was refused by the guard: tool not allowed: refund\n"
               "index 2: blocked: tool 'write_note' was refused by the guard: denied by rule notes-in-docs: notes go "
               "under docs/\n"
               "index 3: approved: tool 'cancel_order' ran after a person's yes\n"
               "index 4: blocked: tool 'cancel_order' was refused by the guard: confirmation declined\n"
               f"index {last}: blocked: tool 'get_order' was refused by the guard: budget exceeded: max_steps\n", "")


def _cli(*argv: str) -> tuple[int, str, str]:
    io = IO.memory()
    code = main(list(argv), io)
    return code, io.out(), io.err()


def check_record(test: Any, path: str, folder: str, redelivers: bool = True) -> None:
    """The sealed record holds every step, in order; verify, replay and scope read it."""
    with open(path, "rb") as handle:
        records = list(read_session(handle, path))
    played = steps(redelivers)
    test.assertEqual([(r.tool, r.args, r.response) for r in records],
                     [(step.tool, step.args, step.response) for step in played])
    test.assertEqual(_cli("verify", path), (0, "chain: intact\n", ""))
    # Every record says when it was asked for and under the framework's own tool-call id.
    test.assertTrue(all(r.meta is not None and "ts" in r.meta and r.meta.get("call_id") for r in records),
                    [r.meta for r in records])
    # The redelivered call is answered from the first (meta.outcome "cached"): no new answer of the tool, and,
    # since the declined cancel between them changed nothing, a redundant repeat of the agent's.
    cached = [r.index for r in records if r.outcome == "cached"]
    test.assertEqual(cached, [5] if redelivers else [])
    test.assertEqual(_cli("replay", path, "--mutator", "cancel_order"), (
        1 if cached else 0, f"calls: {len(played)}\ndivergence: none\nfindings: {len(cached)}\n" + "".join(
            f"index {index}: redundant-call: tool 'cancel_order' repeats the identical call at index 3 with no "
            "state change between them\n" for index in cached), ""))
    code, out, err = _cli("scope", path, write_policy(folder, redelivers))
    test.assertEqual((code, out, err), scope_report(redelivers))


def write_policy(folder: str, redelivers: bool = True) -> str:
    """The table's policy as a file (for `scope`)."""
    path = os.path.join(folder, "policy.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(_policy(redelivers), handle)
    return path


class AdapterCase(unittest.TestCase):
    """A test of one adapter: its framework required (`HAVE`, `REASON`), a temporary folder `tmp` per test."""

    HAVE = False
    REASON = ""

    def setUp(self) -> None:
        require(self.HAVE, self.REASON)
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.tmp = folder.name
