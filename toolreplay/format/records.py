"""The session format (docs/format.md): one tool call per line, read strictly and streamed.

`read_session` yields `Record`s one at a time, each carrying the canonical bytes of its parts so the
checks and the chain never re-encode. A sealed file (docs/format.md: every line a link with `prev` and
`digest`) is a session too; a file mixing plain records and links is an input error.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import IO, Any

from toolreplay.errors import InputError, UsageError
from toolreplay.format.canonical import canonical_json
from toolreplay.format.strictjson import (
    JSONLineError,
    StrictLoader,
    canonical_value,
    encode_plain,
    has_astral_key,
    json_type_name,
    may_hold_astral_literal,
    scan_canonical_numbers,
)

__all__ = ["Record", "read_session", "read_links", "iter_records", "iter_link_facts", "iter_facts", "PLAIN_FACTS",
           "PlainParts", "canonical_call_text", "GENESIS", "link_fact", "LinkFact",
           "open_input", "format_record",
           "canonical_record_bytes", "check_meta", "meta_outcome", "ts_seconds", "ts_nanoseconds",
           "format_ts", "RECORD_FIELDS", "LINK_FIELDS", "META_KEYS", "OUTCOMES", "PLAIN_IN_SEALED",
           "LINK_IN_PLAIN", "NOT_SEALED", "MAX_LINE_BYTES", "line_too_long", "TornLineError", "index_out_of_order"]

RECORD_FIELDS = ("index", "tool", "args", "response")
LINK_FIELDS = ("index", "tool", "args", "response", "prev", "digest")
_RECORD_SET = frozenset(RECORD_FIELDS)
_LINK_SET = frozenset(LINK_FIELDS)
_RECORD_META_SET = _RECORD_SET | {"meta"}
_LINK_META_SET = _LINK_SET | {"meta"}
META_KEYS = ("ts", "duration_ms", "call_id", "turn", "outcome", "mutates")
OUTCOMES = ("ran", "cached", "refused", "cancelled", "unknown")
_OUTCOME_SET = frozenset(OUTCOMES)
_TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?Z")
_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX_BYTES = b"0123456789abcdef"
_JSON_WHITESPACE = " \t\r\n"
STDIN_NAME = "<stdin>"
PLAIN_IN_SEALED = "plain record in a sealed file (every line must be a link with prev and digest)"
LINK_IN_PLAIN = "sealed link in a file of plain records (prev and digest are not record fields)"
NOT_SEALED = "not sealed: a plain session (no prev and digest); seal it with 'toolreplay seal'"
MAX_LINE_BYTES = 64 << 20  # a longer line is an input error: memory stays bounded whatever the input


class TornLineError(InputError):
    """The last line of a file is incomplete: no line break and not a whole JSON value (a write cut short
    by a crash). Reported like any input error; `verify` reports the links before it."""

    def __init__(self, path: str, line: int | None, message: str, size: int) -> None:
        super().__init__(path, line, message)
        self.size = size  # the incomplete line's bytes


def index_out_of_order(index: int, expected: int) -> str:
    """The message of a record whose index is not the one expected."""
    if expected == 0:
        return f"index must start at 0, got {index}"
    return f"index {index} out of order: expected {expected}"


def line_too_long(limit: int) -> str:
    """The message of a line longer than `limit` bytes (not counting its line break)."""
    return f"line longer than {limit} bytes"


@dataclass(slots=True)
class Record:
    """One tool call: its fields, where it was read, and the link fields when it came from a sealed file.

    The canonical forms are computed on demand, so a check that needs only names (scope) never pays
    for encoding. `fast_canonical` is set by the parser when the C encoder prints these values
    canonically (no exotic float, no key beyond U+FFFF, decided once for the line); values built in Python
    keep the default and go through `canonical_json`. `record_bytes` is the canonical record when the
    parser already has it (a link line as `seal` writes it). Treat a Record as immutable (it is not frozen
    only because frozen dataclasses are slow to build).
    """

    index: int
    tool: str
    args: dict[str, Any]
    response: dict[str, Any]
    line: int = 0
    prev: str | None = None
    digest: str | None = None
    fast_canonical: bool = False
    meta: dict[str, Any] | None = None
    record_bytes: bytes | None = None
    texts: tuple[str, str, str | None] | None = None  # canonical args, response, meta (`_encoded_parts`)

    @property
    def outcome(self) -> str:
        """What happened to the request (`meta.outcome`); a record without one ran."""
        return meta_outcome(self.meta)

    @property
    def canonical_tool(self) -> bytes:
        """Canonical bytes of the tool name (a JSON string: the C encoder's text of any string is canonical)."""
        return encode_basestring(self.tool).encode("utf-8")

    @property
    def canonical_args(self) -> bytes:
        """Canonical bytes of the arguments object."""
        if self.texts is not None:
            return self.texts[0].encode("utf-8")
        if self.fast_canonical:
            return encode_plain(self.args).encode("utf-8")
        return canonical_value(self.args, False)

    @property
    def canonical_response(self) -> bytes:
        """Canonical bytes of the response object."""
        if self.texts is not None:
            return self.texts[1].encode("utf-8")
        if self.fast_canonical:
            return encode_plain(self.response).encode("utf-8")
        return canonical_value(self.response, False)

    @property
    def canonical_response_text(self) -> str:
        """The canonical text of the response (its bytes, decoded): for a digest compared within one run,
        which need not pay for encoding."""
        if self.texts is not None:
            return self.texts[1]
        if self.fast_canonical:
            return encode_plain(self.response)
        return canonical_json(self.response)

    @property
    def canonical_call(self) -> bytes:
        """Canonical bytes of {"tool": TOOL, "args": ARGS}: equal bytes, identical calls."""
        if self.texts is not None:
            return canonical_call_text(self.texts[0], self.tool).encode("utf-8")
        if self.fast_canonical:  # one encoding of the pair, not two joined
            return encode_plain({"args": self.args, "tool": self.tool}).encode("utf-8")
        return b'{"args":' + self.canonical_args + b',"tool":' + self.canonical_tool + b"}"

    @property
    def canonical_meta(self) -> bytes | None:
        """Canonical bytes of `meta`, or None for a format-1.0 record."""
        if self.meta is None:
            return None
        if self.texts is not None and self.texts[2] is not None:
            return self.texts[2].encode("utf-8")
        if self.fast_canonical:
            return encode_plain(self.meta).encode("utf-8")
        return canonical_value(self.meta, False)

    @property
    def canonical_record(self) -> bytes:
        """Canonical bytes of the record (four fields, or five with `meta`), as hashed by the chain."""
        if self.record_bytes is not None:
            return self.record_bytes
        return canonical_record_bytes(self.index, self.canonical_tool, self.canonical_args, self.canonical_response,
                                      self.canonical_meta)


def canonical_call_text(args_text: str, tool: str) -> str:
    """The canonical text of {"tool": TOOL, "args": ARGS} from the canonical text of ARGS."""
    return '{"args":' + args_text + ',"tool":' + encode_basestring(tool) + "}"


def canonical_record_bytes(index: int, tool: bytes, args: bytes, response: bytes, meta: bytes | None = None) -> bytes:
    """The canonical record from the canonical forms of its parts (keys in sorted order; `meta` when given)."""
    if meta is None:
        return (b'{"args":' + args + b',"index":' + str(index).encode() + b',"response":' + response + b',"tool":'
                + tool + b"}")
    return (b'{"args":' + args + b',"index":' + str(index).encode() + b',"meta":' + meta + b',"response":'
            + response + b',"tool":' + tool + b"}")


def meta_outcome(meta: dict[str, Any] | None) -> str:
    """The outcome a record's `meta` states; `ran` when it states none (format 1.0)."""
    if meta is None:
        return "ran"
    outcome: str = meta.get("outcome", "ran")
    return outcome


def ts_nanoseconds(ts: str) -> int:
    """Nanoseconds since the Unix epoch of a `meta.ts` already checked by `check_meta` (exact)."""
    match = _TIMESTAMP.fullmatch(ts)
    if match is None:
        raise ValueError(f"not an RFC 3339 time in UTC ending in Z: {ts!r}")
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    fraction = match.group(7) or ""
    whole = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
    return whole * 1_000_000_000 + int(fraction.ljust(9, "0"))


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days from 1970-01-01 to a date of the proleptic Gregorian calendar (what `calendar.timegm` counts),
    in arithmetic alone: a hook process that resumes a record reads every `ts` and need not load calendar."""
    year -= month <= 2
    era = year // 400
    of_era = year - era * 400
    of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    return era * 146097 + of_era * 365 + of_era // 4 - of_era // 100 + of_year - 719468


def ts_seconds(ts: str) -> float:
    """Seconds since the Unix epoch of a `meta.ts` already checked by `check_meta`."""
    return ts_nanoseconds(ts) / 1e9


_last_second: tuple[int | None, str] = (None, "")  # format_ts's last whole second and its text: most calls share one


def format_ts(nanoseconds: int) -> str:
    """A `meta.ts` for a time in nanoseconds since the Unix epoch, with millisecond precision or finer as needed."""
    global _last_second
    seconds, fraction = divmod(nanoseconds, 1_000_000_000)
    last_seconds, text = _last_second
    if seconds != last_seconds:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _last_second = (seconds, text)
    digits = f"{fraction:09d}".rstrip("0")
    return f"{text}.{digits.ljust(3, '0')}Z" if digits else f"{text}.000Z"


def _check_timestamp(value: Any) -> None:
    if not isinstance(value, str):
        raise JSONLineError(f"meta field \"ts\" must be a string, not {json_type_name(value)}")
    match = _TIMESTAMP.fullmatch(value)
    if match is None:
        raise JSONLineError(f"meta field \"ts\" must be an RFC 3339 time in UTC ending in Z "
                            f"(2026-12-01T16:00:00.123Z), got {json.dumps(value[:40])}")
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if (not 1 <= month <= 12 or not 1 <= day <= _DAYS[month - 1] or (month == 2 and day == 29 and not leap)
            or hour > 23 or minute > 59 or second > 60):
        raise JSONLineError(f"meta field \"ts\" is not a valid date and time: {json.dumps(value)}")


def check_meta(meta: Any) -> None:
    """Check a record's `meta` object (docs/format.md); raise JSONLineError naming what is wrong."""
    if type(meta) is not dict:
        raise JSONLineError(f"field \"meta\" must be an object, not {json_type_name(meta)}")
    for key, value in meta.items():
        # The common, valid values are told apart with a few comparisons; anything else takes the
        # careful path below, which names what is wrong.
        if key == "ts":
            if (type(value) is str and _TIMESTAMP.fullmatch(value) is not None and "01" <= value[5:7] <= "12"
                    and "01" <= value[8:10] <= "28" and value[11:13] <= "23" and value[14:16] <= "59"
                    and value[17:19] <= "59"):
                continue
            _check_timestamp(value)
        elif key == "outcome" and type(value) is str and value in _OUTCOME_SET:
            continue
        elif key == "call_id" and type(value) is str and value:
            continue
        elif key == "turn" and type(value) is int and value >= 0:
            continue
        elif key == "duration_ms" and (type(value) is float or type(value) is int) and value >= 0:
            continue
        elif key == "mutates":
            if type(value) is not bool:
                raise JSONLineError(f"meta field \"mutates\" must be true or false, not {json_type_name(value)}")
        elif key == "duration_ms":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise JSONLineError(f"meta field \"duration_ms\" must be a number, not {json_type_name(value)}")
            if value < 0:
                raise JSONLineError(f"meta field \"duration_ms\" must not be negative, got {value}")
        elif key == "call_id":
            if not isinstance(value, str):
                raise JSONLineError(f"meta field \"call_id\" must be a string, not {json_type_name(value)}")
            if not value:
                raise JSONLineError("meta field \"call_id\" must not be empty")
        elif key == "turn":
            _check_count(value, 'meta field "turn"')
        elif key == "outcome":
            if value not in OUTCOMES or not isinstance(value, str):
                raise JSONLineError(f"meta field \"outcome\" must be one of {', '.join(OUTCOMES)}, "
                                    f"got {json.dumps(value) if isinstance(value, str) else json_type_name(value)}")
        elif not key.startswith("x-"):
            raise JSONLineError(f"unknown meta field {json.dumps(key)} (own keys start with x-)")


# The read buffer of an input file. The default is the file system's block size (4 KiB here): a read call
# every seven records of 550 bytes, 13,000 a 100,000-record session, 1.2-1.4% of `replay`, `seal` and
# `verify` (measured); with 1 MiB, 55.
READ_BUFFER = 1 << 20


@contextmanager
def open_input(path: str, stdin: IO[bytes] | None = None) -> Iterator[IO[bytes]]:
    """Open a file for binary reading; `-` is standard input. An unreadable file is a UsageError."""
    if path == "-":
        yield stdin if stdin is not None else sys.stdin.buffer
        return
    try:
        handle = open(path, "rb", buffering=READ_BUFFER)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    with handle:
        yield handle


def _check_fields(obj: Any, sealed: bool | None) -> bool:
    """Check the field set; return whether the line is a sealed link."""
    if not isinstance(obj, dict):
        raise JSONLineError(f"record must be a JSON object, not {json_type_name(obj)}")
    keys = obj.keys()
    if keys == _LINK_SET or keys == _LINK_META_SET:
        is_link = True
    elif keys == _RECORD_SET or keys == _RECORD_META_SET:
        is_link = False
    else:
        allowed = _LINK_META_SET if sealed else _RECORD_META_SET
        unknown = [key for key in obj if key not in allowed]
        if unknown and not (sealed is None and set(unknown) <= {"prev", "digest"}):
            raise JSONLineError(f"unknown field {json.dumps(unknown[0])}")
        missing = [field for field in (LINK_FIELDS if sealed or unknown else RECORD_FIELDS) if field not in obj]
        raise JSONLineError(f"missing field {json.dumps(missing[0])}")
    if sealed is not None and is_link != sealed:
        if sealed:
            raise JSONLineError(PLAIN_IN_SEALED)
        raise JSONLineError(LINK_IN_PLAIN)
    return is_link


def _check_count(value: Any, what: str) -> None:
    """An integer >= 0 (`1.0` and `true` are not), or a JSONLineError naming `what`."""
    if type(value) is not int:
        shown = "a number with a fraction or exponent" if isinstance(value, (int, float)) and not isinstance(
            value, bool) else json_type_name(value)
        raise JSONLineError(f"{what} must be an integer, not {shown}")
    if value < 0:
        raise JSONLineError(f"{what} must not be negative, got {value}")


def _check_types(obj: dict[str, Any], is_link: bool) -> None:
    _check_count(obj["index"], 'field "index"')
    tool = obj["tool"]
    if not isinstance(tool, str):
        raise JSONLineError(f"field \"tool\" must be a string, not {json_type_name(tool)}")
    if not tool:
        raise JSONLineError("field \"tool\" must not be empty")
    for field in ("args", "response"):
        if not isinstance(obj[field], dict):
            raise JSONLineError(f"field \"{field}\" must be an object, not {json_type_name(obj[field])}")
    if is_link:
        for field in ("prev", "digest"):
            value = obj[field]
            if not isinstance(value, str) or not _HEX64.fullmatch(value):
                raise JSONLineError(f"field \"{field}\" must be 64 lower-case hex characters")
    if "meta" in obj:
        check_meta(obj["meta"])


GENESIS = "0" * 64  # the prev of a chain's first link

# What a link line holds beyond its canonical record: ,"prev":"<64 hex>" and ,"digest":"<64 hex>".
_LINK_EXTRA = len(',"prev":""') + 64 + len(',"digest":""') + 64


LinkFact = tuple[bytes, "str | None", "str | None"]


def link_fact(record: Record) -> LinkFact:
    """What verifying needs of a link: the canonical record, and the stated prev and digest."""
    return record.canonical_record, record.prev, record.digest


def _canonical_link(raw: bytes, previous: str | None = None) -> tuple[LinkFact, dict[str, Any]] | None:
    """The link on a line as `seal` writes it (compact, each float in its canonical text): its fact (canonical
    record, prev, digest), taken from one encoding of the parsed line, and the parsed record without prev and
    digest; None for any other line, which the careful path then reads (and names what is wrong with it).
    The record equals the careful path's: see `scan_canonical_numbers` for why a line whose canonical record
    is exactly as long as the line without prev and digest has no duplicate key; every other rule is checked
    here as there, or the line goes there. `previous`: the digest the link before states, known to be 64
    lower-case hex characters (None when not known): a prev equal to it needs no look at its characters."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    found = scan_canonical_numbers(text)
    if found is None:
        return None
    obj, end = found
    if end != len(text) - 1 or type(obj) is not dict:  # the caller passes only lines ending in a line feed
        return None
    keys = obj.keys()
    if keys != _LINK_SET:
        if keys != _LINK_META_SET:
            return None
        try:
            check_meta(obj["meta"])
        except JSONLineError:
            return None
    index, tool, prev, digest = obj["index"], obj["tool"], obj.pop("prev"), obj.pop("digest")
    if (type(index) is not int or index < 0 or type(tool) is not str or not tool or type(obj["args"]) is not dict
            or type(obj["response"]) is not dict or type(digest) is not str or len(digest) != 64
            or not digest.isascii() or digest.encode("ascii").translate(None, _HEX_BYTES)
            or (prev != previous and (type(prev) is not str or len(prev) != 64 or not prev.isascii()
                                      or prev.encode("ascii").translate(None, _HEX_BYTES)))):
        return None  # (the hex digits deleted from a byte string leave nothing: a third of str.strip's time)
    canonical = encode_plain(obj)  # the record's five or four remaining fields, sorted: its canonical record
    if len(canonical) + _LINK_EXTRA != end:
        return None
    # A key beyond U+FFFF sorts otherwise in UTF-16. Written as itself, it makes the text 4 bytes a character
    # (which getsizeof tells at once); escaped, it cannot be here: a surrogate pair's 12 characters are longer
    # than the one of its canonical text, and the lengths are equal.
    if may_hold_astral_literal(text) and has_astral_key(obj):
        return None
    try:
        record = canonical.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return None
    return (record, prev, digest), obj


def _read_canonical_link(raw: bytes, lineno: int) -> Record | None:
    """`_canonical_link` as a Record (a link line as `seal` writes it), or None for any other line."""
    found = _canonical_link(raw)
    if found is None:
        return None
    (record, prev, digest), obj = found
    return Record(obj["index"], obj["tool"], obj["args"], obj["response"], lineno, prev, digest, True,
                  obj.get("meta"), record)


# The escapes the fast reading of a plain line looks for: \\uD800-\\uDFFF (a surrogate: a pair is one character,
# half of one an error) and \\u003a (a colon, which would spoil the count of colons in `_encoded_parts`: such
# a line is left to the careful reading).
_ESCAPE_TO_CHECK = re.compile(rb"\\u(?:[dD]|003[aA])")
_COLON_ESCAPE = re.compile(rb"\\u003[aA]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD]")


# A plain record as the fast reading has it: index, tool, args, response, meta (or None), and the canonical texts
# of args, response and meta (or None).
PlainParts = tuple[int, str, dict[str, Any], dict[str, Any], "dict[str, Any] | None", str, str, "str | None"]

# For a check's fact function (of a Record) that a caller registers, the function making the same fact from a
# plain record's parts, so that the fast reading of such a check makes no Record (seal, replay: `iter_facts`).
PLAIN_FACTS: dict[Callable[[Record], Any], Callable[[PlainParts], Any]] = {}


def _encoded_parts(raw: bytes, loader: StrictLoader) -> PlainParts | None:
    """A plain record read without a Python call per object, for a reader whose caller encodes its parts
    anyway (replay, seal): its parts with the canonical args, response and meta texts, or None for any line
    the careful path must read (anything unusual, and every error: that path names it).

    No duplicate key, proven by counting colons. When the line holds no \\u003a escape, every colon in a
    string's value is a colon written in its token, and the canonical text writes it as itself (the encoder
    escapes only quotes, backslashes and control characters); outside strings the line has one colon a
    member, and no number, literal or white space holds one. So a line has, object by object, as many colons
    as the canonical text of what it parses to plus one or more for each member that a later duplicate
    replaced (its own colon, and those of its key and value): the counts are equal exactly when no object
    anywhere in the line repeats a key. Every other rule is the careful path's: the same parser (its float
    hook, the nesting limit), the same field and type checks, `check_meta`."""
    escape = _ESCAPE_TO_CHECK.search(raw)  # (one search for both: most lines have neither)
    if escape is not None and _COLON_ESCAPE.search(raw, escape.start()) is not None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    obj = loader.loads_without_key_check(text)
    if type(obj) is not dict or loader.exotic:
        return None
    keys = obj.keys()
    meta = None
    if keys != _RECORD_SET:  # most records have no meta
        if keys != _RECORD_META_SET:
            return None
        meta = obj["meta"]
        try:
            check_meta(meta)
        except JSONLineError:
            return None
    index, tool, args, response = obj["index"], obj["tool"], obj["args"], obj["response"]
    if (type(index) is not int or index < 0 or type(tool) is not str or not tool or type(args) is not dict
            or type(response) is not dict or ((escape is not None or may_hold_astral_literal(text))
                                              and has_astral_key(obj))):
        return None
    args_text = encode_plain(args)
    response_text = encode_plain(response)
    colons = 4 + tool.count(":") + args_text.count(":") + response_text.count(":")  # index, tool, args, response
    meta_text = None
    if meta is not None:
        meta_text = encode_plain(meta)
        colons += 1 + meta_text.count(":")
    if raw.count(b":") != colons:
        return None
    # A surrogate escape: a pair is one character once parsed (and written as itself), half a pair is an error
    # the careful path names; no UTF-8 text can hold it (the encoding finds one faster than a search).
    if escape is not None:
        try:
            tool.encode("utf-8")
            args_text.encode("utf-8")
            response_text.encode("utf-8")
            if meta_text is not None:
                meta_text.encode("utf-8")
        except UnicodeEncodeError:
            return None
    return index, tool, args, response, meta, args_text, response_text, meta_text


def iter_records(handle: IO[bytes], path: str, *, check_sequence: bool, require_sealed: bool,
                 first_chunk: bool = True, resume: tuple[bool | None, int | None] | None = None,
                 max_line: int = MAX_LINE_BYTES, encodes: bool = False) -> Iterator[Record]:
    """Stream records from lines of bytes. Not the first chunk of a file: no BOM check, and the index
    sequence starts at the first record's index (the caller checks it against the chunk before), unless
    `resume` gives what the lines before established: (sealed or not or None, the next expected index).
    A line longer than `max_line` bytes is an input error, found before more than that is held in memory.
    `encodes`: the caller encodes each record's parts (replay, seal), so a plain record comes with their
    canonical texts, and its line is checked for duplicate keys from them (`_encoded_parts`)."""
    records: Iterator[Record] = _read_lines(handle, path, check_sequence, require_sealed, first_chunk, resume,
                                            max_line, False, encodes)
    return records


def iter_facts(handle: IO[bytes], path: str, extract: Callable[[Record], Any], *, check_sequence: bool,
               first_chunk: bool = True, resume: tuple[bool | None, int | None] | None = None,
               max_line: int = MAX_LINE_BYTES) -> Iterator[Any]:
    """`map(extract, iter_records(..., encodes=True))` over a session's records, the same facts and errors, for
    an `extract` in PLAIN_FACTS: a plain record the fast reading takes is made into its fact without a Record."""
    facts: Iterator[Any] = _read_lines(handle, path, check_sequence, False, first_chunk, resume, max_line, False,
                                       True, extract)
    return facts


def iter_link_facts(handle: IO[bytes], path: str, *, first_chunk: bool = True,
                    resume: tuple[bool | None, int | None] | None = None,
                    max_line: int = MAX_LINE_BYTES) -> Iterator[LinkFact]:
    """`map(link_fact, iter_records(...))` over the links of a sealed file, the same facts and errors, made
    without a Record for each line `seal` wrote (what `verify` reads)."""
    facts: Iterator[LinkFact] = _read_lines(handle, path, False, True, first_chunk, resume, max_line, True, False)
    return facts


def _read_lines(handle: IO[bytes], path: str, check_sequence: bool, require_sealed: bool, first_chunk: bool,
                resume: tuple[bool | None, int | None] | None, max_line: int, facts: bool,
                encodes: bool, extract: Callable[[Record], Any] | None = None) -> Iterator[Any]:
    """`iter_records`, with `facts` (links only) `iter_link_facts`, with `extract` `iter_facts`: one loop, so
    that all read alike."""
    plain = None if extract is None else PLAIN_FACTS[extract]
    loader = StrictLoader()
    loads = loader.loads
    sealed: bool | None = True if require_sealed else None
    expected_index: int | None = 0 if first_chunk else None
    if resume is not None:
        sealed, expected_index = resume
    plain_fields = _LINK_SET if sealed or require_sealed else _RECORD_SET
    meta_fields = _LINK_META_SET if sealed or require_sealed else _RECORD_META_SET
    lineno = 0
    readline = handle.readline
    bound = max_line + 1  # the line's bytes and its line break
    records = 0
    previous = GENESIS if first_chunk and resume is None else None  # the digest the link before states
    fast_links = require_sealed and not check_sequence  # links as seal writes them: `_read_canonical_link`
    fast_plain = encodes and not require_sealed  # plain records for a caller that encodes: `_encoded_parts`
    while raw := readline(bound):
        lineno += 1
        if fast_plain and sealed is not True and raw[-1:] == b"\n":
            parts = _encoded_parts(raw, loader)
            if parts is not None and (parts[0] == expected_index or not check_sequence or expected_index is None):
                sealed = False  # as the careful path decides at a plain record
                expected_index = parts[0] + 1
                records += 1
                if plain is not None:
                    yield plain(parts)
                else:
                    index, tool, args, response, meta, args_text, response_text, meta_text = parts
                    yield Record(index, tool, args, response, lineno, None, None, True, meta, None,
                                 (args_text, response_text, meta_text))
                continue
        if fast_links and raw[-1:] == b"\n":
            if facts:
                found = _canonical_link(raw, previous)
                if found is not None:
                    records += 1
                    fact = found[0]
                    previous = fact[2]
                    yield fact
                    continue
            else:
                link = _read_canonical_link(raw, lineno)
                if link is not None:
                    records += 1
                    yield link
                    continue
        unparsed = False  # True while a JSON error would mean a last line cut short
        try:
            if len(raw) == bound and raw[-1:] != b"\n":
                raise JSONLineError(line_too_long(max_line))
            if lineno == 1 and first_chunk and raw.startswith(b"\xef\xbb\xbf"):
                raise JSONLineError("byte-order mark at start of file (UTF-8 without BOM expected)")
            unparsed = raw[-1:] != b"\n"
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise JSONLineError(f"invalid UTF-8 (byte 0x{raw[exc.start]:02x} at byte offset {exc.start})") from None
            if text[:1] != "{" and not text.strip(_JSON_WHITESPACE):
                continue
            obj = loads(text)
            unparsed = False
            # Fast path: the expected field set with the expected types; anything else gets a precise message.
            if type(obj) is not dict or obj.keys() != plain_fields:
                # Format 1.1: the same fast path, and meta. The checks repeat the plain path's below on purpose:
                # merged, they cost records without meta an extra test per line (measured, about 2%).
                if type(obj) is dict and obj.keys() == meta_fields:
                    if sealed is None:
                        sealed = require_sealed
                    index, tool, args, response = obj["index"], obj["tool"], obj["args"], obj["response"]
                    if (type(index) is not int or type(tool) is not str or not tool or type(args) is not dict
                            or type(response) is not dict or index < 0 or sealed):
                        _check_types(obj, bool(sealed))
                    else:
                        check_meta(obj["meta"])
                else:
                    is_link = _check_fields(obj, sealed)
                    if sealed is None:
                        sealed = is_link
                        plain_fields = _LINK_SET if is_link else _RECORD_SET
                        meta_fields = _LINK_META_SET if is_link else _RECORD_META_SET
                    _check_types(obj, is_link)
                    index, tool, args, response = obj["index"], obj["tool"], obj["args"], obj["response"]
            else:
                if sealed is None:
                    sealed = require_sealed
                index, tool, args, response = obj["index"], obj["tool"], obj["args"], obj["response"]
                if (type(index) is not int or type(tool) is not str or not tool or type(args) is not dict
                        or type(response) is not dict or index < 0 or sealed):
                    _check_types(obj, bool(sealed))
            if check_sequence and index != expected_index and expected_index is not None:
                raise JSONLineError(index_out_of_order(index, expected_index))
            expected_index = index + 1
            surrogate_escape = _SURROGATE_ESCAPE.search(text) is not None
            if surrogate_escape:
                loader.canonical(obj)  # a \\uD800-\\uDFFF escape: reject it here if it is a lone surrogate
            # One look at the line decides for all its parts whether the C encoder's key order is canonical.
            fast = not loader.exotic and not ((surrogate_escape or may_hold_astral_literal(text))
                                              and has_astral_key(obj))
            record = Record(index, tool, args, response, lineno, obj.get("prev"), obj.get("digest"), fast,
                            obj.get("meta"))
        except JSONLineError as exc:
            message = str(exc)
            if message == PLAIN_IN_SEALED and require_sealed and first_chunk and not records:
                message = NOT_SEALED  # the first record is plain: not a damaged sealed file, just not one
            if unparsed:
                raise TornLineError(path, lineno, message, len(raw)) from None
            raise InputError(path, lineno, message) from None
        records += 1
        if facts:
            previous = record.digest
            yield record.canonical_record, record.prev, record.digest
        elif extract is not None:
            yield extract(record)
        else:
            yield record


def read_session(handle: IO[bytes], path: str, max_line: int = MAX_LINE_BYTES) -> Iterator[Record]:
    """Stream the records of a session (plain or sealed), checking every rule of the session format."""
    return iter_records(handle, path, check_sequence=True, require_sealed=False, max_line=max_line)


def read_links(handle: IO[bytes], path: str, max_line: int = MAX_LINE_BYTES) -> Iterator[Record]:
    """Stream the links of a sealed file; the index sequence is the chain's business, not checked here."""
    return iter_records(handle, path, check_sequence=False, require_sealed=True, max_line=max_line)


def format_record(index: int, tool: str, args: dict[str, Any], response: dict[str, Any],
                  meta: dict[str, Any] | None = None) -> str:
    """One session line (without the newline), in the documented field order; `meta` last, when given."""
    if meta is None:
        return json.dumps({"index": index, "tool": tool, "args": args, "response": response}, allow_nan=False)
    return json.dumps({"index": index, "tool": tool, "args": args, "response": response, "meta": meta},
                      allow_nan=False)
