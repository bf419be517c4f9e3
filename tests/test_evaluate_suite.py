"""The suite file: every validation error with its exact message, and what a valid suite becomes."""

from __future__ import annotations

import copy
import os
import tempfile
import unittest
from typing import Any

from toolreplay.errors import InputError, UsageError
from toolreplay.evaluation.metrics import ExpectedCall
from toolreplay.evaluation.suite import load_suite, parse_suite
from toolreplay.evaluation.tools import CassetteTools, ModuleTools

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = {"module": "toolreplay.demos.orders:TOOLS"}
CASE = {"id": "a", "question": "Status of order 3001?", "expected_answer": "shipped", "expected_tools": ["get_order"]}
KNOWN = "(tools: count_orders, get_order, get_refund, track_shipment)"
MODES = "exact, ignore, subset, superset, within, includes"


def suite_with(**changes: Any) -> dict[str, Any]:
    """A valid one-case suite with the case's fields changed (None removes a field)."""
    case = copy.deepcopy(CASE)
    for key, value in changes.items():
        if value is None:
            case.pop(key)
        else:
            case[key] = value
    return {"tools": TOOLS, "cases": [case]}


INVALID = [
    ([], "a suite must be an object, not array"),
    ({"tools": TOOLS}, 'missing field "cases"'),
    ({"tools": TOOLS, "cases": [CASE], "name": "x"}, 'unknown field "name" (known: tools, cases, args_match)'),
    ({"tools": TOOLS, "cases": []}, "cases: must be a non-empty array of cases"),
    ({"tools": TOOLS, "cases": {}}, "cases: must be a non-empty array of cases"),
    ({"tools": {}, "cases": [CASE]}, 'tools: must be an object with exactly one of "module", "factory" or "cassette"'),
    ({"tools": {"module": "x:y", "cassette": "s.jsonl"}, "cases": [CASE]},
     'tools: must be an object with exactly one of "module", "factory" or "cassette"'),
    ({"tools": {"module": "toolreplay.demos.orders"}, "cases": [CASE]},
     'tools.module: must be "MODULE:ATTRIBUTE", not "toolreplay.demos.orders"'),
    ({"tools": {"module": "no_such_module_xyz:TOOLS"}, "cases": [CASE]},
     "tools.module: cannot import 'no_such_module_xyz': ModuleNotFoundError: No module named 'no_such_module_xyz'"),
    ({"tools": {"module": "toolreplay.demos.orders:NOPE"}, "cases": [CASE]},
     "tools.module: module 'toolreplay.demos.orders' has no attribute 'NOPE'"),
    ({"tools": {"module": "toolreplay.demos.orders:__all__"}, "cases": [CASE]},
     "tools.module: 'toolreplay.demos.orders:__all__' must be a non-empty dict of tool name to function"),
    ({"tools": {"module": "toolreplay.demos.orders:SUITE"}, "cases": [CASE]},
     "tools.module: 'toolreplay.demos.orders:SUITE' entry 'cases' is not callable"),
    ({"tools": {"cassette": "-"}, "cases": [CASE]},
     "tools.cassette: must be a non-empty string (a session path relative to the suite)"),
    ({"tools": TOOLS, "cases": [1]}, "cases[0]: must be an object, not number"),
    (suite_with(extra=1), 'cases[0]: unknown field "extra" (known: id, question, expected_answer, expected_tools, '
                          'match, args_match, scorer, min_score, tools)'),
    # a case's own tools
    ({"cases": [CASE]}, 'cases[0]: missing field "tools" (the suite has no "tools" for all its cases)'),
    (suite_with(tools={"module": "toolreplay.demos.orders:NOPE"}),
     "cases[0].tools.module: module 'toolreplay.demos.orders' has no attribute 'NOPE'"),
    (suite_with(tools={"cassette": "s.jsonl", "module": "x:y"}),
     'cases[0].tools: must be an object with exactly one of "module", "factory" or "cassette"'),
    (suite_with(tools={"cassette": "s.jsonl", "mode": "first"}),
     'cases[0].tools: unknown field "mode" (known: cassette, responses)'),
    (suite_with(tools={"cassette": "s.jsonl", "responses": "last"}),
     'cases[0].tools.responses: must be one of sequential, first, not "last"'),
    (suite_with(tools={"factory": "toolreplay.demos.bookings:make_tools"}),
     'cases[0].expected_tools[0]: "get_order" is not a tool of this suite (tools: book_table, list_bookings)'),
    ({"args_match": {"book_table": "ignore"},
      "cases": [suite_with(tools={"module": "toolreplay.demos.orders:TOOLS"})["cases"][0]]},
     f'args_match: "book_table" is not a tool of this suite {KNOWN}'),
    (suite_with(question=None), 'cases[0]: missing field "question"'),
    (suite_with(id="a b"), "cases[0].id: must be a string of letters, digits, '.', '_' or '-' starting with a "
                           "letter or digit"),
    (suite_with(id=5), "cases[0].id: must be a string of letters, digits, '.', '_' or '-' starting with a "
                       "letter or digit"),
    ({"tools": TOOLS, "cases": [CASE, dict(CASE, question="again?")]},
     'cases[1].id: duplicate case id "a" (first at cases[0])'),
    (suite_with(question="  "), "cases[0].question: must be a non-empty string"),
    (suite_with(expected_answer=[]),
     "cases[0].expected_answer: must be a non-empty string or a non-empty array of non-empty strings"),
    (suite_with(expected_answer=True),
     "cases[0].expected_answer: must be a non-empty string or a non-empty array of non-empty strings"),
    (suite_with(expected_answer=["ok", 3]), "cases[0].expected_answer[1]: must be a non-empty string"),
    (suite_with(expected_tools="get_order"), "cases[0].expected_tools: must be an array, not string"),
    (suite_with(expected_tools=[3]),
     'cases[0].expected_tools[0]: must be a tool name or an object with "tool" and optional "args", not number'),
    (suite_with(expected_tools=[{"tool": "get_order", "args": [1]}]),
     "cases[0].expected_tools[0].args: must be an object, not array"),
    (suite_with(expected_tools=[{"tool": "get_order", "argz": {}}]),
     'cases[0].expected_tools[0]: unknown field "argz" (known: tool, args, args_match)'),
    (suite_with(expected_tools=[{"args": {}}]), 'cases[0].expected_tools[0]: missing field "tool"'),
    (suite_with(expected_tools=[{"tool": 7}]), "cases[0].expected_tools[0].tool: must be a tool name (string), "
                                               "not number"),
    (suite_with(expected_tools=["get_order", "get_ordr"]),
     f'cases[0].expected_tools[1]: "get_ordr" is not a tool of this suite {KNOWN}'),
    (suite_with(expected_tools=[{"tool": "cancel_order"}]),
     f'cases[0].expected_tools[0].tool: "cancel_order" is not a tool of this suite {KNOWN}'),
    (suite_with(match="fuzzy"), 'cases[0].match: must be one of strict, unordered, subset, superset, not "fuzzy"'),
    # argument modes
    (suite_with(args_match="loose"), f'cases[0].args_match: must be one of {MODES} or a non-empty array of '
                                     'field paths, not "loose"'),
    (suite_with(expected_tools=[{"tool": "get_order", "args": {}, "args_match": []}]),
     f"cases[0].expected_tools[0].args_match: must be one of {MODES} or a non-empty array of field paths, not []"),
    (suite_with(args_match=["order_id", 7]), f"cases[0].args_match: must be one of {MODES} or a non-empty array of "
                                             "field paths, not [\"order_id\", 7]"),
    (suite_with(args_match=["order_id", []]), "cases[0].args_match[1]: a field path is a dotted string or a "
                                              "non-empty array of keys, not []"),
    (suite_with(args_match=["time..start"]), 'cases[0].args_match[0]: "time..start": a field path has no empty key '
                                             "(a dot in a key is '\\.')"),
    (suite_with(args_match=["a\\b"]), 'cases[0].args_match[0]: "a\\\\b": a backslash escapes only \'.\' or \'\\\''),
    # a field the expected call's args do not have could never differ: refused, wherever the mode is set
    (suite_with(args_match=["time.strat"], expected_tools=[{"tool": "get_order", "args": {"time": {"start": 9}}}]),
     'cases[0].expected_tools[0].args: has no field "time.strat", which its args_match compares'),
    ({"tools": TOOLS, "args_match": {"*": [["time", "start"]]},
      "cases": [suite_with(expected_tools=[{"tool": "get_order", "args": {"time.start": 9}}])["cases"][0]]},
     'cases[0].expected_tools[0].args: has no field "time.start", which its args_match compares'),
    ({"tools": TOOLS, "cases": [CASE], "args_match": []}, "args_match: must be an object of tool name to mode, "
                                                          "not array"),
    ({"tools": TOOLS, "cases": [CASE], "args_match": {"get_ordr": "subset"}},
     f'args_match: "get_ordr" is not a tool of this suite {KNOWN}'),
    ({"tools": TOOLS, "cases": [CASE], "args_match": {"get_order": 1}},
     f"args_match.get_order: must be one of {MODES} or a non-empty array of field paths, not 1"),
    # factories and cassettes
    ({"tools": {"factory": "toolreplay.demos.orders:TOOLS"}, "cases": [CASE]},
     "tools.factory: 'toolreplay.demos.orders:TOOLS' is not callable"),
    ({"tools": {"factory": "toolreplay.demos.orders:get_order"}, "cases": [CASE]},
     "tools.factory: 'toolreplay.demos.orders:get_order' raised TypeError: get_order() missing 1 required "
     "positional argument: 'order_id'"),
    ({"tools": {"factory": "toolreplay.demos.bookings:make_tools", "module": "x:y"}, "cases": [CASE]},
     'tools: must be an object with exactly one of "module", "factory" or "cassette"'),
    ({"tools": {"module": "toolreplay.demos.orders:TOOLS", "responses": "first"}, "cases": [CASE]},
     'tools: unknown field "responses" (known: module)'),
    ({"tools": {"cassette": "x.jsonl", "responses": "last"}, "cases": [CASE]},
     'tools.responses: must be one of sequential, first, not "last"'),
    # scorers
    (suite_with(expected_answer=None), 'cases[0]: missing field "expected_answer" (or a "scorer")'),
    (suite_with(scorer="toolreplay.demos.orders"),
     "cases[0].scorer: scorer must be MODULE:CALLABLE, got 'toolreplay.demos.orders'"),
    (suite_with(scorer="toolreplay.demos.orders:nope"),
     "cases[0].scorer: cannot import scorer 'toolreplay.demos.orders:nope': no attribute 'nope'"),
    (suite_with(scorer=1), 'cases[0].scorer: must be "MODULE:FUNCTION", not number'),
    (suite_with(min_score=0.5), 'cases[0].min_score: needs a "scorer"'),
    (suite_with(scorer="toolreplay.demos.orders:get_order", min_score="high"),
     "cases[0].min_score: must be a number, not string"),
]


class ParseSuiteTest(unittest.TestCase):
    def test_invalid_suites_give_exact_messages(self) -> None:
        for obj, message in INVALID:
            with self.subTest(message=message):
                with self.assertRaises(InputError) as caught:
                    parse_suite(obj, "suites/s.json")
                self.assertEqual(str(caught.exception), f"suites/s.json: {message}")

    def test_valid_suite(self) -> None:
        suite = parse_suite(suite_with(expected_answer=["a", "B"], match="superset",
                                       expected_tools=["get_order", {"tool": "count_orders", "args": {"x": 1.0}}]),
                            "s.json")
        self.assertIsInstance(suite.tools, ModuleTools)
        (case,) = suite.cases
        self.assertEqual((case.id, case.expected_answer, case.match), ("a", ("a", "B"), "superset"))
        self.assertEqual(case.expected_tools, (ExpectedCall("get_order"), ExpectedCall("count_orders", '{"x":1}')))
        self.assertIsNone(parse_suite(suite_with(), "s.json").cases[0].match)  # no match: the run's default

    def test_argument_modes_most_specific_wins(self) -> None:
        suite = parse_suite({"tools": TOOLS, "args_match": {"get_order": "subset", "count_orders": ["customer_id"]},
                             "cases": [dict(CASE, expected_tools=[
                                 {"tool": "get_order", "args": {"order_id": 1}},
                                 {"tool": "count_orders", "args": {"customer_id": "C"}},
                                 {"tool": "get_order", "args": {"order_id": 1}, "args_match": "superset"},
                                 {"tool": "track_shipment", "args": {"order_id": 1}},
                                 {"tool": "track_shipment", "args": {"order_id": 1}, "args_match": "ignore"}]),
                                       dict(CASE, id="b", args_match="exact", expected_tools=[
                                           {"tool": "get_order", "args": {"order_id": 1}}])]}, "s.json")
        self.assertEqual([item.args_match for item in suite.cases[0].expected_tools],
                         ["subset", (("customer_id",),), "superset", "exact", "exact"])
        self.assertEqual(suite.cases[0].expected_tools[4], ExpectedCall("track_shipment"))
        self.assertEqual(suite.cases[1].expected_tools[0].args_match, "exact")

    def test_field_paths_dotted_or_as_arrays_and_a_default_for_every_tool(self) -> None:
        args = {"time": {"start": 9}, "a.b": 1, "rooms": [{"id": "A"}]}
        suite = parse_suite({"tools": TOOLS, "args_match": {"*": "superset", "get_refund": "exact"}, "cases": [
            dict(CASE, expected_tools=[
                {"tool": "get_order", "args": args, "args_match": ["time.start", ["a.b"], "a\\.b", "rooms.0.id"]},
                {"tool": "count_orders", "args": args},
                {"tool": "get_refund", "args": args}])]}, "s.json")
        self.assertEqual([item.args_match for item in suite.cases[0].expected_tools],
                         [(("time", "start"), ("a.b",), ("a.b",), ("rooms", "0", "id")), "superset", "exact"])
        self.assertEqual(str(suite.cases[0].expected_tools[0]).rsplit(" (", 1)[1],
                         "fields time.start,a\\.b,a\\.b,rooms.0.id)")

    def test_subset_and_superset_warn_that_their_meaning_changed(self) -> None:
        suite = parse_suite({"tools": TOOLS, "args_match": {"get_order": "subset"}, "cases": [
            dict(CASE, args_match="superset"),
            dict(CASE, id="b", expected_tools=[{"tool": "get_order", "args": {"order_id": 1}, "args_match": "subset"},
                                               {"tool": "get_order", "args_match": "superset"}])]}, "s.json")
        self.assertEqual(suite.warnings, (
            'args_match "subset" (args_match.get_order and 1 more) now means what it means in agentevals: every '
            'argument the call made is expected (it may leave some out), the reverse of before; write "within" for '
            'this meaning or "includes" for the old one, and this warning goes',
            'args_match "superset" (cases[0].args_match and 1 more) now means what it means in agentevals: every '
            'expected argument is in the call (it may add others), the reverse of before; write "includes" for this '
            'meaning or "within" for the old one, and this warning goes'))
        quiet = parse_suite({"tools": TOOLS, "args_match": {"get_order": "within"}, "cases": [
            dict(CASE, args_match="includes", match="subset")]}, "s.json")
        self.assertEqual(quiet.warnings, ())

    def test_scorer_instead_of_expected_answer(self) -> None:
        case = parse_suite(suite_with(expected_answer=None, scorer="toolreplay.demos.bookings:booking_made",
                                      min_score=1), "s.json").cases[0]
        self.assertEqual((case.expected_answer, case.scorer and case.scorer.spec, case.scorer and case.scorer.min_score),
                         ((), "toolreplay.demos.bookings:booking_made", 1.0))

    def test_empty_expected_tools_is_allowed(self) -> None:
        self.assertEqual(parse_suite(suite_with(expected_tools=[]), "s.json").cases[0].expected_tools, ())


class LoadSuiteTest(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.TemporaryDirectory()
        self.addCleanup(self.directory.cleanup)

    def write(self, name: str, data: bytes) -> str:
        path = os.path.join(self.directory.name, name)
        with open(path, "wb") as handle:
            handle.write(data)
        return path

    def test_json_errors_name_the_file(self) -> None:
        for data, message in ((b'{"tools": {},\n "cases": ]}', ":2: invalid JSON: Expecting value (column 11)"),
                              (b'{"cases": 1, "cases": 2}', ': duplicate key "cases"'),
                              (b'{"tools": NaN}', ": NaN is not allowed in JSON"),
                              (b"\xff", ": not valid UTF-8")):
            with self.subTest(data=data):
                path = self.write("bad.json", data)
                with self.assertRaises(InputError) as caught:
                    load_suite(path)
                self.assertEqual(str(caught.exception), path + message)

    def test_unreadable_file_is_a_usage_error(self) -> None:
        path = os.path.join(self.directory.name, "missing.json")
        with self.assertRaises(UsageError) as caught:
            load_suite(path)
        self.assertEqual(str(caught.exception), f"cannot read {path}: No such file or directory")

    def test_cassette_path_is_relative_to_the_suite(self) -> None:
        self.write("orders.jsonl", b'{"index": 0, "tool": "get_order", "args": {"order_id": 1}, '
                                   b'"response": {"status": "shipped"}}\n')
        path = self.write("suite.json", b'{"tools": {"cassette": "orders.jsonl"}, "cases": [{"id": "a", '
                                        b'"question": "q", "expected_answer": "shipped", '
                                        b'"expected_tools": ["get_order"]}]}')
        suite = load_suite(path)
        self.assertIsInstance(suite.tools, CassetteTools)
        self.assertEqual(suite.tools.names, frozenset({"get_order"}))

    def test_missing_or_malformed_cassette(self) -> None:
        case = b'"cases": [{"id": "a", "question": "q", "expected_answer": "x", "expected_tools": []}]}'
        path = self.write("suite.json", b'{"tools": {"cassette": "none.jsonl"}, ' + case)
        with self.assertRaises(InputError) as caught:
            load_suite(path)
        cassette = os.path.join(self.directory.name, "none.jsonl")
        self.assertEqual(str(caught.exception),
                         f"{path}: tools.cassette: cannot read {cassette}: No such file or directory")
        self.write("bad.jsonl", b'{"index": 1, "tool": "t", "args": {}, "response": {}}\n')
        path = self.write("suite.json", b'{"tools": {"cassette": "bad.jsonl"}, ' + case)
        with self.assertRaises(InputError) as caught:
            load_suite(path)
        self.assertEqual(str(caught.exception), os.path.join(self.directory.name, "bad.jsonl")
                         + ":1: index must start at 0, got 1")


class ShippedSuiteTest(unittest.TestCase):
    def test_sample_suite_is_the_demo_suite(self) -> None:
        from toolreplay.demos.orders import SUITE

        suite = load_suite(os.path.join(ROOT, "samples", "eval-suite.json"))
        self.assertEqual(suite.cases, parse_suite(SUITE, "x").cases)
        self.assertEqual([case.id for case in suite.cases], ["order-status", "delivery-date", "all-orders-completed",
                                                             "orders-placed", "refund-status"])


if __name__ == "__main__":
    unittest.main()
