"""The scores of one run: does the answer hold the expected information, did the calls match, pass^k.

Tool match compares the calls made with the expected ones as multisets of items, an expected item
being a tool name (any arguments) or a tool with arguments compared in one of the `ARGUMENT_MODES`
(numbers compare canonically: `1` equals `1.0`). Modes:

- `strict`: the same calls in the same order;
- `unordered`: the same calls, in any order (every call counted as often as it occurs);
- `subset`: every call made was expected (some expected calls may be missing);
- `superset`: every expected call was made (extra calls are allowed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import comb
from typing import Any, TypeAlias

from toolreplay.format.canonical import canonical_json

__all__ = ["ARGUMENT_MODES", "ARGUMENT_SYNONYMS", "MATCH_MODES", "ArgumentMode", "ExpectedCall", "FieldPath",
           "argument_difference", "argument_mismatches", "field_path_text", "has_field",
           "missing_information", "parse_field_path", "pass_hat_k", "tools_match"]

MATCH_MODES = ("strict", "unordered", "subset", "superset")

# How an expected call's arguments are compared with a call made (as agentevals' `tool_args_match_mode`):
# - `exact`: the same arguments (canonically equal objects);
# - `ignore`: the tool name only;
# - `subset` (or `within`): the arguments made are a subset of the expected ones: every argument made
#   is expected with an equal value; expected ones may be left out;
# - `superset` (or `includes`): the arguments made are a superset of the expected ones: every expected
#   argument is there with an equal value; extra arguments are fine;
# a tuple of field paths: those fields are equal; the others are not compared.
# Before, `subset` and `superset` meant the reverse; `within` and `includes` mean the same in every version.
ARGUMENT_MODES = ("exact", "ignore", "subset", "superset", "within", "includes")
ARGUMENT_SYNONYMS = {"subset": "within", "superset": "includes"}  # agentevals' names, and ours
FieldPath: TypeAlias = tuple[str, ...]  # keys from the arguments object down; an array takes a key "N" as index N
ArgumentMode: TypeAlias = str | tuple[FieldPath, ...]
_INDEX = re.compile(r"0|[1-9][0-9]{0,8}")
_ABSENT: Any = object()


def parse_field_path(text: str) -> FieldPath:
    """A dotted field path (`time.start`) as keys; `\\.` is a dot inside a key, `\\\\` a backslash.

    Raises ValueError on an empty key or another backslash escape."""
    keys: list[str] = []
    key: list[str] = []
    characters = iter(text)
    for character in characters:
        if character == "\\":
            escaped = next(characters, "")
            if escaped not in (".", "\\"):
                raise ValueError(f"{json.dumps(text)[:60]}: a backslash escapes only '.' or '\\'")
            key.append(escaped)
        elif character == ".":
            keys.append("".join(key))
            key = []
        else:
            key.append(character)
    keys.append("".join(key))
    if "" in keys:
        raise ValueError(f"{json.dumps(text)[:60]}: a field path has no empty key (a dot in a key is '\\.')")
    return tuple(keys)


def field_path_text(path: FieldPath) -> str:
    """The dotted spelling of a field path, dots and backslashes in keys escaped."""
    return ".".join(key.replace("\\", "\\\\").replace(".", "\\.") for key in path)


def _field_value(args: dict[str, Any], path: FieldPath) -> Any:
    """The value at a field path of an arguments object, or `_ABSENT`."""
    current: Any = args
    for key in path:
        if isinstance(current, dict) and key in current:
            current = current[key]
        elif isinstance(current, list) and _INDEX.fullmatch(key) and int(key) < len(current):
            current = current[int(key)]
        else:
            return _ABSENT
    return current


def has_field(args: dict[str, Any], path: FieldPath) -> bool:
    """Whether the arguments object has a value at this field path."""
    return _field_value(args, path) is not _ABSENT


def _value(args: dict[str, Any], path: FieldPath) -> str | None:
    value = _field_value(args, path)
    return None if value is _ABSENT else canonical_json(value)


def argument_difference(expected: dict[str, Any], made: dict[str, Any], mode: ArgumentMode) -> str | None:
    """None when the arguments made satisfy the expected ones in `mode`, else the first field that differs.

    The field comes as `"path" (expected V, got W)`, with `none` for an absent side; fields in sorted order.
    """
    mode = ARGUMENT_SYNONYMS.get(mode, mode) if isinstance(mode, str) else mode
    paths: list[FieldPath]
    if mode == "ignore":
        return None
    if mode == "exact":
        paths = [(name,) for name in sorted(set(expected) | set(made))]
    elif mode == "includes":
        paths = [(name,) for name in sorted(expected)]
    elif mode == "within":
        paths = [(name,) for name in sorted(made)]
    elif isinstance(mode, tuple):
        paths = sorted(mode)
    else:
        raise ValueError(f"unknown argument mode {mode!r}")
    for path in paths:
        want, got = _value(expected, path), _value(made, path)
        if want != got:
            name = json.dumps(field_path_text(path), ensure_ascii=False)
            return f"{name} (expected {want or 'none'}, got {got or 'none'})"
    return None


@dataclass(frozen=True, slots=True)
class ExpectedCall:
    """One expected call: a tool name, the canonical JSON of its arguments when they matter, and how."""

    tool: str
    args: str | None = None
    args_match: ArgumentMode = "exact"

    @classmethod
    def of(cls, tool: str, args: dict[str, Any] | None = None, args_match: ArgumentMode = "exact") -> ExpectedCall:
        """An expected call from a tool name and, optionally, its arguments and their mode."""
        if args is None or args_match == "ignore":
            return cls(tool)
        return cls(tool, canonical_json(args), args_match)

    def difference(self, tool: str, canonical_args: str) -> str | None:
        """None when one call made (tool and canonical arguments) satisfies this item, else what differs."""
        if tool != self.tool:
            return "tool"
        if self.args is None or self.args == canonical_args:
            return None
        return argument_difference(json.loads(self.args), json.loads(canonical_args), self.args_match)

    def matches(self, tool: str, canonical_args: str) -> bool:
        """Whether one call made (tool and canonical arguments) satisfies this expected call."""
        return self.difference(tool, canonical_args) is None

    def __str__(self) -> str:
        if self.args is None:
            return self.tool
        if self.args_match == "exact":
            return f"{self.tool} {self.args}"
        mode = (self.args_match if isinstance(self.args_match, str)
                else "fields " + ",".join(field_path_text(path) for path in self.args_match))
        return f"{self.tool} {self.args} ({mode})"


def _matching_size(expected: Sequence[ExpectedCall], called: Sequence[tuple[str, str]]) -> int:
    """Largest number of expected calls paired with distinct calls made (Kuhn's augmenting paths).

    Greedy pairing is not enough: a name-only item could take the call a with-arguments item needs.
    """
    owner: list[int | None] = [None] * len(called)

    def augment(item: int, visited: list[bool]) -> bool:
        for position, (tool, args) in enumerate(called):
            if visited[position] or not expected[item].matches(tool, args):
                continue
            visited[position] = True
            current = owner[position]
            if current is None or augment(current, visited):
                owner[position] = item
                return True
        return False

    return sum(augment(item, [False] * len(called)) for item in range(len(expected)))


def _turn_groups(items: Sequence[Any], turns: Sequence[int] | None) -> list[list[Any]]:
    """Items grouped by turn (consecutive items of one turn form a group); no turns: each its own group."""
    if not turns:
        return [[item] for item in items]
    groups: list[list[Any]] = []
    previous: int | None = None
    for item, turn in zip(items, turns, strict=True):
        if not groups or turn != previous:
            groups.append([])
        groups[-1].append(item)
        previous = turn
    return groups


def tools_match(expected: Sequence[ExpectedCall], called: Sequence[tuple[str, str]], mode: str,
                expected_turns: Sequence[int] | None = None, called_turns: Sequence[int] | None = None) -> bool:
    """Whether the calls made, as (tool, canonical args) pairs, match the expected calls in this mode.

    In `strict` mode the calls are compared turn by turn, as agentevals does: the same number of
    turns, and in each the same calls in any order (calls of one turn may run in parallel). Turns are
    the turn number of each call (`expected_turns`, `called_turns`); without them each call is its own
    turn. The other modes ignore turns."""
    if mode == "strict":
        if not expected_turns and not called_turns:
            return len(expected) == len(called) and all(
                item.matches(tool, args) for item, (tool, args) in zip(expected, called, strict=True))
        expected_groups = _turn_groups(expected, expected_turns)
        called_groups = _turn_groups(called, called_turns)
        return len(expected) == len(called) and len(expected_groups) == len(called_groups) and all(
            len(want) == len(made) and _matching_size(want, made) == len(made)
            for want, made in zip(expected_groups, called_groups, strict=True))
    if mode == "unordered":
        return len(expected) == len(called) and _matching_size(expected, called) == len(called)
    if mode == "subset":
        return _matching_size(expected, called) == len(called)
    if mode == "superset":
        return _matching_size(expected, called) == len(expected)
    raise ValueError(f"unknown match mode {mode!r}")


def argument_mismatches(expected: Sequence[ExpectedCall], called: Sequence[tuple[str, str]]) -> list[str]:
    """For each expected call with arguments that no call made satisfies, the first field that differs
    from the first call made to the same tool; nothing for a tool that was not called at all."""
    notes = []
    for item in expected:
        if item.args is None or any(item.matches(tool, args) for tool, args in called):
            continue
        same_tool = next((args for tool, args in called if tool == item.tool), None)
        if same_tool is not None:
            notes.append(f"{item.tool} argument {item.difference(item.tool, same_tool)}")
    return notes


def missing_information(answer: str, expected: Sequence[str]) -> list[str]:
    """The expected pieces of information the answer does not contain (case-insensitive)."""
    folded = answer.casefold()
    return [piece for piece in expected if piece.casefold() not in folded]


def pass_hat_k(successes: Sequence[int], trials: int, k: int) -> Fraction:
    """pass^k: the mean over cases of C(c, k) / C(n, k), c a case's successes out of n trials."""
    if not 1 <= k <= trials or not successes:
        raise ValueError(f"pass^k needs 1 <= k <= trials and at least one case, got k={k}, trials={trials}")
    total = sum((Fraction(comb(c, k), comb(trials, k)) for c in successes), Fraction(0))
    return total / len(successes)
