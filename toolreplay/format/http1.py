"""HTTP/1.1 message heads, read strictly (RFC 9112): the one reading of header lines that the MCP upstream's lean
client (toolreplay/mcp/http/http11.py: a response's head) and the hook endpoint (toolreplay/hooks/http.py: a
request's head) share.

A head is a start line and header lines up to an empty line, CRLF or LF line ends, at most `MAX_HEAD` bytes; a
header line is `NAME: VALUE` with NAME a token (so obsolete line folding, a line starting with white space, is
refused), VALUE without its surrounding spaces and tabs. Names come back lowercase, in the order sent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["MAX_HEAD", "HeadError", "Request", "keeps_alive", "parse_fields", "read_request"]

MAX_HEAD = 64 * 1024  # bytes of a start line and headers, at most
_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_REQUEST_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+) ([\x21-\x7e]+) HTTP/1\.([01])")


class _Lines(Protocol):
    def readline(self, size: int = -1, /) -> bytes: ...


class HeadError(ValueError):
    """A head that is not HTTP/1.1 as read here; `status` is the answer a server gives it (400 or 431)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def parse_fields(lines: Iterable[str]) -> list[tuple[str, str]]:
    """The (lowercase name, value) of each header line (latin-1 text without its line end); HeadError on a
    line that is not `NAME: VALUE`."""
    fields = []
    for text in lines:
        name, colon, value = text.partition(":")
        if not colon or not _NAME.fullmatch(name):  # obsolete line folding included: refused
            raise HeadError("a malformed header line")
        fields.append((name.lower(), value.strip(" \t")))
    return fields


def keeps_alive(minor: str, fields: Iterable[tuple[str, str]]) -> bool:
    """Whether the connection stays open after this message: HTTP/1.1 (`minor` "1") unless `Connection: close`,
    HTTP/1.0 only with `Connection: keep-alive`."""
    tokens = {token.strip().lower() for name, value in fields if name == "connection" for token in value.split(",")}
    return "keep-alive" in tokens if minor == "0" else "close" not in tokens


@dataclass(frozen=True, slots=True)
class Request:
    """A request's head: method, target, whether the connection stays open after it, and the header fields
    (lowercase name -> value; a repeated field's values joined with ", ")."""

    method: str
    target: str
    keep_alive: bool
    headers: dict[str, str]


def read_request(stream: _Lines, max_head: int = MAX_HEAD) -> Request | None:
    """The next request head on a (buffered, blocking) stream; None when the peer closed the connection before
    one began; HeadError when it is malformed (400), longer than `max_head` bytes (431), or cut off."""
    lines: list[bytes] = []
    size = 0
    while True:
        line = stream.readline(max_head - size + 1)
        if not line:
            if lines or size:
                raise HeadError("the connection closed mid-head")
            return None
        size += len(line)
        if size > max_head or not line.endswith(b"\n"):
            if size > max_head:
                raise HeadError(f"the request head exceeds {max_head} bytes", 431)
            raise HeadError("the connection closed mid-head")
        if line in (b"\r\n", b"\n"):
            if lines:
                break
            continue  # empty lines before a request line are tolerated (RFC 9112 2.2)
        lines.append(line[:-2] if line.endswith(b"\r\n") else line[:-1])
    match = _REQUEST_LINE.fullmatch(lines[0])
    if match is None:
        raise HeadError("a malformed request line")
    fields = parse_fields(line.decode("latin-1") for line in lines[1:])
    headers: dict[str, str] = {}
    for name, value in fields:
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    minor = match.group(3).decode("ascii")
    return Request(match.group(1).decode("ascii"), match.group(2).decode("ascii"), keeps_alive(minor, fields),
                   headers)
