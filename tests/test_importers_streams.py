"""Streamed responses: Anthropic stream events, OpenAI chat chunks and Responses stream events, as SSE
text or JSON Lines, alone or between the messages that hold the replies (the fixtures under
tests/fixtures/import/*/stream* are real streams; these tests build the cases those do not show)."""

from __future__ import annotations

import io
import json
import os
import tempfile
import unittest
from typing import Any

from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.evaluation import NamedAgent, evaluate, load_suite
from toolreplay.evaluation.recorded import recorded_agent
from toolreplay.importers import Transcript, import_file


def _run(fmt: str, data: bytes) -> tuple[int, str, str]:
    io = IO.memory(stdin=data)
    code = main(["import", fmt, "-"], io)
    return code, io.out(), io.err()


def _records(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def _lines(*items: Any) -> bytes:
    return "".join(json.dumps(item) + "\n" for item in items).encode("utf-8")


def _sse(*items: Any, names: bool = True) -> bytes:
    text = ""
    for item in items:
        if names and isinstance(item, dict) and "type" in item:
            text += f"event: {item['type']}\n"
        text += f"data: {json.dumps(item)}\n\n"
    return text.encode("utf-8")


# Anthropic events.
def _start(message_id: str = "msg_1") -> dict[str, Any]:
    return {"type": "message_start", "message": {"id": message_id, "type": "message", "role": "assistant",
                                                 "content": []}}


def _tool(index: int, call_id: str, name: str) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}}}


def _piece(index: int, text: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": text}}


def _stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


_END = ({"type": "message_delta", "delta": {"stop_reason": "tool_use"}}, {"type": "message_stop"})


# OpenAI chat chunks.
def _chunk(chunk_id: str, calls: list[dict[str, Any]] | None = None, finish: str | None = None,
           created: Any = 1727346178) -> dict[str, Any]:
    delta: dict[str, Any] = {"tool_calls": calls} if calls is not None else {}
    return {"id": chunk_id, "object": "chat.completion.chunk", "created": created, "model": "gpt-4o",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _call_piece(index: int, arguments: str, call_id: str | None = None, name: str | None = None) -> dict[str, Any]:
    piece: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        piece.update(id=call_id, type="function")
        piece["function"]["name"] = name
    return piece


# Responses stream events.
def _created(response_id: str, created_at: Any = 1743082657) -> dict[str, Any]:
    return {"type": "response.created", "response": {"id": response_id, "object": "response",
                                                     "created_at": created_at, "status": "in_progress",
                                                     "output": []}}


def _added(index: int, item_id: str, call_id: str, name: str) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": index,
            "item": {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": "",
                     "status": "in_progress"}}


def _delta(index: int, item_id: str, text: str) -> dict[str, Any]:
    return {"type": "response.function_call_arguments.delta", "item_id": item_id, "output_index": index,
            "delta": text}


def _done(index: int, item_id: str, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"type": "response.output_item.done", "output_index": index,
            "item": {"type": "function_call", "id": item_id, "call_id": call_id, "name": name,
                     "arguments": arguments, "status": "completed"}}


def _completed(response_id: str) -> dict[str, Any]:
    return {"type": "response.completed", "response": {"id": response_id, "status": "completed"}}


class AnthropicStreamTest(unittest.TestCase):
    def test_replies_come_from_the_messages_between_the_streams(self) -> None:
        log = _lines(
            {"role": "user", "content": "What is in notes.txt and todo.txt?"},
            _start("msg_1"), {"type": "ping"},
            _tool(0, "toolu_a", "read_file"), _piece(0, '{"path": "no'), _tool(1, "toolu_b", "read_file"),
            _piece(1, '{"path": "todo.txt"}'), _piece(0, 'tes.txt"}'), _stop(0), _stop(1), *_END,
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "call mum"},
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "buy milk"}]},
            _start("msg_2"), _tool(0, "toolu_c", "list_files"), _piece(0, ""), _stop(0), *_END,
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_c", "content": "[]",
                                          "is_error": True}]},
        )
        for data in (log, _sse(*[json.loads(line) for line in log.splitlines()])):
            code, out, err = _run("auto", data)
            self.assertEqual((code, err), (0, "detected format: anthropic\n"))
            self.assertEqual(_records(out), [
                {"index": 0, "tool": "read_file", "args": {"path": "notes.txt"}, "response": {"text": "buy milk"},
                 "meta": {"call_id": "toolu_a", "turn": 0}},
                {"index": 1, "tool": "read_file", "args": {"path": "todo.txt"}, "response": {"text": "call mum"},
                 "meta": {"call_id": "toolu_b", "turn": 0}},
                {"index": 2, "tool": "list_files", "args": {}, "response": {"error": True, "text": "[]"},
                 "meta": {"call_id": "toolu_c", "turn": 1}},
            ])

    def test_malformed_streams_are_one_line_errors_with_the_line(self) -> None:
        cases = [
            ((_start(), _tool(0, "t", "f"), _piece(0, '{"a": '), _piece(0, '1,, "b": 2}'), _stop(0)),
             "<stdin>:4: conversation 0, message 3: the streamed input of tool_use f does not join into JSON: "
             "Expecting property name enclosed in double quotes at character 3 of this event's piece"),
            ((_start(), _tool(0, "t", "f"), _piece(0, "[1, 2]"), _stop(0)),
             "<stdin>:3: conversation 0, message 2: the streamed input of tool_use f is not a JSON object"),
            ((_start(), _piece(3, "{}")),
             "<stdin>:2: conversation 0, message 1: a content_block_delta for content block 3, which no "
             "content_block_start began"),
            ((_start(), _tool(0, "t", "f"), _piece(0, {"a": 1})),
             "<stdin>:3: conversation 0, message 2: an input_json_delta's \"partial_json\" must be a string"),
            ((_start(), {"type": "content_block_start", "index": "0", "content_block": {"type": "text"}}),
             '<stdin>:2: conversation 0, message 1: a content_block_start event has no "index" integer'),
            ((_start(), _tool(0, "t", "f"), _tool(0, "u", "g")),
             "<stdin>:3: conversation 0, message 2: content block 0 starts twice"),
            ((_start(), {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t"}},
              _stop(0)),
             '<stdin>:2: conversation 0, message 1: a tool_use block has no "name" string'),
        ]
        for events, error in cases:
            with self.subTest(error=error):
                self.assertEqual(_run("anthropic", _lines(*events)), (2, "", f"error: {error}\n"))

    def test_a_block_the_token_limit_cut_is_a_warning_even_when_it_stopped(self) -> None:
        log = _lines(_start(), _tool(0, "toolu_a", "write"), _piece(0, '{"text": "long'), _stop(0),
                     {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}}, {"type": "message_stop"})
        code, out, err = _run("anthropic", log)
        self.assertEqual((code, [r["args"] for r in _records(out)]), (0, [{"_raw_arguments": '{"text": "long'}]))
        self.assertEqual(err.splitlines()[0], 'warning: <stdin>:2: conversation 0, message 1: tool_use write: its '
                                              'streamed input did not end (the message stopped at "max_tokens"); '
                                              "read as far as it came")

    def test_the_stop_reason_of_a_message_is_not_the_next_ones(self) -> None:
        log = _lines({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}}, {"type": "message_stop"},
                     _start(), _tool(0, "t", "f"), _piece(0, "{oops}"), _stop(0), {"type": "message_stop"})
        self.assertEqual(_run("anthropic", log)[0], 2)

    def test_a_cut_stream_and_an_error_event_are_warnings(self) -> None:
        log = _lines(_start(), _tool(0, "toolu_a", "search"), _piece(0, '{"q": "rain"}'),
                     {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        code, out, err = _run("anthropic", log)
        self.assertEqual((code, _records(out)), (0, [{"index": 0, "tool": "search", "args": {"q": "rain"},
                                                       "response": {"error": "no recorded response"},
                                                       "meta": {"call_id": "toolu_a", "turn": 0}}]))
        self.assertEqual(err.splitlines(), [
            "warning: <stdin>:2: conversation 0, message 1: tool_use search: its streamed input did not end (no "
            "content_block_stop); read as far as it came",
            "warning: <stdin>:2: conversation 0, message 1: call 0 (search): no reply; response set to "
            '{"error": "no recorded response"}',
            "warning: <stdin>:4: conversation 0, message 3: the stream reports an error: overloaded_error: "
            "Overloaded",
        ])


class OpenAIChatStreamTest(unittest.TestCase):
    def test_interleaved_parallel_calls_keep_their_index_order(self) -> None:
        log = [
            {"role": "user", "content": "Weather in Paris and Oslo?"},
            _chunk("c1", [_call_piece(1, "", "call_b", "get_weather")]),
            _chunk("c1", [_call_piece(0, "", "call_a", "get_weather")]),
            _chunk("c1", [_call_piece(1, '{"city": '), _call_piece(0, '{"city": "Par')]),
            _chunk("c1", [_call_piece(0, 'is"}')]),
            _chunk("c1", [_call_piece(1, '"Oslo"}')]),
            _chunk("c1", finish="tool_calls"),
            {"role": "tool", "tool_call_id": "call_b", "content": "snow"},
            {"role": "tool", "tool_call_id": "call_a", "content": "rain"},
            _chunk("c2", [_call_piece(0, "{}", "call_c", "get_time")], created=1727346200),
            _chunk("c2", finish="tool_calls", created=1727346200),
        ]
        for data in (_lines(*log), _sse(*log, names=False) + b"data: [DONE]\n\n"):
            code, out, err = _run("auto", data)
            self.assertEqual(_records(out), [
                {"index": 0, "tool": "get_weather", "args": {"city": "Paris"}, "response": {"text": "rain"},
                 "meta": {"ts": "2024-09-26T10:22:58Z", "call_id": "call_a", "turn": 0}},
                {"index": 1, "tool": "get_weather", "args": {"city": "Oslo"}, "response": {"text": "snow"},
                 "meta": {"ts": "2024-09-26T10:22:58Z", "call_id": "call_b", "turn": 0}},
                {"index": 2, "tool": "get_time", "args": {}, "response": {"error": "no recorded response"},
                 "meta": {"ts": "2024-09-26T10:23:20Z", "call_id": "call_c", "turn": 1}},
            ])
            self.assertEqual(code, 0)
            self.assertEqual(err.splitlines()[0], "detected format: openai-chat")

    def test_cut_calls_bad_arguments_and_bad_times_are_warnings(self) -> None:
        log = _lines(
            _chunk("c1", [_call_piece(0, '{"q": "x"', "call_a", "search")], created="yesterday"),
            _chunk("c1", finish="length", created="yesterday"),
            _chunk("c2", [_call_piece(0, '{"n": 1}', "call_b", "count")]),
        )
        code, out, err = _run("openai-chat", log)
        self.assertEqual((code, [(r["tool"], r["args"], r["meta"]) for r in _records(out)]), (0, [
            ("search", {"_raw_arguments": '{"q": "x"'}, {"call_id": "call_a", "turn": 0}),
            ("count", {"n": 1}, {"ts": "2024-09-26T10:22:58Z", "call_id": "call_b", "turn": 1}),
        ]))
        self.assertEqual(err.splitlines(), [
            "warning: <stdin>:1: conversation 0, message 0: call search: its streamed arguments did not end "
            '(finish_reason "length": the token limit); read as far as they came',
            'warning: <stdin>:1: conversation 0, message 0: call 0 (search): time "yesterday" is not a count of '
            "seconds since 1970; no ts kept",
            "warning: <stdin>:1: conversation 0, message 0: call 0 (search): arguments are not valid JSON; kept "
            'as {"_raw_arguments": "{\\"q\\": \\"x\\""}',
            "warning: <stdin>:1: conversation 0, message 0: call 0 (search): no reply; response set to "
            '{"error": "no recorded response"}',
            "warning: <stdin>:3: conversation 0, message 2: call count: its streamed arguments did not end "
            "(no finish_reason); read as far as they came",
            "warning: <stdin>:3: conversation 0, message 2: call 1 (count): no reply; response set to "
            '{"error": "no recorded response"}',
        ])

    def test_what_tells_one_completion_from_the_next(self) -> None:
        def role(chunk: dict[str, Any]) -> dict[str, Any]:
            chunk["choices"][0]["delta"]["role"] = "assistant"
            return chunk

        # A server that writes a new id on every chunk: one completion, one call.
        every = [role(_chunk("a1", [_call_piece(0, '{"x"', "call_1", "f")])), _chunk("a2", [_call_piece(0, ": 1}")]),
                 _chunk("a3", finish="tool_calls"), {"id": "a4", "object": "chat.completion.chunk", "choices": []}]
        # A server that writes the same id on every completion: the role after a finish_reason begins one.
        same = [role(_chunk("c", [_call_piece(0, "{}", "call_1", "f")])), _chunk("c", finish="tool_calls"),
                role(_chunk("c", [_call_piece(0, "{}", "call_2", "g")])), _chunk("c", finish="tool_calls")]
        for log, expected in ((every, [("f", {"x": 1}, 0)]), (same, [("f", {}, 0), ("g", {}, 1)])):
            for data in (_lines(*log), json.dumps(log).encode("utf-8")):  # JSON Lines, or a JSON array
                code, out, _ = _run("auto", data)
                self.assertEqual((code, [(r["tool"], r["args"], r["meta"]["turn"]) for r in _records(out)]),
                                 (0, expected))

    def test_an_error_ending_the_stream_is_a_warning(self) -> None:
        log = _lines(_chunk("c", [_call_piece(0, '{"q": ', "call_1", "search")]),
                     {"error": {"message": "The server had an error", "type": "server_error", "code": None}})
        code, out, err = _run("auto", log)
        self.assertEqual((code, [r["args"] for r in _records(out)]), (0, [{"_raw_arguments": '{"q": '}]))
        self.assertEqual(err.splitlines()[-1], "warning: <stdin>:2: conversation 0, message 1: the stream reports an "
                                               "error: server_error: The server had an error")

    def test_malformed_chunks_are_one_line_errors(self) -> None:
        cases = [
            ((_chunk("c", [{"index": 0, "id": "x", "function": {"arguments": "{}"}}]),),
             '<stdin>:1: conversation 0, message 0: a streamed tool call has no "function.name" string'),
            ((_chunk("c", [{"index": 0, "id": "x", "function": {"name": "f", "arguments": {}}}]),),
             '<stdin>:1: conversation 0, message 0: a streamed "function.arguments" must be a string'),
            (({"id": "c", "object": "chat.completion.chunk", "choices": {}},),
             '<stdin>:1: conversation 0, message 0: "choices" must be an array'),
        ]
        for events, error in cases:
            with self.subTest(error=error):
                self.assertEqual(_run("openai-chat", _lines(*events, *events)), (2, "", f"error: {error}\n"))


class ResponsesStreamTest(unittest.TestCase):
    def test_two_responses_with_the_output_between_them(self) -> None:
        log = [
            {"role": "user", "content": "Capital of France, then its weather?"},
            _created("resp_1"), _added(0, "fc_1", "call_1", "get_capital"), _delta(0, "fc_1", '{"country":'),
            _delta(0, "fc_1", '"France"}'), _done(0, "fc_1", "call_1", "get_capital", '{"country":"France"}'),
            _completed("resp_1"),
            {"type": "function_call_output", "call_id": "call_1", "output": "Paris"},
            _created("resp_2", 1743082700), _added(0, "fc_2", "call_2", "get_weather"),
            _delta(0, "fc_2", '{"city": "Par'), _completed("resp_2"),
        ]
        for data, line in ((_lines(*log), 10), (_sse(*log), 28)):  # SSE: 3 lines an event, data the 2nd
            code, out, err = _run("auto", data)
            self.assertEqual((code, _records(out)), (0, [
                {"index": 0, "tool": "get_capital", "args": {"country": "France"}, "response": {"text": "Paris"},
                 "meta": {"ts": "2025-03-27T13:37:37Z", "call_id": "call_1", "turn": 0}},
                {"index": 1, "tool": "get_weather", "args": {"_raw_arguments": '{"city": "Par'},
                 "response": {"error": "no recorded response"},
                 "meta": {"ts": "2025-03-27T13:38:20Z", "call_id": "call_2", "turn": 1}},
            ]))
            self.assertEqual(err.splitlines()[:2], [
                "detected format: openai-responses",
                f"warning: <stdin>:{line}: conversation 0, message 9: function_call get_weather: its item did not end "
                "(no response.output_item.done); read as far as it came",
            ])

    def test_the_done_arguments_win_and_unknown_items_are_errors(self) -> None:
        log = _lines(_created("r"), _added(0, "fc", "call", "f"), _delta(0, "fc", '{"a": 1'),
                     {"type": "response.function_call_arguments.done", "item_id": "fc", "output_index": 0,
                      "arguments": '{"a": 1}'}, _completed("r"))
        self.assertEqual([(r["args"]) for r in _records(_run("openai-responses", log)[1])], [{"a": 1}])
        self.assertEqual(
            _run("openai-responses", _lines(_created("r"), _delta(0, "fc_9", "{}"))),
            (2, "", "error: <stdin>:2: conversation 0, message 1: a response.function_call_arguments.delta event "
                    "for an item that no response.output_item.added began\n"))


class ProxyLogTest(unittest.TestCase):
    def test_a_request_with_its_streamed_response(self) -> None:
        # A proxy's log line: the request's messages (the replies to the calls before) and the response,
        # as its SSE text or its events.
        events = [_start(), _tool(0, "toolu_b", "read_file"), _piece(0, '{"path": "b.txt"}'), _stop(0), *_END]
        request = [{"role": "user", "content": "Read a.txt, then b.txt"},
                   {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_a", "name": "read_file",
                                                      "input": {"path": "a.txt"}}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"}]}]
        for response in (_sse(*events).decode("utf-8"), events):
            entry = {"model": "claude-sonnet-4-5", "messages": request, "response": response}
            code, out, _ = _run("auto", _lines(entry))
            self.assertEqual((code, [(r["tool"], r["args"], r["response"], r["meta"]["turn"]) for r in
                                     _records(out)]),
                             (0, [("read_file", {"path": "a.txt"}, {"text": "A"}, 0),
                                  ("read_file", {"path": "b.txt"}, {"error": "no recorded response"}, 1)]))
        bad = {"messages": request, "response": "event: message_start\ndata: {oops}\n\n"}
        self.assertEqual(_run("anthropic", _lines(bad, bad)),
                         (2, "", 'error: <stdin>:1: conversation 0: "response" line 2: SSE data: invalid JSON: '
                                 "Expecting property name enclosed in double quotes (column 2)\n"))


def _text(index: int, *pieces: str) -> list[dict[str, Any]]:
    return [{"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
            *({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}
              for piece in pieces), _stop(index)]


def _content(chunk_id: str, text: str | None = None, finish: str | None = None) -> dict[str, Any]:
    return {"id": chunk_id, "object": "chat.completion.chunk", "created": 1727346178,
            "choices": [{"index": 0, "delta": {"content": text} if text is not None else {},
                         "finish_reason": finish}]}


class TranscriptTest(unittest.TestCase):
    def transcripts(self, data: bytes) -> list[Transcript]:
        found: list[Transcript] = []
        import_file(io.BytesIO(data), "auto", "log", found)
        return found

    def test_the_answer_is_the_text_of_the_last_streamed_response(self) -> None:
        anthropic = _sse(
            {"role": "user", "content": "Weather in Paris?"},
            _start(), *_text(0, "Let me ", "check."), _tool(1, "toolu_a", "get_weather"),
            _piece(1, '{"city": "Paris"}'), _stop(1), *_END,
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "rain"}]},
            _start("msg_2"), {"type": "content_block_start", "index": 0,
                              "content_block": {"type": "thinking", "thinking": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Easy."}},
            _stop(0), *_text(1, "It is ", "raining in Paris."), *_END)
        chat = _lines(
            {"role": "user", "content": "Weather in Paris?"},
            _chunk("c1", [_call_piece(0, '{"city": "Paris"}', "call_a", "get_weather")]),
            _chunk("c1", finish="tool_calls"),
            {"role": "tool", "tool_call_id": "call_a", "content": "rain"},
            _content("c2", "It is "), _content("c2", "raining in Paris."), _content("c2", None, "stop"))
        responses = _lines(
            {"role": "user", "content": "Weather in Paris?"},
            _created("r1"), _added(0, "fc", "call_a", "get_weather"),
            _done(0, "fc", "call_a", "get_weather", '{"city": "Paris"}'), _completed("r1"),
            {"type": "function_call_output", "call_id": "call_a", "output": "rain"},
            _created("r2"), {"type": "response.output_text.delta", "output_index": 0, "delta": "It is "},
            {"type": "response.output_text.delta", "output_index": 0, "delta": "raining in Paris."},
            _completed("r2"))
        for data in (anthropic, chat, responses):
            with self.subTest(data=data[:60]):
                self.assertEqual(self.transcripts(data),
                                 [Transcript(0, "Weather in Paris?", "It is raining in Paris.", (0,))])
        # The text of the response that asked for a call is no answer.
        self.assertEqual(self.transcripts(anthropic[:anthropic.index(b'"tool_result"')].rsplit(b"data:", 1)[0]),
                         [Transcript(0, "Weather in Paris?", None, (0,))])

    def test_a_streamed_log_becomes_a_suite_the_recorded_agent_passes(self) -> None:
        log = _lines(
            {"role": "user", "content": "Weather in Paris?"},
            _chunk("c1", [_call_piece(0, '{"city": "Paris"}', "call_a", "get_weather")]),
            _chunk("c1", finish="tool_calls"),
            {"role": "tool", "tool_call_id": "call_a", "content": "rain"},
            _content("c2", "It is raining."), _content("c2", None, "stop"))
        with tempfile.TemporaryDirectory() as tmp:
            path, suite = os.path.join(tmp, "log.jsonl"), os.path.join(tmp, "suite")
            with open(path, "wb") as handle:
                handle.write(log)
            self.assertEqual(main(["import", "auto", path, "--suite", suite], IO.memory()), 0)
            report = evaluate(load_suite(os.path.join(suite, "suite.json")),
                              [NamedAgent("recorded", "toolreplay.evaluation.recorded:recorded_agent",
                                          recorded_agent)])
        run = report.agents[0].runs[0]
        self.assertEqual((run.case.question, run.answer, run.calls[0].response, run.passed),
                         ("Weather in Paris?", "It is raining.", {"text": "rain"}, True))


class DetectionTest(unittest.TestCase):
    def test_a_named_format_of_another_stream_is_refused(self) -> None:
        chat = _lines(_chunk("c", [_call_piece(0, "{}", "x", "f")]))
        self.assertEqual(_run("anthropic", chat), (
            2, "", 'error: <stdin>:1: conversation 0, message 0: a "chat.completion.chunk" belongs to the '
                   "openai-chat format, not anthropic\n"))
        self.assertEqual(_run("openai-chat", _sse(_start()))[2],
                         "error: <stdin>:2: conversation 0, message 0: an Anthropic stream event belongs to the "
                         "anthropic format, not openai-chat\n")

    def test_sse_details(self) -> None:
        # CRLF line ends, a comment, an `id:` field, data over two lines, no blank line at the end.
        data = (b": keep-alive\r\nid: 1\r\nevent: message_start\r\ndata: " + json.dumps(_start()).encode()
                + b"\r\n\r\ndata: " + json.dumps(_tool(0, "t", "f")).encode() + b"\r\n\r\ndata: {\"type\":\r\n"
                b"data: \"content_block_stop\", \"index\": 0}\r\n\r\ndata: {\"type\": \"message_stop\"}")
        code, out, _ = _run("auto", data)
        self.assertEqual((code, [r["tool"] for r in _records(out)]), (0, ["f"]))
        self.assertEqual(_run("auto", b"event: message_start\ndata: {\"type\": \n\n"),
                         (2, "", "error: <stdin>:2: SSE data: invalid JSON: Expecting value (column 10)\n"))
        self.assertEqual(_run("auto", b"event: ping\n\n"), (2, "", "error: <stdin>: SSE text without an event "
                                                                  "holding data\n"))


if __name__ == "__main__":
    unittest.main()
