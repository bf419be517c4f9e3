"""Tool match modes, duplicates, nested arguments, answer checks and pass^k against hand-computed values."""

from __future__ import annotations

import unittest
from fractions import Fraction

from toolreplay.evaluation.metrics import (
           ExpectedCall,
           argument_difference,
           argument_mismatches,
           field_path_text,
           missing_information,
           parse_field_path,
           pass_hat_k,
           tools_match,
)
from toolreplay.format.canonical import canonical_json


def expected(*items: str | tuple[str, dict]) -> list[ExpectedCall]:
    return [ExpectedCall.of(item) if isinstance(item, str) else ExpectedCall.of(*item) for item in items]


def called(*items: str | tuple[str, dict]) -> list[tuple[str, str]]:
    return [(item, "{}") if isinstance(item, str) else (item[0], canonical_json(item[1])) for item in items]


class ToolMatchTest(unittest.TestCase):
    # (expected, called, {mode: result}) - every mode checked on every row
    CASES = [
        (["a", "b"], ["a", "b"], dict(strict=True, unordered=True, subset=True, superset=True)),
        (["a", "b"], ["b", "a"], dict(strict=False, unordered=True, subset=True, superset=True)),
        (["a", "b"], ["a"], dict(strict=False, unordered=False, subset=True, superset=False)),
        (["a"], ["a", "b"], dict(strict=False, unordered=False, subset=False, superset=True)),
        (["a", "a"], ["a"], dict(strict=False, unordered=False, subset=True, superset=False)),
        (["a"], ["a", "a"], dict(strict=False, unordered=False, subset=False, superset=True)),
        (["a", "a", "b"], ["a", "b", "b"], dict(strict=False, unordered=False, subset=False, superset=False)),
        (["a", "b", "a"], ["a", "a", "b"], dict(strict=False, unordered=True, subset=True, superset=True)),
        ([], [], dict(strict=True, unordered=True, subset=True, superset=True)),
        ([], ["a"], dict(strict=False, unordered=False, subset=False, superset=True)),
        (["a"], [], dict(strict=False, unordered=False, subset=True, superset=False)),
    ]

    def test_modes_on_names(self) -> None:
        for want, got, results in self.CASES:
            for mode, result in results.items():
                with self.subTest(expected=want, called=got, mode=mode):
                    self.assertIs(tools_match(expected(*want), called(*got), mode), result)

    def test_arguments_compare_canonically_and_nested(self) -> None:
        want = expected(("search", {"q": {"terms": ["a", {"b": [1.0, None]}]}, "limit": 10}))
        self.assertTrue(tools_match(want, called(("search", {"limit": 10, "q": {"terms": ["a", {"b": [1, None]}]}})),
                                    "strict"))
        self.assertFalse(tools_match(want, called(("search", {"limit": 10, "q": {"terms": ["a", {"b": [2]}]}})),
                                     "strict"))

    def test_name_only_item_matches_any_arguments(self) -> None:
        self.assertTrue(tools_match(expected("get_order"), called(("get_order", {"order_id": [1, {"x": {}}]})),
                                    "strict"))

    def test_multiset_pairs_name_only_and_argument_items_optimally(self) -> None:
        # greedy pairing would give get_order{1} to the name-only item and leave the {1} item unmatched
        want = expected("get_order", ("get_order", {"order_id": 1}))
        got = called(("get_order", {"order_id": 1}), ("get_order", {"order_id": 2}))
        self.assertTrue(tools_match(want, got, "unordered"))
        self.assertFalse(tools_match(want, got, "strict"))
        self.assertFalse(tools_match(want, called(("get_order", {"order_id": 2}), ("get_order", {"order_id": 3})),
                                     "unordered"))

    def test_repeated_identical_calls_count_as_often_as_they_occur(self) -> None:
        want = expected(("get_order", {"order_id": 1}))
        twice = called(("get_order", {"order_id": 1}), ("get_order", {"order_id": 1}))
        self.assertFalse(tools_match(want, twice, "unordered"))
        self.assertFalse(tools_match(want, twice, "subset"))
        self.assertTrue(tools_match(want, twice, "superset"))

    def test_unknown_mode(self) -> None:
        with self.assertRaisesRegex(ValueError, "unknown match mode 'fuzzy'"):
            tools_match([], [], "fuzzy")

    def test_expected_call_text(self) -> None:
        self.assertEqual(str(ExpectedCall.of("count_orders", {"customer_id": "C-1", "a": 1.0})),
                         'count_orders {"a":1,"customer_id":"C-1"}')
        self.assertEqual(str(ExpectedCall.of("count_orders")), "count_orders")


class ArgumentModeTest(unittest.TestCase):
    EXPECTED = {"order_id": 7, "full": True}
    # (arguments made, {mode: first differing field or None})
    # `subset`/`superset` as in agentevals: the arguments made are a subset/superset of the expected ones.
    CASES = [
        ({"order_id": 7.0, "full": True}, {"exact": None, "ignore": None, "subset": None, "superset": None}),
        ({"order_id": 7, "full": True, "page": 2},
         {"exact": '"page" (expected none, got 2)', "subset": '"page" (expected none, got 2)', "superset": None}),
        ({"order_id": 7}, {"exact": '"full" (expected true, got none)', "subset": None,
                           "superset": '"full" (expected true, got none)'}),
        ({"order_id": 8, "full": True}, {"exact": '"order_id" (expected 7, got 8)', "ignore": None,
                                         "subset": '"order_id" (expected 7, got 8)',
                                         "superset": '"order_id" (expected 7, got 8)',
                                         (("order_id",),): '"order_id" (expected 7, got 8)', (("full",),): None}),
        ({"order_id": 7, "full": False, "x": 1},
         {(("order_id",),): None, (("order_id",), ("x",)): '"x" (expected none, got 1)'}),
        ({"order_id": [7], "full": True}, {"exact": '"order_id" (expected 7, got [7])'}),
    ]

    def test_each_mode_names_the_first_differing_field(self) -> None:
        synonyms = {"subset": "within", "superset": "includes"}
        for made, results in self.CASES:
            for mode, difference in results.items():
                for spelling in (mode, synonyms.get(mode, mode)) if isinstance(mode, str) else (mode,):
                    with self.subTest(made=made, mode=spelling):
                        self.assertEqual(argument_difference(self.EXPECTED, made, spelling), difference)
                        item = ExpectedCall.of("get_order", self.EXPECTED, spelling)
                        self.assertIs(item.matches("get_order", canonical_json(made)), difference is None)

    def test_nested_field_paths(self) -> None:
        expected = {"time": {"start": "09:00", "end": "10:00"}, "rooms": [{"id": "A"}, {"id": "B"}],
                    "a.b": 1, "back\\slash": {"x": 2}}
        for made, path, difference in (
                (dict(expected, time={"start": "09:30", "end": "10:00"}), ("time", "start"),
                 '"time.start" (expected "09:00", got "09:30")'),
                (dict(expected, time={"start": "09:00", "end": "11:00"}), ("time", "start"), None),
                (dict(expected, time={"end": "10:00"}), ("time", "start"), '"time.start" (expected "09:00", got none)'),
                (dict(expected, time="09:00"), ("time", "start"), '"time.start" (expected "09:00", got none)'),
                (dict(expected, rooms=[{"id": "A"}, {"id": "C"}]), ("rooms", "1", "id"),
                 '"rooms.1.id" (expected "B", got "C")'),
                (dict(expected, rooms=[{"id": "A"}]), ("rooms", "1", "id"), '"rooms.1.id" (expected "B", got none)'),
                (dict(expected, rooms=[{"id": "A"}, {"id": "C"}]), ("rooms", "0", "id"), None),
                (dict(expected, **{"a.b": 2}), ("a.b",), '"a\\\\.b" (expected 1, got 2)'),
                (dict(expected, **{"back\\slash": {"x": 3}}), ("back\\slash", "x"),
                 '"back\\\\\\\\slash.x" (expected 2, got 3)')):
            with self.subTest(path=path, made=made):
                self.assertEqual(argument_difference(expected, made, (path,)), difference)

    def test_dotted_field_paths(self) -> None:
        for text, path in (("time.start", ("time", "start")), ("a\\.b", ("a.b",)), ("x\\\\.y", ("x\\", "y")),
                           ("rooms.0.id", ("rooms", "0", "id")), ("plain", ("plain",))):
            with self.subTest(text=text):
                self.assertEqual(parse_field_path(text), path)
                self.assertEqual(field_path_text(path), text)
        for text, message in (("a..b", "a field path has no empty key"), (".a", "a field path has no empty key"),
                              ("a.", "a field path has no empty key"), ("a\\b", "a backslash escapes only"),
                              ("a\\", "a backslash escapes only")):
            with self.subTest(text=text), self.assertRaisesRegex(ValueError, message):
                parse_field_path(text)

    def test_modes_inside_tool_match(self) -> None:
        want = [ExpectedCall.of("search", {"q": "tea"}, "superset"), ExpectedCall.of("get", {"id": 1}, (("id",),))]
        self.assertTrue(tools_match(want, called(("search", {"q": "tea", "limit": 5}), ("get", {"id": 1.0, "v": 2})),
                                    "strict"))
        self.assertFalse(tools_match(want, called(("search", {"limit": 5}), ("get", {"id": 1})), "strict"))

    def test_mismatch_notes_name_the_field_of_a_call_to_the_same_tool(self) -> None:
        want = [ExpectedCall.of("get", {"id": 1}), ExpectedCall.of("count", {"c": "A"})]
        self.assertEqual(argument_mismatches(want, called(("get", {"id": 2}), ("get", {"id": 3}))),
                         ['get argument "id" (expected 1, got 2)'])
        self.assertEqual(argument_mismatches(want, called(("get", {"id": 1}), ("count", {"c": "A"}))), [])

    def test_text_shows_the_mode_unless_exact(self) -> None:
        self.assertEqual(str(ExpectedCall.of("get", {"id": 1}, "subset")), 'get {"id":1} (subset)')
        self.assertEqual(str(ExpectedCall.of("get", {"id": 1}, "includes")), 'get {"id":1} (includes)')
        self.assertEqual(str(ExpectedCall.of("get", {"id": 1}, (("id",), ("v", "w.x")))),
                         'get {"id":1} (fields id,v.w\\.x)')
        self.assertEqual(ExpectedCall.of("get", {"id": 1}, "ignore"), ExpectedCall.of("get"))

    def test_unknown_argument_mode(self) -> None:
        with self.assertRaisesRegex(ValueError, "unknown argument mode 'loose'"):
            argument_difference({"a": 1}, {"a": 2}, "loose")


class AnswerTest(unittest.TestCase):
    def test_case_insensitive_contains_every_piece(self) -> None:
        self.assertEqual(missing_information("The refund is REFUNDED: 850.00 THB", ["refunded", "850.00"]), [])
        self.assertEqual(missing_information("Order 3021 is shipped.", ["4 orders", "shipped"]), ["4 orders"])
        self.assertEqual(missing_information("STRASSE", ["straße"]), [])  # casefold, not lower


class PassHatKTest(unittest.TestCase):
    def test_hand_computed(self) -> None:
        # three cases, three trials; successes 3, 2, 0
        self.assertEqual(pass_hat_k([3, 2, 0], 3, 1), Fraction(5, 9))   # (1 + 2/3 + 0) / 3
        self.assertEqual(pass_hat_k([3, 2, 0], 3, 2), Fraction(4, 9))   # (3/3 + 1/3 + 0) / 3
        self.assertEqual(pass_hat_k([3, 2, 0], 3, 3), Fraction(1, 3))   # (1 + 0 + 0) / 3
        # two cases, four trials; successes 2, 4; k = 2: (C(2,2)/C(4,2) + 1) / 2 = (1/6 + 1) / 2
        self.assertEqual(pass_hat_k([2, 4], 4, 2), Fraction(7, 12))

    def test_out_of_range(self) -> None:
        for successes, trials, k in (([1], 1, 0), ([1], 1, 2), ([], 1, 1)):
            with self.subTest(k=k), self.assertRaises(ValueError):
                pass_hat_k(successes, trials, k)


if __name__ == "__main__":
    unittest.main()
