"""Bounded regular expressions for `regex` rules: no pattern may backtrack without limit on an argument.

Python's `re` backtracks, and the argument is the model's choice. Two shapes of pattern are costly:

- a part that can match in more than one way, repeated without bound (`(\\w+\\s?)+`, `(a|aa)*`):
  exponential in the argument's length (41 characters take days);
- several variable-length parts in a row (`\\w*\\w*\\w*!`): polynomial, of degree their number.

So a pattern is refused when it loads if it repeats, more than once and without bound, a part that
can match in more than one way (a nested quantifier or an alternation), or if it could try more than
`MAX_WAYS` ways of splitting an argument of `MAX_INPUT` characters among its variable parts; and an
argument longer than `MAX_INPUT` characters is not tested (a rule error, so the rule fails closed).
"""

from __future__ import annotations

import re
from re import _constants as _c  # type: ignore[attr-defined]  # the parser's opcodes (stdlib, private)
from re import _parser  # type: ignore[attr-defined]  # the stdlib's own pattern parser (private)
from typing import Any

__all__ = ["MAX_INPUT", "MAX_WAYS", "compile_bounded"]

MAX_INPUT = 4096  # characters a regex rule tests; a longer argument is a rule error
MAX_WAYS = 1 << 27  # ways to split MAX_INPUT characters among a pattern's variable parts

_CAP = MAX_WAYS + 1  # counts saturate here: anything above MAX_WAYS is refused alike
_SINGLE = {_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN, _c.CATEGORY, _c.AT, _c.GROUPREF, _c.FAILURE}
_REPEATS = {_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT}


class _NestedError(Exception):
    """The pattern repeats without bound a part that can match in more than one way."""


def _ways(items: Any) -> int:
    """How many ways (saturating at _CAP) the sequence can split an argument of MAX_INPUT characters."""
    total = 1
    for op, av in items:
        if op in _SINGLE:
            continue
        if op in _REPEATS:
            low, high, body = av
            inner = _ways(body)
            span = min(high, MAX_INPUT) - min(low, MAX_INPUT) + 1
            if inner == 1:
                ways = span
            elif high <= 1:
                ways = span * inner
            elif high == _c.MAXREPEAT:
                raise _NestedError
            else:
                ways = span * pow(inner, min(high, 64))
        elif op == _c.SUBPATTERN:
            ways = _ways(av[3])
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            ways = _ways(av[1])
        elif op == _c.ATOMIC_GROUP:
            ways = _ways(av)
        elif op == _c.BRANCH:
            ways = sum(_ways(branch) for branch in av[1])
        elif op == _c.GROUPREF_EXISTS:
            ways = _ways(av[1]) + (_ways(av[2]) if av[2] is not None else 1)
        else:  # an opcode this check does not know: count it as the worst
            ways = _CAP
        total = min(total * ways, _CAP)
    return total


def compile_bounded(pattern: str) -> re.Pattern[str]:
    """The compiled pattern; `re.error` for bad syntax, ValueError (completing "PATTERN ...") when refused."""
    compiled = re.compile(pattern)
    tree = _parser.parse(pattern)
    try:
        ways = _ways(tree)
    except _NestedError:
        raise ValueError("repeats a part that can match in more than one way (a nested quantifier or an "
                         "alternation inside * + or {n,}), which can take exponential time") from None
    except RecursionError:
        raise ValueError("is nested too deeply to check") from None
    if ways > MAX_WAYS:
        raise ValueError(f"has too many variable-length parts: it could try more than {MAX_WAYS:,} ways "
                         f"on an argument of {MAX_INPUT:,} characters")
    return compiled
