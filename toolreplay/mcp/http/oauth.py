"""OAuth through the `--listen` listener in front of a server URL, as the MCP authorization specification has
it for a resource server: the client runs the flow with the server's authorization server; the listener
passes the server's 401/403 on as HTTP, with its `WWW-Authenticate` naming the listener's own protected
resource metadata (RFC 9728), which is the server's with the listener's URL as `resource`.

The metadata is fetched from the server's origin only (the URL its `WWW-Authenticate` names when that is on
the server's origin, else its well-known URLs): a server cannot make the listener fetch another host.
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

from toolreplay.mcp.http.auto import open_client
from toolreplay.mcp.http.client import HttpFailure

__all__ = ["METADATA_PREFIX", "MAX_METADATA", "MetadataError", "fetch_metadata", "metadata_path", "rewrite_challenge"]

METADATA_PREFIX = "/.well-known/oauth-protected-resource"
MAX_METADATA = 64 * 1024  # bytes of a protected resource metadata document
_RESOURCE_METADATA = re.compile(r'resource_metadata="([^"]*)"')


class MetadataError(Exception):
    """The server's protected resource metadata cannot be passed on (the message says why, without a URL)."""


def metadata_path(path: str) -> str:
    """The listener's metadata path for its endpoint `path` (RFC 9728: the well-known prefix, then the path)."""
    return METADATA_PREFIX + (path if path != "/" else "")


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port


def rewrite_challenge(challenge: str, own_metadata: str, resource: str) -> tuple[str, str | None]:
    """`challenge` (a WWW-Authenticate value) naming `own_metadata` as its `resource_metadata`; and the URL it
    named, when that is on the origin of `resource` (None otherwise: the listener then fetches the well-known
    URLs of `resource`)."""
    match = _RESOURCE_METADATA.search(challenge)
    named = match.group(1) if match else None
    if named is not None and _origin(named) != _origin(resource):
        named = None
    if match:
        return challenge[:match.start(1)] + own_metadata + challenge[match.end(1):], named
    separator = ", " if challenge.strip().lower() != "bearer" and challenge.strip() else " "
    base = challenge.strip() or "Bearer"
    return f'{base}{separator}resource_metadata="{own_metadata}"', None


def _candidates(resource: str, named: str | None) -> list[str]:
    parts = urlsplit(resource)
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    urls = [named] if named is not None else []
    urls += [origin + METADATA_PREFIX + path] if path else []
    urls.append(origin + METADATA_PREFIX)
    return list(dict.fromkeys(urls))


async def fetch_metadata(resource: str, named: str | None, own_url: str) -> bytes:
    """The server's protected resource metadata with `own_url` as its `resource`: from `named` (a URL on the
    server's origin its 401 named), else the well-known URLs of `resource`. MetadataError when none answers
    with a JSON object whose `resource` is the server's URL."""
    for url in _candidates(resource, named):
        client = open_client(url, connect_timeout=10)
        try:
            answer = await client.send("GET", {"accept": "application/json"}, timeout=10)
            try:
                if answer.status_code == 404:
                    continue
                if answer.status_code != 200:
                    raise MetadataError(f"the server answered HTTP {answer.status_code} for its metadata")
                length = answer.headers.get("content-length", "")
                if length.isdigit() and int(length) > MAX_METADATA:
                    raise MetadataError(f"the server's metadata is over {MAX_METADATA} bytes")
                body = await answer.aread()
            finally:
                await answer.aclose()
        except HttpFailure as exc:
            raise MetadataError(f"the server's metadata could not be fetched: {exc.describe()}") from None
        finally:
            await client.aclose()
        return _rewritten(body, resource, own_url)
    raise MetadataError("the server publishes no protected resource metadata")


def _rewritten(body: bytes, resource: str, own_url: str) -> bytes:
    if len(body) > MAX_METADATA:
        raise MetadataError(f"the server's metadata is over {MAX_METADATA} bytes")
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise MetadataError("the server's metadata is not JSON") from None
    if not isinstance(document, dict) or not isinstance(document.get("resource"), str):
        raise MetadataError('the server\'s metadata has no "resource"')
    if document["resource"].rstrip("/") != resource.rstrip("/"):
        raise MetadataError("the server's metadata names another resource than the server")
    return json.dumps({**document, "resource": own_url}, ensure_ascii=False).encode("utf-8")
