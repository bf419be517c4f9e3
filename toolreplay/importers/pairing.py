"""What every format shares: calls and replies as events, their mapping to records, and their pairing.

A format module turns one conversation's messages into `ToolCall` and `ToolReply` events in message
order; `pair_events` turns those into records. A reply pairs with the earliest earlier call still
waiting for a reply whose id equals the reply's; an id missing on either side matches any call. So
unique ids pair by id, and missing or repeated ids (real gpt-4o logs reuse them) pair by order.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from toolreplay.importers.conversations import Conversation, JSONTextError, parse_json

__all__ = [
    "CallId",
    "call_id",
    "NameKey",
    "Event",
    "ToolCall",
    "ToolReply",
    "Note",
    "ImportedCall",
    "ConversionWarning",
    "MISSING",
    "NO_RESPONSE",
    "pair_events",
    "parse_arguments",
    "reply_response",
    "flag_error",
    "content_text",
    "Time",
    "TimeError",
    "iso_time",
    "nano_time",
    "duration_ms",
    "call_times",
]

CallId = str | int | None  # JSON-RPC ids may be numbers; None when the source has none
MISSING: Any = object()  # a field the source message does not have
NO_RESPONSE = {"error": "no recorded response"}
_TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})


class NameKey(str):
    """A pairing key made of a tool's name, for formats whose calls have no ids (Gemini)."""

    __slots__ = ()

    def __new__(cls, name: str) -> NameKey:
        return super().__new__(cls, "\0" + name)  # never equal to a real id

    @property
    def name(self) -> str:
        """The tool's name."""
        return self[1:]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call as the source wrote it: `arguments` is the raw value (a JSON string, an object, ...).

    What the source says of the call besides (written as the record's `meta`, docs/format.md): `ts`
    when it started (RFC 3339 UTC), `duration_ms` when it states its end too, `turn` the ordinal of the
    model turn that asked for it, and `id` the id to keep as `call_id`: MISSING means `call_id` (the
    pairing key) is the source's own id, None that the source has none (a pairing key made up for
    the import). `time_note` says why a time the source has was not kept.
    """

    call_id: CallId
    tool: str
    arguments: Any
    message: int
    ts: str | None = None
    duration_ms: int | float | None = None
    turn: int | None = None
    id: Any = MISSING
    time_note: str | None = None
    extra: tuple[tuple[str, Any], ...] = ()  # more meta the source states (a ToolReplay export's outcome, x- keys)

    def kept_id(self) -> str | None:
        """The id written as `meta.call_id`: the source's id as a string (a JSON-RPC number in decimal),
        never a made-up pairing key."""
        value = self.call_id if self.id is MISSING else self.id
        if value is None or isinstance(value, NameKey) or isinstance(value, bool):
            return None
        if isinstance(value, int):
            return str(value)
        return value if isinstance(value, str) and value else None

    def meta(self) -> dict[str, Any] | None:
        """The record's `meta` (keys in the order ts, duration_ms, call_id, turn), or None when the
        source says none of them."""
        found: dict[str, Any] = {}
        if self.ts is not None:
            found["ts"] = self.ts
        if self.duration_ms is not None:
            found["duration_ms"] = self.duration_ms
        kept = self.kept_id()
        if kept is not None:
            found["call_id"] = kept
        if self.turn is not None:
            found["turn"] = self.turn
        found.update(self.extra)
        return found or None


@dataclass(frozen=True, slots=True)
class ToolReply:
    """A reply, already mapped to its response object."""

    call_id: CallId
    response: dict[str, Any]
    message: int


@dataclass(frozen=True)
class Note:
    """Something in a message that is not imported, said as a warning (e.g. a built-in tool call)."""

    text: str
    message: int


Event = ToolCall | ToolReply | Note


@dataclass(frozen=True, slots=True)
class ImportedCall:
    """One record of an imported session, before its index is written."""

    tool: str
    args: dict[str, Any]
    response: dict[str, Any]
    meta: dict[str, Any] | None = None


@dataclass(frozen=True)
class ConversionWarning:
    """Something the import changed or dropped; renders as `PATH:LINE: message` like an input error."""

    path: str
    line: int | None
    message: str

    def __str__(self) -> str:
        if self.line is None:
            return f"{self.path}: {self.message}"
        return f"{self.path}:{self.line}: {self.message}"


def call_id(value: Any) -> str | None:
    """A call or reply id as the log gives it; None when it is missing, empty or not a string (pairs by order)."""
    return value if isinstance(value, str) and value else None


class TimeError(ValueError):
    """A time in a log that cannot be read as an instant; the text says why (with the value).
    `local`: a valid date and time without a UTC offset (the local time of some unknown zone)."""

    def __init__(self, text: str, local: bool = False) -> None:
        super().__init__(text)
        self.local = local


@dataclass(frozen=True)
class Time:
    """An instant a log states: nanoseconds since the Unix epoch, and as RFC 3339 in UTC (`...Z`)."""

    ns: int
    text: str


_ISO = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})?", re.ASCII)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _utc_time(moment: datetime.datetime, digits: str) -> Time:
    """The Time of a whole-second UTC datetime and the digits of its fraction (at most 9)."""
    whole = (moment - _EPOCH) // datetime.timedelta(seconds=1)
    text = (f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}:{moment.minute:02d}:"
            f"{moment.second:02d}" + (f".{digits}" if digits else "") + "Z")
    return Time(whole * 10**9 + (int(digits.ljust(9, "0")) if digits else 0), text)


def iso_time(value: Any) -> Time:
    """An ISO 8601 / RFC 3339 date and time with its UTC offset (`Z`, `+00:00`, `-05:00`), converted
    to UTC; the fraction keeps its digits (up to nanoseconds). A time without an offset is a local
    time of an unknown zone: a TimeError, as is anything else that is not a valid date and time."""
    if not isinstance(value, str):
        raise TimeError(f"time {_shown(value)} is not a string")
    match = _ISO.fullmatch(value)
    if match is None:
        raise TimeError(f"time {_shown(value)} is not an ISO 8601 date and time")
    zone = match.group(8)
    try:
        offset = datetime.timedelta(0)
        if zone is not None and zone not in "Zz":
            hours, minutes = int(zone[1:3]), int(zone[4:6])
            if hours > 23 or minutes > 59:
                raise ValueError
            offset = datetime.timedelta(hours=hours, minutes=minutes) * (1 if zone[0] == "+" else -1)
        year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
        local = datetime.datetime(year, month, day, hour, minute, second, tzinfo=datetime.timezone(offset))
        utc = local.astimezone(datetime.UTC)
    except (ValueError, OverflowError):
        raise TimeError(f"time {_shown(value)} is not a valid date and time") from None
    if zone is None:
        raise TimeError(f"time {_shown(value)} has no UTC offset (a local time of an unknown zone)", local=True)
    return _utc_time(utc, (match.group(7) or "")[:9])


def nano_time(value: Any) -> Time:
    """Nanoseconds since the Unix epoch (an integer or its decimal string, as OTLP writes them)."""
    if isinstance(value, str) and re.fullmatch(r"\d+", value, re.ASCII):
        if len(value) > 30:  # past the year 9999 (and too long for int() to read)
            raise TimeError(f"time {_shown(value)} is after the year 9999")
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TimeError(f"time {_shown(value)} is not a count of nanoseconds since 1970")
    seconds, rest = divmod(value, 10**9)
    try:
        moment = _EPOCH + datetime.timedelta(seconds=seconds)
    except OverflowError:
        raise TimeError(f"time {_shown(value)} is after the year 9999") from None
    return _utc_time(moment, f"{rest:09d}".rstrip("0") if rest else "")


def duration_ms(start: Time, end: Time) -> int | float:
    """Milliseconds from start to end (an integer when whole); a TimeError when the end comes first."""
    nanoseconds = end.ns - start.ns
    if nanoseconds < 0:
        raise TimeError(f"end time {end.text} comes before the start {start.text}")
    return nanoseconds // 10**6 if nanoseconds % 10**6 == 0 else nanoseconds / 10**6


def call_times(start: Any, end: Any, read: Callable[[Any], Time], quiet_local: bool = False) -> dict[str, Any]:
    """A call's `ts` and `duration_ms` (ToolCall fields) from the start and end the source states
    (None where it states none), each read with `read`; what cannot be read is left out and said in
    `time_note`. `quiet_local`: a start without a UTC offset is left out without a word."""
    if start is None:
        return {}
    try:
        begun = read(start)
    except TimeError as problem:
        return {} if quiet_local and problem.local else {"time_note": f"{problem}; no ts kept"}
    if end is None:
        return {"ts": begun.text}
    try:
        finished = read(end)
    except TimeError as problem:
        return {"ts": begun.text, "time_note": f"end {problem}; no duration kept"}
    try:
        return {"ts": begun.text, "duration_ms": duration_ms(begun, finished)}
    except TimeError as problem:
        return {"ts": begun.text, "time_note": f"{problem}; no duration kept"}


def parse_arguments(value: Any) -> tuple[dict[str, Any], str | None]:
    """The args object of a call, and why it was kept as `_raw_arguments` (None when it was not)."""
    if value is MISSING or value is None:
        return {}, None
    if isinstance(value, dict):
        return value, None
    if not isinstance(value, str):
        return {"_raw_arguments": value}, "arguments are not a JSON object"
    try:
        parsed = parse_json(value)
    except JSONTextError:
        return {"_raw_arguments": value}, "arguments are not valid JSON"
    if not isinstance(parsed, dict):
        return {"_raw_arguments": value}, "arguments are not a JSON object"
    return parsed, None


def content_text(content: Any) -> str | None:
    """The text of a reply's content: a string, or text parts joined by newlines; None if not text."""
    if content is MISSING or content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(part, dict)
        and isinstance(part.get("type"), str)
        and part["type"] in _TEXT_PART_TYPES
        and isinstance(part.get("text"), str)
        for part in content
    ):
        return "\n".join(part["text"] for part in content)
    return None


def reply_response(content: Any, error: bool) -> dict[str, Any]:
    """A reply's response: its text's JSON object, else {"text": TEXT}; other content as {"content": ...}."""
    text = content_text(content)
    if text is None:
        return flag_error({"content": content}, error, {"content": content})
    try:
        parsed = parse_json(text)
    except JSONTextError:
        parsed = None
    if isinstance(parsed, dict):
        return flag_error(parsed, error, {"text": text})
    return flag_error({"text": text}, error, {"text": text})


def flag_error(response: dict[str, Any], error: bool, fallback: dict[str, Any]) -> dict[str, Any]:
    """Add `"error": true` in front when the source flags an error; a response that already has an
    `error` field is not merged into: the fallback form is flagged instead."""
    if not error:
        return response
    if "error" in response:
        return {"error": True, **fallback}
    return {"error": True, **response}


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:56] + '..."'


@dataclass
class _Pending:
    call: ToolCall
    index: int
    line: int | None  # the call's line, known while its message is read (a stream forgets it after)


def _warn(conversation: Conversation, message: int, text: str, line: Any = MISSING) -> ConversionWarning:
    return ConversionWarning(
        conversation.path,
        conversation.line_of(message) if line is MISSING else line,
        f"{conversation.where(message)}: {text}",
    )


def pair_events(
    conversation: Conversation, events: Iterable[Event], warnings: list[ConversionWarning]
) -> list[ImportedCall]:
    """Records of one conversation, in call order; appends what was changed or dropped to `warnings`."""
    found: list[tuple[int, ConversionWarning]] = []
    calls: list[_Pending] = []
    responses: list[dict[str, Any] | None] = []
    waiting: list[_Pending] = []
    for event in events:
        if isinstance(event, ToolCall):
            pending = _Pending(event, len(calls), conversation.line_of(event.message))
            calls.append(pending)
            responses.append(None)
            waiting.append(pending)
            continue
        if isinstance(event, Note):
            found.append((event.message, _warn(conversation, event.message, event.text)))
            continue
        match = next(
            (
                p
                for p in waiting
                if event.call_id is None or p.call.call_id is None or p.call.call_id == event.call_id
            ),
            None,
        )
        if match is None:
            if isinstance(event.call_id, NameKey):
                named = f"reply from {_shown(event.call_id.name)}"
            else:
                named = f"reply to call id {_shown(event.call_id)}" if event.call_id is not None else "reply"
            found.append(
                (
                    event.message,
                    _warn(conversation, event.message, f"{named} matches no earlier call; dropped"),
                )
            )
            continue
        waiting.remove(match)
        responses[match.index] = event.response
    records = []
    untimed = [pending for pending in calls if pending.call.time_note is not None]
    if untimed:  # said once per conversation: a log's times are usually all of one kind
        first = untimed[0]
        others = len(untimed) - 1
        more = f" (and {others} more call{'s' if others > 1 else ''})" if others else ""
        found.append((first.call.message, _warn(
            conversation, first.call.message,
            f"call {first.index} ({first.call.tool}): {first.call.time_note}{more}", first.line)))
    for pending, response in zip(calls, responses, strict=True):
        call = pending.call
        label = f"call {pending.index} ({call.tool})"
        args, problem = parse_arguments(call.arguments)
        if problem is not None:
            kept = f'kept as {{"_raw_arguments": {_shown(call.arguments)}}}'
            found.append(
                (call.message, _warn(conversation, call.message, f"{label}: {problem}; {kept}", pending.line))
            )
        if response is None:
            found.append(
                (
                    call.message,
                    _warn(
                        conversation,
                        call.message,
                        f"{label}: no reply; response set to {json.dumps(NO_RESPONSE)}",
                        pending.line,
                    ),
                )
            )
            response = dict(NO_RESPONSE)
        records.append(ImportedCall(call.tool, args, response, call.meta()))
    found.sort(key=lambda item: item[0])  # stable: a call's own warnings keep their order
    warnings.extend(warning for _, warning in found)
    return records
