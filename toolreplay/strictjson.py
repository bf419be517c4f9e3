"""Strict JSON for one session line: what `json` accepts, minus what SPEC.md §2 forbids.

The standard library's C scanner does the parsing; hooks reject duplicate keys, NaN/Infinity and
numbers that overflow a double. Canonical text then comes from the C encoder, which already matches
RFC 8785 for everything but a few number forms and keys outside the Basic Multilingual Plane; a line
holding one of those takes the pure-Python `toolreplay.canonical` route instead. Lone surrogates
surface when the canonical text is encoded to UTF-8.
"""

from __future__ import annotations

import json
import re
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from toolreplay.canonical import canonical_json

__all__ = ["JSONLineError", "StrictLoader"]

_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _no_default(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not a JSON value")


# The C encoder, built once: sorted keys, no white space, no circular-reference markers (parsed JSON
# cannot be circular). Going through json.dumps would rebuild it on every call.
_c_encode = (c_make_encoder(None, _no_default, encode_basestring, None, ":", ",", True, False, False)
             if c_make_encoder is not None else None)


def _fast_dumps(value: Any) -> str:
    if _c_encode is None:
        return canonical_json(value)
    return "".join(_c_encode(value, 0))


class JSONLineError(ValueError):
    """Why a JSON text is not strict JSON; the caller adds the path (and line, when it knows it)."""

    def __init__(self, message: str, lineno: int | None = None) -> None:
        super().__init__(message)
        self.lineno = lineno


class _IntegralFloat(int):
    """A float with an integral value below 2**53, kept as an int: same canonical text, not an index."""

    __slots__ = ()


def _quote(text: str) -> str:
    shown = json.dumps(text)
    return shown if len(shown) <= 60 else shown[:57] + '..."'


def _reject_constant(name: str) -> Any:
    raise JSONLineError(f"{name} is not allowed in JSON")


class StrictLoader:
    """Parses lines strictly and turns parsed values into canonical UTF-8 bytes."""

    def __init__(self) -> None:
        # Set when the line holds a float whose canonical text the C encoder would get wrong.
        self._exotic = False
        self._scan = json.JSONDecoder(
            object_pairs_hook=self._make_object, parse_float=self._make_float, parse_constant=_reject_constant
        ).scan_once

    @staticmethod
    def _make_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    raise JSONLineError(f"duplicate key {_quote(key)}")
                seen.add(key)
        return obj

    def _make_float(self, text: str) -> Any:
        value = float(text)
        if value in (float("inf"), float("-inf")):
            raise JSONLineError(f"number {text[:40]} overflows a double")
        shown = repr(value)
        if "e" in shown:
            self._exotic = True
        elif shown.endswith(".0"):
            return _IntegralFloat(int(value))
        return value

    def loads(self, text: str) -> Any:
        """Parse one JSON text (usually one line), strictly."""
        self._exotic = False
        try:
            try:
                value, end = self._scan(text, _WHITESPACE.match(text, 0).end())  # type: ignore[union-attr]
            except StopIteration as stop:
                raise json.JSONDecodeError("Expecting value", text, stop.value) from None
            end = _WHITESPACE.match(text, end).end()  # type: ignore[union-attr]
            if end != len(text):
                raise json.JSONDecodeError("Extra data", text, end)
            return value
        except json.JSONDecodeError as exc:
            raise JSONLineError(f"invalid JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
        except RecursionError:
            raise JSONLineError("JSON nested too deeply") from None
        except ValueError as exc:  # e.g. an integer longer than the interpreter converts
            if isinstance(exc, JSONLineError):
                raise
            raise JSONLineError(f"invalid number: {exc}") from None

    def canonical_string(self, text: str) -> bytes:
        """Canonical UTF-8 bytes of a string value."""
        try:
            return encode_basestring(text).encode("utf-8")  # type: ignore[no-any-return]
        except UnicodeEncodeError:
            raise JSONLineError("string holds a lone surrogate (invalid Unicode escape)") from None

    def canonical(self, value: Any) -> bytes:
        """Canonical UTF-8 bytes of a value parsed by the last `loads` call."""
        try:
            if self._exotic:
                text = canonical_json(value)
            else:
                text = _fast_dumps(value)
                if not text.isascii() and _ASTRAL.search(text):
                    text = canonical_json(value)
            return text.encode("utf-8")
        except UnicodeEncodeError:
            raise JSONLineError("string holds a lone surrogate (invalid Unicode escape)") from None
        except RecursionError:
            raise JSONLineError("JSON nested too deeply") from None
