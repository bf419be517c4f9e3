"""`HttpClient` over httpx (the extra `toolreplay[http]`), through its public API only: for an https://
server, a server reached through a proxy from the environment, a URL with a user part.

The client is httpx's own `AsyncClient` with `trust_env`, as the MCP SDK's is: `HTTPS_PROXY`,
`HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY` and `SSL_CERT_FILE` are honoured; redirects are not followed; the
cookies a server sets go back to it. httpx's errors become `HttpFailure`s of the same name, whose message
is dropped when it would show the URL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import TYPE_CHECKING

from toolreplay.mcp.http.client import Answer, HttpClient, HttpFailure, Later

if TYPE_CHECKING:
    import httpx

__all__ = ["HttpxClient"]


def _failure(exc: Exception) -> HttpFailure:
    text = str(exc).strip()
    return HttpFailure("" if "://" in text else text, type(exc).__name__)


class _HttpxAnswer:
    """An httpx response as an `Answer`: its errors are HttpFailures."""

    __slots__ = ("_response",)

    def __init__(self, response: httpx.Response) -> None:
        self._response = response

    @property
    def status_code(self) -> int:
        return self._response.status_code

    @property
    def reason_phrase(self) -> str:
        return self._response.reason_phrase

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers

    async def aread(self) -> bytes:
        import httpx

        try:
            return await self._response.aread()
        except httpx.HTTPError as exc:
            raise _failure(exc) from None

    async def aiter_text(self) -> AsyncIterator[str]:
        import httpx

        try:
            async for text in self._response.aiter_text():
                yield text
        except httpx.HTTPError as exc:
            raise _failure(exc) from None

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxClient(HttpClient):
    """Requests to one URL through an `httpx.AsyncClient`."""

    def __init__(self, url: str, *, connect_timeout: float = 30.0) -> None:
        import httpx

        self._url = url
        # no read deadline: an answer streamed back may take as long as its tool runs
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(connect_timeout, read=None, pool=None),
                                         follow_redirects=False, trust_env=True)

    def send(self, method: str, headers: Mapping[str, str], body: bytes = b"", *,
             timeout: float | None = None) -> Awaitable[Answer]:
        """The request leaves when the answer is awaited."""
        return Later(lambda: self._send(method, headers, body, timeout))

    async def _send(self, method: str, headers: Mapping[str, str], body: bytes, timeout: float | None) -> Answer:
        import httpx

        request = self._client.build_request(method, self._url, content=body or None, headers=dict(headers),
                                             timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout)
        try:
            response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise _failure(exc) from None
        return _HttpxAnswer(response)

    async def aclose(self) -> None:
        await self._client.aclose()
