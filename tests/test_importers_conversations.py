"""Conversation discovery and pairing: where conversations are, and which reply belongs to which call."""

from __future__ import annotations

import unittest

from toolreplay.importers.conversations import find_conversations
from toolreplay.importers.pairing import (
    ConversionWarning,
    ImportedCall,
    ToolCall,
    ToolReply,
    flag_error,
    pair_events,
    parse_arguments,
    reply_response,
)

M = '{"role": "user", "content": "hi"}'

# (input, [(position, number of messages, line of the conversation, container)])
DISCOVERY = [
    (f"[{M}, {M}]", [(0, 2, None, "array")]),
    (f'{{"messages": [{M}]}}', [(0, 1, None, "messages")]),
    (f'{{"traj": [{M}, {M}], "task_id": 3}}', [(0, 2, None, "traj")]),
    (f'[{{"messages": [{M}]}}, {{"traj": []}}]', [(0, 1, None, "messages"), (1, 0, None, "traj")]),
    (
        f'{{"simulations": [{{"messages": [{M}]}}, {{"messages": []}}]}}',
        [(0, 1, None, "simulations"), (1, 0, None, "simulations")],
    ),
    (f"[{M}]\n\n[{M}, {M}]\n", [(0, 1, 1, "array"), (1, 2, 3, "array")]),
    (f'{{"messages": [{M}]}}\n{{"messages": []}}', [(0, 1, 1, "messages"), (1, 0, 2, "messages")]),
    (f"{M}\n{M}\n\n{M}\n", [(0, 3, None, "lines")]),
    (M, [(0, 1, None, "lines")]),
    ("[]", [(0, 0, None, "array")]),
]


class DiscoveryTest(unittest.TestCase):
    def test_where_conversations_are(self) -> None:
        for text, expected in DISCOVERY:
            with self.subTest(text=text):
                found = find_conversations(text.encode(), "log")
                self.assertEqual(
                    [(c.position, len(c.messages), c.line, c.container) for c in found], expected
                )

    def test_message_per_line_keeps_line_numbers(self) -> None:
        (conversation,) = find_conversations(f"{M}\n\n{M}\n".encode(), "log")
        self.assertEqual((conversation.lines, conversation.line_of(1)), ((1, 3), 3))
        self.assertEqual(str(conversation.error(1, "bad")), "log:3: conversation 0, message 1: bad")

    def test_mixed_lines_are_errors(self) -> None:
        cases = [
            (
                f"[{M}]\n{M}",
                'log:2: not a conversation (an array of messages or an object with "messages"), '
                "unlike line 1",
            ),
            (f"{M}\n[{M}]", "log:2: not a message object, unlike line 1"),
            (
                '{"messages": 3}\n{"messages": []}',
                'log:1: conversation 0: "messages" must be an array of messages',
            ),
        ]
        for text, message in cases:
            with self.subTest(text=text), self.assertRaises(Exception) as caught:
                find_conversations(text.encode(), "log")
            self.assertEqual(str(caught.exception), message)


def _call(call_id: str | None, tool: str, message: int) -> ToolCall:
    return ToolCall(call_id, tool, {}, message)


def _reply(call_id: str | None, text: str, message: int) -> ToolReply:
    return ToolReply(call_id, {"text": text}, message)


class PairingTest(unittest.TestCase):
    def _pair(self, events: list[ToolCall | ToolReply]) -> tuple[list[tuple[str, str]], list[str]]:
        (conversation,) = find_conversations(b"[]", "log")
        warnings: list[ConversionWarning] = []
        records = pair_events(conversation, events, warnings)
        return [(r.tool, r.response.get("text", r.response.get("error"))) for r in records], [
            w.message for w in warnings
        ]

    def test_by_id_whatever_the_reply_order(self) -> None:
        events = [_call("a", "f", 0), _call("b", "g", 0), _reply("b", "B", 1), _reply("a", "A", 2)]
        self.assertEqual(self._pair(events), ([("f", "A"), ("g", "B")], []))

    def test_repeated_ids_pair_by_order(self) -> None:
        events = [_call("x", "f", 0), _reply("x", "1", 1), _call("x", "g", 2), _reply("x", "2", 3)]
        self.assertEqual(self._pair(events), ([("f", "1"), ("g", "2")], []))

    def test_repeated_ids_waiting_together_pair_in_order(self) -> None:
        events = [_call("x", "f", 0), _call("x", "g", 0), _reply("x", "1", 1), _reply("x", "2", 2)]
        self.assertEqual(self._pair(events), ([("f", "1"), ("g", "2")], []))

    def test_missing_ids_pair_by_order(self) -> None:
        events = [_call(None, "f", 0), _call(None, "g", 0), _reply(None, "1", 1), _reply("z", "2", 2)]
        self.assertEqual(self._pair(events), ([("f", "1"), ("g", "2")], []))

    def test_a_reply_never_pairs_with_a_later_call(self) -> None:
        events = [_reply(None, "early", 0), _call(None, "f", 1)]
        self.assertEqual(
            self._pair(events),
            (
                [("f", "no recorded response")],
                [
                    "conversation 0, message 0: reply matches no earlier call; dropped",
                    "conversation 0, message 1: call 0 (f): no reply; response set to "
                    '{"error": "no recorded response"}',
                ],
            ),
        )

    def test_a_second_reply_to_one_call_is_dropped(self) -> None:
        events = [_call("a", "f", 0), _reply("a", "1", 1), _reply("a", "2", 2)]
        self.assertEqual(
            self._pair(events),
            (
                [("f", "1")],
                ['conversation 0, message 2: reply to call id "a" matches no earlier call; dropped'],
            ),
        )

    def test_records_are_imported_calls(self) -> None:
        (conversation,) = find_conversations(b"[]", "log")
        records = pair_events(
            conversation, [ToolCall("a", "f", '{"k": 1}', 0), ToolReply("a", {"ok": True}, 1)], []
        )
        self.assertEqual(records, [ImportedCall("f", {"k": 1}, {"ok": True}, {"call_id": "a"})])


# (raw arguments, args, why kept raw)
ARGUMENTS = [
    ('{"a": 1}', {"a": 1}, None),
    ({"a": 1}, {"a": 1}, None),
    (None, {}, None),
    ("", {"_raw_arguments": ""}, "arguments are not valid JSON"),
    ('{"a": 1, "a": 2}', {"_raw_arguments": '{"a": 1, "a": 2}'}, "arguments are not valid JSON"),
    ("[1]", {"_raw_arguments": "[1]"}, "arguments are not a JSON object"),
    ("null", {"_raw_arguments": "null"}, "arguments are not a JSON object"),
    (7, {"_raw_arguments": 7}, "arguments are not a JSON object"),
]

# (content, error flag, response)
RESPONSES = [
    ('{"a": 1}', False, {"a": 1}),
    (' {"a": 1}\n', False, {"a": 1}),
    ("[1, 2]", False, {"text": "[1, 2]"}),
    ("plain", False, {"text": "plain"}),
    (None, False, {"text": ""}),
    ([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], False, {"text": "a\nb"}),
    ([{"type": "text", "text": '{"x":'}, {"type": "text", "text": "1}"}], False, {"x": 1}),
    ([{"type": "image", "source": {}}], False, {"content": [{"type": "image", "source": {}}]}),
    ("Error: boom", True, {"error": True, "text": "Error: boom"}),
    ('{"code": 5}', True, {"error": True, "code": 5}),
    ('{"error": "gone"}', True, {"error": True, "text": '{"error": "gone"}'}),
    ('{"error": "gone"}', False, {"error": "gone"}),
]


class MappingTest(unittest.TestCase):
    def test_arguments(self) -> None:
        for raw, args, problem in ARGUMENTS:
            with self.subTest(raw=raw):
                self.assertEqual(parse_arguments(raw), (args, problem))

    def test_responses(self) -> None:
        for content, error, response in RESPONSES:
            with self.subTest(content=content, error=error):
                self.assertEqual(reply_response(content, error), response)

    def test_flag_error_puts_error_first(self) -> None:
        self.assertEqual(
            list(flag_error({"content": [], "isError": True}, True, {})), ["error", "content", "isError"]
        )


if __name__ == "__main__":
    unittest.main()
