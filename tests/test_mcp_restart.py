"""A lone server started again when it ends (toolreplay.mcp.restart.RestartingServer) against in-memory
servers, and the core's side of it: a call its server end did not send (`NotSent`) is refused, not held.

tests/test_mcp_proxy.py (raw lines), tests/test_mcp_real.py (the MCP SDK client, pins) and
tests/test_mcp_http.py (a server URL) test the same through a real proxy process.
"""

from __future__ import annotations

import io
import json
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
import unittest
import unittest.mock
from typing import Any

from tests.support import integration
from tests.test_mcp_servers import INIT, FakeServer, line
from toolreplay.errors import UsageError
from toolreplay.guard.gate import Gate
from toolreplay.guard.host import NotSent
from toolreplay.guard.outcomes import Refusal
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.mcp.pins import ToolPins
from toolreplay.mcp.restart import Backoff, ClientSetup, RestartingServer, list_changed, restart_request
from toolreplay.mcp.transport import ServerEnd
from toolreplay.mcp.wire import id_key
from toolreplay.policy.model import parse_policy
from toolreplay.policy.refusals import is_refusal

LOST = {"code": -32000, "message": "toolreplay: the server ended before it answered", "data": {"toolreplay": "no answer"}}
CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


def withdrawn(request_id: object) -> dict[str, object]:
    """What the client is sent for a request of a server that ended before the client answered it."""
    return {"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": "the server that asked ended"}}
DOWN = {"code": -32603, "message": "Internal error: the server has ended; it is being started again",
        "data": {"toolreplay": "not sent"}}
SAID_ENDED = "toolreplay mcp-proxy: the server ended (server exited): it is started again\n"
SAID_BACK = "toolreplay mcp-proxy: the server is back (started again): its tools are listed again\n"


def call(message_id: Any, tool: str = "x") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message_id, "method": "tools/call", "params": {"name": tool, "arguments": {}}}


class PiecesTest(unittest.TestCase):
    def test_backoff_counts_the_attempts_in_a_row_until_reset(self) -> None:
        backoff = Backoff((1.0, 2.0))
        self.assertEqual([backoff.next_delay() for _ in range(3)], [1.0, 2.0, None])
        backoff.reset()
        self.assertEqual(backoff.next_delay(), 1.0)

    def test_the_restarts_initialize_and_the_notifications(self) -> None:
        self.assertEqual(restart_request(INIT, 3), ("toolreplay-restart-3", line({**INIT, "id": "toolreplay-restart-3"})))
        self.assertEqual([json.loads(data)["method"] for data in list_changed({"prompts": {}, "resources": {},
                                                                               "logging": {}})],
                         ["notifications/tools/list_changed", "notifications/prompts/list_changed",
                          "notifications/resources/list_changed"])
        self.assertEqual(list_changed({"prompts": True}), [line(CHANGED)])  # not an object: not offered


def subscribe(message_id: Any, uri: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message_id, "method": "resources/subscribe", "params": {"uri": uri}}


def level(message_id: Any, name: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message_id, "method": "logging/setLevel", "params": {"level": name}}


class ClientSetupTest(unittest.TestCase):
    """What is set up again, as a table: the client's requests, the server's answers (True: a result), and
    the requests the next end is sent."""

    CASES = [
        ("nothing set up", [], []),
        ("an accepted subscription", [(subscribe(1, "a://x"), True)], [("resources/subscribe", {"uri": "a://x"})]),
        ("a refused one", [(subscribe(1, "a://x"), False)], []),
        ("unsubscribed", [(subscribe(1, "a://x"), True),
                          ({"jsonrpc": "2.0", "id": 2, "method": "resources/unsubscribe", "params": {"uri": "a://x"}},
                           False)], []),
        ("unsubscribed before the subscription was accepted",
         [(subscribe(1, "a://x"), True),
          ({"jsonrpc": "2.0", "id": 2, "method": "resources/unsubscribe", "params": {"uri": "a://x"}}, None)], []),
        ("the last level accepted, first", [(subscribe(1, "a://x"), True), (level(2, "info"), True),
                                            (level(3, "debug"), True), (level(4, "nope"), False)],
         [("logging/setLevel", {"level": "debug"}), ("resources/subscribe", {"uri": "a://x"})]),
        ("a subscription twice is sent once", [(subscribe(1, "a://x"), True), (subscribe(2, "a://x"), True)],
         [("resources/subscribe", {"uri": "a://x"})]),
        ("params of the wrong shape", [({"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe", "params": []},
                                        True), (subscribe(2, 7), True)], []),  # type: ignore[arg-type]
    ]

    def test_what_is_set_up_again(self) -> None:
        for name, exchanges, expected in self.CASES:
            with self.subTest(name):
                setup = ClientSetup()
                for request, _ in exchanges:
                    setup.sent(id_key(request["id"]), request["method"], request["params"])
                for request, accepted in [exchange for exchange in exchanges if exchange[1] is not None]:
                    setup.answered(id_key(request["id"]), {"jsonrpc": "2.0", "id": request["id"], **(
                        {"result": {}} if accepted else {"error": {"code": -1, "message": "no"}})})
                sent = [json.loads(data) for data in setup.again(4)]
                self.assertEqual([(item["method"], item["params"]) for item in sent], expected)
                self.assertEqual([item["id"] for item in sent],
                                 [f"toolreplay-restart-4-{number}" for number in range(1, len(expected) + 1)])

    def test_answers_to_what_was_sent_again_are_told_apart(self) -> None:
        setup = ClientSetup()
        setup.sent(id_key(1), "resources/subscribe", {"uri": "a://x"})
        self.assertIsNone(setup.own_answer(id_key(1), {"result": {}}))  # the client's own: not the proxy's
        setup.answered(id_key(1), {"result": {}})
        setup.again(1)
        self.assertIsNone(setup.own_answer(id_key("toolreplay-restart-1-2"), {"result": {}}))
        self.assertEqual(setup.own_answer(id_key("toolreplay-restart-1-1"), {"result": {}}), "")
        self.assertIsNone(setup.own_answer(id_key("toolreplay-restart-1-1"), {"result": {}}))  # answered once
        setup.again(2)
        self.assertEqual(setup.own_answer(id_key("toolreplay-restart-2-1"), {"error": "?"}),
                         "refused the subscription to 'a://x' again (no result): its updates no longer reach the client")
        self.assertEqual(setup.again(3), [])


class RestartingServerTest(unittest.TestCase):
    def setUp(self) -> None:
        self.made: list[FakeServer] = []
        self.fail_next = 0  # how many of the next ends cannot be started
        self.forgotten = 0
        self.diagnostics = io.StringIO()
        self.up: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.ended: queue.SimpleQueue[str] = queue.SimpleQueue()

    def make(self) -> ServerEnd:
        if self.fail_next:
            self.fail_next -= 1
            raise UsageError("cannot start the server nope: No such file or directory")
        self.made.append(FakeServer(status=3))
        return self.made[-1]

    def forget(self) -> None:
        self.forgotten += 1

    def start(self, backoff: tuple[float, ...] = (0.05, 0.05)) -> RestartingServer:
        server = RestartingServer(self.make, diagnostics=self.diagnostics, backoff=backoff, on_restart=self.forget)
        server.start(lambda data: self.up.put(json.loads(data)), self.ended.put)
        self.addCleanup(server.close)
        return server

    def got(self) -> Any:
        return self.up.get(timeout=5)

    def wait_for(self, count: int) -> FakeServer:
        deadline = time.monotonic() + 5
        while len(self.made) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.made[count - 1]

    def initialized(self, server: RestartingServer, capabilities: dict[str, Any] | None = None) -> FakeServer:
        first = self.made[0]
        server.send(line(INIT))
        self.assertEqual(first.got(), INIT)
        first.emit({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-11-25",
                                                          "capabilities": capabilities or {}}})
        self.assertEqual(self.got()["id"], 0)
        return first

    def test_a_server_that_ends_is_started_again_and_serves_the_same_session(self) -> None:
        server = self.start()
        first = self.initialized(server, {"tools": {}, "resources": {}})
        server.send(line(call(1)))
        self.assertEqual(first.got(), call(1))
        first.end()
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": 1, "error": LOST})  # the router: unknown for a write
        self.assertEqual([self.got(), self.got()], [
            CHANGED, {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"}])
        self.assertEqual(self.forgotten, 1)  # the pins verify its tools anew
        # while it is down, the proxy answers: listings empty, a ping, anything else not sent
        for message in ({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, {"jsonrpc": "2.0", "id": 3, "method": "ping"},
                        call(4), {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}):
            server.send(line(message))
        self.assertEqual([self.got() for _ in range(3)], [
            {"jsonrpc": "2.0", "id": 2, "result": {"tools": []}}, {"jsonrpc": "2.0", "id": 3, "result": {}},
            {"jsonrpc": "2.0", "id": 4, "error": DOWN}])
        second = self.wait_for(2)
        self.assertTrue(first.closed)
        self.assertEqual(second.got(), {**INIT, "id": "toolreplay-restart-1"})
        second.end()  # it ended before it was back: the next attempt, nothing more said
        third = self.wait_for(3)
        self.assertEqual(third.got(), {**INIT, "id": "toolreplay-restart-2"})
        third.emit({"jsonrpc": "2.0", "id": "toolreplay-restart-2", "result": {"capabilities": {"prompts": {}}}})
        self.assertEqual(third.got(), {"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.assertEqual([self.got(), self.got()], [CHANGED, {"jsonrpc": "2.0",
                                                              "method": "notifications/prompts/list_changed"}])
        server.send(line(call(5)))
        self.assertEqual(third.got(), call(5))
        third.emit({"jsonrpc": "2.0", "id": 5, "result": {"content": []}})
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": 5, "result": {"content": []}})
        self.assertTrue(self.up.empty() and self.ended.empty())
        self.assertEqual(self.diagnostics.getvalue(), SAID_ENDED + SAID_BACK)
        self.assertEqual(server.close(), 3)  # the server running now, closed
        self.assertTrue(third.closed)

    def test_lines_pass_through_byte_for_byte(self) -> None:
        server = self.start()
        first = self.made[0]
        raw: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        first.send = raw.put  # type: ignore[method-assign]
        server.send(b'{"jsonrpc":"2.0", "id":[1,{"a":null}],"method":"x/y","extra":true}\n')
        self.assertEqual(raw.get(timeout=5), b'{"jsonrpc":"2.0", "id":[1,{"a":null}],"method":"x/y","extra":true}\n')
        assert first.on_line is not None
        first.on_line(b'{"jsonrpc":"2.0","id":[1,{"a":null}],  "result":{}}\n')
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": [1, {"a": None}], "result": {}})

    def test_a_server_that_ends_before_initialize_ends_the_session_as_without_restarts(self) -> None:
        self.start()
        self.made[0].end()
        self.assertEqual(self.ended.get(timeout=5), "server exited")
        time.sleep(0.1)
        self.assertEqual((len(self.made), self.diagnostics.getvalue(), self.forgotten), (1, "", 0))

    def test_after_the_last_attempt_the_session_ends(self) -> None:
        server = self.start(backoff=(0.01, 0.01))
        self.initialized(server).end()
        self.assertEqual(self.got(), CHANGED)
        self.wait_for(2).end()
        self.wait_for(3).end()
        self.assertEqual(self.ended.get(timeout=5), "server exited")
        self.assertEqual(self.diagnostics.getvalue(), SAID_ENDED + "toolreplay mcp-proxy: the server ended (server "
                                                      "exited) and was not started again: the session ends\n")
        self.assertEqual(server.close(), 3)

    def test_a_restart_that_cannot_start_or_initialize_is_tried_again(self) -> None:
        server = self.start(backoff=(0.01, 0.01, 0.01, 0.01))
        self.fail_next = 1
        self.initialized(server).end()
        second = self.wait_for(2)  # the first attempt could not start it
        self.assertEqual(second.got()["id"], "toolreplay-restart-2")
        second.emit({"jsonrpc": "2.0", "id": "toolreplay-restart-2", "error": {"code": -1, "message": "no"}})
        third = self.wait_for(3)
        self.assertTrue(second.closed)
        second.end()  # a closed end's end is no new death
        self.assertEqual(third.got()["id"], "toolreplay-restart-4")  # the failed one took a generation
        self.fail_next = 1
        third.end()  # then the last attempt cannot start it: the session ends
        self.assertEqual(self.ended.get(timeout=5), "server exited")
        self.assertEqual(self.diagnostics.getvalue(), SAID_ENDED + (
            "toolreplay mcp-proxy: the server could not be started again: cannot start the server nope: No such "
            "file or directory\n"
            "toolreplay mcp-proxy: the server failed to initialize again\n"
            "toolreplay mcp-proxy: the server could not be started again: cannot start the server nope: No such "
            "file or directory\n"
            "toolreplay mcp-proxy: the server was not started again: the session ends\n"))

    def test_a_session_closed_while_the_server_is_down_starts_nothing(self) -> None:
        server = self.start(backoff=(0.2,))
        self.initialized(server).end()
        self.assertEqual(server.close(), 3)
        time.sleep(0.4)
        self.assertEqual(len(self.made), 1)

    def test_a_clients_answer_to_the_ended_servers_request_does_not_reach_the_new_one(self) -> None:
        server = self.start()
        first = self.initialized(server)
        first.emit({"jsonrpc": "2.0", "id": 0, "method": "roots/list"})
        self.assertEqual(self.got()["method"], "roots/list")
        first.end()
        self.assertEqual(self.got(), withdrawn(0))  # nobody is left to take the client's answer
        self.assertEqual(self.got(), CHANGED)
        second = self.wait_for(2)
        second.emit({"jsonrpc": "2.0", "id": second.got()["id"], "result": {}})
        self.assertEqual(second.got()["method"], "notifications/initialized")
        self.assertEqual(self.got(), CHANGED)
        answer = {"jsonrpc": "2.0", "id": 0, "result": {"roots": []}}
        server.send(line(answer))  # late, to the server that ended: dropped
        second.emit({"jsonrpc": "2.0", "id": 0, "method": "roots/list"})  # the new server's own, the same id
        self.assertEqual(self.got()["method"], "roots/list")
        server.send(line({"jsonrpc": "2.0", "id": 1, "result": {}}))  # to no request: passed on as without restarts
        server.send(line(answer))
        self.assertEqual([second.got(), second.got()], [{"jsonrpc": "2.0", "id": 1, "result": {}}, answer])
        self.assertTrue(second.nothing())
        self.assertEqual(self.diagnostics.getvalue(), SAID_ENDED + SAID_BACK + (
            "toolreplay mcp-proxy: dropped a response from the client to a request of the server that ended\n"))

    def test_a_late_answer_is_dropped_and_a_new_request_of_the_same_id_gets_one_of_the_proxys(self) -> None:
        server = self.start()
        first = self.initialized(server)
        first.emit({"jsonrpc": "2.0", "id": "ask-1", "method": "roots/list"})
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": "ask-1", "method": "roots/list"})
        first.end()
        self.assertEqual(self.got(), withdrawn("ask-1"))
        self.assertEqual(self.got(), CHANGED)
        second = self.restarted()
        # the new end asks with the id the ended one used, before the client's late answer to that one came
        second.emit({"jsonrpc": "2.0", "id": "ask-1", "method": "roots/list"})
        renamed = "toolreplay-restart-1-asks-1"
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": renamed, "method": "roots/list"})
        second.emit({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1}})
        second.emit({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "ask-1"}})
        self.assertEqual(self.got()["method"], "notifications/progress")  # not the proxy's to change
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "method": "notifications/cancelled",
                                      "params": {"requestId": renamed}})
        server.send(line({"jsonrpc": "2.0", "id": "ask-1", "result": {"roots": [{"uri": "file:///old"}]}}))
        server.send(line({"jsonrpc": "2.0", "id": renamed, "result": {"roots": [{"uri": "file:///new"}]}}))
        self.assertEqual(second.got(), {"jsonrpc": "2.0", "id": "ask-1", "result": {"roots": [{"uri": "file:///new"}]}})
        server.send(line({"jsonrpc": "2.0", "id": renamed, "result": {}}))  # answered already: as without restarts
        self.assertEqual(second.got(), {"jsonrpc": "2.0", "id": renamed, "result": {}})
        self.assertTrue(second.nothing())
        self.assertEqual(self.diagnostics.getvalue(), SAID_ENDED + SAID_BACK + (
            "toolreplay mcp-proxy: dropped a response from the client to a request of the server that ended\n"))

    def test_a_late_answer_in_a_batch_is_taken_out_of_it(self) -> None:
        server = self.start()
        first = self.initialized(server)
        first.emit({"jsonrpc": "2.0", "id": 7, "method": "ping"})
        first.emit({"jsonrpc": "2.0", "id": 6, "method": "ping"})
        self.got(), self.got()
        first.end()
        self.assertEqual([self.got(), self.got(), self.got()], [withdrawn(6), withdrawn(7), CHANGED])
        second = self.restarted()
        second.emit({"jsonrpc": "2.0", "id": 8, "method": "ping"})
        self.assertEqual(self.got()["id"], 8)  # no id of the ended end: unchanged
        late, fresh = {"jsonrpc": "2.0", "id": 7, "result": {}}, {"jsonrpc": "2.0", "id": 8, "result": {}}
        server.send_parsed(line([late, fresh]), [late, fresh])
        other = {"jsonrpc": "2.0", "id": 6, "result": {}}
        server.send_parsed(line([other]), [other])  # nothing left of it: nothing sent
        server.send(line(call(9)))
        self.assertEqual([second.got(), second.got()], [[fresh], call(9)])
        self.assertEqual(self.diagnostics.getvalue().count("dropped a response from the client"), 2)

    def test_the_clients_subscriptions_and_logging_level_are_set_up_again(self) -> None:
        server = self.start()
        first = self.initialized(server, {"tools": {}, "resources": {"subscribe": True}, "logging": {}})
        requests = [subscribe(1, "note://a"), subscribe(2, "note://refused"), subscribe(3, "note://b"),
                    subscribe(4, "note://gone"), level(5, "info"), level(6, "bogus"), level(7, "debug"),
                    subscribe(8, "note://c")]
        for request in requests:
            server.send(line(request))
        self.assertEqual([first.got() for _ in requests], requests)
        for request in requests:
            refused = request["id"] in (2, 6)
            first.emit({"jsonrpc": "2.0", "id": request["id"], **(
                {"error": {"code": -32602, "message": "no"}} if refused else {"result": {}})})
        self.assertEqual([self.got()["id"] for _ in requests], [1, 2, 3, 4, 5, 6, 7, 8])  # the client's own
        server.send(line({"jsonrpc": "2.0", "id": 9, "method": "resources/unsubscribe",
                          "params": {"uri": "note://gone"}}))
        self.assertEqual(first.got()["method"], "resources/unsubscribe")
        server.send(line(subscribe(10, "note://c")))  # in flight when the server ends: it got no answer
        server.send(line({"jsonrpc": "2.0", "id": 11, "method": "resources/unsubscribe",
                          "params": {"uri": "note://c"}}))  # not answered either: the client still wants it gone
        first.got(), first.got()
        first.end()
        self.assertEqual({self.got()["id"] for _ in range(3)}, {9, 10, 11})
        self.got(), self.got()  # tools and resources list_changed
        second = self.wait_for(2)
        second.emit({"jsonrpc": "2.0", "id": second.got()["id"], "result": {"capabilities": {"resources": {}}}})
        self.assertEqual(second.got(), {"jsonrpc": "2.0", "method": "notifications/initialized"})
        again = [second.got() for _ in range(3)]
        self.assertEqual(again, [
            {"jsonrpc": "2.0", "id": "toolreplay-restart-1-1", "method": "logging/setLevel", "params": {"level": "debug"}},
            {"jsonrpc": "2.0", "id": "toolreplay-restart-1-2", "method": "resources/subscribe",
             "params": {"uri": "note://a"}},
            {"jsonrpc": "2.0", "id": "toolreplay-restart-1-3", "method": "resources/subscribe",
             "params": {"uri": "note://b"}}])
        self.assertTrue(second.nothing())
        second.emit({"jsonrpc": "2.0", "id": "toolreplay-restart-1-1", "result": {}})
        second.emit({"jsonrpc": "2.0", "id": "toolreplay-restart-1-3", "error": {"code": -32602,
                                                                                "message": "unknown\x1b[2J"}})
        second.emit({"jsonrpc": "2.0", "id": "toolreplay-restart-1-2", "result": {}})
        second.emit({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "note://a"}})
        self.assertEqual([self.got() for _ in range(3)], [  # the proxy's answers kept from the client
            CHANGED, {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"},
            {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "note://a"}}])
        self.assertEqual(self.diagnostics.getvalue(), SAID_ENDED + SAID_BACK + (
            "toolreplay mcp-proxy: the server refused the subscription to 'note://b' again (unknown\\x1b[2J): its "
            "updates no longer reach the client\n"))
        second.end()  # once more: what the new end refused is not asked again
        self.got(), self.got()
        third = self.wait_for(3)
        third.emit({"jsonrpc": "2.0", "id": third.got()["id"], "result": {"capabilities": {}}})
        self.assertEqual([third.got().get("params") for _ in range(3)], [None, {"level": "debug"}, {"uri": "note://a"}])
        self.assertTrue(third.nothing())

    def test_a_level_refused_again_is_said_and_not_kept(self) -> None:
        server = self.start()
        first = self.initialized(server, {"logging": {}})
        server.send(line(level(1, "warning")))
        first.got()
        first.emit({"jsonrpc": "2.0", "id": 1, "result": {}})
        self.got()
        first.end()
        self.got()
        second = self.wait_for(2)
        second.emit({"jsonrpc": "2.0", "id": second.got()["id"], "result": {"capabilities": {}}})
        self.assertEqual([second.got()["method"], second.got()["id"]],
                         ["notifications/initialized", "toolreplay-restart-1-1"])
        second.emit({"jsonrpc": "2.0", "id": "toolreplay-restart-1-1", "error": {"code": -32601,
                                                                                "message": "Method not found"}})
        self.assertEqual(self.got(), CHANGED)
        second.end()
        self.got()
        third = self.wait_for(3)
        third.emit({"jsonrpc": "2.0", "id": third.got()["id"], "result": {"capabilities": {}}})
        self.assertEqual(third.got()["method"], "notifications/initialized")
        self.assertEqual(self.got(), CHANGED)
        self.assertTrue(third.nothing())
        self.assertIn("toolreplay mcp-proxy: the server refused the logging level 'warning' again (Method not "
                      "found)\n", self.diagnostics.getvalue())

    def test_the_ended_servers_open_requests_are_withdrawn_from_the_client(self) -> None:
        """Its question, its sampling request, unanswered when it ended: the client is told each one is
        cancelled, before the tools change (an answer has nobody to go to); one answered already is not."""
        server = self.start()
        first = self.initialized(server)
        for request_id, method in ((3, "sampling/createMessage"), ("q", "elicitation/create"), (4, "ping")):
            first.emit({"jsonrpc": "2.0", "id": request_id, "method": method, "params": {}})
            self.assertEqual(self.got()["id"], request_id)
        server.send(line({"jsonrpc": "2.0", "id": 4, "result": {}}))
        self.assertEqual(first.got(), {"jsonrpc": "2.0", "id": 4, "result": {}})
        first.end()
        self.assertEqual([self.got(), self.got(), self.got()], [withdrawn(3), withdrawn("q"), CHANGED])
        self.restarted()

    def restarted(self) -> FakeServer:
        """The second end, initialized: the client has been told its tools changed."""
        second = self.wait_for(2)
        second.emit({"jsonrpc": "2.0", "id": second.got()["id"], "result": {}})
        self.assertEqual(second.got()["method"], "notifications/initialized")
        self.assertEqual(self.got(), CHANGED)
        return second

    def test_a_cancelled_call_is_not_answered_when_the_server_ends(self) -> None:
        server = self.start()
        first = self.initialized(server)
        server.send(line(call(7)))
        server.send(line({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}))
        self.assertEqual([first.got()["id"], first.got()["method"]], [7, "notifications/cancelled"])
        first.end()
        self.assertEqual(self.got(), CHANGED)  # no error for 7: the client gave up on it


class ParsedOnceTest(unittest.TestCase):
    """Behind the proxy's router, each line is parsed once on its way: the router hands the restart layer
    the message it parsed (a tools/call's request included), and the restart layer hands the router the
    server's; what reaches either side is unchanged."""

    def test_each_line_is_parsed_once_and_passes_unchanged(self) -> None:
        from toolreplay.mcp import restart, router
        from toolreplay.mcp.proxy import McpProxy

        parsed: list[bytes] = []

        def counting(data: bytes) -> Any:
            parsed.append(data)
            return wire_parse(data)

        wire_parse = router.parse_message
        for module in (router, restart):
            patcher = unittest.mock.patch.object(module, "parse_message", counting)
            patcher.start()
            self.addCleanup(patcher.stop)
        made: list[FakeServer] = []
        upstream = RestartingServer(lambda: made.append(FakeServer()) or made[-1], diagnostics=io.StringIO())
        client_in, to_proxy = os.pipe()
        from_proxy, client_out = os.pipe()
        with open(client_in, "rb") as proxy_in, open(client_out, "wb") as proxy_out, \
                open(to_proxy, "wb") as send, open(from_proxy, "rb") as receive:
            proxy = McpProxy(upstream, parse_policy({"agent": "a", "allowed_tools": ["x"]}), client_in=proxy_in,
                             client_out=proxy_out, diagnostics=io.StringIO())
            runner = threading.Thread(target=proxy.run)
            runner.start()
            send.write(line(INIT))
            send.flush()
            server = made[0]
            self.assertEqual(server.got(), INIT)
            initialized = {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-11-25", "capabilities": {}}}
            server.emit(initialized)
            self.assertEqual(json.loads(receive.readline()), initialized)
            send.write(line(call(1)))
            send.flush()
            self.assertEqual(server.got(), call(1))
            answer = b'{"jsonrpc":"2.0","id":1,  "result":{"content":[]}}\n'
            assert server.on_line is not None
            server.on_line(answer)
            self.assertEqual(receive.readline(), answer)  # byte for byte
            send.close()
            runner.join(timeout=30)
        self.assertEqual(parsed, [line(INIT), line(initialized), line(call(1)), answer])


@integration
class ProcessTest(unittest.TestCase):
    """Real processes: a server that exits after each initialize, until the attempts run out."""

    def test_a_server_that_keeps_ending_is_given_up_and_the_proxy_returns_its_status(self) -> None:
        from toolreplay.mcp.proxy import McpProxy
        from toolreplay.mcp.transport import StdioServer

        command = [sys.executable, "-c", "import sys; sys.stdin.readline(); sys.exit(4)"]
        diagnostics = io.StringIO()
        client_in, to_proxy = os.pipe()
        from_proxy, client_out = os.pipe()
        with open(client_in, "rb") as proxy_in, open(client_out, "wb") as proxy_out, \
                open(to_proxy, "wb") as send, open(from_proxy, "rb") as receive:
            upstream = RestartingServer(lambda: StdioServer(command), diagnostics=diagnostics, backoff=(0.05, 0.05))
            proxy = McpProxy(upstream, parse_policy({"agent": "a", "allowed_tools": []}), client_in=proxy_in,
                             client_out=proxy_out, diagnostics=diagnostics)
            status: list[int] = []
            runner = threading.Thread(target=lambda: status.append(proxy.run()))
            runner.start()
            send.write(line(INIT))  # the input stays open: the session ends because the server did
            send.flush()
            replies = [json.loads(receive.readline()) for _ in range(2)]
            runner.join(timeout=30)
        self.assertEqual((status, proxy.exit_reason), ([4], "server exited"))
        self.assertEqual(sorted(replies, key=str), sorted([CHANGED, {"jsonrpc": "2.0", "id": 0, "error": LOST}], key=str))
        self.assertEqual(diagnostics.getvalue(), SAID_ENDED + "toolreplay mcp-proxy: the server ended (server "
                                                              "exited) and was not started again: the session ends\n")


class NotSentTest(unittest.TestCase):
    """The core: a call its host did not send is refused as `server unavailable`, its intent settled, and an
    identical call runs anew (a write answered with an error would be held and answer its repeat)."""

    def test_a_write_not_sent_is_refused_and_its_repeat_runs(self) -> None:
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        path = os.path.join(directory, "record.jsonl")
        down = [True]

        class Host:
            def refusal(self, tool: str) -> Refusal | None:
                return None

            def run(self, tool: str, args: dict[str, Any], context: Any) -> Any:
                if down[0]:
                    raise NotSent("the server has ended; it is being started again")
                return {"written": args["text"]}

            def confirm(self, tool: str, args: dict[str, Any], context: Any) -> bool:
                return True

        policy = parse_policy({"agent": "a", "allowed_tools": ["note"]})
        with SessionRecorder.open(path, sealed=True) as recorder:
            gate = Gate(Host(), policy, recorder=recorder, mutators=("note",))
            first = gate.handle("note", {"text": "t"})
            down[0] = False
            second = gate.handle("note", {"text": "t"})
        self.assertEqual((first.outcome, first.response, first.refusal and first.refusal.reason), (
            "refused", {"ok": False, "error": "server unavailable: the server has ended; it is being started again"},
            "unavailable"))
        self.assertEqual((second.outcome, second.response), ("ran", {"written": "t"}))
        self.assertTrue(is_refusal(first.response))
        with SessionRecorder.open(path, sealed=True) as recorder:  # a proxy started again on the record
            resumed = Gate(Host(), policy, recorder=recorder, mutators=("note",))
            self.assertEqual(resumed.unknown_outcomes, ())  # both intents settled
            self.assertEqual(resumed.handle("note", {"text": "t"}).outcome, "cached")
        with open(path, encoding="utf-8") as record:
            self.assertEqual([json.loads(row)["meta"]["outcome"] for row in record], ["refused", "ran", "cached"])


class PinsForgetTest(unittest.TestCase):
    def test_forget_unverifies_the_tools_of_one_prefix_or_all(self) -> None:
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        pins = ToolPins(os.path.join(directory, "pins.json"))
        pins.check([{"name": "a__x"}, {"name": "b__x"}])
        self.assertEqual([pins.refusal_of(name) for name in ("a__x", "b__x")], [None, None])
        pins.forget("a__")
        self.assertEqual([pins.refusal(name) for name in ("a__x", "b__x")],
                         ["tool definition not verified against its pin: a__x", None])
        pins.forget()
        self.assertEqual(pins.refusal("b__x"), "tool definition not verified against its pin: b__x")
        pins.check([{"name": "b__x"}])
        self.assertIsNone(pins.refusal("b__x"))


if __name__ == "__main__":
    unittest.main()
