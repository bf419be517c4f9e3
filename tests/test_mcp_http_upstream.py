"""The HTTP upstream's pieces without network: server-sent events, lines, the proxy's error answers, the
--header arguments, and what the gate records for a call whose answer was lost, or that the server refused
before running it (a 401 or 403).

tests/test_mcp_http.py drives the whole proxy against real servers over HTTP.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import unittest
from typing import Any
from unittest import mock

from tests.test_cli import run
from toolreplay.errors import UsageError
from toolreplay.format.records import read_session
from toolreplay.guard import idempotency
from toolreplay.guard.gate import AnswerLost, CallRefused, Gate
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.mcp.http.upstream import (
    SseEvent,
    SseParser,
    SseTooLarge,
    answered_ids,
    compact_line,
    is_http_url,
    lost_answers,
    parse_header,
    request_ids,
)
from toolreplay.mcp.wire import id_key, no_answer_error, no_answer_reason, refused_unrun
from toolreplay.policy.model import Policy


class SseParserTest(unittest.TestCase):
    def feed(self, *chunks: str) -> tuple[list[SseEvent], SseParser]:
        parser = SseParser()
        events = [event for chunk in chunks for event in parser.feed(chunk)]
        return events, parser

    def test_events_fields_and_comments(self) -> None:
        events, parser = self.feed(": a comment\nevent: message\nid: 7\nretry: 2500\ndata: {\"a\":1}\n\n"
                                   "data:no space\n\n")
        self.assertEqual(events, [SseEvent('{"a":1}', "message", "7"), SseEvent("no space", "message", "7")])
        self.assertEqual((parser.last_id, parser.retry), ("7", 2.5))

    def test_multi_line_data_is_joined_with_lf(self) -> None:
        events, _ = self.feed('data: {"a":\ndata: 1}\n\n')
        self.assertEqual(events, [SseEvent('{"a":\n1}', "message", None)])

    def test_line_ends_crlf_cr_lf_and_chunks_split_anywhere(self) -> None:
        text = 'id: 1\r\ndata: {"x":"y"}\r\n\r\nid: 2\rdata: 2\r\rdata: 3\n\n'
        whole, _ = self.feed(text)
        self.assertEqual(whole, [SseEvent('{"x":"y"}', "message", "1"), SseEvent("2", "message", "2"),
                                 SseEvent("3", "message", "2")])
        for cut in range(1, len(text)):
            self.assertEqual(self.feed(text[:cut], text[cut:])[0], whole, cut)
        self.assertEqual(self.feed(*text)[0], whole)  # a character at a time

    def test_a_priming_event_sets_the_id_without_dispatching(self) -> None:
        events, parser = self.feed("id: abc\ndata:\n\n", "id: abc\n\n")
        self.assertEqual((events, parser.last_id), ([SseEvent("", "message", "abc")], "abc"))
        events, parser = self.feed("id: p\n\n")
        self.assertEqual((events, parser.last_id), ([], "p"))

    def test_ignored_fields(self) -> None:
        events, parser = self.feed("id: a\0b\nretry: soon\nunknown: x\ndata\n\n")
        self.assertEqual((events, parser.last_id, parser.retry), ([SseEvent("", "message", None)], None, None))

    def test_an_unfinished_event_is_not_dispatched(self) -> None:
        self.assertEqual(self.feed("data: 1\n")[0], [])

    def test_an_event_or_a_line_over_the_limit_is_refused_and_dropped(self) -> None:
        for chunks in (["data: 12345\n", "data: 6789\n"], ["data: 1234567890"], ["data: 12", "34567890"]):
            with self.subTest(chunks):
                parser = SseParser(limit=10)
                with self.assertRaises(SseTooLarge) as caught:
                    for chunk in chunks:
                        parser.feed(chunk)
                self.assertEqual(str(caught.exception), "an event over 10 characters")
                self.assertEqual(parser.feed("\ndata: ok\n\n"), [SseEvent("ok", "message", None)])  # it goes on
        parser = SseParser(limit=10)
        self.assertEqual([parser.feed("data: 12345\n\n") for _ in range(3)], [[SseEvent("12345", "message", None)]] * 3)


class LinesTest(unittest.TestCase):
    def test_compact_line_keeps_the_message_and_makes_one_line(self) -> None:
        self.assertEqual(compact_line(b'{"a": 1}'), b'{"a": 1}\n')
        self.assertEqual(compact_line(b'{\r\n  "a":\n "b\\nc"\n}\n'), b'{    "a":  "b\\nc" }\n')
        self.assertEqual(json.loads(compact_line(b'[1,\n2]')), [1, 2])

    def test_compact_line_refuses_what_is_not_json(self) -> None:
        for body in (b"", b"<html>502</html>", b'{"a": NaN}', b'{"a": "b\nc"}'):
            with self.assertRaises(ValueError, msg=body):
                compact_line(body)

    def test_answered_and_request_ids(self) -> None:
        self.assertEqual(answered_ids({"jsonrpc": "2.0", "id": 1, "result": {}}), [id_key(1)])
        self.assertEqual(answered_ids([{"id": "a", "error": {}}, {"id": 2, "method": "ping"}, {"method": "x"}]),
                         [id_key("a")])
        self.assertEqual(request_ids({"id": 1, "method": "tools/call"}), {id_key(1): 1})
        self.assertEqual(request_ids([{"id": "1", "method": "a"}, {"method": "n"}, {"id": 2, "result": {}}]),
                         {id_key("1"): "1"})
        self.assertEqual(request_ids("not a message"), {})

    def test_lost_answers_are_the_proxys_errors(self) -> None:
        lines = lost_answers({id_key(1): 1, id_key("x"): "x"}, "the server answered HTTP 502 Bad Gateway")
        self.assertEqual([json.loads(line) for line in lines], [
            {"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "data": {"toolreplay": "no answer"},
                                                  "message": "toolreplay: the server answered HTTP 502 Bad Gateway"}},
            {"jsonrpc": "2.0", "id": "x", "error": {"code": -32000, "data": {"toolreplay": "no answer"},
                                                    "message": "toolreplay: the server answered HTTP 502 Bad Gateway"}}])
        self.assertTrue(all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in lines))
        self.assertEqual(no_answer_reason(json.loads(lines[0])), "the server answered HTTP 502 Bad Gateway")

    def test_a_servers_own_error_is_not_a_lost_answer(self) -> None:
        self.assertIsNone(no_answer_reason({"id": 1, "error": {"code": -32000, "message": "busy"}}))
        self.assertIsNone(no_answer_reason({"id": 1, "result": {"data": {"toolreplay": "no answer"}}}))
        self.assertIsNone(no_answer_reason({"id": 1, "error": {"code": -32603, "message": "x",
                                                               "data": {"toolreplay": "no answer"}}}))
        self.assertEqual(no_answer_reason(no_answer_error(3, "why")), "why")

    def test_a_request_the_server_refused_before_running_it(self) -> None:
        [line] = lost_answers({id_key(7): 7}, "the server answered HTTP 401 Unauthorized", refused=True)
        reply = json.loads(line)
        self.assertEqual(reply, {"jsonrpc": "2.0", "id": 7, "error": {
            "code": -32000, "data": {"toolreplay": "refused"},
            "message": "toolreplay: the server answered HTTP 401 Unauthorized"}})
        self.assertEqual((no_answer_reason(reply), refused_unrun(reply)),
                         ("the server answered HTTP 401 Unauthorized", True))
        self.assertFalse(refused_unrun(no_answer_error(7, "the connection dropped")))
        self.assertFalse(refused_unrun({"id": 7, "error": {"code": -32603, "message": "x",
                                                           "data": {"toolreplay": "refused"}}}))
        self.assertFalse(refused_unrun({"id": 7, "result": {"data": {"toolreplay": "refused"}}}))


class HeaderTest(unittest.TestCase):
    def test_headers_and_environment_references(self) -> None:
        environ = {"TOKEN": "s3cret", "ORG": "acme"}
        self.assertEqual(parse_header("Authorization: Bearer ${TOKEN}", environ), ("Authorization", "Bearer s3cret"))
        self.assertEqual(parse_header("X-Org:${ORG}-${ORG}", environ), ("X-Org", "acme-acme"))
        self.assertEqual(parse_header("X-Plain: $TOKEN {x}", environ), ("X-Plain", "$TOKEN {x}"))
        self.assertEqual(parse_header("X-Empty:", environ), ("X-Empty", ""))

    def test_bad_headers_never_show_their_value(self) -> None:
        cases = [("no colon s3cret", "--header needs \"Name: value\" (a header name, a colon, the value)"),
                 ("Bad Name: s3cret", "--header needs \"Name: value\" (a header name, a colon, the value)"),
                 ("Mcp-Session-Id: s3cret", "--header Mcp-Session-Id: the proxy sets this header itself"),
                 ("Content-Type: s3cret", "--header Content-Type: the proxy sets this header itself"),
                 ("X-Token: s3cret ${MISSING}", "--header X-Token: the environment variable MISSING is not set"),
                 ("X-Token: ${NL}", "--header X-Token: the value holds a line break or NUL")]
        for text, message in cases:
            with self.assertRaises(UsageError, msg=text) as caught:
                parse_header(text, {"NL": "s3cret\r\nX-Evil: 1"})
            self.assertEqual(str(caught.exception), message)

    def test_urls(self) -> None:
        self.assertTrue(is_http_url("https://example.com/mcp"))
        self.assertTrue(is_http_url("http://127.0.0.1:8000/mcp"))
        self.assertFalse(is_http_url("node"))
        self.assertFalse(is_http_url("ftp://example.com"))


class CommandLineTest(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory)
        self.policy = os.path.join(self.directory, "policy.json")
        with open(self.policy, "w", encoding="utf-8") as out:
            json.dump({"agent": "a", "allowed_tools": ["lookup"]}, out)

    def test_without_the_extra_a_url_is_a_one_line_usage_error(self) -> None:
        with mock.patch.dict(sys.modules, {"httpx": None}):
            self.assertEqual(run("mcp-proxy", "--policy", self.policy, "--", "https://example.com/mcp"), (
                2, "", "error: a server URL needs the http extra: pip install '.[http]' in a ToolReplay checkout\n"))

    def test_headers_need_a_url(self) -> None:
        self.assertEqual(run("mcp-proxy", "--policy", self.policy, "--header", "Authorization: Bearer s3cret", "--",
                             "node", "server.js"), (
            2, "", "error: --header and --header-env need a server URL (http:// or https://) after --\n"))

    def test_header_env_needs_a_name_and_a_variable(self) -> None:
        for given in ("Authorization", "Authorization="):
            self.assertEqual(run("mcp-proxy", "--policy", self.policy, "--header-env", given, "--",
                                 "https://example.com/mcp"), (
                2, "", "error: --header-env needs NAME=ENVVAR (the header's name, the variable holding its value)\n"))

    def test_a_missing_variable_is_named_not_shown(self) -> None:
        with mock.patch.dict(os.environ, {}, clear=False):
            os.environ.pop("TOOLREPLAY_TEST_NO_SUCH_TOKEN", None)
            self.assertEqual(run("mcp-proxy", "--policy", self.policy, "--header-env",
                                 "Authorization=TOOLREPLAY_TEST_NO_SUCH_TOKEN", "--", "https://example.com/mcp"), (
                2, "", "error: --header-env Authorization: the environment variable TOOLREPLAY_TEST_NO_SUCH_TOKEN "
                       "is not set\n"))


class LostAnswerGateTest(unittest.TestCase):
    """What the gate records when a host's `run` raises AnswerLost: the call was sent, no answer came."""

    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory)
        self.path = os.path.join(self.directory, "record.jsonl")
        self.recorder = SessionRecorder.open(self.path, sealed=True)
        self.addCleanup(self.recorder.close)
        self.runs: list[str] = []
        policy = Policy(agent="a", allowed_tools=frozenset({"send", "lookup"}), write_tools=frozenset({"send"}))

        def lost(name: str) -> Any:
            def tool(**args: Any) -> Any:
                self.runs.append(name)
                raise AnswerLost("the server answered HTTP 502 Bad Gateway")
            return tool

        self.gate = Gate({"send": lost("send"), "lookup": lost("lookup")}, policy, confirm=lambda tool, args: True,
                         recorder=self.recorder)

    def records(self) -> list[tuple[str, dict[str, Any], str]]:
        with open(self.path, "rb") as handle:
            return [(record.tool, record.response, (record.meta or {})["outcome"])
                    for record in read_session(handle, self.path)]

    def test_a_write_whose_answer_was_lost_is_unknown_and_not_run_again(self) -> None:
        first = self.gate.handle("send", {"to": "x"})
        again = self.gate.handle("send", {"to": "x"})
        self.assertEqual((first.outcome, first.response), ("unknown", {
            "ok": False, "error": "outcome unknown: the server answered HTTP 502 Bad Gateway; whether the write "
                                  "took effect is unknown"}))
        self.assertEqual(again.outcome, "refused")
        self.assertTrue(again.response["error"].startswith("outcome unknown: an identical send call started earlier"))
        self.assertEqual(self.runs, ["send"])
        self.assertEqual([outcome for _, _, outcome in self.records()], ["unknown", "refused"])
        self.assertEqual(self.gate.unknown_outcomes, ('send {"to":"x"}',))

    def test_a_read_whose_answer_was_lost_failed(self) -> None:
        answer = self.gate.handle("lookup", {})
        self.assertEqual((answer.outcome, answer.response), ("ran", {
            "ok": False, "error": "ConnectionError: the server answered HTTP 502 Bad Gateway"}))
        self.gate.handle("lookup", {})
        self.assertEqual(self.runs, ["lookup", "lookup"])  # a read is not held back

    def test_a_continued_record_keeps_the_write_unknown(self) -> None:
        self.gate.handle("send", {"to": "x"})
        self.recorder.close()
        with SessionRecorder.open(self.path, sealed=True) as recorder:
            gate = Gate({"send": lambda **args: {"ok": True}},
                        Policy(agent="a", allowed_tools=frozenset({"send"}), write_tools=frozenset({"send"})),
                        confirm=lambda tool, args: True, recorder=recorder)
            self.assertEqual(gate.unknown_outcomes, ('send {"to":"x"}',))
            self.assertEqual(gate.handle("send", {"to": "x"}).outcome, "refused")


class RefusedByServerGateTest(unittest.TestCase):
    """What the gate records when a host's `run` raises CallRefused: the server refused the call before it ran
    (its 401 or 403), so a write did not happen either: refused, its intent settled, and it may be made again."""

    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory)
        self.path = os.path.join(self.directory, "record.jsonl")
        self.runs: list[str] = []
        self.authorized = False

    def gate(self, recorder: SessionRecorder) -> Gate:
        def tool(name: str) -> Any:
            def run(**args: Any) -> Any:
                self.runs.append(name)
                if not self.authorized:
                    raise CallRefused("the server answered HTTP 401 Unauthorized")
                return {"done": name}
            return run

        policy = Policy(agent="a", allowed_tools=frozenset({"send", "lookup"}), write_tools=frozenset({"send"}))
        return Gate({"send": tool("send"), "lookup": tool("lookup")}, policy, confirm=lambda tool, args: True,
                    recorder=recorder)

    def records(self) -> list[tuple[str, dict[str, Any], str]]:
        with open(self.path, "rb") as handle:
            return [(record.tool, record.response, (record.meta or {})["outcome"])
                    for record in read_session(handle, self.path)]

    def test_a_refused_write_and_read_did_not_run_and_may_be_made_again(self) -> None:
        refused = {"ok": False, "error": "refused by the server: the server answered HTTP 401 Unauthorized"}
        with SessionRecorder.open(self.path, sealed=True) as recorder:
            gate = self.gate(recorder)
            answers = [gate.handle("send", {"to": "x"}), gate.handle("lookup", {})]
            self.assertEqual([(a.outcome, a.response, a.refusal and a.refusal.reason) for a in answers],
                             [("refused", refused, "server"), ("refused", refused, "server")])
            self.assertEqual(gate.unknown_outcomes, ())
            self.authorized = True  # the client authorized again: the same write runs, once
            self.assertEqual(gate.handle("send", {"to": "x"}).response, {"done": "send"})
            self.assertEqual(gate.handle("send", {"to": "x"}).outcome, "cached")
            intents = recorder.intents_path
        self.assertFalse(os.path.exists(intents))  # every intent settled: nothing left for a person to check
        self.assertEqual(self.records(), [("send", refused, "refused"), ("lookup", refused, "refused"),
                                          ("send", {"done": "send"}, "ran"), ("send", {"done": "send"}, "cached")])
        self.assertEqual(self.runs, ["send", "lookup", "send"])

    def test_an_identical_write_that_waited_gets_the_same_refusal(self) -> None:
        """A second identical write made while the first is at the server waits for it; the server refuses
        the first (401): the second is refused the same way (it was not run, nor called cancelled)."""
        started, release = threading.Event(), threading.Event()

        def send(**args: Any) -> Any:
            self.runs.append("send")
            started.set()
            release.wait(10)
            raise CallRefused("the server answered HTTP 401 Unauthorized")

        waiting = threading.Event()

        class Done(threading.Event):  # a call's completion, telling when an identical call waits for it
            def wait(self, timeout: float | None = None) -> bool:
                waiting.set()
                return super().wait(timeout)

        policy = Policy(agent="a", allowed_tools=frozenset({"send"}), write_tools=frozenset({"send"}))
        refused = {"ok": False, "error": "refused by the server: the server answered HTTP 401 Unauthorized"}
        with SessionRecorder.open(self.path, sealed=True) as recorder, \
                mock.patch.object(idempotency.threading, "Event", Done):
            gate = Gate({"send": send}, policy, confirm=lambda tool, args: True, recorder=recorder)
            answers: list[Any] = []
            first = threading.Thread(target=lambda: answers.append(gate.handle("send", {"to": "x"})))
            first.start()
            started.wait(10)
            second = threading.Thread(target=lambda: answers.append(gate.handle("send", {"to": "x"})))
            second.start()
            self.assertTrue(waiting.wait(10))  # the second waits for the first's answer
            release.set()
            first.join(10)
            second.join(10)
        self.assertEqual([(a.outcome, a.response, a.refusal and a.refusal.reason) for a in answers],
                         [("refused", refused, "server"), ("refused", refused, "server")])
        self.assertEqual(self.runs, ["send"])

    def test_a_continued_record_does_not_hold_the_refused_write(self) -> None:
        with SessionRecorder.open(self.path, sealed=True) as recorder:
            self.gate(recorder).handle("send", {"to": "x"})
        self.authorized = True
        with SessionRecorder.open(self.path, sealed=True) as recorder:
            gate = self.gate(recorder)
            self.assertEqual(gate.unknown_outcomes, ())
            self.assertEqual(gate.handle("send", {"to": "x"}).outcome, "ran")
        self.assertEqual(self.runs, ["send", "send"])


if __name__ == "__main__":
    unittest.main()

