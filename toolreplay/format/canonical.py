"""Canonical JSON (RFC 8785, JCS) with one deliberate difference: integers keep all their digits.

`canonical_json` works on any JSON-like Python value: dict (str keys), list/tuple, str, int, float,
bool, None. Keys sort by UTF-16 code units, strings are escaped minimally, numbers print in the
ECMAScript shortest form. The session parser has a faster route for the common case (see
`toolreplay.strictjson`); both produce the same text, which the tests check on every vector.
"""

from __future__ import annotations

import math
from json.encoder import encode_basestring
from typing import Any

__all__ = ["CanonicalError", "canonical_json", "canonical_bytes", "format_number"]


class CanonicalError(ValueError):
    """A value that has no canonical JSON form (NaN, infinity, a non-string key, an unknown type)."""


def format_number(value: int | float) -> str:
    """The ECMAScript shortest form of a number; integers keep every digit."""
    if isinstance(value, int):
        return int.__repr__(value)
    if not math.isfinite(value):
        raise CanonicalError(f"{value!r} has no JSON form")
    if value == 0:
        return "0"
    if value.is_integer() and abs(value) < 2**53:
        return int.__repr__(int(value))
    text = float.__repr__(value)
    if "e" not in text and not text.endswith(".0"):  # 1e-4 <= |value| < 1e16 with a fraction: both forms agree
        return text
    sign = "-" if value < 0 else ""
    mantissa, _, exp_text = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    # value = 0.DIGITS x 10^point; leading zeros move the point, trailing zeros carry nothing
    point = len(whole) + int(exp_text or 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k = len(digits)
    if k <= point <= 21:
        text = digits + "0" * (point - k)
    elif 0 < point <= 21:
        text = digits[:point] + "." + digits[point:]
    elif -6 < point <= 0:
        text = "0." + "0" * -point + digits
    else:
        exponent = point - 1
        text = digits[0] + ("." + digits[1:] if k > 1 else "") + ("e+" if exponent > 0 else "e-") + str(
            abs(exponent))
    return sign + text


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _encode(value: Any, out: list[str]) -> None:
    # the exact types first (what parsed JSON holds), by identity: the isinstance chain is for subclasses
    kind = type(value)
    if kind is str:
        out.append(encode_basestring(value))
    elif kind is dict:
        _encode_object(value, out)
    elif kind is list or kind is tuple:
        _encode_array(value, out)
    elif kind is int:
        out.append(int.__repr__(value))
    elif isinstance(value, str):
        out.append(encode_basestring(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, (int, float)):
        out.append(format_number(value))
    elif isinstance(value, dict):
        _encode_object(value, out)
    elif isinstance(value, (list, tuple)):
        _encode_array(value, out)
    else:
        raise CanonicalError(f"{type(value).__name__} is not a JSON value")


def _encode_object(value: dict[Any, Any], out: list[str]) -> None:
    keys = list(value)
    try:
        joined = "".join(keys)
    except TypeError:  # a key that is not a string
        joined = None
    if joined is None:
        for key in keys:
            if not isinstance(key, str):
                raise CanonicalError(f"object key {key!r} is not a string")
    # code points order ASCII keys as UTF-16 code units do; only other keys need the slower sort key
    ordered = sorted(keys) if joined is not None and joined.isascii() else sorted(keys, key=_utf16_key)
    out.append("{")
    first = True
    for key in ordered:
        if not first:
            out.append(",")
        first = False
        out.append(encode_basestring(key))
        out.append(":")
        _encode(value[key], out)
    out.append("}")


def _encode_array(value: list[Any] | tuple[Any, ...], out: list[str]) -> None:
    out.append("[")
    for position, item in enumerate(value):
        if position:
            out.append(",")
        _encode(item, out)
    out.append("]")


def canonical_json(value: Any) -> str:
    """The canonical JSON text of a JSON-like value."""
    out: list[str] = []
    _encode(value, out)
    return "".join(out)


def canonical_bytes(value: Any) -> bytes:
    """The canonical JSON of a value as UTF-8 bytes; a lone surrogate raises CanonicalError."""
    try:
        return canonical_json(value).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalError("string holds a lone surrogate") from exc
