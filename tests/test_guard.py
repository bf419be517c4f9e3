"""The gate: allowlist, confirmation, idempotency (across threads), stale reads, budgets, failing tools,
approver, and failing closed when the record cannot be written."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import unittest
from typing import Any

from tests.faults import FullDiskHandle, fill, small_tmpfs
from toolreplay.format.records import read_session
from toolreplay.guard import gate as guard
from toolreplay.guard import idempotency
from toolreplay.guard.gate import MAX_NESTING, CallCancelled, CannotConfirmError, ConsoleApprover, Gate, is_refusal
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.policy.model import Limits, Policy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

POLICY = Policy(agent="support", allowed_tools=frozenset({"get_order", "cancel_order", "echo", "fail"}),
                write_tools=frozenset({"cancel_order"}))
NEEDS_CONFIRMATION = {"ok": False, "error": "confirmation required"}
DECLINED = {"ok": False, "error": "confirmation declined"}
TIMED_OUT = {"ok": False, "error": "confirmation timed out"}
OVER_STEPS = {"ok": False, "error": "budget exceeded: max_steps"}


class Tools:
    """Counting fake tools."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, dict[str, Any]]] = []

    def mapping(self) -> dict[str, Any]:
        return {"get_order": self.get_order, "cancel_order": self.cancel_order, "echo": self.echo,
                "fail": self.fail, "delete_everything": self.delete_everything}

    def get_order(self, order_id: int) -> dict[str, Any]:
        self.runs.append(("get_order", {"order_id": order_id}))
        return {"order_id": order_id, "status": "shipped"}

    def cancel_order(self, order_id: int, **extra: Any) -> dict[str, Any]:
        self.runs.append(("cancel_order", {"order_id": order_id, **extra}))
        return {"ok": True, "order_id": order_id}

    def echo(self, value: Any) -> Any:
        self.runs.append(("echo", {"value": value}))
        return value

    def fail(self) -> Any:
        self.runs.append(("fail", {}))
        raise ValueError("database is down")

    def delete_everything(self) -> Any:
        self.runs.append(("delete_everything", {}))
        return {"ok": True}


def make_gate(policy: Policy = POLICY, **options: Any) -> tuple[Gate, Tools]:
    tools = Tools()
    return Gate(tools.mapping(), policy, **options), tools


class AllowlistTest(unittest.TestCase):
    def test_allowed_tool_runs_and_returns_its_dict(self) -> None:
        gate, tools = make_gate()
        self.assertEqual(gate.call("get_order", {"order_id": 1}), {"order_id": 1, "status": "shipped"})
        self.assertEqual(tools.runs, [("get_order", {"order_id": 1})])

    def test_non_dict_result_is_wrapped(self) -> None:
        gate, _ = make_gate()
        self.assertEqual(gate.call("echo", {"value": [1, "a"]}), {"result": [1, "a"]})
        self.assertEqual(gate.call("echo", {"value": None}), {"result": None})

    def test_tool_outside_policy_is_refused_before_it_runs(self) -> None:
        gate, tools = make_gate()
        self.assertEqual(gate.call("delete_everything", {}),
                         {"ok": False, "error": "tool not allowed: delete_everything"})
        self.assertEqual(tools.runs, [])

    def test_unknown_tool_is_refused(self) -> None:
        policy = Policy("a", frozenset({"ghost"}))
        gate, _ = make_gate(policy)
        self.assertEqual(gate.call("ghost", {}), {"ok": False, "error": "tool not allowed: ghost"})
        self.assertEqual(gate.call("nope", {}), {"ok": False, "error": "tool not allowed: nope"})

    def test_names_match_case_sensitively(self) -> None:
        gate, tools = make_gate()
        self.assertEqual(gate.call("Get_Order", {"order_id": 1}),
                         {"ok": False, "error": "tool not allowed: Get_Order"})
        self.assertEqual(tools.runs, [])

    def test_request_without_json_form_is_a_host_error(self) -> None:
        gate, tools = make_gate()
        for tool, args, message in (
                ("", {}, "tool must be a non-empty string"),
                ("echo", [], "args must be a JSON object (a dict)"),
                ("echo", {"value": float("nan")}, "args have no JSON form: nan has no JSON form"),
                ("echo", {"value": {1: 2}}, "args have no JSON form: object key 1 is not a string")):
            with self.subTest(args=args), self.assertRaises(ValueError) as caught:
                gate.call(tool, args)  # type: ignore[arg-type]
            self.assertEqual(str(caught.exception), message)
        self.assertEqual((tools.runs, gate.steps), ([], 0))


class ConfirmationTest(unittest.TestCase):
    def test_write_without_confirm_callback_is_refused(self) -> None:
        gate, tools = make_gate()
        self.assertEqual(gate.call("cancel_order", {"order_id": 1}),
                         NEEDS_CONFIRMATION)
        self.assertEqual(tools.runs, [])

    def test_confirmation_written_by_the_model_never_counts(self) -> None:
        for confirm, refusal in ((None, NEEDS_CONFIRMATION), (lambda tool, args: False, DECLINED)):
            gate, tools = make_gate(confirm=confirm)
            for args in ({"order_id": 1, "confirmed": True}, {"order_id": 1, "approved": "yes"}):
                self.assertEqual(gate.call("cancel_order", args), refusal)
            self.assertEqual(tools.runs, [])

    def test_declined_not_asked_and_timed_out_are_three_refusals(self) -> None:
        def raises(error: Exception) -> Any:
            def confirm(tool: str, args: dict[str, Any]) -> bool:
                raise error
            return confirm

        for confirm, refusal in ((None, NEEDS_CONFIRMATION),
                                 (raises(CannotConfirmError("no terminal")), NEEDS_CONFIRMATION),
                                 (lambda tool, args: False, DECLINED),
                                 (raises(TimeoutError("nobody answered in 60 s")), TIMED_OUT)):
            with self.subTest(refusal=refusal["error"]), tempfile.TemporaryDirectory() as directory:
                record = os.path.join(directory, "r.jsonl")
                with SessionRecorder.open(record) as recorder:
                    gate, tools = make_gate(confirm=confirm, recorder=recorder)
                    self.assertEqual(gate.call("cancel_order", {"order_id": 1}), refusal)
                self.assertEqual(tools.runs, [])
                with open(record, "rb") as handle:
                    (line,) = read_session(handle, record)
                self.assertEqual(line.response, refusal)
                self.assertTrue(is_refusal(line.response))  # did not run: a continued record does not count it

    def test_callback_approves_that_exact_call(self) -> None:
        asked: list[tuple[str, dict[str, Any]]] = []

        def confirm(tool: str, args: dict[str, Any]) -> bool:
            asked.append((tool, args))
            return args == {"order_id": 1}

        gate, tools = make_gate(confirm=confirm)
        self.assertEqual(gate.call("cancel_order", {"order_id": 2}), DECLINED)
        self.assertEqual(gate.call("cancel_order", {"order_id": 1}), {"ok": True, "order_id": 1})
        self.assertEqual(asked, [("cancel_order", {"order_id": 2}), ("cancel_order", {"order_id": 1})])
        self.assertEqual(tools.runs, [("cancel_order", {"order_id": 1})])

    def test_read_tools_never_ask(self) -> None:
        asked: list[str] = []
        gate, _ = make_gate(confirm=lambda tool, args: asked.append(tool) or True)
        gate.call("get_order", {"order_id": 1})
        self.assertEqual(asked, [])

    def test_only_true_approves(self) -> None:
        for answer in ("yes", 1, [True], None):
            gate, tools = make_gate(confirm=lambda tool, args, answer=answer: answer)
            self.assertEqual(gate.call("cancel_order", {"order_id": 1}),
                             NEEDS_CONFIRMATION)
            self.assertEqual(tools.runs, [])

    def test_failing_approver_approves_nothing(self) -> None:
        def confirm(tool: str, args: dict[str, Any]) -> bool:
            raise OSError("no terminal")

        gate, tools = make_gate(confirm=confirm)
        self.assertEqual(gate.call("cancel_order", {"order_id": 1}), NEEDS_CONFIRMATION)
        self.assertEqual(tools.runs, [])

    def test_approver_cannot_change_what_runs(self) -> None:
        def confirm(tool: str, args: dict[str, Any]) -> bool:
            args["order_id"] = 99
            return True

        gate, tools = make_gate(confirm=confirm)
        self.assertEqual(gate.call("cancel_order", {"order_id": 1}), {"ok": True, "order_id": 1})
        self.assertEqual(tools.runs, [("cancel_order", {"order_id": 1})])


class IdempotencyTest(unittest.TestCase):
    def test_identical_read_runs_again_by_default(self) -> None:
        clock = iter(range(100))
        gate = Gate({"now": lambda: {"t": next(clock)}}, Policy("a", frozenset({"now"})))
        self.assertEqual([gate.call("now", {}) for _ in range(3)], [{"t": 0}, {"t": 1}, {"t": 2}])

    def test_identical_call_runs_once_and_returns_the_original(self) -> None:
        gate, tools = make_gate(read_cache=True)
        first = gate.call("echo", {"value": {"b": 1, "a": 2.0}})
        again = gate.call("echo", {"value": {"a": 2, "b": 1.0}})  # canonically identical
        self.assertEqual(first, again)
        self.assertEqual(len(tools.runs), 1)
        self.assertEqual(gate.steps, 2)

    def test_different_args_run_again(self) -> None:
        gate, tools = make_gate()
        gate.call("get_order", {"order_id": 1})
        gate.call("get_order", {"order_id": 2})
        self.assertEqual(len(tools.runs), 2)

    def test_confirmed_write_retried_is_not_run_or_asked_again(self) -> None:
        asked: list[str] = []
        gate, tools = make_gate(confirm=lambda tool, args: asked.append(tool) or True)
        self.assertEqual(gate.call("cancel_order", {"order_id": 1}), {"ok": True, "order_id": 1})
        self.assertEqual(gate.call("cancel_order", {"order_id": 1}), {"ok": True, "order_id": 1})
        self.assertEqual((len(tools.runs), asked), (1, ["cancel_order"]))

    def test_refused_write_is_asked_again_on_retry(self) -> None:
        answers = [False, True]
        gate, tools = make_gate(confirm=lambda tool, args: answers.pop(0))
        self.assertEqual(gate.call("cancel_order", {"order_id": 1}), DECLINED)
        self.assertEqual(gate.call("cancel_order", {"order_id": 1}), {"ok": True, "order_id": 1})
        self.assertEqual(len(tools.runs), 1)

    def test_failed_call_is_not_retried(self) -> None:
        gate, tools = make_gate(read_cache=True)
        self.assertEqual(gate.call("fail", {}), gate.call("fail", {}))
        self.assertEqual(len(tools.runs), 1)

    def test_responses_are_copies(self) -> None:
        store = {"items": [1]}
        gate = Gate({"peek": lambda: store}, Policy("a", frozenset({"peek"})), read_cache=True)
        seen = gate.call("peek", {})
        seen["items"].append(2)
        store["items"].append(3)
        self.assertEqual(gate.call("peek", {}), {"items": [1]})

    def test_two_threads_race_past_the_first_check_tool_runs_once(self) -> None:
        # Both requests wait in the approver until both are there: neither has registered the call yet.
        barrier = threading.Barrier(2, timeout=10)

        def confirm(tool: str, args: dict[str, Any]) -> bool:
            barrier.wait()
            return True

        gate, tools = make_gate(confirm=confirm)
        results = self._race(lambda: gate.call("cancel_order", {"order_id": 7}))
        self.assertEqual(results, [{"ok": True, "order_id": 7}] * 2)
        self.assertEqual(tools.runs, [("cancel_order", {"order_id": 7})])

    def test_retry_waits_for_the_original_in_flight(self) -> None:
        started, release, waiting = threading.Event(), threading.Event(), threading.Event()

        class SignallingEvent(idempotency.Done):
            def wait(self) -> bool:
                waiting.set()
                return super().wait()

        class Pending(idempotency.Pending):
            def __init__(self) -> None:
                super().__init__()
                self.done = SignallingEvent()

        runs: list[int] = []

        def slow(order_id: int) -> dict[str, Any]:
            runs.append(order_id)
            started.set()
            self.assertTrue(release.wait(10))
            return {"order_id": order_id, "status": "shipped"}

        directory = tempfile.mkdtemp()
        path = os.path.join(directory, "s.jsonl")
        original = idempotency.Pending
        idempotency.Pending = Pending  # type: ignore[misc]
        try:
            with SessionRecorder.open(path) as recorder:
                gate = Gate({"get_order": slow}, Policy("a", frozenset({"get_order"})), recorder=recorder,
                            read_cache=True)
                results: list[Any] = [None, None]
                def request(slot: int) -> None:
                    results[slot] = gate.call("get_order", {"order_id": 3})

                first = threading.Thread(target=request, args=(0,))
                second = threading.Thread(target=request, args=(1,))
                first.start()
                self.assertTrue(started.wait(10))
                second.start()
                self.assertTrue(waiting.wait(10))  # the retry is blocked on the original
                release.set()
                first.join(10)
                second.join(10)
        finally:
            idempotency.Pending = original  # type: ignore[misc]
        self.assertEqual(runs, [3])
        self.assertEqual(results, [{"order_id": 3, "status": "shipped"}] * 2)
        with open(path, "rb") as handle:
            records = [(r.index, r.tool, r.response) for r in read_session(handle, path)]
        self.assertEqual(records, [(0, "get_order", {"order_id": 3, "status": "shipped"}),
                                   (1, "get_order", {"order_id": 3, "status": "shipped"})])
        os.unlink(path)
        os.rmdir(directory)

    @staticmethod
    def _race(call: Any) -> list[Any]:
        results: list[Any] = [None, None]
        threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, call())) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        return results


class FailingToolTest(unittest.TestCase):
    def test_exception_becomes_error_response(self) -> None:
        gate, _ = make_gate()
        self.assertEqual(gate.call("fail", {}), {"ok": False, "error": "ValueError: database is down"})

    def test_wrong_arguments_become_error_response(self) -> None:
        gate, _ = make_gate()
        self.assertEqual(gate.call("get_order", {"id": 1}), {
            "ok": False, "error": "TypeError: Tools.get_order() got an unexpected keyword argument 'id'"})

    def test_result_without_json_form_becomes_error_response(self) -> None:
        gate, _ = make_gate()
        self.assertEqual(gate.call("echo", {"value": 1.5e308}), {"result": 1.5e308})
        gate = Gate({"bad": lambda: {"x": float("inf")}, "obj": lambda: object()},
                    Policy("a", frozenset({"bad", "obj"})))
        prefix = "ValueError: tool result has no JSON form: "
        self.assertEqual(gate.call("bad", {}), {"ok": False, "error": prefix + "inf has no JSON form"})
        self.assertEqual(gate.call("obj", {}), {"ok": False, "error": prefix + "object is not a JSON value"})


class BudgetTest(unittest.TestCase):
    def test_max_steps(self) -> None:
        gate, tools = make_gate(Policy("a", POLICY.allowed_tools, limits=Limits(max_steps=2)))
        gate.call("get_order", {"order_id": 1})
        gate.call("delete_everything", {})  # refused, still a step
        self.assertIsNone(gate.stop_reason)
        for _ in range(2):
            self.assertEqual(gate.call("get_order", {"order_id": 2}),
                             OVER_STEPS)
        self.assertEqual((gate.stop_reason, gate.steps, len(tools.runs)), ("max_steps", 4, 1))

    def test_duplicates_and_refusals_past_the_limit_are_refused_too(self) -> None:
        gate, _ = make_gate(Policy("a", POLICY.allowed_tools, limits=Limits(max_steps=1)))
        gate.call("get_order", {"order_id": 1})
        self.assertEqual(gate.call("get_order", {"order_id": 1}), OVER_STEPS)
        self.assertEqual(gate.call("nope", {}), OVER_STEPS)

    def test_result_bytes(self) -> None:
        # {"result":"aaaaaaaaaa"} is 23 canonical bytes.
        gate, tools = make_gate(Policy("a", POLICY.allowed_tools, limits=Limits(max_result_bytes=46)))
        gate.call("echo", {"value": "a" * 10})
        gate.call("echo", {"value": "b" * 10})
        self.assertEqual((gate.result_bytes, gate.stop_reason), (46, None))
        self.assertEqual(gate.call("echo", {"value": "c"}), {"result": "c"})  # delivered, crosses the limit
        self.assertEqual((gate.result_bytes, gate.stop_reason), (60, "budget"))
        self.assertEqual(gate.call("echo", {"value": "d"}), {"ok": False, "error": "budget exceeded: budget"})
        self.assertEqual(len(tools.runs), 3)

    def test_refusals_cost_no_result_bytes(self) -> None:
        gate, _ = make_gate(Policy("a", POLICY.allowed_tools, limits=Limits(max_result_bytes=1)))
        gate.call("nope", {})
        self.assertEqual((gate.result_bytes, gate.stop_reason), (0, None))

    def test_time_with_injected_clock(self) -> None:
        now = [100.0]
        gate, tools = make_gate(Policy("a", POLICY.allowed_tools, limits=Limits(max_seconds=10)),
                                clock=lambda: now[0])
        now[0] = 110.0  # exactly the limit: still allowed
        self.assertEqual(gate.call("get_order", {"order_id": 1}), {"order_id": 1, "status": "shipped"})
        now[0] = 110.5
        self.assertEqual(gate.call("get_order", {"order_id": 2}),
                         {"ok": False, "error": "budget exceeded: time"})
        self.assertEqual((gate.stop_reason, len(tools.runs)), ("time", 1))

    def test_first_limit_passed_stays_the_reason(self) -> None:
        now = [0.0]
        gate, _ = make_gate(Policy("a", POLICY.allowed_tools, limits=Limits(max_steps=1, max_seconds=5)),
                            clock=lambda: now[0])
        gate.call("get_order", {"order_id": 1})
        gate.call("get_order", {"order_id": 2})
        now[0] = 60.0
        self.assertEqual(gate.call("get_order", {"order_id": 3}), OVER_STEPS)
        self.assertEqual(gate.stop_reason, "max_steps")

    def test_no_limits_by_default(self) -> None:
        gate, _ = make_gate()
        for order_id in range(50):
            gate.call("get_order", {"order_id": order_id})
        self.assertEqual((gate.stop_reason, gate.steps), (None, 50))


class RecordingTest(unittest.TestCase):
    def test_every_request_is_recorded_with_the_response_the_agent_saw(self) -> None:
        directory = tempfile.mkdtemp()
        path = os.path.join(directory, "s.jsonl")
        policy = Policy("a", POLICY.allowed_tools, POLICY.write_tools, Limits(max_steps=6))
        with SessionRecorder.open(path) as recorder:
            gate, _ = make_gate(policy, recorder=recorder)
            seen = [gate.call("get_order", {"order_id": 1}),
                    gate.call("get_order", {"order_id": 1}),
                    gate.call("delete_everything", {}),
                    gate.call("cancel_order", {"order_id": 1, "confirmed": True}),
                    gate.call("fail", {}),
                    gate.call("echo", {"value": 5}),
                    gate.call("echo", {"value": 6})]
        with open(path, "rb") as handle:
            records = [(r.index, r.tool, r.args, r.response) for r in read_session(handle, path)]
        self.assertEqual(records, [
            (0, "get_order", {"order_id": 1}, {"order_id": 1, "status": "shipped"}),
            (1, "get_order", {"order_id": 1}, {"order_id": 1, "status": "shipped"}),
            (2, "delete_everything", {}, {"ok": False, "error": "tool not allowed: delete_everything"}),
            (3, "cancel_order", {"order_id": 1, "confirmed": True}, NEEDS_CONFIRMATION),
            (4, "fail", {}, {"ok": False, "error": "ValueError: database is down"}),
            (5, "echo", {"value": 5}, {"result": 5}),
            (6, "echo", {"value": 6}, OVER_STEPS)])
        self.assertEqual([r[3] for r in records], seen)
        os.unlink(path)
        os.rmdir(directory)

    def test_calls_of_tools_that_change_state_are_declared_in_meta(self) -> None:
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory, True)
        path = os.path.join(directory, "s.jsonl")
        policy = Policy("a", POLICY.allowed_tools, POLICY.write_tools, repeatable_tools=frozenset({"fail"}))
        with SessionRecorder.open(path) as recorder:
            gate, _ = make_gate(policy, recorder=recorder, mutators={"echo"}, confirm=approve)
            gate.call("get_order", {"order_id": 1})  # a read
            gate.call("cancel_order", {"order_id": 1})  # the policy's write tool
            gate.call("cancel_order", {"order_id": 1})  # answered from the first: cached, declared all the same
            gate.call("echo", {"value": 5})  # a mutator named to the gate
            gate.call("fail", {})  # a repeatable tool (that raised)
            gate.call("delete_everything", {})  # refused: not allowed, and no write
        with open(path, "rb") as handle:
            metas = [(r.tool, r.meta["outcome"], r.meta.get("mutates")) for r in read_session(handle, path)
                     if r.meta is not None]
        self.assertEqual(metas, [("get_order", "ran", None), ("cancel_order", "ran", True),
                                 ("cancel_order", "cached", True), ("echo", "ran", True), ("fail", "ran", True),
                                 ("delete_everything", "refused", None)])
        with open(path, encoding="utf-8") as handle:
            second = json.loads(handle.readlines()[1])
        self.assertEqual(list(second["meta"]), ["ts", "duration_ms", "x-confirmed", "outcome", "mutates"])

    def test_recorded_args_are_those_the_model_sent(self) -> None:
        def greedy(items: list[int]) -> dict[str, Any]:
            items.append(99)
            return {"n": len(items)}

        directory = tempfile.mkdtemp()
        path = os.path.join(directory, "s.jsonl")
        args = {"items": [1]}
        with SessionRecorder.open(path) as recorder:
            gate = Gate({"greedy": greedy}, Policy("a", frozenset({"greedy"})), recorder=recorder)
            gate.call("greedy", args)
        with open(path, "rb") as handle:
            self.assertEqual([r.args for r in read_session(handle, path)], [{"items": [1]}])
        self.assertEqual(args, {"items": [1]})
        os.unlink(path)
        os.rmdir(directory)


class Store:
    """Orders whose status a write changes, with counting tools."""

    def __init__(self) -> None:
        self.status = {1: "shipped", 2: "processing"}
        self.runs: list[str] = []

    def tools(self) -> dict[str, Any]:
        return {"get_order": self.get_order, "cancel_order": self.cancel_order, "note": self.note}

    def get_order(self, order_id: int) -> dict[str, Any]:
        self.runs.append("get_order")
        return {"order_id": order_id, "status": self.status[order_id]}

    def cancel_order(self, order_id: int) -> dict[str, Any]:
        self.runs.append("cancel_order")
        if self.status[order_id] == "cancelled":
            raise ValueError(f"order {order_id} is already cancelled")
        self.status[order_id] = "cancelled"
        return {"ok": True, "order_id": order_id}

    def note(self, order_id: int, text: str) -> dict[str, Any]:
        self.runs.append("note")
        return {"ok": True}


STORE_POLICY = Policy("support", frozenset({"get_order", "cancel_order", "note"}), frozenset({"cancel_order"}))


def approve(tool: str, args: dict[str, Any]) -> bool:
    return True


class StaleReadTest(unittest.TestCase):
    def test_read_after_an_approved_write_runs_again(self) -> None:
        store = Store()
        gate = Gate(store.tools(), STORE_POLICY, confirm=approve)
        self.assertEqual(gate.call("get_order", {"order_id": 2}), {"order_id": 2, "status": "processing"})
        self.assertEqual(gate.call("cancel_order", {"order_id": 2}), {"ok": True, "order_id": 2})
        self.assertEqual(gate.call("get_order", {"order_id": 2}), {"order_id": 2, "status": "cancelled"})
        self.assertEqual(store.runs, ["get_order", "cancel_order", "get_order"])

    def test_reads_are_cached_until_a_write_runs(self) -> None:
        store = Store()
        gate = Gate(store.tools(), STORE_POLICY, confirm=approve, read_cache=True)
        for _ in range(3):
            gate.call("get_order", {"order_id": 1})
        gate.call("cancel_order", {"order_id": 2})
        for _ in range(2):
            gate.call("get_order", {"order_id": 1})
        self.assertEqual(store.runs, ["get_order", "cancel_order", "get_order"])

    def test_a_refused_or_repeated_write_keeps_the_cache(self) -> None:
        store = Store()
        answers = [False, True]
        gate = Gate(store.tools(), STORE_POLICY, confirm=lambda tool, args: answers.pop(0), read_cache=True)
        gate.call("get_order", {"order_id": 1})
        self.assertEqual(gate.call("cancel_order", {"order_id": 2}), DECLINED)
        gate.call("get_order", {"order_id": 1})
        gate.call("cancel_order", {"order_id": 2})
        gate.call("get_order", {"order_id": 1})
        self.assertEqual(gate.call("cancel_order", {"order_id": 2}), {"ok": True, "order_id": 2})
        gate.call("get_order", {"order_id": 1})
        self.assertEqual(store.runs, ["get_order", "cancel_order", "get_order"])

    def test_a_failing_write_empties_the_cache_too(self) -> None:
        store = Store()
        store.status[2] = "cancelled"
        gate = Gate(store.tools(), STORE_POLICY, confirm=approve, read_cache=True)
        gate.call("get_order", {"order_id": 2})
        self.assertEqual(gate.call("cancel_order", {"order_id": 2}),
                         {"ok": False, "error": "ValueError: order 2 is already cancelled"})
        gate.call("get_order", {"order_id": 2})
        self.assertEqual(store.runs, ["get_order", "cancel_order", "get_order"])

    def test_read_cache_off(self) -> None:
        store = Store()
        gate = Gate(store.tools(), STORE_POLICY, read_cache=False)
        for _ in range(3):
            self.assertEqual(gate.call("get_order", {"order_id": 1}), {"order_id": 1, "status": "shipped"})
        self.assertEqual(store.runs, ["get_order"] * 3)

    def test_mutators_change_state_without_confirmation(self) -> None:
        store = Store()
        gate = Gate(store.tools(), STORE_POLICY, mutators={"note"}, read_cache=True)
        gate.call("get_order", {"order_id": 1})
        self.assertEqual(gate.call("note", {"order_id": 1, "text": "hi"}), {"ok": True})
        self.assertEqual(gate.call("note", {"order_id": 1, "text": "hi"}), {"ok": True})
        gate.call("get_order", {"order_id": 1})
        self.assertEqual(store.runs, ["get_order", "note", "get_order"])

    def test_idempotency_keys(self) -> None:
        store = Store()
        gate = Gate(store.tools(), STORE_POLICY, mutators={"note"})
        args = {"order_id": 1, "text": "called the customer"}
        self.assertEqual([gate.call("note", args, key=key) for key in ("call_1", "call_2", "call_1", None, None)],
                         [{"ok": True}] * 5)
        self.assertEqual(store.runs, ["note"] * 3)  # call_1, call_2 and the keyless one
        with self.assertRaises(ValueError) as caught:
            gate.call("note", args, key=5)  # type: ignore[arg-type]
        self.assertEqual(str(caught.exception), "key must be a string or None")

    def test_keys_do_not_matter_for_reads(self) -> None:
        store = Store()
        gate = Gate(store.tools(), STORE_POLICY, read_cache=True)
        gate.call("get_order", {"order_id": 1}, key="a")
        gate.call("get_order", {"order_id": 1}, key="b")
        self.assertEqual(store.runs, ["get_order"])


class RepeatableTest(unittest.TestCase):
    POLICY = Policy("support", frozenset({"get_order", "cancel_order", "note"}), frozenset({"cancel_order", "note"}),
                    repeatable_tools=frozenset({"note"}))

    def test_each_call_of_a_repeatable_tool_is_a_new_action_confirmed_on_its_own(self) -> None:
        store = Store()
        asked: list[str] = []
        gate = Gate(store.tools(), self.POLICY, confirm=lambda tool, args: asked.append(tool) or True)
        args = {"order_id": 1, "text": "called again"}
        self.assertEqual([gate.call("note", args) for _ in range(3)], [{"ok": True}] * 3)
        self.assertEqual(gate.call("cancel_order", {"order_id": 2}), {"ok": True, "order_id": 2})
        self.assertEqual(gate.call("cancel_order", {"order_id": 2}), {"ok": True, "order_id": 2})
        self.assertEqual((store.runs, asked), (["note"] * 3 + ["cancel_order"], ["note"] * 3 + ["cancel_order"]))

    def test_a_declined_repeat_does_not_run_and_the_next_is_asked_again(self) -> None:
        store = Store()
        answers = [True, False, True]
        gate = Gate(store.tools(), self.POLICY, confirm=lambda tool, args: answers.pop(0))
        args = {"order_id": 1, "text": "x"}
        self.assertEqual([gate.call("note", args) for _ in range(3)], [{"ok": True}, DECLINED, {"ok": True}])
        self.assertEqual(store.runs, ["note", "note"])

    def test_a_host_key_still_answers_a_retry(self) -> None:
        store = Store()
        gate = Gate(store.tools(), STORE_POLICY, repeatable={"note"})
        args = {"order_id": 1, "text": "x"}
        for key in ("call_1", "call_1", "call_2", None, None, "call_2"):
            gate.call("note", args, key=key)
        self.assertEqual(store.runs, ["note"] * 4)  # call_1, call_2 and both keyless calls

    def test_a_repeatable_tool_changes_state_for_the_read_cache(self) -> None:
        store = Store()
        gate = Gate(store.tools(), STORE_POLICY, repeatable={"note"}, read_cache=True)
        for tool, args in (("get_order", {"order_id": 1}), ("note", {"order_id": 1, "text": "x"}),
                           ("get_order", {"order_id": 1})):
            gate.call(tool, args)
        self.assertEqual(store.runs, ["get_order", "note", "get_order"])

    def test_a_recorded_repeatable_call_runs_again_after_a_restart(self) -> None:
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory, True)
        path = os.path.join(directory, "s.jsonl")
        args = {"order_id": 1, "text": "x"}
        for _ in range(2):
            store = Store()
            with SessionRecorder.open(path) as recorder:
                gate = Gate(store.tools(), STORE_POLICY, repeatable={"note"}, recorder=recorder)
                self.assertEqual(gate.call("note", args), {"ok": True})
            self.assertEqual(store.runs, ["note"])
            self.assertFalse(os.path.exists(path + ".intents"))  # announced and settled like any write


class FrontEndTest(unittest.TestCase):
    def test_handle_gives_the_outcome(self) -> None:
        gate, tools = make_gate(confirm=approve, read_cache=True)
        self.assertEqual([(answer.response, answer.outcome) for answer in (
            gate.handle("get_order", {"order_id": 1}), gate.handle("get_order", {"order_id": 1}),
            gate.handle("delete_everything", {}), gate.handle("cancel_order", {"order_id": 1}),
            gate.handle("cancel_order", {"order_id": 1}))], [
            ({"order_id": 1, "status": "shipped"}, "ran"), ({"order_id": 1, "status": "shipped"}, "cached"),
            ({"ok": False, "error": "tool not allowed: delete_everything"}, "refused"),
            ({"ok": True, "order_id": 1}, "ran"), ({"ok": True, "order_id": 1}, "cached")])

    def test_a_tool_host_gets_each_call_its_own_context(self) -> None:
        seen: list[tuple[str, str, Any]] = []

        class Host:
            def refusal(self, tool: str) -> str | None:
                return "tool definition not verified against its pin: " + tool if tool == "get_order" else None

            def run(self, tool: str, args: dict[str, Any], context: Any) -> Any:
                seen.append(("run", tool, context))
                if context == "cancel me":
                    raise CallCancelled("the client cancelled the call")
                return {"ok": True}

            def confirm(self, tool: str, args: dict[str, Any], context: Any) -> bool:
                seen.append(("confirm", tool, context))
                return context != "no"

        gate = Gate(Host(), POLICY, repeatable={"cancel_order"})
        answers = [gate.handle(tool, {"order_id": 1}, context=context) for tool, context in (
            ("cancel_order", "yes"), ("cancel_order", "no"), ("echo", "cancel me"), ("get_order", "pins"),
            ("cancel_order", "cancel me"))]
        self.assertEqual([(answer.response.get("error"), answer.outcome) for answer in answers], [
            (None, "ran"), ("confirmation declined", "refused"), ("cancelled: the client cancelled the call", "cancelled"),
            ("tool definition not verified against its pin: get_order", "refused"),
            ("cancelled: the client cancelled the call; whether the write took effect is unknown", "unknown")])
        self.assertEqual(seen, [("confirm", "cancel_order", "yes"), ("run", "cancel_order", "yes"),
                                ("confirm", "cancel_order", "no"), ("run", "echo", "cancel me"),
                                ("confirm", "cancel_order", "cancel me"), ("run", "cancel_order", "cancel me")])
        self.assertEqual(gate.unknown_outcomes, ('cancel_order {"order_id":1}',))

    def test_a_variant_is_another_request(self) -> None:
        gate, tools = make_gate(confirm=approve, read_cache=True)
        for tool in ("get_order", "cancel_order"):
            for variant in (b"", b'{"task":{}}', b'{"task":{}}', b""):
                gate.handle(tool, {"order_id": 1}, variant=variant)
        self.assertEqual(tools.runs, [("get_order", {"order_id": 1})] * 2 + [("cancel_order", {"order_id": 1})] * 2)


class MemoryTest(unittest.TestCase):
    """The responses held to answer repeats are bounded; a write past the bound still never runs again."""

    def test_an_old_write_without_a_record_is_refused_not_run(self) -> None:
        gate, tools = make_gate(confirm=approve, remember_bytes=60)  # each response is 25 bytes
        for order_id in (1, 2, 3, 3, 2):
            self.assertEqual(gate.call("cancel_order", {"order_id": order_id}), {"ok": True, "order_id": order_id})
        self.assertEqual(gate.call("cancel_order", {"order_id": 1}), {
            "ok": False, "error": "already ran: an identical cancel_order call ran earlier; its answer is no longer "
                                  "held in memory and cannot be read back from a record"})
        self.assertEqual(len(tools.runs), 3)

    def test_an_old_write_is_answered_from_the_record(self) -> None:
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory, True)
        path = os.path.join(directory, "s.jsonl")
        for _ in range(2):  # in the session, then after a restart (the record's writes bounded too)
            tools = Tools()
            with SessionRecorder.open(path) as recorder:
                gate = Gate(tools.mapping(), POLICY, confirm=approve, recorder=recorder, remember_bytes=60)
                for order_id in (1, 2, 3):
                    gate.call("cancel_order", {"order_id": order_id})
                answer = gate.handle("cancel_order", {"order_id": 1})
            self.assertEqual((answer.response, answer.outcome), ({"ok": True, "order_id": 1}, "cached"))
            self.assertLessEqual(len(tools.runs), 3)
        self.assertEqual(tools.runs, [])  # after the restart nothing ran again

    def test_the_read_cache_is_bounded(self) -> None:
        gate, tools = make_gate(read_cache=True, remember_bytes=70)  # each read answers 34 bytes
        for order_id in (1, 2, 1, 3, 1):
            gate.call("get_order", {"order_id": order_id})
        self.assertEqual([args["order_id"] for _, args in tools.runs], [1, 2, 3, 1])
class ConfirmationDeferredTest(unittest.TestCase):
    """A framework adapter's confirm callback raises ConfirmationDeferred: the answer comes in a later call."""

    def test_nothing_recorded_or_counted_and_the_same_call_comes_back(self) -> None:
        answers: list[bool | None] = [None, True]

        def confirm(tool: str, args: dict[str, Any]) -> bool:
            answer = answers.pop(0)
            if answer is None:
                raise guard.ConfirmationDeferred("asked through the framework")
            return answer

        limited = Policy("support", frozenset({"get_order", "cancel_order"}), frozenset({"cancel_order"}),
                       limits=Limits(max_steps=2))
        with tempfile.TemporaryDirectory() as directory:
            record = os.path.join(directory, "r.jsonl")
            with SessionRecorder.open(record) as recorder:
                gate, tools = make_gate(limited, confirm=confirm, recorder=recorder)
                with self.assertRaises(guard.ConfirmationDeferred):
                    gate.call("cancel_order", {"order_id": 1}, key="c1")
                self.assertEqual((gate.steps, tools.runs), (0, []))
                self.assertEqual(os.path.getsize(record), 0)
                self.assertEqual(gate.call("cancel_order", {"order_id": 1}, key="c1"), {"ok": True, "order_id": 1})
                self.assertEqual(gate.call("get_order", {"order_id": 1}), {"order_id": 1, "status": "shipped"})
            with open(record, "rb") as handle:
                self.assertEqual([r.tool for r in read_session(handle, record)], ["cancel_order", "get_order"])
        self.assertEqual(tools.runs, [("cancel_order", {"order_id": 1}), ("get_order", {"order_id": 1})])


class PlainReadTest(unittest.TestCase):
    """`Gate.plain_read`: no call of the tool can ever ask a person, nor write an intent (the MCP listener runs
    such a call in its event loop, where nothing may wait)."""

    def test_a_tool_no_write_rule_or_host_flag_touches(self) -> None:
        from toolreplay.guard.host import FunctionHost
        from toolreplay.policy.model import parse_policy

        ruled = parse_policy({
            "agent": "support", "allowed_tools": ["get_order", "cancel_order", "echo", "fail"],
            "write_tools": ["cancel_order"], "repeatable_tools": ["fail"],
            "rules": [{"id": "loud", "tools": ["echo"], "effect": "ask", "reason": "a person reads it",
                       "when": [{"arg": "value", "eq": "loud"}]}]})
        everyone = parse_policy({"agent": "support", "allowed_tools": ["get_order"],
                                 "rules": [{"id": "any", "tools": ["*"], "effect": "deny", "reason": "never on 9",
                                            "when": [{"arg": "order_id", "eq": 9}]}]})

        class Asking(FunctionHost):
            def asks(self, tool: str, args: dict[str, Any], context: Any) -> bool:
                return False

        cases = [(make_gate()[0], "get_order", True),                            # a read
                 (make_gate()[0], "delete_everything", True),                    # refused, never asked
                 (make_gate()[0], "cancel_order", False),                        # a write tool
                 (make_gate(mutators=["get_order"])[0], "get_order", False),     # a mutator
                 (make_gate(ruled)[0], "fail", False),                           # a repeatable tool
                 (make_gate(ruled)[0], "echo", False),                           # a rule names it
                 (make_gate(ruled)[0], "get_order", True),                       # rules of other tools only
                 (make_gate(everyone)[0], "get_order", False),                   # a rule for every tool
                 (Gate(Asking(Tools().mapping(), None), POLICY), "get_order", False)]  # the host's own flag
        for gate, tool, expected in cases:
            with self.subTest(tool=tool, expected=expected):
                self.assertIs(gate.plain_read(tool), expected)


class NeedsConfirmationTest(unittest.TestCase):
    """`Gate.needs_confirmation`: would this call ask now? (for frameworks that ask before calling the tool)"""

    def test_only_a_call_that_would_reach_the_question(self) -> None:
        from toolreplay.policy.model import parse_policy

        limited = parse_policy({
            "agent": "support", "allowed_tools": ["get_order", "cancel_order", "echo"],
            "write_tools": ["cancel_order"], "limits": {"max_steps": 3},
            "rules": [{"id": "no-9", "tools": ["cancel_order"], "effect": "deny", "reason": "order 9 is locked",
                       "when": [{"arg": "order_id", "eq": 9}]},
                      {"id": "free-3", "tools": ["cancel_order"], "effect": "allow", "reason": "order 3 is free",
                       "when": [{"arg": "order_id", "eq": 3}]},
                      {"id": "loud", "tools": ["echo"], "effect": "ask", "reason": "a person reads it",
                       "when": [{"arg": "value", "eq": "loud"}]}]})
        with tempfile.TemporaryDirectory() as directory:
            record = os.path.join(directory, "r.jsonl")
            with SessionRecorder.open(record) as recorder:
                gate, tools = make_gate(limited, confirm=lambda tool, args: True, recorder=recorder)
                cases = [("cancel_order", {"order_id": 1}, "k1", True),   # a write tool
                         ("echo", {"value": "loud"}, None, True),           # an ask rule
                         ("echo", {"value": "quiet"}, None, False),         # a read
                         ("get_order", {"order_id": 1}, None, False),
                         ("delete_everything", {}, None, False),            # not allowed: refused, not asked
                         ("cancel_order", {"order_id": 9}, "k1", False),   # a deny rule
                         ("cancel_order", {"order_id": 3}, "k1", False)]   # an allow rule
                for tool, args, key, expected in cases:
                    with self.subTest(tool=tool, args=args):
                        self.assertIs(gate.needs_confirmation(tool, args, key=key), expected)
                self.assertEqual((gate.steps, os.path.getsize(record), tools.runs), (0, 0, []))
                gate.call("cancel_order", {"order_id": 1}, key="k1")
                self.assertFalse(gate.needs_confirmation("cancel_order", {"order_id": 1}, key="k1"))  # ran: answered
                self.assertTrue(gate.needs_confirmation("cancel_order", {"order_id": 1}, key="k2"))
                gate.call("get_order", {"order_id": 1})
                gate.call("get_order", {"order_id": 2})
                self.assertFalse(gate.needs_confirmation("cancel_order", {"order_id": 1}, key="k2"))  # over budget
            self.assertEqual(gate.steps, 3)


class RecordCase(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory, True)
        self.path = os.path.join(self.directory, "s.jsonl")

    def records(self, path: str | None = None) -> list[tuple[int, str, dict[str, Any], dict[str, Any]]]:
        path = path or self.path
        with open(path, "rb") as handle:
            return [(r.index, r.tool, r.args, r.response) for r in read_session(handle, path)]

    def child(self, script: str) -> subprocess.CompletedProcess[bytes]:
        """Run a guarded host in a child process (it sees `path`, `Store`-like tools and the gate)."""
        prelude = (
            "import os, signal, sys\n"
            "from toolreplay.guard import Gate, SessionRecorder\n"
            "from toolreplay.policy.model import Policy\n"
            "policy = Policy('support', frozenset({'get_order', 'cancel_order'}), frozenset({'cancel_order'}))\n"
            "path = sys.argv[1]\n"
            "recorder = SessionRecorder.open(path, sealed=True)\n")
        return subprocess.run([sys.executable, "-c", prelude + script, self.path],
                              env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, timeout=60, check=False)


FAILED = "recording failed: "


class RestartTest(RecordCase):
    def test_recorded_write_is_not_repeated_after_a_restart(self) -> None:
        with SessionRecorder.open(self.path, sealed=True) as recorder:
            gate = Gate(Store().tools(), STORE_POLICY, confirm=approve, recorder=recorder)
            gate.call("cancel_order", {"order_id": 2}, key="call_1")
            gate.call("get_order", {"order_id": 2})
        self.assertFalse(os.path.exists(self.path + ".intents"))  # every write ended in a record
        store = Store()
        with SessionRecorder.open(self.path, sealed=True) as recorder:
            gate = Gate(store.tools(), STORE_POLICY, confirm=approve, recorder=recorder)
            # after a restart a recorded write answers an identical call whatever its key
            for key in (None, "call_1", "call_9"):
                self.assertEqual(gate.call("cancel_order", {"order_id": 2}, key=key), {"ok": True, "order_id": 2})
            self.assertEqual(gate.call("cancel_order", {"order_id": 1}), {"ok": True, "order_id": 1})
        self.assertEqual(store.runs, ["cancel_order"])
        self.assertEqual([r[1:] for r in self.records()][2:], [
            ("cancel_order", {"order_id": 2}, {"ok": True, "order_id": 2})] * 3 + [
            ("cancel_order", {"order_id": 1}, {"ok": True, "order_id": 1})])

    def test_budgets_continue_after_a_restart(self) -> None:
        policy = Policy("a", frozenset({"get_order", "cancel_order"}), limits=Limits(max_steps=3, max_result_bytes=60))
        with SessionRecorder.open(self.path) as recorder:
            gate = Gate(Store().tools(), policy, recorder=recorder)
            gate.call("get_order", {"order_id": 1})  # 33 bytes of result
            gate.call("nothing", {})  # refused: a step, no bytes
        self.assertEqual((gate.steps, gate.result_bytes), (2, 33))
        with SessionRecorder.open(self.path) as recorder:
            gate = Gate(Store().tools(), policy, recorder=recorder)
            self.assertEqual((gate.steps, gate.result_bytes, gate.stop_reason), (2, 33, None))
            self.assertEqual(gate.call("get_order", {"order_id": 2}), {"order_id": 2, "status": "processing"})
            self.assertEqual((gate.steps, gate.result_bytes, gate.stop_reason), (3, 69, "budget"))
        with SessionRecorder.open(self.path) as recorder:  # a record already past a limit stops at once
            gate = Gate(Store().tools(), policy, recorder=recorder)
            self.assertEqual(gate.stop_reason, "budget")
            self.assertEqual(gate.call("get_order", {"order_id": 1}), {"ok": False, "error": "budget exceeded: budget"})

    def test_a_refusal_as_the_proxy_recorded_it_before_does_not_count_as_run(self) -> None:
        old = {"content": [{"type": "text", "text": "toolreplay: confirmation required"}], "isError": True}
        with SessionRecorder.open(self.path) as recorder:
            recorder.append("cancel_order", {"order_id": 2}, old)
            recorder.append("cancel_order", {"order_id": 1}, {**old, "isError": False})  # a result: it ran
        store = Store()
        with SessionRecorder.open(self.path) as recorder:
            gate = Gate(store.tools(), STORE_POLICY, confirm=approve, recorder=recorder)
            self.assertEqual(gate.call("cancel_order", {"order_id": 2}), {"ok": True, "order_id": 2})
            self.assertEqual(gate.call("cancel_order", {"order_id": 1}), {**old, "isError": False})
        self.assertEqual(store.runs, ["cancel_order"])

    def test_refused_write_on_record_runs_after_a_restart(self) -> None:
        with SessionRecorder.open(self.path) as recorder:
            Gate(Store().tools(), STORE_POLICY, recorder=recorder).call("cancel_order", {"order_id": 2})
        store = Store()
        with SessionRecorder.open(self.path) as recorder:
            gate = Gate(store.tools(), STORE_POLICY, confirm=approve, recorder=recorder)
            self.assertEqual(gate.call("cancel_order", {"order_id": 2}), {"ok": True, "order_id": 2})
        self.assertEqual(store.runs, ["cancel_order"])

    def test_host_killed_inside_a_write_then_the_retry_is_refused(self) -> None:
        if not hasattr(signal, "SIGKILL"):
            self.skipTest("no SIGKILL on this platform")
        marker = os.path.join(self.directory, "cancelled")
        result = self.child(
            "def cancel_order(order_id):\n"
            "    open(sys.argv[2], 'w').close()  # the side effect happened\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "gate = Gate({'get_order': lambda order_id: {'status': 'processing'}, 'cancel_order': cancel_order},"
            " policy, confirm=lambda tool, args: True, recorder=recorder)\n"
            "gate.call('get_order', {'order_id': 2})\n"
            "gate.call('cancel_order', {'order_id': 2})\n".replace("sys.argv[2]", repr(marker)))
        self.assertEqual(result.returncode, -signal.SIGKILL, result.stderr)
        self.assertTrue(os.path.exists(marker))
        self.assertEqual([r[1] for r in self.records()], ["get_order"])
        with open(self.path + ".intents", "rb") as handle:
            self.assertEqual(handle.read(), b'{"args":{"order_id":2},"from":1,"intent":0,"key":null,'
                                            b'"tool":"cancel_order"}\n')
        unknown = {"ok": False, "error": "outcome unknown: an identical cancel_order call started earlier and its "
                                         "result was never recorded; a person must check whether it took "
                                         "effect, then delete its line from s.jsonl.intents"}
        for runs in (["cancel_order"], []):  # a second restart still refuses it
            store = Store()
            with SessionRecorder.open(self.path, sealed=True) as recorder:
                gate = Gate(store.tools(), STORE_POLICY, confirm=approve, recorder=recorder)
                self.assertEqual(gate.unknown_outcomes, ('cancel_order {"order_id":2}',))
                for key in (None, "call_2"):
                    self.assertEqual(gate.call("cancel_order", {"order_id": 2}, key=key), unknown)
                self.assertEqual(gate.call("cancel_order", {"order_id": 1}), {"ok": True, "order_id": 1})
            self.assertEqual(store.runs, runs)
        self.assertEqual(self.records()[1][1:], ("cancel_order", {"order_id": 2}, unknown))
        os.unlink(self.path + ".intents")  # a person checked the order and resolved it
        store = Store()
        with SessionRecorder.open(self.path, sealed=True) as recorder:
            gate = Gate(store.tools(), STORE_POLICY, confirm=approve, recorder=recorder)
            self.assertEqual(gate.call("cancel_order", {"order_id": 2}), {"ok": True, "order_id": 2})
        self.assertEqual(store.runs, ["cancel_order"])

    def test_host_killed_after_the_write_was_recorded(self) -> None:
        if not hasattr(signal, "SIGKILL"):
            self.skipTest("no SIGKILL on this platform")
        result = self.child(
            "def get_order(order_id):\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "gate = Gate({'get_order': get_order, 'cancel_order': lambda order_id: {'ok': True, 'n': 1}},"
            " policy, confirm=lambda tool, args: True, recorder=recorder)\n"
            "gate.call('cancel_order', {'order_id': 2})\n"
            "gate.call('get_order', {'order_id': 2})\n")
        self.assertEqual(result.returncode, -signal.SIGKILL, result.stderr)
        store = Store()
        with SessionRecorder.open(self.path, sealed=True) as recorder:
            gate = Gate(store.tools(), STORE_POLICY, confirm=approve, recorder=recorder)
            self.assertEqual(gate.call("cancel_order", {"order_id": 2}), {"ok": True, "n": 1})
        self.assertEqual(store.runs, [])

    def test_record_landed_but_its_done_line_did_not(self) -> None:
        intent = (b'{"args":{"order_id":2},"from":0,"intent":0,"key":null,"tool":"cancel_order"}\n')
        with SessionRecorder.open(self.path) as recorder:
            recorder.append("cancel_order", {"order_id": 2}, {"ok": True, "order_id": 2})
        for intents, unknown in ((intent, ()), (intent + intent.replace(b'"intent":0', b'"intent":1'),
                                                ('cancel_order {"order_id":2}',))):
            with self.subTest(intents=intents):
                with open(self.path + ".intents", "wb") as handle:
                    handle.write(intents)
                with SessionRecorder.open(self.path) as recorder:
                    gate = Gate(Store().tools(), STORE_POLICY, recorder=recorder)
                    self.assertEqual(gate.unknown_outcomes, unknown)
                self.assertEqual(os.path.exists(self.path + ".intents"), bool(unknown))


class FailClosedTest(RecordCase):
    def gate(self, recorder: SessionRecorder, store: Store | None = None) -> Gate:
        return Gate((store or Store()).tools(), STORE_POLICY, confirm=approve, recorder=recorder)

    def test_full_disk_no_write_runs(self) -> None:
        directory = small_tmpfs(self)
        path = os.path.join(directory, "s.jsonl")
        store = Store()
        with SessionRecorder.open(path, sealed=True) as recorder:
            gate = self.gate(recorder, store)
            gate.call("get_order", {"order_id": 1})
            filler = fill(directory)
            error = FAILED + f"cannot write {path}.intents: No space left on device"
            for order_id in (1, 2, 1, 2):
                self.assertEqual(gate.call("cancel_order", {"order_id": order_id}), {"ok": False, "error": error})
            os.unlink(filler)  # space is back; the gate stays stopped
            self.assertEqual(gate.call("get_order", {"order_id": 2}), {"ok": False, "error": error})
            self.assertEqual((gate.stop_reason, gate.record_error, gate.steps),
                             ("record", error[len(FAILED):], 2))
        self.assertEqual(store.runs, ["get_order"])
        self.assertEqual([r[1] for r in self.records(path)], ["get_order"])

    def test_full_disk_while_recording_a_result(self) -> None:
        directory = small_tmpfs(self)
        path = os.path.join(directory, "s.jsonl")
        with SessionRecorder.open(path, sealed=True) as recorder:
            gate = Gate({"read": lambda: {"text": "x" * 30000}}, Policy("a", frozenset({"read"})),
                        recorder=recorder, read_cache=False)
            gate.call("read", {})
            filler = fill(directory)
            error = {"ok": False, "error": FAILED + f"cannot write {path}: No space left on device"}
            self.assertEqual(gate.call("read", {}), error)
            os.unlink(filler)
            self.assertEqual(gate.call("read", {}), error)
        with open(path, "rb") as handle:
            self.assertEqual(handle.read().count(b"\n"), 1)  # no half line
        self.assertEqual(len(self.records(path)), 1)

    def test_simulated_full_disk(self) -> None:
        store = Store()
        with SessionRecorder.open(self.path, sealed=True) as recorder:
            gate = self.gate(recorder, store)
            gate.call("get_order", {"order_id": 1})
            recorder._handle = FullDiskHandle(recorder._handle)  # type: ignore[attr-defined]
            error = {"ok": False, "error": FAILED + f"cannot write {self.path}: No space left on device"}
            self.assertEqual(gate.call("get_order", {"order_id": 2}), error)  # the read ran, its record failed
            self.assertEqual(gate.call("cancel_order", {"order_id": 2}), error)
        self.assertEqual(store.runs, ["get_order", "get_order"])
        self.assertEqual(len(self.records()), 1)

    def test_write_that_ran_but_was_not_recorded_is_an_unknown_outcome(self) -> None:
        store = Store()
        with SessionRecorder.open(self.path) as recorder:
            gate = self.gate(recorder, store)
            recorder._handle = FullDiskHandle(recorder._handle)  # type: ignore[attr-defined]
            response = gate.call("cancel_order", {"order_id": 2})  # no OSError reaches the host
            self.assertEqual(response["error"], FAILED + f"cannot write {self.path}: No space left on device")
        self.assertEqual((store.runs, self.records()), (["cancel_order"], []))
        with SessionRecorder.open(self.path) as recorder:
            gate = self.gate(recorder, store)
            self.assertEqual(gate.unknown_outcomes, ('cancel_order {"order_id":2}',))
            self.assertTrue(gate.call("cancel_order", {"order_id": 2})["error"].startswith("outcome unknown: "))
        self.assertEqual(store.runs, ["cancel_order"])

    def test_record_deleted_or_replaced_while_held(self) -> None:
        for how in ("delete", "rename"):
            with self.subTest(how=how):
                store = Store()
                with SessionRecorder.open(self.path) as recorder:
                    gate = self.gate(recorder, store)
                    gate.call("get_order", {"order_id": 1})
                    if how == "delete":
                        os.unlink(self.path)
                    else:
                        other = os.path.join(self.directory, "other.jsonl")
                        with open(other, "wb"):
                            pass
                        os.replace(other, self.path)
                    error = {"ok": False, "error": FAILED + f"{self.path} was deleted or replaced while being recorded"}
                    self.assertEqual(gate.call("get_order", {"order_id": 2}), error)
                    self.assertEqual(gate.call("cancel_order", {"order_id": 2}), error)
                    self.assertEqual(gate.stop_reason, "record")
                self.assertEqual(store.runs, ["get_order"])
                if os.path.exists(self.path):
                    os.unlink(self.path)

    def test_closed_recorder(self) -> None:
        store = Store()
        recorder = SessionRecorder.open(self.path)
        gate = self.gate(recorder, store)
        recorder.close()
        self.assertEqual(gate.call("get_order", {"order_id": 1}),
                         {"ok": False, "error": FAILED + f"recorder for {self.path} is closed"})
        self.assertEqual(store.runs, [])


class InterruptTest(RecordCase):
    def test_interrupted_write_is_recorded_reraised_and_not_run_again(self) -> None:
        runs: list[int] = []

        def cancel_order(order_id: int) -> dict[str, Any]:
            runs.append(order_id)
            raise KeyboardInterrupt

        with SessionRecorder.open(self.path) as recorder:
            gate = Gate({"cancel_order": cancel_order}, STORE_POLICY, confirm=approve, recorder=recorder)
            with self.assertRaises(KeyboardInterrupt):
                gate.call("cancel_order", {"order_id": 2})
            self.assertTrue(gate.call("cancel_order", {"order_id": 2})["error"].startswith("outcome unknown: "))
        self.assertEqual(runs, [2])
        self.assertEqual(self.records()[0][3], {"ok": False, "error": "interrupted: KeyboardInterrupt"})
        with SessionRecorder.open(self.path) as recorder:  # and after a restart
            gate = Gate({"cancel_order": cancel_order}, STORE_POLICY, confirm=approve, recorder=recorder)
            self.assertEqual(gate.unknown_outcomes, ('cancel_order {"order_id":2}',))

    def test_interrupted_read_runs_again(self) -> None:
        calls = [KeyboardInterrupt, None]

        def get_order(order_id: int) -> dict[str, Any]:
            problem = calls.pop(0)
            if problem is not None:
                raise problem
            return {"status": "shipped"}

        with SessionRecorder.open(self.path) as recorder:
            gate = Gate({"get_order": get_order}, STORE_POLICY, recorder=recorder)
            with self.assertRaises(KeyboardInterrupt):
                gate.call("get_order", {"order_id": 1})
            self.assertEqual(gate.call("get_order", {"order_id": 1}), {"status": "shipped"})
        self.assertEqual([r[3] for r in self.records()],
                         [{"ok": False, "error": "interrupted: KeyboardInterrupt"}, {"status": "shipped"}])

    def test_approver_exiting(self) -> None:
        def confirm(tool: str, args: dict[str, Any]) -> bool:
            raise SystemExit(3)

        store = Store()
        with SessionRecorder.open(self.path) as recorder:
            gate = Gate(store.tools(), STORE_POLICY, confirm=confirm, recorder=recorder)
            with self.assertRaises(SystemExit):
                gate.call("cancel_order", {"order_id": 2})
        self.assertEqual((store.runs, self.records()), ([], [
            (0, "cancel_order", {"order_id": 2}, {"ok": False, "error": "interrupted: SystemExit"})]))

    def test_reentrant_identical_call_is_refused_not_deadlocked(self) -> None:
        gate: Gate
        inner: list[dict[str, Any]] = []

        def cancel_order(order_id: int) -> dict[str, Any]:
            inner.append(gate.call("cancel_order", {"order_id": order_id}))
            return {"ok": True}

        def lookup(order_id: int) -> dict[str, Any]:
            inner.append(gate.call("lookup", {"order_id": order_id}))
            return {"status": "shipped"}

        policy = Policy("a", frozenset({"cancel_order", "lookup"}), frozenset({"cancel_order"}))
        gate = Gate({"cancel_order": cancel_order, "lookup": lookup}, policy, confirm=approve, read_cache=True)
        outer: list[dict[str, Any]] = []
        worker = threading.Thread(target=lambda: outer.extend(
            [gate.call("cancel_order", {"order_id": 1}), gate.call("lookup", {"order_id": 1})]), daemon=True)
        worker.start()
        worker.join(10)
        self.assertFalse(worker.is_alive(), "deadlocked")
        self.assertEqual(outer, [{"ok": True}, {"status": "shipped"}])
        self.assertEqual(inner, [
            {"ok": False, "error": "re-entrant call: cancel_order is already running this identical call"},
            {"ok": False, "error": "re-entrant call: lookup is already running this identical call"}])


class NestingTest(RecordCase):
    def test_result_nested_too_deeply_is_a_recorded_error(self) -> None:
        def deep(levels: int) -> dict[str, Any]:
            value: Any = []
            for _ in range(levels - 2):  # the result object and `levels - 1` arrays
                value = [value]
            return {"value": value}

        with SessionRecorder.open(self.path, sealed=True) as recorder:
            gate = Gate({"deep": deep}, Policy("a", frozenset({"deep"})), recorder=recorder)
            self.assertEqual(gate.call("deep", {"levels": MAX_NESTING})["value"], deep(MAX_NESTING)["value"])
            for levels in (MAX_NESTING + 1, 900, 5000):
                self.assertEqual(gate.call("deep", {"levels": levels}), {
                    "ok": False, "error": f"ValueError: tool result has no JSON form: nested deeper than "
                                          f"{MAX_NESTING} levels"})
        self.assertEqual(len(self.records()), 4)  # every reader can read the record back

    def test_a_tuple_or_a_subclass_anywhere_is_measured_alike(self) -> None:
        # the one-walk copy leaves these to the two walks: the limit and the message are the same
        class Listing(list[Any]):
            pass

        def deep(levels: int, kind: str) -> dict[str, Any]:
            value: Any = (1, 2) if kind == "tuple" else Listing([1])
            for _ in range(levels - 2):
                value = [value]
            return {"value": value}

        gate = Gate({"deep": deep}, Policy("a", frozenset({"deep"})))
        for kind in ("tuple", "subclass"):
            with self.subTest(kind=kind):
                self.assertEqual(gate.call("deep", {"levels": MAX_NESTING, "kind": kind}), guard._copy_json(
                    deep(MAX_NESTING, kind)))
                self.assertEqual(gate.call("deep", {"levels": MAX_NESTING + 1, "kind": kind}), {
                    "ok": False, "error": f"ValueError: tool result has no JSON form: nested deeper than "
                                          f"{MAX_NESTING} levels"})

    def test_args_nested_too_deeply_are_a_host_error(self) -> None:
        value: Any = 1
        for _ in range(MAX_NESTING):
            value = [value]
        gate = Gate({"echo": lambda value: value}, Policy("a", frozenset({"echo"})))
        with self.assertRaises(ValueError) as caught:
            gate.call("echo", {"value": value})
        self.assertEqual(str(caught.exception), f"args have no JSON form: nested deeper than {MAX_NESTING} levels")


class RecordBytesTest(RecordCase):
    def test_the_gates_record_is_the_recorders_own_encoding_byte_for_byte(self) -> None:
        # the gate hands the recorder the args (from the call's identity) and the response already encoded
        tool = 'odd,"tool":name'
        args = {"tool": ',"tool":"x"', "n": [1, 2.5, {"é": None}], "": True}
        def echo(**given: Any) -> dict[str, Any]:
            return {"echo": given, "text": "\u2028 \"quoted\" \U0001f600", "float": 1e-7, "big": 2**70}

        for sealed in (True, False):
            with self.subTest(sealed=sealed):
                through_gate, direct = (os.path.join(self.directory, f"{name}-{sealed}.jsonl")
                                        for name in ("gate", "direct"))
                with SessionRecorder.open(through_gate, sealed=sealed, meta_keys=("outcome",)) as recorder:
                    gate = Gate({tool: echo}, Policy("a", frozenset({tool})), recorder=recorder)
                    self.assertEqual(gate.call(tool, args)["echo"], args)
                with SessionRecorder.open(direct, sealed=sealed, meta_keys=("outcome",)) as recorder:
                    recorder.append(tool, args, echo(**args), meta={"outcome": "ran"})
                with open(through_gate, "rb") as first, open(direct, "rb") as second:
                    self.assertEqual(first.read(), second.read())


class DoneTest(unittest.TestCase):
    def test_set_once_lets_every_waiter_go_and_again_does_nothing(self) -> None:
        done = idempotency.Done()
        self.assertFalse(done.is_set())
        woken: list[bool] = []
        waiters = [threading.Thread(target=lambda: woken.append(done.wait())) for _ in range(3)]
        for waiter in waiters:
            waiter.start()
        for waiter in waiters:
            waiter.join(0.05)
        self.assertEqual(woken, [])  # all three still wait
        done.set()
        done.set()
        for waiter in waiters:
            waiter.join(10)
        self.assertEqual(woken, [True, True, True])
        self.assertTrue(done.is_set())
        self.assertTrue(done.wait())  # set: returns at once


class ConsoleApproverTest(unittest.TestCase):
    def ask(self, answer: str, args: dict[str, Any] | None = None) -> tuple[bool, str]:
        output = io.StringIO()
        approved = ConsoleApprover(io.StringIO(answer), output)("cancel_order", args or {"order_id": 1})
        return approved, output.getvalue()

    def test_yes_approves(self) -> None:
        for answer in ("y\n", "yes\n", " YES \n", "Y"):
            with self.subTest(answer=answer):
                self.assertTrue(self.ask(answer)[0])

    def test_anything_else_refuses(self) -> None:
        for answer in ("n\n", "\n", "yes please\n", "ok\n", "n"):
            with self.subTest(answer=answer):
                self.assertFalse(self.ask(answer)[0])

    def test_prompt_shows_the_exact_call_in_ascii(self) -> None:
        self.assertEqual(self.ask("n\n", {"reason": "caf\u00e9\u202e", "order_id": 1}),
                         (False, 'approve cancel_order {"order_id":1,"reason":"caf\\u00e9\\u202e"}? [y/N] '))

    def test_end_of_input_is_no_way_to_ask_and_ends_the_prompt_line(self) -> None:
        output = io.StringIO()
        with self.assertRaises(CannotConfirmError) as caught:
            ConsoleApprover(io.StringIO(""), output)("cancel_order", {"order_id": 1})
        self.assertEqual(str(caught.exception), "no answer: the input ended")
        self.assertEqual(output.getvalue(), 'approve cancel_order {"order_id":1}? [y/N] \n')

    def test_the_tool_name_is_escaped(self) -> None:
        for tool, shown in [("cancel\x1b[2J\x1b]0;ok\x07order", '"cancel\\u001b[2J\\u001b]0;ok\\u0007order"'),
                            ("cancel order\ny", '"cancel order\\ny"'), ("caf\u00e9\u202e", '"caf\\u00e9\\u202e"'),
                            ("", '""'), ("fs/read_file-2.v1:x", "fs/read_file-2.v1:x")]:
            with self.subTest(tool=tool):
                output = io.StringIO()
                ConsoleApprover(io.StringIO("n\n"), output)(tool, {})
                self.assertEqual(output.getvalue(), f"approve {shown} {{}}? [y/N] ")

    def test_gate_with_console_approver(self) -> None:
        output = io.StringIO()
        gate, tools = make_gate(confirm=ConsoleApprover(io.StringIO("y\nn\n"), output))
        self.assertEqual(gate.call("cancel_order", {"order_id": 1}), {"ok": True, "order_id": 1})
        self.assertEqual(gate.call("cancel_order", {"order_id": 2}), DECLINED)
        self.assertEqual(gate.call("cancel_order", {"order_id": 3}), NEEDS_CONFIRMATION)  # input ended
        self.assertEqual(output.getvalue(), 'approve cancel_order {"order_id":1}? [y/N] '
                                            'approve cancel_order {"order_id":2}? [y/N] '
                                            'approve cancel_order {"order_id":3}? [y/N] \n')
        self.assertEqual(tools.runs, [("cancel_order", {"order_id": 1})])


if __name__ == "__main__":
    unittest.main()


class CopyTest(unittest.TestCase):
    """The gate's copies of JSON values (`_copy_json`): independent at every depth, other values deep-copied."""

    def test_a_copy_shares_nothing_mutable(self) -> None:
        value = {"a": [1, {"b": [2, 3]}, "s"], "c": {"d": None, "e": 1.5, "f": True}}
        copied = guard._copy_json(value)
        self.assertEqual(copied, value)
        copied["a"][1]["b"].append(4)
        copied["c"]["d"] = "x"
        self.assertEqual(value, {"a": [1, {"b": [2, 3]}, "s"], "c": {"d": None, "e": 1.5, "f": True}})

    def test_other_values_fall_back_to_deepcopy(self) -> None:
        inner = [1]
        value = {"t": (inner, 2)}
        copied = guard._copy_json(value)
        self.assertEqual(copied, value)
        self.assertIsNot(copied["t"][0], inner)

    def test_a_tool_that_changes_its_result_later_changes_neither_the_answer_nor_the_record(self) -> None:
        kept: list[dict[str, Any]] = []

        def tool() -> dict[str, Any]:
            result = {"items": [{"n": 1}]}
            kept.append(result)
            return result

        gate = Gate({"t": tool}, Policy("a", frozenset({"t"})))
        answer = gate.call("t", {})
        kept[0]["items"][0]["n"] = 2
        self.assertEqual(answer, {"items": [{"n": 1}]})


class HandedOutTest(unittest.TestCase):
    def test_a_caller_that_changes_its_answer_changes_no_later_one(self) -> None:
        # a held response (the read cache's, a write's for its repeat) and a refusal's are handed out as copies
        def tools() -> dict[str, Any]:
            return {"lookup": lambda n: {"items": [n]}, "cancel": lambda n: {"cancelled": [n]}}

        policy = Policy("a", frozenset({"lookup", "cancel"}), frozenset({"cancel"}))
        cases = [("lookup", True, {"items": [1]}), ("cancel", False, {"cancelled": [1]}),
                 ("missing", False, {"ok": False, "error": "tool not allowed: missing"})]
        for tool, read_cache, expected in cases:
            with self.subTest(tool=tool):
                gate = Gate(tools(), policy, read_cache=read_cache, confirm=lambda tool, args: True)
                first = gate.call(tool, {"n": 1})
                self.assertEqual(first, expected)
                first.clear()
                self.assertEqual(gate.call(tool, {"n": 1}), expected)

    def test_a_read_run_without_the_read_cache_hands_out_the_gates_own_copy(self) -> None:
        result = {"items": [1]}
        gate = Gate({"lookup": lambda: result}, Policy("a", frozenset({"lookup"})))
        answer = gate.handle("lookup", {})
        self.assertEqual((answer.response, answer.outcome), ({"items": [1]}, "ran"))
        self.assertIsNot(answer.response, result)
        self.assertIsNot(answer.response["items"], result["items"])


class HandleAsyncTest(unittest.TestCase):
    """`Gate.handle_async`: the gate's decisions and record, the tool awaited in the caller's event loop."""

    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory)
        self.record = os.path.join(self.directory, "r.jsonl")
        self.runs: list[tuple[str, dict[str, Any], int]] = []

    def tool(self, name: str, result: Any = None, *, pause: bool = False) -> Any:
        async def run(args: dict[str, Any]) -> Any:
            self.runs.append((name, args, threading.get_ident()))
            if pause:
                await asyncio.sleep(0.01)
            if isinstance(result, BaseException):
                raise result
            return result if result is not None else {"ok": True, **args}
        return run

    def outcomes(self) -> list[tuple[str, str]]:
        with open(self.record, "rb") as handle:
            return [(r.tool, (r.meta or {})["outcome"]) for r in read_session(handle, self.record)]

    def test_every_gate_behaviour_with_the_tool_run_in_the_loop(self) -> None:
        async def session(gate: Gate) -> list[tuple[dict[str, Any], str]]:
            answers = []
            for tool, args, key, result in (
                    ("get_order", {"order_id": 1}, "c1", None),
                    ("delete_everything", {}, "c2", None),  # not allowed
                    ("cancel_order", {"order_id": 1}, "c3", None),  # a write: confirmed
                    ("cancel_order", {"order_id": 1}, "c3", None),  # its repeat: answered from the first
                    ("cancel_order", {"order_id": 2}, "c4", None),  # declined
                    ("fail", {}, "c5", ValueError("database is down"))):
                answer = await gate.handle_async(tool, args, self.tool(tool, result), key=key, call_id=key)
                answers.append((answer.response, answer.outcome))
            return answers

        with SessionRecorder.open(self.record, sealed=True) as recorder:
            gate = Gate(Tools().mapping(), POLICY, confirm=lambda tool, args: args["order_id"] == 1, recorder=recorder)
            answers = asyncio.run(session(gate))
        self.assertEqual(answers, [
            ({"ok": True, "order_id": 1}, "ran"), ({"ok": False, "error": "tool not allowed: delete_everything"},
                                                   "refused"),
            ({"ok": True, "order_id": 1}, "ran"), ({"ok": True, "order_id": 1}, "cached"), (DECLINED, "refused"),
            ({"ok": False, "error": "ValueError: database is down"}, "ran")])
        self.assertEqual([(name, thread) for name, _, thread in self.runs],  # no worker thread
                         [("get_order", threading.get_ident()), ("cancel_order", threading.get_ident()),
                          ("fail", threading.get_ident())])
        self.assertEqual(self.outcomes(), [("get_order", "ran"), ("delete_everything", "refused"),
                                           ("cancel_order", "ran"), ("cancel_order", "cached"),
                                           ("cancel_order", "refused"), ("fail", "ran")])
        self.assertFalse(os.path.exists(self.record + ".intents"))

    def test_a_cancelled_write_is_an_unknown_outcome(self) -> None:
        async def session(gate: Gate) -> tuple[bool, dict[str, Any]]:
            task = asyncio.ensure_future(gate.handle_async("cancel_order", {"order_id": 1},
                                                           self.tool("cancel_order", pause=True), key="c1"))
            await asyncio.sleep(0.001)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                cancelled = True
            retry = await gate.handle_async("cancel_order", {"order_id": 1}, self.tool("cancel_order"), key="c2")
            return cancelled, retry.response

        with SessionRecorder.open(self.record, sealed=True) as recorder:
            gate = Gate(Tools().mapping(), POLICY, confirm=lambda tool, args: True, recorder=recorder)
            cancelled, retry = asyncio.run(session(gate))
        self.assertTrue(cancelled)
        self.assertTrue(retry["error"].startswith("outcome unknown: an identical cancel_order call started"), retry)
        self.assertEqual(self.outcomes(), [("cancel_order", "unknown"), ("cancel_order", "refused")])
        self.assertEqual(len(self.runs), 1)

    def test_an_identical_call_waits_for_the_running_one_and_a_reentrant_one_is_refused(self) -> None:
        async def session(gate: Gate) -> list[Any]:
            first = self.tool("get_order", pause=True)
            both = await asyncio.gather(gate.handle_async("get_order", {"order_id": 1}, first),
                                        gate.handle_async("get_order", {"order_id": 1}, first))

            async def reentrant(args: dict[str, Any]) -> Any:
                return (await gate.handle_async("get_order", {"order_id": 2}, reentrant)).response

            again = await gate.handle_async("get_order", {"order_id": 2}, reentrant)
            return [(answer.response, answer.outcome) for answer in both] + [again.response]

        gate = Gate(Tools().mapping(), POLICY, read_cache=True)
        self.assertEqual(asyncio.run(session(gate)), [
            ({"ok": True, "order_id": 1}, "ran"), ({"ok": True, "order_id": 1}, "cached"),
            {"ok": False, "error": "re-entrant call: get_order is already running this identical call"}])
        self.assertEqual(len(self.runs), 1)
