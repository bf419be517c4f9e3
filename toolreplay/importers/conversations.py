"""Where the conversations are in a log file: one, or many, in JSON, JSON Lines or an `.eval` archive.

A file whose first non-blank line is a JSON value on its own, followed by another, is JSON Lines and
is streamed (`read_conversations`); anything else is read as one JSON document. Then (docs/import.md,
"Where the conversations are"):

- layouts that tell their format: OTLP exports (one conversation per trace), inspect_ai logs (per
  sample), Agents SDK spans (per trace), stream-json messages (the main agent, then per sub-agent);
- JSON array of conversation objects (each with `messages` or `traj`, or a request body with `input`,
  `contents` or `history`, an ATIF trajectory's `steps`, or a response object): many conversations;
- any other JSON array: one conversation, the array being its messages;
- JSON object with `simulations` (tau2-bench): many, one per simulation's `messages`;
- JSON object with `messages` (or one of the keys above): one conversation (a logged `response`
  adds its message);
- JSON Lines whose first line is an array or a conversation object: one conversation per line;
- JSON Lines of other objects (a lone object counts too): one message per line, one conversation.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import itertools
import json
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Generic, TypeVar

from toolreplay.errors import InputError
from toolreplay.format.strictjson import JSONLineError, StrictLoader
from toolreplay.importers.otlp import Span, is_sdk_span, sdk_span, spans_of
from toolreplay.importers.sse import is_sse, is_stream_event, sse_events

__all__ = [
    "Conversation",
    "MessageStream",
    "Peekable",
    "find_conversations",
    "is_atif",
    "read_conversations",
    "messages_of",
    "parse_json",
    "JSONTextError",
]

_CONVERSATION_KEYS = ("messages", "traj")
_LEADING_SPACE = re.compile(r"[ \t\r\n]*")


JSONTextError = JSONLineError  # the importers' name for it
T = TypeVar("T")


class Peekable(Generic[T]):
    """A one-pass sequence whose start can be looked at first: `peek()` keeps what it reads for the
    pass (`for item in ...`) that follows, and nothing else is kept."""

    def __init__(self, source: Iterator[T], streamed: bool = False) -> None:
        """`streamed`: the items are read from the file as the pass goes (JSON Lines)."""
        self._source = source
        self.streamed = streamed
        self._buffer: collections.deque[T] = collections.deque()
        self._taken = 0  # items handed out by the pass so far

    def peek(self, limit: int | None = None) -> Iterator[T]:
        """The items from the start of the pass on, reading (and keeping) no more than `limit` new ones."""
        yield from list(self._buffer)
        read = 0
        while limit is None or read < limit:
            try:
                item = next(self._source)
            except StopIteration:
                return
            self._buffer.append(item)
            read += 1
            yield item

    def _take(self) -> T:
        item = self._buffer.popleft() if self._buffer else next(self._source)
        self._taken += 1
        return item

    def __iter__(self) -> Iterator[T]:
        while True:
            try:
                yield self._take()
            except StopIteration:
                return


class MessageStream(Peekable[tuple[int, Any]]):
    """The messages of a JSON Lines file, one a line, parsed as they are read: iterating yields the
    messages; `line_of` knows the line of the message being read, and of none before it."""

    def __init__(self, source: Iterator[tuple[int, Any]], streamed: bool = True) -> None:
        super().__init__(source, streamed)
        self._line: int | None = None
        self._watch: Callable[[Any], str | None] | None = None
        self.watched: tuple[int, str] | None = None  # (message, what `watch`'s function found there)
        self.watched_line: int | None = None

    def watch(self, find: Callable[[Any], str | None]) -> None:
        """Look at each message the pass reads with `find` until it finds something (kept in `watched`)."""
        self._watch = find

    @property
    def current_line(self) -> int | None:
        """The line of the message the pass is reading (None before the pass)."""
        return self._line

    def peek_messages(self, limit: int | None = None) -> Iterator[Any]:
        """The messages from the start, as `peek` reads them."""
        return (value for _, value in self.peek(limit))

    def __iter__(self) -> Iterator[Any]:
        while True:
            try:
                self._line, value = self._take()
            except StopIteration:
                return
            if self._watch is not None:
                found = self._watch(value)
                if found is not None:
                    self.watched, self.watched_line, self._watch = (self._taken - 1, found), self._line, None
            yield value

    def line_of(self, message: int) -> int | None:
        """The line of the message being read (message positions count from 0)."""
        return self._line if message == self._taken - 1 else None


def messages_of(conversation: Conversation, limit: int | None = None) -> Iterator[Any]:
    """A conversation's messages for a look before the pass: all of a list, the start of a stream."""
    if isinstance(conversation.messages, MessageStream):
        return conversation.messages.peek_messages(limit)
    return iter(conversation.messages)


def parse_json(text: str) -> Any:
    """Parse one JSON text strictly; floats stay floats, so re-encoding with `json.dumps` is faithful."""
    return StrictLoader(keep_floats=True).loads(text)


@dataclass(frozen=True)
class Conversation:
    """One conversation: its position in the file, its messages, and where each message came from."""

    path: str
    position: int
    messages: list[Any] | MessageStream  # a stream for JSON Lines with one message per line
    lines: tuple[int | None, ...] | None = None  # per message, for JSON Lines with one message per line
    line: int | None = None  # for JSON Lines with one conversation per line
    container: str = "messages"  # where the messages were: simulations, messages, traj, array, lines, ...
    paths: tuple[str, ...] | None = None  # per message, its JSON path, where "message M" says too little
    notes: tuple[str, ...] = ()  # what the layout could not read, said as warnings
    timeline: list[Any] | None = None  # what the layout logs beside the messages (inspect_ai: a sample's events)

    def line_of(self, message: int) -> int | None:
        """The file line of a message, when the file is JSON Lines."""
        if isinstance(self.messages, MessageStream):
            return self.messages.line_of(message)
        return self.lines[message] if self.lines is not None else self.line

    def where(self, message: int) -> str:
        """`conversation C, message M` (positions count from 0, as in the JSON arrays), or the message's
        JSON path when the layout gives one."""
        if self.paths is not None:
            return f"conversation {self.position}, {self.paths[message]}"
        return f"conversation {self.position}, message {message}"

    def error(self, message: int, text: str) -> InputError:
        """An input error located at one message of this conversation."""
        return InputError(self.path, self.line_of(message), f"{self.where(message)}: {text}")


def _is_conversation_object(value: Any) -> bool:
    return _conversation_key(value) is not None


def _conversation_key(value: Any) -> str | None:
    """The key holding an object's messages: `messages`/`traj`, a Responses request's `input`, a Gemini
    request's `contents`, SWE-agent's `history`, a chat completion's `choices`, a response's `output`."""
    if not isinstance(value, dict):
        return None
    for key in _CONVERSATION_KEYS:
        if key in value:
            return key
    if value.get("object") == "chat.completion" and "choices" in value:
        return "choices"
    if value.get("object") == "response" and "output" in value:
        return "output"
    if is_atif(value):
        return "steps"
    if "role" in value or "type" in value:
        return None  # a message or an item, not a request
    for key in ("contents", "history", "input"):
        if isinstance(value.get(key), list):
            return key
    return None


def is_atif(value: dict[str, Any]) -> bool:
    """Whether an object is an ATIF trajectory: `steps` and an ATIF `schema_version` (or another
    version beside an `agent` object, as some writers put it)."""
    version = value.get("schema_version")
    if "steps" not in value or not isinstance(version, str):
        return False
    return version.startswith("ATIF") or bool(version) and isinstance(value["steps"], list) and isinstance(
        value.get("agent"), dict)


def _response_messages(response: Any) -> tuple[list[Any], list[str]]:
    """The messages a logged `response` adds to its request's `messages`, and what was not read."""
    if response is None:
        return [], []
    if isinstance(response, dict) and isinstance(response.get("choices"), list):
        choices = response["choices"]
        notes = [f'"response" has {len(choices)} choices; only choice 0 is read'] if len(choices) > 1 else []
        if choices and isinstance(choices[0], dict) and isinstance(choices[0].get("message"), dict):
            return [choices[0]["message"]], notes
        return [], notes + ['"response" choice 0 has no "message" object; not read'] if choices else notes
    if isinstance(response, dict) and isinstance(response.get("output"), list):
        return list(response["output"]), []
    if isinstance(response, dict) and "role" in response and "content" in response:
        return [response], []
    if isinstance(response, list) and response and is_stream_event(response[0]):  # a streamed response's events
        return list(response), []
    if isinstance(response, str) and is_sse(response.lstrip(" \t\r\n")):  # ... or its SSE text
        return [value for _, value in sse_events(response, "")], []
    return [], ['"response" is not a chat completion, Responses or Messages response; not read']


def _conversation(value: dict[str, Any], path: str, position: int, line: int | None) -> Conversation:
    key = _conversation_key(value)
    assert key is not None
    messages = value[key]
    if not isinstance(messages, list):
        raise InputError(path, line, f'conversation {position}: "{key}" must be an array of messages')
    if key == "choices":  # a chat completion response: its choices' messages
        messages = [choice.get("message") if isinstance(choice, dict) else choice for choice in messages]
    notes: list[str] = []
    if key == "messages" and "response" in value:  # a proxy log: the request and the model's response
        try:
            added, notes = _response_messages(value["response"])
        except InputError as problem:  # SSE text whose data is not JSON: where in the conversation's line
            raise InputError(path, line, f'conversation {position}: "response" line {problem.line}: '
                                         f"{problem.message}") from None
        messages = [*messages, *added]
    return Conversation(path, position, messages, line=line, container=_layout_of(value, key), notes=tuple(notes))


def _layout_of(value: dict[str, Any], key: str) -> str:
    """The container's name: its key, or the layout that writes `messages` with a telling key beside."""
    if key == "messages":
        kind = value.get("trajectory_format")
        if isinstance(kind, str) and kind.startswith("mini-swe-agent"):
            return "mini-swe-agent"
        if isinstance(value.get("sessionId"), str) and isinstance(value.get("projectHash"), str):
            return "gemini-cli"
    return key


def _otel_conversations(documents: list[tuple[int | None, Any]], path: str) -> list[Conversation]:
    """OTLP exports: one conversation per trace id (in order of first appearance), spans by start time."""
    traces: dict[str, list[Span]] = {}
    for line, document in documents:
        if not isinstance(document, dict) or "resourceSpans" not in document:
            raise InputError(path, line, 'not an OTLP JSON export (an object with "resourceSpans")')
        for span in spans_of(document, path, line):
            traces.setdefault(span.trace_id, []).append(span)
    if not traces:  # an export without spans: one empty session
        return [Conversation(path, 0, [], container="resourceSpans", paths=())]
    found = []
    for position, spans in enumerate(traces.values()):
        spans.sort(key=lambda span: span.start)  # stable: equal times keep file order
        found.append(
            Conversation(
                path,
                position,
                list(spans),
                lines=tuple(span.line for span in spans) if documents[0][0] is not None else None,
                container="resourceSpans",
                paths=tuple(span.json_path for span in spans),
            )
        )
    return found


def _sdk_conversations(items: list[tuple[int | None, Any]], path: str, lone: bool = False) -> list[Conversation]:
    """Spans of the OpenTelemetry SDK's span JSON (one object per span): one conversation per trace
    id, in order of first appearance, its spans by start time, as for OTLP exports. `lone`: the file is
    one span object (its JSON path is `$`)."""
    by_lines = items[0][0] is not None
    traces: dict[str, list[Span]] = {}
    for index, (line, item) in enumerate(items):
        span = sdk_span(item, path, line, "$" if by_lines or lone else f"$[{index}]")
        traces.setdefault(span.trace_id, []).append(span)
    found = []
    for position, spans in enumerate(traces.values()):
        spans.sort(key=lambda span: span.start)  # stable: equal times keep file order
        found.append(Conversation(path, position, list(spans),
                                  lines=tuple(span.line for span in spans) if by_lines else None,
                                  container="sdk-spans",
                                  paths=None if by_lines else tuple(span.json_path for span in spans)))
    return found


def _agents_conversations(items: list[tuple[int | None, Any]], path: str) -> list[Conversation]:
    """OpenAI Agents SDK exports (`trace` and `trace.span` objects): one conversation per trace id,
    its spans by start time."""
    traces: dict[str, list[tuple[str, int, int | None, Any]]] = {}
    for index, (line, item) in enumerate(items):
        if not isinstance(item, dict):
            raise InputError(path, line, f"item {index}: not an Agents SDK trace or span object")
        if item.get("object") == "trace":
            traces.setdefault(str(item.get("id")), [])
            continue
        if not isinstance(item.get("span_data"), dict):
            raise InputError(path, line, f'item {index}: a span has no "span_data" object')
        started = item.get("started_at")
        traces.setdefault(str(item.get("trace_id")), []).append(
            (started if isinstance(started, str) else "", index, line, item)
        )
    found: list[Conversation] = []
    for spans in traces.values():
        spans.sort(key=lambda entry: entry[:2])
        lines = tuple(entry[2] for entry in spans)
        found.append(
            Conversation(
                path,
                len(found),
                [entry[3] for entry in spans],
                lines=lines if items[0][0] is not None else None,
                container="agents-spans",
                paths=None if items[0][0] is not None else tuple(f"item {entry[1]}" for entry in spans),
            )
        )
    return found


def _is_agents_item(value: Any) -> bool:
    return isinstance(value, dict) and (
        value.get("object") in ("trace", "trace.span") or isinstance(value.get("span_data"), dict)
    )


def _is_stream_json(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("type"), str) and "session_id" in value


def _stream_json_conversations(items: list[tuple[int | None, Any]], path: str) -> list[Conversation]:
    """Claude Code stream-json: the main agent's messages, then one conversation per sub-agent (the
    messages sharing a `parent_tool_use_id`), in order of first appearance."""
    groups: dict[Any, list[tuple[int, int | None, Any]]] = {None: []}
    for index, (line, item) in enumerate(items):
        if not isinstance(item, dict):
            raise InputError(path, line, f"message {index}: not a stream-json message object")
        parent = item.get("parent_tool_use_id")
        if parent is not None and not isinstance(parent, str):
            raise InputError(path, line, f'message {index}: "parent_tool_use_id" must be a string or null')
        groups.setdefault(parent, []).append((index, line, item))
    by_lines = items[0][0] is not None
    return [
        Conversation(
            path,
            position,
            [entry[2] for entry in group],
            lines=tuple(entry[1] for entry in group) if by_lines else None,
            container="stream-json",
            paths=None if by_lines else tuple(f"message {entry[0]}" for entry in group),
        )
        for position, group in enumerate(groups.values())
    ]


def _inspect_conversations(samples: list[Any], path: str, names: list[str] | None) -> list[Conversation]:
    """inspect_ai samples: one conversation per sample (and epoch), in log order."""
    found = []
    for position, sample in enumerate(samples):
        where = names[position] if names is not None else f"samples[{position}]"
        if not isinstance(sample, dict) or not isinstance(sample.get("messages"), list):
            raise InputError(path, None, f'{where}: a sample has no "messages" array')
        events = sample.get("events")
        found.append(Conversation(path, position, sample["messages"], container="samples",
                                  timeline=events if isinstance(events, list) else None))
    return found


def _layout(document: Any, path: str) -> list[Conversation] | None:
    """The conversations of a document in one of the layouts that tell their format, or None."""
    if isinstance(document, dict) and "resourceSpans" in document:
        return _otel_conversations([(None, document)], path)
    if isinstance(document, dict) and isinstance(document.get("eval"), dict) and "samples" in document:
        samples = document["samples"]
        if not isinstance(samples, list):
            raise InputError(path, None, '"samples" must be an array')
        return _inspect_conversations(samples, path, None)
    items = document.get("data") if isinstance(document, dict) and len(document) <= 2 else document
    if isinstance(items, list) and items and _is_agents_item(items[0]):
        return _agents_conversations([(None, item) for item in items], path)
    if isinstance(document, list) and document and _is_stream_json(document[0]):
        return _stream_json_conversations([(None, item) for item in document], path)
    spans = [document] if isinstance(document, dict) else document
    if isinstance(spans, list) and spans and is_sdk_span(spans[0]):
        return _sdk_conversations([(None, item) for item in spans], path, lone=spans is not document)
    return None


def _from_document(document: Any, path: str) -> list[Conversation]:
    found = _layout(document, path)
    if found is not None:
        return found
    if isinstance(document, dict) and "simulations" in document:
        simulations = document["simulations"]
        if not isinstance(simulations, list):
            raise InputError(path, None, '"simulations" must be an array')
        found = []
        for position, simulation in enumerate(simulations):
            if not isinstance(simulation, dict) or not isinstance(simulation.get("messages"), list):
                raise InputError(path, None, f'simulation {position}: no "messages" array')
            found.append(Conversation(path, position, simulation["messages"], container="simulations"))
        return found
    if _is_conversation_object(document):
        return [_conversation(document, path, 0, None)]
    if isinstance(document, list) and document and _is_conversation_object(document[0]):
        found = []
        for position, item in enumerate(document):
            if not _is_conversation_object(item):
                raise InputError(
                    path,
                    None,
                    f'element {position}: not a conversation object (no "messages" or '
                    '"traj"), unlike element 0',
                )
            found.append(_conversation(item, path, position, None))
        return found
    if isinstance(document, list):
        return [Conversation(path, 0, document, container="array")]
    if isinstance(document, dict):  # a lone message
        return [Conversation(path, 0, [document], lines=(1,), container="lines")]
    raise InputError(path, None, "expected an array or an object of messages or conversations")


def _from_lines(lines: list[tuple[int, Any]], path: str) -> list[Conversation]:
    first = lines[0][1]
    if isinstance(first, dict) and "resourceSpans" in first:
        return _otel_conversations(list(lines), path)
    if _is_agents_item(first):
        return _agents_conversations(list(lines), path)
    if _is_stream_json(first):
        return _stream_json_conversations(list(lines), path)
    if is_sdk_span(first):
        return _sdk_conversations(list(lines), path)
    if isinstance(first, list) or _is_conversation_object(first):
        found = []
        for position, (lineno, value) in enumerate(lines):
            if isinstance(value, list):
                found.append(Conversation(path, position, value, line=lineno, container="array"))
            elif _is_conversation_object(value):
                found.append(_conversation(value, path, position, lineno))
            else:
                raise InputError(
                    path,
                    lineno,
                    "not a conversation (an array of messages or an object with "
                    '"messages"), unlike line ' + str(lines[0][0]),
                )
        return found
    for lineno, value in lines:
        if not isinstance(value, dict) or _is_conversation_object(value):
            raise InputError(path, lineno, "not a message object, unlike line " + str(lines[0][0]))
    return [
        Conversation(
            path,
            0,
            [value for _, value in lines],
            lines=tuple(lineno for lineno, _ in lines),
            container="lines",
        )
    ]


def _parse_lines(text: str, path: str, whole_error: JSONTextError) -> list[tuple[int, Any]] | None:
    parsed = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip(" \t\r"):
            continue
        try:
            parsed.append((lineno, parse_json(line)))
        except JSONTextError as exc:
            if not parsed:  # not JSON Lines either: the whole-document error says more
                raise InputError(path, whole_error.lineno, str(whole_error)) from None
            raise InputError(path, lineno, str(exc)) from None
    return parsed


def _concatenated_values(text: str, path: str, whole_error: JSONTextError) -> list[tuple[int, Any]] | None:
    """JSON objects one after the other, each over several lines (the OpenTelemetry SDK's console
    exporter prints spans so; `cat` of one-event files gives the same), each with the line it starts
    on, to be read as JSON Lines; None when the text is not that (its second value is not an object)."""
    if not str(whole_error).startswith("invalid JSON: Extra data"):
        return None
    scan = json.JSONDecoder().raw_decode  # only to find where each value ends; each is then parsed strictly
    found: list[tuple[int, Any]] = []
    position = _LEADING_SPACE.match(text).end()  # type: ignore[union-attr]
    line = 1 + text.count("\n", 0, position)
    while position < len(text):
        try:
            end = scan(text, position)[1] if text[position] == "{" else None
        except (ValueError, RecursionError):
            end = None
        if end is None:
            if len(found) < 2:
                return None  # not objects one after the other: the whole document's error says more
            try:  # the strict parser says what is wrong, and where
                parse_json(text[position:])
            except JSONTextError as exc:
                raise InputError(path, line + (exc.lineno or 1) - 1, str(exc)) from None
            raise InputError(path, line, "not a JSON object, unlike the values before it")
        try:
            found.append((line, parse_json(text[position:end])))
        except JSONTextError as exc:
            raise InputError(path, line + (exc.lineno or 1) - 1, str(exc)) from None
        after = _LEADING_SPACE.match(text, end).end()  # type: ignore[union-attr]
        line += text.count("\n", position, after)
        position = after
    return found


def _eval_archive(data: bytes, path: str) -> list[Conversation]:
    """An inspect_ai `.eval` log: a zip archive with one `samples/NAME.json` per sample (and epoch)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = [name for name in archive.namelist() if name.startswith("samples/") and name.endswith(".json")]
            samples = []
            for name in names:
                try:
                    samples.append(parse_json(archive.read(name).decode("utf-8")))
                except (JSONTextError, UnicodeDecodeError) as exc:
                    raise InputError(path, None, f"{name}: {exc}") from None
                except NotImplementedError:  # zstd (method 93) needs Python 3.14's zipfile
                    method = archive.getinfo(name).compress_type
                    raise InputError(
                        path,
                        None,
                        f"{name}: compressed with zip method {method}, which this Python cannot read; "
                        "convert the log first (inspect log convert --to json)",
                    ) from None
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise InputError(path, None, f"not a readable zip archive ({exc})") from None
    if not names:
        raise InputError(path, None, "a zip archive without samples/*.json (not an inspect_ai .eval log)")
    return _inspect_conversations(samples, path, names)


def find_conversations(data: bytes, path: str) -> list[Conversation]:
    """Decode a log file (UTF-8 JSON or JSON Lines) and return its conversations, in file order."""
    return _document_conversations([data], path)


def _content_bounds(text: str) -> tuple[int, int]:
    """Where the text's content starts and ends, white space aside (without copying the text)."""
    start = _LEADING_SPACE.match(text).end()  # type: ignore[union-attr]
    end = len(text)
    while end > start and text[end - 1] in " \t\r\n":
        end -= 1
    return start, end


def _document_conversations(holder: list[bytes], path: str) -> list[Conversation]:
    """`find_conversations` of the bytes in `holder`, which it empties so that the bytes are freed
    once decoded (the caller keeping no other reference)."""
    data = holder.pop()
    if data.startswith(b"PK\x03\x04"):
        return _eval_archive(data, path)
    if data.startswith(b"\xef\xbb\xbf"):
        raise InputError(path, 1, "byte-order mark at start of file (UTF-8 without BOM expected)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            path, data.count(b"\n", 0, exc.start) + 1, f"invalid UTF-8 (byte 0x{data[exc.start]:02x})"
        ) from None
    del data
    start, end = _content_bounds(text)
    if start == end:
        raise InputError(path, None, "empty file: no conversation")
    first_end = text.find("\n", start, end)
    if is_sse(text[start:first_end if first_end >= 0 else end]):  # a streamed response's SSE text
        events = sse_events(text, path)
        if not events:
            raise InputError(path, None, "SSE text without an event holding data")
        return _from_lines(events, path)
    try:
        document = parse_json(text)
    except JSONTextError as exc:
        values = _concatenated_values(text, path, exc)
        lines = values if values is not None else _parse_lines(text, path, exc)
        conversations = _from_lines(lines or [], path)
    else:
        multi_line = text.find("\n", start, end) >= 0
        del text  # only the parsed document is kept
        conversations = _from_parsed(document, path, multi_line)
    if not conversations:
        raise InputError(path, None, "no conversation found")
    return conversations


def _from_parsed(document: Any, path: str, multi_line: bool) -> list[Conversation]:
    conversations = _from_document(document, path)
    if not conversations:  # e.g. `{"simulations": []}`
        raise InputError(path, None, "no conversation found")
    if conversations[0].container == "lines" and multi_line:
        # One object over many lines is not JSON Lines: name the JSON path, not line 1.
        conversations = [dataclasses.replace(conversations[0], lines=None, paths=("$",))]
    return conversations


def _decode_line(raw: bytes, path: str, lineno: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, lineno, f"invalid UTF-8 (byte 0x{raw[exc.start]:02x})") from None


def _stream_lines(
    handle: Iterable[bytes], path: str, first: tuple[int, Any], lineno: int
) -> Iterator[tuple[int, Any]]:
    yield first
    for raw in handle:
        lineno += 1
        text = _decode_line(raw, path, lineno)
        if not text.strip(" \t\r\n"):
            continue
        try:
            yield lineno, parse_json(text)
        except JSONTextError as exc:
            raise InputError(path, lineno, str(exc)) from None


def _stream_conversations(lines: Iterator[tuple[int, Any]], path: str, first_line: int) -> Iterator[Conversation]:
    for position, (lineno, value) in enumerate(lines):
        if isinstance(value, list):
            yield Conversation(path, position, value, line=lineno, container="array")
        elif _is_conversation_object(value):
            yield _conversation(value, path, position, lineno)
        else:
            raise InputError(
                path,
                lineno,
                "not a conversation (an array of messages or an object with "
                '"messages"), unlike line ' + str(first_line),
            )


def _checked_messages(lines: Iterator[tuple[int, Any]], path: str, first_line: int) -> Iterator[tuple[int, Any]]:
    for lineno, value in lines:
        if not isinstance(value, dict) or _is_conversation_object(value):
            raise InputError(path, lineno, "not a message object, unlike line " + str(first_line))
        yield lineno, value


def read_conversations(handle: IO[bytes], path: str) -> Peekable[Conversation]:
    """The conversations of a log file, read as they are needed.

    JSON Lines is streamed: a line is parsed when its message or conversation is read, and dropped
    after, so memory follows what is kept (the calls), not the file's size. A layout that groups lines
    (OTLP traces, Agents SDK traces, stream-json sub-agents) and a single JSON document are read whole.
    """
    lineno = 0
    blank = b""
    first_raw = b""
    for raw in handle:  # the first non-blank line tells JSON Lines from a document
        lineno += 1
        if raw.strip(b" \t\r\n"):
            first_raw = raw
            break
        blank += raw
    raw = b""  # the loop's name must not keep a big first line alive
    if first_raw and not (blank + first_raw[:4]).startswith((b"PK\x03\x04", b"\xef\xbb\xbf")):
        try:
            text: str | None = first_raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None:
            del first_raw  # a one-line document: keep its text only
            try:
                first = parse_json(text)
            except JSONTextError:
                first_raw = text.encode("utf-8")
            else:
                del text
                gap = b""
                second = b""
                for raw in handle:
                    if raw.strip(b" \t\r\n"):
                        second = raw
                        break
                    gap += raw
                if not second:  # the first line was the whole document
                    return Peekable(_drain(collections.deque(_from_parsed(first, path, False))), streamed=True)
                # a value alone on its line, then another: JSON Lines
                rest = itertools.chain([second], handle)
                lines = _stream_lines(rest, path, (lineno, first), lineno + gap.count(b"\n"))
                return _from_line_stream(lines, path, lineno, first)
    holder = [blank + first_raw + handle.read()]
    del first_raw
    return Peekable(_drain(collections.deque(_document_conversations(holder, path))), streamed=True)


def _drain(items: collections.deque[T]) -> Iterator[T]:
    """The items, each let go of once handed out (so an imported conversation can be freed)."""
    while items:
        yield items.popleft()


MISSING_LINE: Any = object()
_STREAM_LOOK = 100  # how many lines tell a log of streamed responses


def _from_line_stream(
    lines: Iterator[tuple[int, Any]], path: str, first_line: int, first: Any
) -> Peekable[Conversation]:
    if ((isinstance(first, dict) and "resourceSpans" in first) or _is_agents_item(first) or _is_stream_json(first)
            or is_sdk_span(first)):
        return Peekable(iter(_from_lines(list(lines), path)))  # these layouts group lines: read whole
    start = list(itertools.islice(lines, _STREAM_LOOK))
    lines = itertools.chain(start, lines)
    if any(is_stream_event(value) for _, value in start):  # a streamed response's events: read whole, so
        return Peekable(iter(_from_lines(list(lines), path)))  # a call's line is known when it is complete
    if isinstance(first, list) or _is_conversation_object(first):
        return Peekable(_stream_conversations(lines, path, first_line), streamed=True)
    stream = MessageStream(_checked_messages(lines, path, first_line), streamed=True)
    return Peekable(iter([Conversation(path, 0, stream, container="lines")]), streamed=True)
