"""The scores of one run: does the answer hold the expected information, did the calls match, pass^k.

Tool match compares the calls made with the expected ones as multisets of items, an expected item
being a tool name (any arguments) or a tool with arguments (canonically equal arguments). Modes:

- `strict`: the same calls in the same order;
- `unordered`: the same calls, in any order (every call counted as often as it occurs);
- `subset`: every call made was expected (some expected calls may be missing);
- `superset`: every expected call was made (extra calls are allowed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import comb
from typing import Any

from toolreplay.format.canonical import canonical_json

__all__ = ["MATCH_MODES", "ExpectedCall", "missing_information", "pass_hat_k", "tools_match"]

MATCH_MODES = ("strict", "unordered", "subset", "superset")


@dataclass(frozen=True, slots=True)
class ExpectedCall:
    """One expected call: a tool name, and the canonical JSON of its arguments when they matter."""

    tool: str
    args: str | None = None

    @classmethod
    def of(cls, tool: str, args: dict[str, Any] | None = None) -> ExpectedCall:
        """An expected call from a tool name and, optionally, its arguments."""
        return cls(tool, None if args is None else canonical_json(args))

    def matches(self, tool: str, canonical_args: str) -> bool:
        """Whether one call made (tool and canonical arguments) satisfies this expected call."""
        return tool == self.tool and (self.args is None or self.args == canonical_args)

    def __str__(self) -> str:
        return self.tool if self.args is None else f"{self.tool} {self.args}"


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


def tools_match(expected: Sequence[ExpectedCall], called: Sequence[tuple[str, str]], mode: str) -> bool:
    """Whether the calls made, as (tool, canonical args) pairs, match the expected calls in this mode."""
    if mode == "strict":
        return len(expected) == len(called) and all(
            item.matches(tool, args) for item, (tool, args) in zip(expected, called, strict=True))
    if mode == "unordered":
        return len(expected) == len(called) and _matching_size(expected, called) == len(called)
    if mode == "subset":
        return _matching_size(expected, called) == len(called)
    if mode == "superset":
        return _matching_size(expected, called) == len(expected)
    raise ValueError(f"unknown match mode {mode!r}")


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
