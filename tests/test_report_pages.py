"""The HTML pages as text: `replay`/`scope --format html`, escaping, what a large input leaves out, determinism.

What a browser makes of them is in test_report_html.py.
"""

from __future__ import annotations

import os
import tempfile
import unittest
from unittest import mock

from toolreplay.audit.detail import CallView
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.report import pages
from toolreplay.report.html import args_summaries, json_text, path_text, text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "samples")
DIRTY = os.path.join(SAMPLES, "session-dirty.jsonl")
SCOPE = os.path.join(SAMPLES, "scope.json")


def run(*argv: str, stdin: bytes = b"") -> tuple[int, str, str]:
    io = IO.memory(stdin)
    code = main(list(argv), io)
    return code, io.out(), io.err()


class EscapingTest(unittest.TestCase):
    def test_log_text_is_shown_not_obeyed(self) -> None:
        self.assertEqual(text("<script>alert(1)</script>"), "&lt;script&gt;alert(1)&lt;/script&gt;")
        self.assertEqual(text('a"b\n\u202e'), "a&quot;b\\x0a\\u202e")
        self.assertEqual(json_text('{"q":"<b>\u202e"}'), "{&quot;q&quot;:&quot;&lt;b&gt;\\u202e&quot;}")
        self.assertEqual(path_text("fleet/sub/<a>.jsonl", "fleet/"), '<span class="dir">sub/</span>&lt;a&gt;.jsonl')


class SessionPageTest(unittest.TestCase):
    def test_replay_page(self) -> None:
        code, out, err = run("replay", DIRTY, "--format", "html")
        self.assertEqual((code, err), (1, ""))
        self.assertTrue(out.startswith("<!DOCTYPE html>\n"))
        self.assertIn("tool &#x27;search&#x27; returned a different response than the identical call at index 3", out)
        self.assertIn('<li id="c5" class="lazy hit"', out)
        self.assertIn("first response, index 3", out)
        self.assertEqual(run("replay", DIRTY, "--format", "html"), (code, out, err))

    def test_replay_page_from_standard_input(self) -> None:
        with open(DIRTY, "rb") as handle:
            data = handle.read()
        code, out, _ = run("replay", "-", "--format", "html", stdin=data)
        self.assertEqual(code, 1)
        self.assertIn("<title>replay: &lt;stdin&gt;</title>", out)
        self.assertEqual(run("replay", "-", "--format", "html", stdin=data + b"[]\n"),
                         (2, "", "error: <stdin>:7: record must be a JSON object, not array\n"))

    def test_scope_page(self) -> None:
        code, out, _ = run("scope", DIRTY, SCOPE, "--format", "html")
        self.assertEqual(code, 1)
        self.assertIn("scope report for agent docs-reader", out)
        self.assertIn("tool &#x27;write_file&#x27; is not in the declared scope for agent &#x27;docs-reader&#x27;", out)

    def test_verify_has_no_html(self) -> None:
        code, _, err = run("verify", DIRTY, "--format", "html")
        self.assertEqual(code, 2)
        self.assertIn("invalid choice: 'html'", err)

    def test_a_long_session_says_what_it_leaves_out(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "long.jsonl")
            with open(path, "w", encoding="utf-8") as handle:
                for index in range(3000):  # every call after the first repeats it: 2,999 findings
                    handle.write(f'{{"index": {index}, "tool": "poll", "args": {{}}, "response": {{}}}}\n')
            code, out, _ = run("replay", path, "--format", "html")
        self.assertEqual(code, 1)
        self.assertIn("Findings (the first 1,000 of 2,999)", out)
        self.assertIn("1,999 more findings are not shown here", out)
        self.assertIn('<li class="gap">1,999 calls without shown findings left out</li>', out)
        self.assertNotIn('id="c1001"', out)


class FleetPageTest(unittest.TestCase):
    def test_rows_beyond_the_limit_are_counted(self) -> None:
        with mock.patch.object(pages, "ROWS_LISTED", 2):
            code, out, _ = run("audit", DIRTY, os.path.join(SAMPLES, "session-clean.jsonl"),
                               os.path.join(SAMPLES, "session-orders.jsonl"), "--format", "html")
        self.assertEqual(code, 1)
        self.assertIn('"rows":[["","session-clean.jsonl",4,0,[],"",null,null,null,false],', out)
        self.assertIn("1 more not listed; the JSON report has them all.", out)

    def test_log_text_cannot_end_the_data_block(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "<!--<script>x.jsonl")
            call = '{"index": %d, "tool": "</script><script>alert(1)</script>", "args": {}, "response": {}}\n'
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(call % 0 + call % 1)
            code, out, _ = run("audit", folder, "--format", "html")
        self.assertEqual(code, 1)
        self.assertEqual(out.count("</script>"), 2)  # the data block's end and the page's own script's
        self.assertEqual(out.count("<script"), 2)
        self.assertIn('"\\u003c!--\\u003cscript>x.jsonl"', out)
        self.assertIn("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;", out)


if __name__ == "__main__":
    unittest.main()


def _view(index: int, tool: str, args: str, size: int | None = None) -> CallView:
    return CallView(index, tool, args, "{}", len(args.encode("utf-8")) if size is None else size, 2)


class ArgsSummaryTest(unittest.TestCase):
    """The timeline's one-line args put first the fields that differ between the shown calls of one tool."""

    def test_the_field_that_differs_comes_first(self) -> None:
        calls = [_view(i, "book", f'{{"cabin":"economy","flights":["HAT1"],"payment":"card_{i}","user":"u1"}}')
                 for i in range(3)] + [_view(3, "search", '{"q":"a"}'), _view(4, "search", '{"q":"b","z":1}')]
        self.assertEqual(args_summaries(calls), {
            0: '{"payment":"card_0","cabin":"economy","flights":["HAT1"],"user":"u1"}',
            1: '{"payment":"card_1","cabin":"economy","flights":["HAT1"],"user":"u1"}',
            2: '{"payment":"card_2","cabin":"economy","flights":["HAT1"],"user":"u1"}',
            3: '{"q":"a"}',  # a field present in one call and absent in another differs too
            4: '{"q":"b","z":1}'})

    def test_alike_calls_single_calls_and_cut_args_keep_their_text(self) -> None:
        calls = [_view(0, "book", '{"a":1}'), _view(1, "book", '{"a":1}'), _view(2, "read", '{"p":"x"}'),
                 _view(3, "list", '{"b":1,"a":1}', size=500), _view(4, "list", '{"b":2,"a":1}')]
        self.assertEqual(args_summaries(calls), {})
