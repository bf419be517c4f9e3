"""`diff A B`: alignment of two sessions, the first divergence, each kind of difference, folders, exit codes."""

from __future__ import annotations

import json
import os
import tempfile
import unittest
from typing import Any

from toolreplay.audit.diff import CallSide, diff_sessions, read_side
from toolreplay.cli import main
from toolreplay.cli._io import IO


def run(*argv: str) -> tuple[int, str, str]:
    streams = IO.memory()
    code = main(list(argv), streams)
    return code, streams.out(), streams.err()


def session(*calls: tuple[str, dict[str, Any], dict[str, Any]]) -> bytes:
    return b"".join(json.dumps({"index": index, "tool": tool, "args": args, "response": response}).encode() + b"\n"
                    for index, (tool, args, response) in enumerate(calls))


def sides(*keys: str) -> list[CallSide]:
    """Calls named by letters; a letter followed by `'` is the same call with another response."""
    return [CallSide(index, key[0], key[0].encode(), key.encode()) for index, key in enumerate(keys)]


class AlignmentTest(unittest.TestCase):
    # (a, b, common, first divergence, only in a, only in b, different responses as (a index, b index))
    CASES = [
        ("abc", "abc", 3, None, "", "", []),
        ("", "", 0, None, "", "", []),
        ("abc", "abxc", 3, (2, 2), "", "x", []),
        ("abxc", "abc", 3, (2, 2), "x", "", []),
        ("abc", "ab", 2, (2, 2), "c", "", []),
        ("ab", "abc", 2, (2, 2), "", "c", []),
        ("xabc", "abcy", 3, (0, 0), "x", "y", []),
        ("abc", "xyz", 0, (0, 0), "abc", "xyz", []),
        ("abcabc", "abc", 3, (3, 3), "abc", "", []),
        ("axbyc", "abc", 3, (1, 1), "xy", "", []),
        ("ab", "ba", 1, (0, 0), "a", "a", []),  # ties: keep the earliest pair, A's extra call listed first
    ]

    def test_cases(self) -> None:
        for a, b, common, first, only_a, only_b, different in self.CASES:
            with self.subTest(a=a, b=b):
                diff = diff_sessions(sides(*a), sides(*b))
                self.assertEqual((diff.common, diff.first_divergence, diff.equal), (common, first, first is None))
                self.assertEqual("".join(call.tool for call in diff.only_in_a), only_a)
                self.assertEqual("".join(call.tool for call in diff.only_in_b), only_b)
                self.assertEqual([(p.a.index, p.b.index) for p in diff.different_responses], different)

    def test_same_call_with_another_response(self) -> None:
        diff = diff_sessions(sides("a", "b", "c"), sides("a", "b'", "c"))
        self.assertEqual((diff.common, diff.first_divergence, diff.only_in_a, diff.only_in_b), (3, (1, 1), (), ()))
        self.assertEqual([(p.a.index, p.b.index) for p in diff.different_responses], [(1, 1)])

    def test_long_sessions_with_a_small_change(self) -> None:
        a = sides(*("abcdefgh" * 500))
        b = sides(*("abcdefgh" * 250 + "x" + "abcdefgh" * 250))
        diff = diff_sessions(a, b)
        self.assertEqual((diff.common, diff.first_divergence, len(diff.only_in_b)), (4000, (2000, 2000), 1))


class DiffCommandTest(unittest.TestCase):
    def setUp(self) -> None:
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        self.directory = directory.name

    def write(self, name: str, data: bytes) -> str:
        path = os.path.join(self.directory, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)
        return path

    def test_text_and_exit_codes(self) -> None:
        a = self.write("a.jsonl", session(("search", {"q": "tea"}, {"hits": 3}), ("get", {"id": 1}, {"v": 1}),
                                          ("get", {"id": 2}, {"v": 2})))
        b = self.write("b.jsonl", session(("search", {"q": "tea"}, {"hits": 4}), ("get", {"id": 2.0}, {"v": 2}),
                                          ("buy", {"id": 2}, {"ok": True})))
        self.assertEqual(run("diff", a, b), (1, f"""\
a: {a} (3 calls)
b: {b} (3 calls)
common calls: 2
first divergence: a index 0, b index 0
only in a: 1
  index 1: get {{"id":1}}
only in b: 1
  index 2: buy {{"id":2}}
different responses: 1
  a index 0, b index 0: search {{"q":"tea"}}
result: differ
""", ""))
        self.assertEqual(run("diff", a, a), (0, f"""\
a: {a} (3 calls)
b: {a} (3 calls)
common calls: 3
first divergence: none
only in a: 0
only in b: 0
different responses: 0
result: equal
""", ""))

    def test_json(self) -> None:
        a = self.write("a.jsonl", session(("get", {"id": 1}, {"v": 1})))
        b = self.write("b.jsonl", session(("get", {"id": 1}, {"v": 1}), ("get", {"id": 2}, {"v": 2})))
        code, out, _ = run("diff", a, b, "--format", "json")
        self.assertEqual(code, 1)
        self.assertEqual(json.loads(out), {
            "command": "diff", "a": a, "b": b, "equal": False, "calls": {"a": 1, "b": 2, "common": 1},
            "first_divergence": {"a": None, "b": 1}, "only_in_a": [],
            "only_in_b": [{"index": 1, "tool": "get", "args": {"id": 2}}], "different_responses": []})
        self.assertIn("first divergence: a end, b index 1\n", run("diff", a, b)[1])
        c = self.write("c.jsonl", session(("get", {"id": 1}, {"v": 7})))
        (pair,) = json.loads(run("diff", a, c, "--format", "json")[1])["different_responses"]
        self.assertEqual(pair, {"a_index": 0, "b_index": 0, "tool": "get", "args": {"id": 1}, "a_response": {"v": 1},
                                "b_response": {"v": 7}})

    def test_hostile_tool_names_are_escaped_in_text_only(self) -> None:
        a = self.write("a.jsonl", session(("get\x1b[2J\nresult: equal", {}, {})))
        b = self.write("b.jsonl", b"")
        code, out, _ = run("diff", a, b)
        self.assertEqual((code, out.splitlines()[5]), (1, "  index 0: get\\x1b[2J\\x0aresult: equal {}"))
        self.assertEqual(out.count("result: "), 2)  # the forged one is inside an escaped line
        self.assertTrue(out.endswith("\nresult: differ\n"))
        self.assertEqual(json.loads(run("diff", a, b, "--format", "json")[1])["only_in_a"][0]["tool"],
                         "get\x1b[2J\nresult: equal")

    def test_folders_case_by_case(self) -> None:
        same = session(("get", {"id": 1}, {"v": 1}))
        self.write("old/agent/c1.jsonl", same)
        self.write("new/agent/c1.jsonl", same)
        self.write("old/agent/c2.jsonl", same)
        self.write("new/agent/c2.jsonl", session(("get", {"id": 1}, {"v": 9})))
        self.write("old/agent/gone.jsonl", same)
        self.write("new/agent/new.jsonl", same)
        self.write("new/agent/scope.json", b"{}")
        old, new = os.path.join(self.directory, "old"), os.path.join(self.directory, "new")
        self.assertEqual(run("diff", old, new), (1, f"""\
a: {old}
b: {new}
agent/c1.jsonl: equal
agent/c2.jsonl: differ
  common calls: 1
  first divergence: a index 0, b index 0
  only in a: 0
  only in b: 0
  different responses: 1
    a index 0, b index 0: get {{"id":1}}
only in a: agent/gone.jsonl
only in b: agent/new.jsonl
sessions: 2 compared, 1 differ, 1 only in a, 1 only in b
result: differ
""", ""))
        document = json.loads(run("diff", old, new, "--format", "json")[1])
        self.assertEqual(([s["name"] for s in document["sessions"]], document["only_in_a"], document["equal"]),
                         (["agent/c1.jsonl", "agent/c2.jsonl"], ["agent/gone.jsonl"], False))

    def test_bad_input_exits_2(self) -> None:
        good = self.write("good.jsonl", session(("get", {}, {})))
        bad = self.write("bad.jsonl", b'{"index": 1, "tool": "t", "args": {}, "response": {}}\n')
        missing = os.path.join(self.directory, "none.jsonl")
        for argv, error in (
                ([good, bad], f"error: {bad}:1: index must start at 0, got 1\n"),
                ([missing, good], f"error: cannot read {missing}: No such file or directory\n"),
                ([self.directory, good], f"error: cannot compare a folder with a file: {self.directory} is a folder\n"),
                ([good], "error: the following arguments are required: B\n")):
            with self.subTest(argv=argv):
                code, out, err = run("diff", *argv)
                self.assertEqual((code, out), (2, ""))
                self.assertTrue(err.startswith(error.rstrip("\n")), err)

    def test_read_side_keeps_indexes(self) -> None:
        path = self.write("s.jsonl", session(("a", {}, {}), ("b", {"x": 1}, {"y": 2})))
        self.assertEqual([(call.index, call.tool, call.args) for call in read_side(path)],
                         [(0, "a", {}), (1, "b", {"x": 1})])


if __name__ == "__main__":
    unittest.main()


class TimesTest(unittest.TestCase):
    """Format 1.1: the times and durations of the records are shown next to the calls they concern."""

    A = (b'{"index": 0, "tool": "search", "args": {"q": "x"}, "response": {"n": 1}, "meta": '
         b'{"ts": "2026-12-01T16:00:00.100Z", "duration_ms": 12.5}}\n'
         b'{"index": 1, "tool": "read", "args": {"p": "a"}, "response": {}, "meta": {"ts": "2026-12-01T16:00:01Z"}}\n')
    B = (b'{"index": 0, "tool": "search", "args": {"q": "x"}, "response": {"n": 2}, "meta": {"duration_ms": 3}}\n'
         b'{"index": 1, "tool": "write", "args": {"p": "a"}, "response": {}}\n')

    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.a, self.b = os.path.join(folder.name, "a.jsonl"), os.path.join(folder.name, "b.jsonl")
        for path, data in ((self.a, self.A), (self.b, self.B)):
            with open(path, "wb") as handle:
                handle.write(data)

    def test_text(self) -> None:
        self.assertEqual(run("diff", self.a, self.b), (1, (
            f"a: {self.a} (2 calls)\nb: {self.b} (2 calls)\ncommon calls: 1\nfirst divergence: a index 0, b index 0\n"
            'only in a: 1\n  index 1: read {"p":"a"} (at 2026-12-01T16:00:01Z)\n'
            'only in b: 1\n  index 1: write {"p":"a"}\n'
            'different responses: 1\n  a index 0, b index 0: search {"q":"x"} '
            "(a: at 2026-12-01T16:00:00.100Z, 12.5 ms; b: 3 ms)\nresult: differ\n"), ""))

    def test_json(self) -> None:
        code, out, _ = run("diff", "--format", "json", self.a, self.b)
        document = json.loads(out)
        self.assertEqual(document["only_in_a"], [{"index": 1, "tool": "read", "args": {"p": "a"},
                                                  "ts": "2026-12-01T16:00:01Z"}])
        self.assertEqual(document["only_in_b"], [{"index": 1, "tool": "write", "args": {"p": "a"}}])
        pair = document["different_responses"][0]
        self.assertEqual((pair["a_ts"], pair["a_duration_ms"], pair["b_duration_ms"], "b_ts" in pair),
                         ("2026-12-01T16:00:00.100Z", 12.5, 3, False))

    def test_html_timeline(self) -> None:
        code, out, _ = run("replay", "--format", "html", self.a)
        self.assertEqual(code, 0)
        self.assertIn('<span class="i">0</span><span class="w" title="2026-12-01T16:00:00.100Z">16:00:00.100 · '
                      '12.5 ms</span><span class="t">search</span>', out)
        self.assertIn('<span class="i">1</span><span class="w" title="2026-12-01T16:00:01Z">16:00:01</span>', out)
        code, out, _ = run("replay", "--format", "html", self.b)
        self.assertIn('<span class="i">0</span><span class="w">3 ms</span><span class="t">search</span>', out)
        self.assertIn('<span class="i">1</span><span class="t">write</span>', out)
