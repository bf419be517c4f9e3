"""The HTTP upstream's one way to reach its server: an `HttpClient` sends a request to one URL and hands
back the answer, whose body is then streamed.

Two clients stand behind it: `http11.LeanClient` (standard library, plain http:// reached directly) and
`httpx_client.HttpxClient` (httpx, for the rest); `auto.open_client` chooses, once a session. Every
failure to get an answer is an `HttpFailure`, whichever client it came from.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["Answer", "Exchange", "HttpClient", "HttpFailure", "Later"]

_T = TypeVar("_T")


class HttpFailure(Exception):
    """A request that got no whole answer. `kind` names it as httpx names its errors (ConnectError,
    ReadError, RemoteProtocolError...); the message never holds a header value nor the URL."""

    def __init__(self, text: str = "", kind: str | None = None) -> None:
        super().__init__(text)
        self.kind = kind or type(self).__name__

    def describe(self) -> str:
        """The failure in words: its kind, then its message when it has one."""
        text = str(self).strip()
        return self.kind + (f": {text}" if text else "")


class Answer(Protocol):
    """An answer whose head has come: its status, its headers (lowercase names; a repeated header's values
    joined with ", "), and its body to read once. `aclose` ends it (its connection may serve again)."""

    @property
    def status_code(self) -> int: ...

    @property
    def reason_phrase(self) -> str: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    async def aread(self) -> bytes:
        """The whole body (HttpFailure when it cannot be read)."""
        ...

    def aiter_text(self) -> AsyncIterator[str]:
        """The body as text, as it arrives (HttpFailure when the rest cannot be read)."""
        ...

    async def aclose(self) -> None:
        """Done with the answer, its body read or not."""
        ...


class Exchange(Protocol):
    """A request a thread other than the loop's wrote on a blocking connection; that thread reads the answer
    when it is a plain JSON one, else the loop reads it (`resume`)."""

    def read_json(self) -> bytes | None:
        """On the sending thread: the body of a 200 `application/json` answer framed by Content-Length, not
        compressed, on a connection kept open; None for any other answer (or a failure, or `abandon`): then
        `resume` reads it."""
        ...

    def resume(self) -> Awaitable[Answer]:
        """Awaited on the client's loop, after `read_json` gave None: the answer, read from what came (the
        failure `send` would have raised, if any)."""
        ...

    def abandon(self) -> None:
        """From any thread: the answer is not wanted; a `read_json` waiting for it returns None, and the
        connection is closed."""
        ...


class HttpClient(ABC):
    """Requests to one URL, on one event loop."""

    @abstractmethod
    def send(self, method: str, headers: Mapping[str, str], body: bytes = b"", *,
             timeout: float | None = None) -> Awaitable[Answer]:
        """Send `method` with `headers` (lowercase names) and `body`; awaited, the answer once its head has
        come (HttpFailure when none came, or none within `timeout` seconds). A client may write the request
        at the call already, before the caller's next await: it leaves without waiting for a turn of the
        loop."""

    def exchange(self, method: str, headers: Mapping[str, str], body: bytes = b"") -> Exchange | None:
        """From a thread other than the loop's: send the request at once, on a blocking connection, for this
        thread to read its answer; None (nothing sent) when the client cannot (the request then goes by
        `send`)."""
        return None

    @abstractmethod
    async def aclose(self) -> None:
        """Close every connection; an answer still being read fails."""


class Later(Generic[_T]):
    """An awaitable that makes its coroutine only when awaited: a request `send` did not write at once,
    whose task may be cancelled before it runs, leaves no coroutine never awaited."""

    __slots__ = ("_start",)

    def __init__(self, start: Callable[[], Awaitable[_T]]) -> None:
        self._start = start

    def __await__(self) -> Generator[Any, None, _T]:
        return self._start().__await__()
