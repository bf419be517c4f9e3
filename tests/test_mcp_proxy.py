"""The MCP proxy on the wire: a real proxy process between raw JSON-RPC lines and the tiny test server.

These tests need nothing beyond the standard library; tests/test_mcp_real.py drives the proxy with
the official MCP SDK client against real servers.
"""

from __future__ import annotations

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

from tests.support import integration
from tests.test_cli import run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "mcp_servers", "tiny_server.py")
POLICY = {"agent": "tiny", "allowed_tools": ["echo", "write_note", "ask_client", "noisy", "crash", "needs_input", "forge"],
          "write_tools": ["write_note"]}


def initialize(version: str = "2025-11-25", capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": capabilities or {},
                       "clientInfo": {"name": "raw", "version": "1"}}}


def call(message_id: Any, tool: str, **args: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message_id, "method": "tools/call", "params": {"name": tool, "arguments": args}}


def subscribe(message_id: Any, uri: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message_id, "method": "resources/subscribe", "params": {"uri": uri}}


def text_result(message_id: Any, text: str, error: bool) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message_id, "result": {"content": [{"type": "text", "text": text}],
                                                           "isError": error}}


class Proxy:
    """One proxy process over the tiny server, spoken to line by line."""

    def __init__(self, directory: str, *extra: str, server_args: tuple[str, ...] = (),
                 rules: dict[str, Any] | None = None, server: list[str] | None = None) -> None:
        """`rules` are fields over POLICY's; `server` replaces the tiny server (and `server_args`)."""
        policy = os.path.join(directory, "policy.json")
        with open(policy, "w", encoding="utf-8") as out:
            json.dump({**POLICY, **(rules or {})}, out)
        self.record = os.path.join(directory, "record.jsonl")
        self.policy = policy
        self.stderr = open(os.path.join(directory, "stderr.txt"), "w+", encoding="utf-8")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "toolreplay", "mcp-proxy", "--policy", policy, "--record", self.record, *extra,
             "--", *(server or [sys.executable, TINY, *server_args])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": ROOT})
        self.watchdog = threading.Timer(60, self.process.kill)
        self.watchdog.start()

    def send(self, message: Any) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def line(self) -> bytes:
        assert self.process.stdout is not None
        return self.process.stdout.readline()

    def recv(self) -> Any:
        return json.loads(self.line())

    def ask(self, message: Any) -> Any:
        self.send(message)
        return self.recv()

    def close(self) -> tuple[int, bytes, str]:
        """Close the client side; return the exit code, what was left on stdout and the stderr text."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        rest = self.process.stdout.read()
        code = self.process.wait()
        self.watchdog.cancel()
        self.process.stdout.close()
        self.stderr.seek(0)
        text = self.stderr.read()
        self.stderr.close()
        return code, rest, text

    def kill(self) -> None:
        """Stop a proxy a failed test left running."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        self.watchdog.cancel()


@integration
class ProxyWireTest(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()

    def start(self, *extra: str, server_args: tuple[str, ...] = (), version: str = "2025-11-25",
              capabilities: dict[str, Any] | None = None, rules: dict[str, Any] | None = None) -> Proxy:
        proxy = Proxy(self.directory, *extra, server_args=server_args, rules=rules)
        self.addCleanup(proxy.kill)
        reply = proxy.ask(initialize(version, capabilities))
        self.assertEqual(reply["result"]["protocolVersion"], version)
        proxy.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return proxy

    def test_listing_shows_only_allowed_tools(self) -> None:
        proxy = self.start()
        reply = proxy.ask({"jsonrpc": "2.0", "id": "list", "method": "tools/list"})
        self.assertEqual([tool["name"] for tool in reply["result"]["tools"]],
                         ["echo", "write_note", "ask_client", "noisy", "forge", "needs_input", "crash"])
        self.assertEqual(proxy.close(), (0, b"", ""))

    def test_other_messages_pass_through_byte_for_byte(self) -> None:
        proxy = self.start()
        # An unknown method with unknown fields: the server's error comes back unchanged.
        proxy.send(b'{"jsonrpc":"2.0","id":[1,{"a":null}],"method":"x/y","params":{},"extra":true}\n')
        self.assertEqual(proxy.line(), b'{"jsonrpc":"2.0","id":[1,{"a":null}],"error":{"code":-32601,'
                                       b'"message":"Method not found"}}\n')
        proxy.send(b'{"jsonrpc":"2.0","id":-7,"method":"ping"}\n')
        self.assertEqual(proxy.line(), b'{"jsonrpc":"2.0","id":-7,"result":{}}\n')
        self.assertEqual(proxy.close(), (0, b"", ""))

    def test_ids_of_any_type_are_answered_with_the_same_id(self) -> None:
        proxy = self.start()
        for message_id in ("call-1", 2.5, -1, 12345678901234567890, None, {"k": [1]}):
            with self.subTest(id=message_id):
                reply = proxy.ask(call(message_id, "echo", text="hi"))
                self.assertEqual(reply, text_result(message_id, 'echo {"text": "hi"}', False))
        self.assertEqual(proxy.close()[0], 0)

    def test_refusals_are_tool_results_with_is_error(self) -> None:
        proxy = self.start()
        self.assertEqual(proxy.ask(call(1, "delete_all")),
                         text_result(1, "toolreplay: tool not allowed: delete_all", True))
        # A write without a client that can ask a person: refused, fail closed.
        self.assertEqual(proxy.ask(call(2, "write_note", text="x")),
                         text_result(2, "toolreplay: confirmation required", True))
        self.assertEqual(proxy.close()[0], 0)

    def test_confirmation_through_elicitation(self) -> None:
        notes = os.path.join(self.directory, "notes.txt")
        proxy = self.start(server_args=("--notes", notes), capabilities={"elicitation": {}})
        for answer, text, error in (
                ({"action": "accept", "content": {"approve": True}}, 'write_note {"text": "yes"}', False),
                ({"action": "accept", "content": {"approve": False}}, "toolreplay: confirmation declined", True),
                ({"action": "decline"}, "toolreplay: confirmation declined", True),
                ({"action": "cancel"}, "toolreplay: confirmation declined", True),
                ("not an answer", "toolreplay: confirmation required", True)):
            with self.subTest(answer=answer):
                proxy.send(call(7, "write_note", text="yes" if not error else "no"))
                request = proxy.recv()
                self.assertEqual(request["method"], "elicitation/create")
                self.assertRegex(request["id"], "^toolreplay-confirm-[0-9a-f]{32}$")
                self.assertIn('"write_note" with arguments {"text":', request["params"]["message"])
                proxy.send({"jsonrpc": "2.0", "id": request["id"], "result": answer})
                self.assertEqual(proxy.recv(), text_result(7, text, error))
        self.assertEqual(proxy.close()[0], 0)
        with open(notes, encoding="utf-8") as written:
            self.assertEqual(written.read(), '{"text": "yes"}\n')

    def test_cancelling_a_call_that_waits_for_a_person(self) -> None:
        proxy = self.start(capabilities={"elicitation": {}})
        proxy.send(call(8, "write_note", text="x"))
        request = proxy.recv()
        proxy.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 8}})
        self.assertEqual(proxy.recv(), {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {
            "requestId": request["id"], "reason": "the tool call was cancelled"}})
        # A late answer to the withdrawn question goes nowhere: nothing runs, and call 8 gets no reply.
        proxy.send({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept",
                                                                      "content": {"approve": True}}})
        self.assertEqual(proxy.ask(call(9, "echo")), text_result(9, "echo {}", False))
        self.assertEqual(proxy.close(), (0, b"", ""))
        self.assertCountEqual(self.responses(proxy), [
            {"ok": False, "error": "cancelled: the client cancelled the call while it waited for a person"},
            text_result(9, "echo {}", False)["result"]])

    def responses(self, proxy: Proxy) -> list[dict[str, Any]]:
        with open(proxy.record, encoding="utf-8") as record:
            return [json.loads(line)["response"] for line in record]

    def test_a_cancelled_call_is_released_forwarded_and_recorded(self) -> None:
        proxy = self.start(rules={"allowed_tools": [*POLICY["allowed_tools"], "hold"]})
        for number in (1, 4):  # the identical read again: it was released, so it runs again
            proxy.send(call(number, "hold"))
            self.assertEqual(proxy.ask(call(2, "echo", text="meanwhile")),
                             text_result(2, 'echo {"text": "meanwhile"}', False))
            # the server gets it too: it stops holding, and never answers the call
            proxy.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": number}})
            self.assertEqual(proxy.ask(call(number + 1, "echo")), text_result(number + 1, "echo {}", False))
        self.assertEqual(proxy.close(), (0, b"", ""))
        cancelled = {"ok": False, "error": "cancelled: the client cancelled the call while the server ran it"}
        responses = self.responses(proxy)
        self.assertEqual((len(responses), responses.count(cancelled)), (6, 2))

    def test_a_cancelled_write_has_an_unknown_outcome(self) -> None:
        proxy = self.start("--mutator", "hold", rules={"allowed_tools": [*POLICY["allowed_tools"], "hold"]})
        proxy.send(call(1, "hold"))
        self.assertEqual(proxy.ask(call(9, "echo")), text_result(9, "echo {}", False))  # calls keep their order:
        proxy.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})  # 1 is sent
        unknown = ("toolreplay: outcome unknown: an identical hold call started earlier and its result was never "
                   "recorded; a person must check whether it took effect, then delete its line from "
                   "record.jsonl.intents")
        self.assertEqual(proxy.ask(call(2, "hold")), text_result(2, unknown, True))
        self.assertEqual(proxy.close(), (0, b"", ""))
        self.assertEqual(self.responses(proxy)[1:], [
            {"ok": False, "error": "cancelled: the client cancelled the call while the server ran it; whether "
                                   "the write took effect is unknown"}, {"ok": False, "error": unknown[12:]}])
        with open(proxy.record + ".intents", encoding="utf-8") as intents:  # still open after the session
            self.assertEqual(json.loads(intents.read())["tool"], "hold")

    def test_pipelined_calls_reach_the_server_in_the_order_sent(self) -> None:
        notes = os.path.join(self.directory, "notes.txt")
        proxy = self.start("--repeatable", "write_note", server_args=("--notes", notes), rules={"write_tools": []})
        numbers = range(1, 61)
        proxy.send(b"".join(json.dumps(call(n, "write_note", n=n)).encode() + b"\n" for n in numbers))
        self.assertEqual(sorted(proxy.recv()["id"] for _ in numbers), list(numbers))  # answered in any order
        self.assertEqual(proxy.close(), (0, b"", ""))
        with open(notes, encoding="utf-8") as written:  # the server's own order
            self.assertEqual([json.loads(line)["n"] for line in written], list(numbers))

    def test_valid_json_passes_through_whatever_its_content(self) -> None:
        proxy = self.start(server_args=("--odd",), rules={"allowed_tools": [*POLICY["allowed_tools"], "odd"]})
        proxy.send({"jsonrpc": "2.0", "id": "l", "method": "tools/list"})
        listing = proxy.line()  # changed (filtered), so written anew: the odd values as they came
        self.assertIn(b'"description":"Echo the text back. \\ud800"', listing)
        self.assertIn(b'"maxLength":1e400', listing)
        self.assertEqual(json.loads(listing)["result"]["tools"][-1]["name"], "odd")
        proxy.send(call(1, "odd"))  # a reply the proxy need not change: the bytes the server sent
        self.assertEqual(proxy.line(), b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":'
                                       b'"x\\ud800y"}],"structuredContent":{"n":1e400},"isError":false}}\n')
        self.assertEqual(proxy.close(), (0, b"", ""))
        # the record format holds neither value: the record says so in what it holds instead
        self.assertEqual(self.responses(proxy), [{"content": [{"type": "text", "text": "x\ufffdy"}],
                                                  "structuredContent": {"n": "1e400"}, "isError": False}])
        self.assertEqual(run("verify", proxy.record), (0, "chain: intact\n", ""))

    def test_pipelined_identical_writes_run_once_and_all_get_answers(self) -> None:
        notes = os.path.join(self.directory, "notes.txt")
        proxy = self.start("--mutator", "write_note", server_args=("--notes", notes), rules={"write_tools": []})
        for round_ in range(5):
            numbers = range(round_ * 20, round_ * 20 + 20)
            proxy.send(b"".join(json.dumps(call(n, "write_note", round=round_)).encode() + b"\n" for n in numbers))
            self.assertEqual(sorted(proxy.recv()["id"] for _ in numbers), list(numbers))
        self.assertEqual(proxy.close(), (0, b"", ""))
        with open(notes, encoding="utf-8") as written:
            self.assertEqual([json.loads(line)["round"] for line in written], list(range(5)))

    def test_a_task_augmented_call_is_not_the_plain_call(self) -> None:
        notes = os.path.join(self.directory, "notes.txt")
        proxy = self.start("--mutator", "write_note", server_args=("--notes", notes), rules={"write_tools": []})
        plain = proxy.ask(call(1, "write_note", text="t"))["result"]
        tasked = []
        for number, ttl in ((2, 60000), (3, 60000), (4, 1000)):
            request = call(number, "write_note", text="t")
            request["params"]["task"] = {"ttl": ttl}
            tasked.append(proxy.ask(request)["result"])
        self.assertEqual(plain, text_result(1, 'write_note {"text": "t"}', False)["result"])
        # an identical task request is answered by the first; another ttl is another request
        self.assertEqual(tasked, [{"task": {"taskId": "task-1", "status": "working", "ttl": 60000}}] * 2 + [
            {"task": {"taskId": "task-2", "status": "working", "ttl": 1000}}])
        self.assertEqual(proxy.ask(call(5, "write_note", text="t"))["result"], plain)
        self.assertEqual(proxy.close(), (0, b"", ""))
        with open(notes, encoding="utf-8") as written:
            self.assertEqual(written.read(), '{"text": "t"}\n' * 3)

    def test_an_id_already_in_flight_is_refused(self) -> None:
        proxy = self.start(rules={"allowed_tools": [*POLICY["allowed_tools"], "hold"]})
        proxy.send(call(5, "hold"))
        self.assertEqual(proxy.ask(call(9, "echo")), text_result(9, "echo {}", False))  # 5 reached the server
        in_use = {"jsonrpc": "2.0", "id": 5, "error": {
            "code": -32600, "message": "Invalid Request: the id is already used by a request in flight"}}
        self.assertEqual(proxy.ask({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}), in_use)
        self.assertEqual(proxy.ask(call(5, "echo")), in_use)
        proxy.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}})
        # the server might still answer the cancelled call: its id stays taken
        self.assertEqual(proxy.ask(call(5, "echo")), in_use)
        self.assertEqual(proxy.ask(call(6, "echo")), text_result(6, "echo {}", False))
        self.assertEqual(proxy.close(), (0, b"", ""))

    def test_a_retry_with_input_responses_reaches_the_server(self) -> None:
        proxy = self.start()
        first = proxy.ask(call(1, "needs_input", a=1))["result"]
        self.assertEqual((first["resultType"], sorted(first["inputRequests"])), ("input_required", ["q"]))
        retry = call(2, "needs_input", a=1)
        retry["params"].update(inputResponses={"q": {"action": "accept", "content": {"pick": "b"}}},
                               requestState="round-1")
        self.assertEqual(proxy.ask(retry), text_result(
            2, 'needs_input {"q": {"action": "accept", "content": {"pick": "b"}}}', False))
        # Once answered, the same call goes through the gate again, which answers it from its table.
        self.assertEqual(proxy.ask(call(3, "needs_input", a=1))["result"], first)
        self.assertEqual(proxy.close()[0], 0)
        with open(proxy.record, encoding="utf-8") as record:
            self.assertEqual([json.loads(line)["response"].get("resultType") for line in record],
                             ["input_required", None, "input_required"])

    def test_confirmation_by_round_trip_in_protocol_2026_07_28(self) -> None:
        notes = os.path.join(self.directory, "notes.txt")
        proxy = Proxy(self.directory, server_args=("--notes", notes))  # no initialize in this version
        self.addCleanup(proxy.kill)
        meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}
        for number, (answer, same_call, text, error) in enumerate((
                ({"action": "accept", "content": {"approve": True}}, True, 'write_note {"text": "yes"}', False),
                ({"action": "decline"}, True, "toolreplay: confirmation declined", True),
                ({"action": "accept", "content": {"approve": True}}, False, "toolreplay: confirmation required", True))):
            with self.subTest(answer=answer, same_call=same_call):
                request = call(f"a{number}", "write_note", text="yes" if not error else f"no {number}")
                request["params"]["_meta"] = meta
                asked = proxy.ask(request)["result"]
                self.assertEqual((asked["resultType"], asked.get("requestState")), ("input_required", None))
                (key, question), = asked["inputRequests"].items()
                self.assertEqual((question["method"], question["params"]["mode"]), ("elicitation/create", "form"))
                retry = call(f"b{number}", "write_note", text=request["params"]["arguments"]["text"] + (
                    "" if same_call else " changed"))
                retry["params"].update(_meta=meta, inputResponses={key: answer})
                expected = text_result(f"b{number}", text, error)
                if error:
                    expected["result"] = {**expected["result"], "resultType": "complete"}
                else:
                    expected["result"] = {"resultType": "complete", **expected["result"]}
                self.assertEqual(proxy.ask(retry), expected)
        self.assertEqual(proxy.close()[0], 0)
        with open(notes, encoding="utf-8") as written:
            self.assertEqual(written.read(), '{"text": "yes"}\n')

    def test_a_server_reply_to_no_request_never_reaches_the_client(self) -> None:
        proxy = self.start(capabilities={"elicitation": {}})
        proxy.send(call(1, "write_note", text="x"))
        question = proxy.recv()
        # While call 1 waits for a person, the server forges a "result" for it, then answers call 2.
        self.assertEqual(proxy.ask(call(2, "forge", target=1)), text_result(2, 'forge {"target": 1}', False))
        proxy.send({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "decline"}})
        self.assertEqual(proxy.recv(), text_result(1, "toolreplay: confirmation declined", True))
        self.assertEqual(proxy.close(), (0, b"", "toolreplay mcp-proxy: dropped a response from the server to no "
                                                 "request sent to it\n"))

    def test_server_requests_reach_the_client_and_its_answer_the_server(self) -> None:
        proxy = self.start()
        proxy.send(call(3, "ask_client"))
        self.assertEqual(proxy.recv(), {"jsonrpc": "2.0", "id": "ask-1", "method": "roots/list"})
        proxy.send({"jsonrpc": "2.0", "id": "ask-1", "result": {"roots": [{"uri": "file:///tmp"}]}})
        self.assertEqual(proxy.recv(), text_result(3, 'ask_client {"roots": [{"uri": "file:///tmp"}]}', False))
        self.assertEqual(proxy.close()[0], 0)

    def test_malformed_json_from_either_side(self) -> None:
        proxy = self.start()
        self.assertEqual(proxy.ask(b"{not json\n"),
                         {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
        # The server writes a bad line, then a notification, then the result: the bad line stops at the proxy.
        self.assertEqual(proxy.ask(call(4, "noisy"))["method"], "notifications/message")
        self.assertEqual(proxy.recv(), text_result(4, "noisy {}", False))
        code, rest, stderr = proxy.close()
        self.assertEqual((code, rest), (0, b""))
        self.assertEqual(stderr, "toolreplay mcp-proxy: malformed JSON from the client: "
                                 "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)\n"
                                 "toolreplay mcp-proxy: malformed JSON from the server: "
                                 "Expecting value: line 1 column 1 (char 0)\n")

    def test_a_tools_call_notification_never_reaches_the_server(self) -> None:
        proxy = self.start()
        proxy.send({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "delete_all", "arguments": {}}})
        self.assertEqual(proxy.ask(call(5, "echo")), text_result(5, "echo {}", False))
        code, rest, stderr = proxy.close()
        self.assertEqual(stderr, "toolreplay mcp-proxy: dropped a tools/call sent as a notification (no id): "
                                 "it would bypass the guard\n")

    def test_invalid_tools_call_params(self) -> None:
        proxy = self.start()
        reply = proxy.ask({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "echo",
                                                                                       "arguments": [1]}})
        self.assertEqual(reply, {"jsonrpc": "2.0", "id": 6, "error": {
            "code": -32602, "message": "Invalid params: tools/call needs a tool name and an arguments object"}})
        self.assertEqual(proxy.close()[0], 0)

    def test_batches_when_the_protocol_version_allows_them(self) -> None:
        proxy = self.start(version="2025-03-26")
        replies = proxy.ask([{"jsonrpc": "2.0", "id": 1, "method": "ping"}, call(2, "echo", text="b"),
                             call(3, "delete_all"), {"jsonrpc": "2.0", "method": "notifications/x"}])
        self.assertEqual(sorted(replies, key=lambda reply: reply["id"]), [
            {"jsonrpc": "2.0", "id": 1, "result": {}}, text_result(2, 'echo {"text": "b"}', False),
            text_result(3, "toolreplay: tool not allowed: delete_all", True)])
        self.assertEqual(proxy.close()[0], 0)

    def test_a_listing_in_a_batch_is_filtered_too(self) -> None:
        proxy = self.start(version="2025-03-26")
        replies = proxy.ask([{"jsonrpc": "2.0", "id": "l", "method": "tools/list"},
                             {"jsonrpc": "2.0", "id": "p", "method": "ping"}])
        self.assertEqual(sorted(reply["id"] for reply in replies), ["l", "p"])
        listing = next(reply for reply in replies if reply["id"] == "l")
        self.assertEqual([tool["name"] for tool in listing["result"]["tools"]],
                         ["echo", "write_note", "ask_client", "noisy", "forge", "needs_input", "crash"])
        self.assertEqual(proxy.close()[0], 0)

    def test_budgets_refuse_once_passed(self) -> None:
        proxy = self.start(rules={"limits": {"max_steps": 1}})
        self.assertEqual(proxy.ask(call(1, "echo")), text_result(1, "echo {}", False))
        self.assertEqual(proxy.ask(call(2, "echo", text="b")),
                         text_result(2, "toolreplay: budget exceeded: max_steps", True))
        self.assertEqual(proxy.close()[0], 0)

    def test_a_shadow_rule_and_the_loop_breaker_through_the_proxy(self) -> None:
        proxy = self.start(rules={"rules": [
            {"id": "no-loop", "tools": ["echo"], "effect": "deny", "reason": "the same echo at most twice",
             "unless": [{"identical": "echo", "max": 2}]},
            {"id": "watch", "tools": ["*"], "effect": "ask", "shadow": True, "reason": "an echo",
             "when": [{"arg": "text", "eq": "a"}]}]})
        self.assertEqual([proxy.ask(call(n, "echo", text="a")) for n in (1, 2, 3)],
                         [text_result(1, 'echo {"text": "a"}', False), text_result(2, 'echo {"text": "a"}', False),
                          text_result(3, "toolreplay: denied by rule no-loop: the same echo at most twice", True)])
        self.assertEqual(proxy.close()[0], 0)
        with open(proxy.record, encoding="utf-8") as record:
            metas = [json.loads(line)["meta"] for line in record]
        watch = [{"rule": "watch", "effect": "ask", "reason": "an echo"}]
        self.assertEqual([(meta["outcome"], meta["x-shadow"]) for meta in metas],
                         [("ran", watch), ("ran", watch), ("refused", watch)])

    def test_batches_are_refused_by_later_protocol_versions(self) -> None:
        proxy = self.start(version="2025-06-18")
        self.assertEqual(proxy.ask([call(2, "echo")]), {"jsonrpc": "2.0", "id": None, "error": {
            "code": -32600, "message": "Invalid Request: batches are not supported by the negotiated protocol version"}})
        self.assertEqual(proxy.close()[2], "toolreplay mcp-proxy: rejected a JSON-RPC batch: the negotiated "
                                           "protocol version does not allow batches\n")

    def test_repeated_call_is_answered_once_by_the_gate(self) -> None:
        notes = os.path.join(self.directory, "notes.txt")
        proxy = self.start(server_args=("--notes", notes), capabilities={"elicitation": {}})
        proxy.send(call(1, "write_note", text="once"))
        request = proxy.recv()
        proxy.send({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept",
                                                                      "content": {"approve": True}}})
        self.assertEqual(proxy.recv(), text_result(1, 'write_note {"text": "once"}', False))
        # The same write again: the gate answers it from the first, without asking or running it.
        self.assertEqual(proxy.ask(call(2, "write_note", text="once")),
                         text_result(2, 'write_note {"text": "once"}', False))
        self.assertEqual(proxy.close()[0], 0)
        with open(notes, encoding="utf-8") as written:
            self.assertEqual(written.read(), '{"text": "once"}\n')

    def test_every_read_reaches_the_server_unless_the_read_cache_is_asked_for(self) -> None:
        for extra, answers in (((), ["1", "2", "3"]), (("--read-cache",), ["1", "1", "1"])):
            with self.subTest(extra=extra):
                proxy = self.start(*extra, rules={"allowed_tools": [*POLICY["allowed_tools"], "tick"]})
                self.assertEqual([proxy.ask(call(n, "tick")) for n in range(3)],
                                 [text_result(n, f"tick {answer}", False) for n, answer in enumerate(answers)])
                self.assertEqual(proxy.close()[0], 0)

    def test_a_repeatable_write_runs_each_time_confirmed_on_its_own(self) -> None:
        notes = os.path.join(self.directory, "notes.txt")
        proxy = self.start("--repeatable", "write_note", server_args=("--notes", notes),
                           capabilities={"elicitation": {}})
        for number in (1, 2):
            proxy.send(call(number, "write_note", text="again"))
            request = proxy.recv()
            self.assertEqual(request["method"], "elicitation/create")
            proxy.send({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept",
                                                                          "content": {"approve": True}}})
            self.assertEqual(proxy.recv(), text_result(number, 'write_note {"text": "again"}', False))
        self.assertEqual(proxy.close()[0], 0)
        with open(notes, encoding="utf-8") as written:
            self.assertEqual(written.read(), '{"text": "again"}\n' * 2)

    def test_record_holds_every_call_and_verifies(self) -> None:
        proxy = self.start()
        proxy.ask(call(1, "echo", text="a"))
        proxy.ask(call(2, "delete_all"))
        self.assertEqual(run("verify", proxy.record), (0, "chain: intact\n", ""))  # while the proxy runs
        proxy.ask(call(3, "echo", text="a"))
        self.assertEqual(proxy.close()[0], 0)
        with open(proxy.record, encoding="utf-8") as record:
            records = [json.loads(line) for line in record]
        self.assertEqual([(r["tool"], r["args"], r["response"]) for r in records], [
            ("echo", {"text": "a"}, text_result(1, 'echo {"text": "a"}', False)["result"]),
            ("delete_all", {}, {"ok": False, "error": "tool not allowed: delete_all"}),  # as the library guard
            ("echo", {"text": "a"}, text_result(3, 'echo {"text": "a"}', False)["result"])])
        self.assertEqual(run("verify", proxy.record), (0, "chain: intact\n", ""))
        self.assertEqual(run("replay", proxy.record)[0], 1)  # the repeated echo is a redundant call

    def test_sigterm_ends_both_sides_with_the_record_intact(self) -> None:
        proxy = self.start()
        proxy.ask(call(1, "echo"))
        proxy.process.send_signal(signal.SIGTERM)
        self.assertEqual(proxy.close(), (0, b"", ""))
        self.assertEqual(run("verify", proxy.record), (0, "chain: intact\n", ""))

    def test_server_exit_ends_the_proxy_with_no_restart(self) -> None:
        proxy = self.start("--no-restart")
        self.assertEqual(proxy.ask(call(1, "crash")), text_result(
            1, "toolreplay: ConnectionError: the server ended before it answered", True))
        self.assertEqual(proxy.line(), b"")  # the proxy closed its output
        self.assertEqual(proxy.close(), (1, b"", ""))
        self.assertEqual(run("verify", proxy.record), (0, "chain: intact\n", ""))

    def test_server_exit_during_a_write_is_an_unknown_outcome(self) -> None:
        proxy = self.start("--mutator", "crash", "--no-restart")
        self.assertEqual(proxy.ask(call(1, "crash")), text_result(
            1, "toolreplay: outcome unknown: the server ended before it answered; whether the write took effect "
               "is unknown", True))
        self.assertEqual(proxy.close(), (1, b"", ""))
        with open(proxy.record, encoding="utf-8") as record:
            self.assertEqual(json.loads(record.readline())["meta"]["outcome"], "unknown")
        with open(proxy.record + ".intents", encoding="utf-8") as intents:
            self.assertIn("crash", intents.read())

    def test_a_server_that_exits_is_started_again_and_the_session_goes_on(self) -> None:
        """The tiny server exits during a write (`crash`, a mutator): the write is recorded `unknown`, the
        client is told the tools changed, calls meanwhile are refused as not sent, and after 1 s the
        server is back, sent the client's initialize: the same session goes on."""
        proxy = self.start("--mutator", "crash", "--mutator", "write_note", rules={"write_tools": []})
        proxy.send(call(1, "crash"))
        replies = [proxy.recv(), proxy.recv()]  # the call's answer (recorded first) and the notification
        changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        self.assertEqual(sorted(replies, key=str), sorted([changed, text_result(
            1, "toolreplay: outcome unknown: the server ended before it answered; whether the write took effect "
               "is unknown", True)], key=str))
        self.assertEqual(proxy.ask({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
                         {"jsonrpc": "2.0", "id": 2, "result": {"tools": []}})
        unsent = "toolreplay: server unavailable: the server has ended; it is being started again"
        self.assertEqual(proxy.ask(call(3, "write_note", text="n")), text_result(3, unsent, True))
        self.assertEqual(proxy.ask(call(4, "crash")), text_result(  # its outcome is still unknown
            4, "toolreplay: outcome unknown: an identical crash call started earlier and its result was never "
               "recorded; a person must check whether it took effect, then delete its line from record.jsonl.intents",
            True))
        self.assertEqual(proxy.recv(), changed)  # back
        listing = proxy.ask({"jsonrpc": "2.0", "id": 5, "method": "tools/list"})
        self.assertEqual(len(listing["result"]["tools"]), 7)
        self.assertEqual(proxy.ask(call(6, "write_note", text="n")),  # not sent before: it runs now
                         text_result(6, 'write_note {"text": "n"}', False))
        self.assertEqual(proxy.close(), (0, b"", "toolreplay mcp-proxy: the server ended (server exited): it is "
                                                 "started again\ntoolreplay mcp-proxy: the server is back (started "
                                                 "again): its tools are listed again\n"))
        with open(proxy.record, encoding="utf-8") as record:
            self.assertEqual([(row["tool"], row["meta"]["outcome"]) for row in map(json.loads, record)], [
                ("crash", "unknown"), ("write_note", "refused"), ("crash", "refused"), ("write_note", "ran")])
        self.assertEqual(run("verify", proxy.record), (0, "chain: intact\n", ""))
        self.assertEqual(run("scope", proxy.record, proxy.policy), (1, (  # the write cut short is the finding
            "calls: 4\nfindings: 1\ninformation: 2\n"
            "index 0: unknown-outcome: tool 'crash' has an unknown outcome (it may have run): outcome unknown: the "
            "server ended before it answered; whether the write took effect is unknown\n"
            "index 1: blocked: tool 'write_note' was refused by the guard: server unavailable: the server has ended; "
            "it is being started again\n"
            "index 2: blocked: tool 'crash' was refused by the guard: outcome unknown: an identical crash call "
            "started earlier and its result was never recorded; a person must check whether it took effect, then "
            "delete its line from record.jsonl.intents\n"), ""))

    def test_a_server_started_again_is_subscribed_again_at_the_clients_logging_level(self) -> None:
        """The tiny server with `--resources`: the client subscribes and sets a level once; the server exits,
        and the one started in its place is sent the accepted subscription and the level again, so its
        updates reach the client; the answers to those are the proxy's, never the client's."""
        proxy = self.start(server_args=("--resources",), rules={"allowed_tools": [*POLICY["allowed_tools"], "touch"]})
        self.assertEqual(proxy.ask(subscribe(1, "note://one")), {"jsonrpc": "2.0", "id": 1, "result": {}})
        self.assertEqual(proxy.ask(subscribe(2, "note://nope")), {"jsonrpc": "2.0", "id": 2, "error": {
            "code": -32602, "message": "Unknown resource: note://nope"}})
        self.assertEqual(proxy.ask({"jsonrpc": "2.0", "id": 3, "method": "logging/setLevel",
                                    "params": {"level": "debug"}}), {"jsonrpc": "2.0", "id": 3, "result": {}})
        updated = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "note://one"}}
        touched = text_result(4, 'touch {"level": "debug", "subscribed": ["note://one"]}', False)
        self.assertEqual([proxy.ask(call(4, "touch")), proxy.recv()], [updated, touched])
        proxy.send(call(5, "crash"))
        changed = [{"jsonrpc": "2.0", "method": f"notifications/{what}/list_changed"} for what in ("tools", "resources")]
        self.assertEqual(sorted([proxy.recv() for _ in range(3)], key=str), sorted([*changed, text_result(
            5, "toolreplay: ConnectionError: the server ended before it answered", True)], key=str))
        self.assertEqual([proxy.recv(), proxy.recv()], changed)  # back, after 1 s
        self.assertEqual([proxy.ask(call(6, "touch")), proxy.recv()], [updated, {**touched, "id": 6}])
        self.assertEqual(proxy.close(), (0, b"", "toolreplay mcp-proxy: the server ended (server exited): it is "
                                                 "started again\ntoolreplay mcp-proxy: the server is back (started "
                                                 "again): its tools are listed again\n"))

    def test_a_late_answer_to_the_server_that_exited_never_reaches_the_new_one(self) -> None:
        """The tiny server asks the client (`ask-1`) and exits before the answer; the new one asks with the
        same id: the client sees its request under an id of the proxy's, and the late answer is dropped."""
        proxy = self.start()
        proxy.send(call(1, "ask_client"))
        self.assertEqual(proxy.recv(), {"jsonrpc": "2.0", "id": "ask-1", "method": "roots/list"})
        proxy.send(call(2, "crash"))
        lost = "toolreplay: ConnectionError: the server ended before it answered"
        changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        withdrawn = {"jsonrpc": "2.0", "method": "notifications/cancelled",  # nobody is left to take its answer
                     "params": {"requestId": "ask-1", "reason": "the server that asked ended"}}
        self.assertEqual(sorted([proxy.recv() for _ in range(4)], key=str), sorted(
            [text_result(1, lost, True), text_result(2, lost, True), withdrawn, changed], key=str))
        self.assertEqual(proxy.recv(), changed)  # back
        proxy.send(call(3, "ask_client"))
        renamed = "toolreplay-restart-1-asks-1"
        self.assertEqual(proxy.recv(), {"jsonrpc": "2.0", "id": renamed, "method": "roots/list"})
        proxy.send({"jsonrpc": "2.0", "id": "ask-1", "result": {"roots": [{"uri": "file:///late"}]}})
        proxy.send({"jsonrpc": "2.0", "id": renamed, "result": {"roots": [{"uri": "file:///new"}]}})
        self.assertEqual(proxy.recv(), text_result(3, 'ask_client {"roots": [{"uri": "file:///new"}]}', False))
        self.assertEqual(proxy.close(), (0, b"", (
            "toolreplay mcp-proxy: the server ended (server exited): it is started again\n"
            "toolreplay mcp-proxy: the server is back (started again): its tools are listed again\n"
            "toolreplay mcp-proxy: dropped a response from the client to a request of the server that ended\n")))

    def test_a_server_that_exits_before_initialize_ends_the_session(self) -> None:
        proxy = Proxy(self.directory)  # nothing to initialize a new server with: it is not started again
        self.addCleanup(proxy.kill)
        self.assertEqual(proxy.ask(call(1, "crash"))["result"]["content"][0]["text"],
                         "toolreplay: ConnectionError: the server ended before it answered")
        self.assertEqual(proxy.close(), (1, b"", ""))



class RecordFailureTest(unittest.TestCase):
    def test_a_record_that_cannot_grow_refuses_every_later_call(self) -> None:
        import io

        from tests.faults import FullDiskHandle
        from toolreplay.guard.recorder import SessionRecorder
        from toolreplay.mcp.proxy import McpProxy
        from toolreplay.policy.model import parse_policy

        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory, True)
        path = os.path.join(directory, "record.jsonl")
        client_in, to_proxy = os.pipe()
        from_proxy, client_out = os.pipe()
        diagnostics = io.StringIO()
        with open(client_in, "rb") as proxy_in, open(client_out, "wb") as proxy_out, \
                open(to_proxy, "wb") as send, open(from_proxy, "rb") as receive, \
                SessionRecorder.open(path, sealed=True) as recorder:
            proxy = McpProxy([sys.executable, TINY], parse_policy(POLICY), client_in=proxy_in, client_out=proxy_out,
                             diagnostics=diagnostics, recorder=recorder)
            runner = threading.Thread(target=proxy.run)
            runner.start()
            replies = []
            for number in (1, 2, 3):
                if number == 2:
                    recorder._handle = FullDiskHandle(recorder._handle)  # type: ignore[attr-defined]
                send.write(json.dumps(call(number, "echo", text="x")).encode() + b"\n")
                send.flush()
                replies.append(json.loads(receive.readline()))
            send.close()
            runner.join(timeout=30)
        error = f"cannot write {path}: No space left on device"
        self.assertEqual(replies, [text_result(1, 'echo {"text": "x"}', False)] + [
            text_result(number, "toolreplay: recording failed: " + error, True) for number in (2, 3)])
        self.assertEqual(diagnostics.getvalue(), f"toolreplay mcp-proxy: the session record cannot be written: "
                                                 f"{error}; refusing every further tools/call\n")


class GateOptionsTest(unittest.TestCase):
    def test_mutators_and_read_cache_reach_the_gate(self) -> None:
        import io
        import sys as _sys

        from toolreplay.mcp.proxy import McpProxy
        from toolreplay.policy import Policy

        policy = Policy(agent="a", allowed_tools=frozenset({"echo", "git_commit"}))
        plain = McpProxy(["true"], policy, client_in=io.BytesIO(), client_out=io.BytesIO(), diagnostics=_sys.stderr)
        tuned = McpProxy(["true"], policy, client_in=io.BytesIO(), client_out=io.BytesIO(), diagnostics=_sys.stderr,
                         mutators=["git_commit"], repeatable=["echo"], read_cache=True)
        self.assertEqual((plain._gate._writes, plain._gate._read_cache), (frozenset(), False))
        self.assertEqual((tuned._gate._writes, tuned._gate._repeatable, tuned._gate._read_cache),
                         (frozenset({"git_commit", "echo"}), frozenset({"echo"}), True))


if __name__ == "__main__":
    unittest.main()
