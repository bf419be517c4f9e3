"""Strict JSON for one session line: what `json` accepts, minus what the session format forbids.

The standard library's C scanner does the parsing; hooks reject duplicate keys, NaN/Infinity and
numbers that overflow a double. Canonical text then comes from the C encoder, which already matches
RFC 8785 for everything but a few number forms and the order of keys outside the Basic Multilingual
Plane; a value holding one of those takes the pure-Python `toolreplay.format.canonical` route instead. Lone surrogates
surface when the canonical text is encoded to UTF-8.
"""

from __future__ import annotations

import json
import re
import sys
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from toolreplay.errors import InputError, UsageError
from toolreplay.format.canonical import canonical_json

__all__ = ["JSONLineError", "StrictLoader", "canonical_value", "json_type_name", "read_json_file", "parse_json_bytes",
           "MAX_NESTING", "NESTING_MESSAGE", "nesting_depth", "may_hold_astral_literal",
           "has_astral_key", "encode_plain", "scan_canonical_numbers"]

# Arrays and objects nest at most this deep in anything ToolReplay reads: sessions, sealed files, logs
# to import, permission files, suites. Fixed, so that the verdict never depends on the command, on
# the worker that parsed a line or on how deep the interpreter's stack already is (every parser and
# encoder here recurses once a level, well within Python's default limit of 1000 frames).
MAX_NESTING = 512
NESTING_MESSAGE = f"nesting deeper than {MAX_NESTING}"
# A string literal (skipped: brackets inside it do not nest) or a bracket.
_NESTING_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')

_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
# CPython stores a string with 1, 2 or 4 bytes a character, 4 only when one lies beyond U+FFFF; its
# size then answers "any astral character?" without a scan. Elsewhere, scan.
_EMPTY_WIDE_SIZE = sys.getsizeof("\U00010000") - 4 * 2 if sys.implementation.name == "cpython" else None


def may_hold_astral_literal(text: str) -> bool:
    """Whether `text` may hold a character beyond U+FFFF written as itself (at once on CPython, from the
    string's size); one written as a surrogate-pair escape is the caller's to look for."""
    if text.isascii():
        return False
    if _EMPTY_WIDE_SIZE is None:
        return _ASTRAL.search(text) is not None
    return sys.getsizeof(text) >= _EMPTY_WIDE_SIZE + 4 * (len(text) + 1)


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_JSON_WHITESPACE = " \t\n\r"
_INFINITY = float("inf")


def _no_default(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not a JSON value")


# The C encoder, built once: sorted keys, no white space, no circular-reference markers (parsed JSON
# cannot be circular). Going through json.dumps would rebuild it on every call.
_c_encode = (c_make_encoder(None, _no_default, encode_basestring, None, ":", ",", True, False, False)
             if c_make_encoder is not None else None)


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


def has_astral_key(value: Any) -> bool:
    """Whether any object key holds a character beyond U+FFFF (where code-point and UTF-16 order differ)."""
    return _has_astral_key(value)


def _has_astral_key(value: Any) -> bool:
    """Whether any object key holds a character beyond U+FFFF (where code-point and UTF-16 order differ)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, member in item.items():
                if not key.isascii() and _ASTRAL.search(key):
                    return True
                if isinstance(member, (dict, list)):
                    stack.append(member)
        elif isinstance(item, list):
            stack.extend(member for member in item if isinstance(member, (dict, list)))
    return False


def canonical_value(value: Any, fast: bool) -> bytes:
    """Canonical UTF-8 bytes of a value; `fast` when it was parsed by StrictLoader and held no exotic float."""
    if type(value) is str:
        return encode_basestring(value).encode("utf-8")
    if fast and _c_encode is not None:
        text = "".join(_c_encode(value, 0))
        if may_hold_astral_literal(text) and _has_astral_key(value):
            text = canonical_json(value)
    else:
        text = canonical_json(value)
    return text.encode("utf-8")


def json_type_name(value: Any) -> str:
    """The JSON name of a parsed value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def read_json_file(path: str) -> Any:
    """Read one strict JSON document from a file; errors name the file (and the line, for bad JSON)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse_json_bytes(data, path)


def parse_json_bytes(data: bytes, path: str) -> Any:
    """One strict JSON document from the bytes of the file `path` (`read_json_file` once they are read)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(path, None, "not valid UTF-8") from None
    loader = StrictLoader()
    try:
        value = loader.loads(text)
        if "\\ud" in text or "\\uD" in text:
            loader.canonical(value)  # a \\uD800-\\uDFFF escape: reject a lone surrogate like the session parser
    except JSONLineError as exc:
        raise InputError(path, exc.lineno or _lone_surrogate_line(text), str(exc)) from None
    return value


_SURROGATE_ESCAPE = re.compile(r"(\\+)u([dD][89a-fA-F][0-9a-fA-F]{2})")


def _lone_surrogate_line(text: str) -> int | None:
    """The line of the first `\\uD800`-`\\uDFFF` escape that is not half of a pair."""
    paired_low = -1
    for match in _SURROGATE_ESCAPE.finditer(text):
        if len(match.group(1)) % 2 == 0 or match.start() == paired_low:
            continue  # an escaped backslash followed by "u...", or the low half of a pair
        code = int(match.group(2), 16)
        after = _SURROGATE_ESCAPE.match(text, match.end())
        if code < 0xDC00 and after is not None and len(after.group(1)) == 1 and int(after.group(2), 16) >= 0xDC00:
            paired_low = match.end()
            continue
        return text.count("\n", 0, match.start()) + 1
    return None


def _check_nesting(text: str) -> None:
    """Reject a text whose arrays and objects nest deeper than MAX_NESTING (brackets in strings do not count)."""
    depth = 0
    for match in _NESTING_TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_NESTING:
                raise JSONLineError(NESTING_MESSAGE, text.count("\n", 0, match.start()) + 1)
        elif token in "]}":
            depth -= 1


def _check_depth(text: str) -> None:
    """`_check_nesting`, for a text with enough brackets to nest too deep."""
    if text.count("[") + text.count("{") > MAX_NESTING:
        _check_nesting(text)


def nesting_depth(value: Any) -> int:
    """How deep arrays and objects nest in a parsed value (0 for a scalar), without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        members = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if members is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((member, depth + 1) for member in members if isinstance(member, (dict, list)))
    return deepest


def _position(text: str, pos: int) -> tuple[int, int]:
    """Line and column (from 1) of an error at `pos`; an error past the last line break of the text
    (the text ended early) is placed at the end of the line before it, not at column 1 of an empty line."""
    end = len(text.rstrip("\r\n"))
    if pos > end:
        pos = end
    return text.count("\n", 0, pos) + 1, pos - text.rfind("\n", 0, pos)


# A string (skipped), or an integer of more digits than `int` converts from text.
_LONG_INTEGER = re.compile(r'"(?:[^"\\]|\\.)*"|(-?[0-9]{4301,})')


def _reject_constant(name: str) -> Any:
    raise JSONLineError(f"{name} is not allowed in JSON")


def encode_plain(value: Any) -> str:
    """The C encoder's text of a value (sorted keys, no white space): its canonical text when it was parsed
    by StrictLoader, held no exotic float and has no astral key (`has_astral_key`); the caller checks."""
    if _c_encode is None:
        return canonical_json(value)
    return "".join(_c_encode(value, 0))


class _NotCanonicalNumber(ValueError):
    """A float not written in its canonical text (`scan_canonical_numbers` then answers None)."""


def _canonical_float(text: str) -> float:
    value = float(text)
    # Within [1e-4, 1e16) and not integral, the C encoder's repr is the ECMAScript form (see _make_float).
    # Written without an exponent, such a float is never shorter than that repr: the repr has the fewest
    # digits that give the double back, in the same positional form (the length argument of
    # `scan_canonical_numbers`). Other digits (1.50, or a different last digit of 17 that gives the same
    # double) are longer or as long, and the canonical text is made from the value either way; comparing
    # with the repr itself cost about 4% of `verify`. An exponent can write it shorter (1e-4, not 0.0001).
    if 1e-4 <= abs(value) < 1e16 and not value.is_integer() and "e" not in text and "E" not in text:
        return value
    raise _NotCanonicalNumber(text)


_scan_canonical_numbers: Any = getattr(  # noqa: B009 - set in __init__, not in the type stubs
    json.JSONDecoder(parse_float=_canonical_float, parse_constant=_reject_constant), "scan_once")


def scan_canonical_numbers(text: str) -> tuple[Any, int] | None:
    """Parse the JSON value at the start of `text` with the C scanner and no object hook: (value, end), or
    None when the text is not valid JSON, nests deeper than MAX_NESTING, or writes a float (any number with
    a fraction or exponent) with an exponent, or of a value whose canonical text is not its repr (integral,
    or outside [1e-4, 1e16)).

    Duplicate keys are NOT detected: a caller shows there were none by checking that the value's canonical
    text (`encode_plain`) is exactly as long as the JSON it came from. That holds because every token of
    valid JSON so read is at least as long as its canonical text (such floats, strings' escapes, integers'
    `-0`, white space), and a duplicated member adds its own length."""
    if len(text) > 2 * MAX_NESTING and text.count("[") + text.count("{") > MAX_NESTING:
        return None
    try:
        found: tuple[Any, int] = _scan_canonical_numbers(text, 0)
    except (StopIteration, ValueError, RecursionError):  # JSONDecodeError and a too-long integer are ValueErrors
        return None
    return found


class StrictLoader:
    """Parses lines strictly and turns parsed values into canonical UTF-8 bytes."""

    def __init__(self, keep_floats: bool = False) -> None:
        """`keep_floats`: parse every non-integer number as a Python float, as `json` does, so that
        re-encoding the value with `json.dumps` writes `100.0` back as `100.0` (the importers need it)."""
        self._keep_floats = keep_floats
        # Set by `loads` when the text holds a float whose canonical text the C encoder would get wrong.
        self.exotic = False
        decoder = json.JSONDecoder(
            object_pairs_hook=self._make_object, parse_float=self._make_float, parse_constant=_reject_constant)
        self._scan: Any = getattr(decoder, "scan_once")  # noqa: B009 - set in __init__, not in the type stubs
        unhooked = json.JSONDecoder(parse_float=self._make_float, parse_constant=_reject_constant)
        self._scan_unhooked: Any = getattr(unhooked, "scan_once")  # noqa: B009 - as above

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
        magnitude = abs(value)
        if 1e-4 <= magnitude < 1e16 and not value.is_integer() and not self._keep_floats:
            return value  # the usual float, first: its repr is its canonical text
        if magnitude == _INFINITY:
            raise JSONLineError(f"number {text[:40]} overflows a double")
        if self._keep_floats:
            self.exotic = True
        elif magnitude < 1e16 and value.is_integer():
            return _IntegralFloat(int(value))  # below 1e16 the double is exactly its shortest digits
        elif not 1e-4 <= magnitude < 1e16:
            self.exotic = True  # Python writes these with an exponent, unlike ECMAScript up to 1e21
        return value

    def loads(self, text: str) -> Any:
        """Parse one JSON text (usually one line), strictly."""
        self.exotic = False
        # Too deep is an error before any other, so the brackets are counted before parsing; but a text
        # that parses nests at most len(text) // 2 deep (each level opens and closes), so a shorter one
        # is counted only when it fails to parse (counting every line cost ~3% of replay's instructions).
        if len(text) > 2 * MAX_NESTING:
            _check_depth(text)
        try:
            try:
                start = 0 if text[:1] == "{" else _WHITESPACE.match(text, 0).end()  # type: ignore[union-attr]
                value, end = self._scan(text, start)
            except StopIteration as stop:
                raise json.JSONDecodeError("Expecting value", text, stop.value) from None
            if end != len(text) and text[end:].strip(_JSON_WHITESPACE):
                raise json.JSONDecodeError("Extra data", text, _WHITESPACE.match(text, end).end())  # type: ignore
            return value
        except json.JSONDecodeError as exc:
            _check_depth(text)
            lineno, column = _position(text, exc.pos)
            raise JSONLineError(f"invalid JSON: {exc.msg} (column {column})", lineno) from None
        except RecursionError:
            _check_depth(text)
            raise JSONLineError(NESTING_MESSAGE) from None
        except ValueError as exc:  # e.g. an integer longer than the interpreter converts
            _check_depth(text)
            if isinstance(exc, JSONLineError):
                raise
            # The text parsed up to that integer: the first one outside a string is the culprit.
            found = next((match for match in _LONG_INTEGER.finditer(text) if match.group(1)), None)
            message = "invalid number: an integer of more than 4300 digits is not supported"
            if found is None:
                raise JSONLineError(message) from None
            lineno, column = _position(text, found.start(1))
            raise JSONLineError(f"{message} (column {column})", lineno) from None

    def loads_without_key_check(self, text: str) -> Any:
        """`loads` without its duplicate-key check (a Python call per object), for a caller that proves there
        was none another way: the value, or None for any text `loads` rejects or that starts with white space
        (the caller then reads the text with `loads`, which names the error). `exotic` is set as by `loads`.
        Of duplicate keys the C scanner keeps the last value, as `dict` does."""
        self.exotic = False
        if len(text) > 2 * MAX_NESTING and text.count("[") + text.count("{") > MAX_NESTING:
            return None
        try:
            value, end = self._scan_unhooked(text, 0)
        except (StopIteration, ValueError, RecursionError):  # JSONLineError and JSONDecodeError are ValueErrors
            return None
        if end != len(text) and text[end:] != "\n" and text[end:].strip(_JSON_WHITESPACE):
            return None
        return value

    def canonical(self, value: Any) -> bytes:
        """Canonical UTF-8 bytes of a value parsed by the last `loads` call; a lone surrogate is an error."""
        try:
            return canonical_value(value, not self.exotic)
        except UnicodeEncodeError:
            raise JSONLineError("string holds a lone surrogate (invalid Unicode escape)") from None
        except RecursionError:
            raise JSONLineError(NESTING_MESSAGE) from None
