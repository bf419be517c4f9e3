"""Which `HttpClient` serves an upstream URL, chosen once when its session starts (as uvicorn's
protocols/http/auto.py chooses its parser): the lean client of `http11` for an http:// URL without a user
part that no proxy from the environment applies to, httpx for every other."""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from urllib.parse import urlsplit

from toolreplay.mcp.http.client import HttpClient
from toolreplay.mcp.http.http11 import LeanClient

__all__ = ["lean_serves", "open_client"]


def open_client(url: str, *, connect_timeout: float = 30.0) -> HttpClient:
    """The client for `url` (httpx is needed: the extra `toolreplay[http]`)."""
    import httpx

    if lean_serves(url):
        # httpx's User-Agent: the server sees one client, whichever of the two sends
        return LeanClient(url, connect_timeout=connect_timeout, user_agent=f"python-httpx/{httpx.__version__}")
    from toolreplay.mcp.http.httpx_client import HttpxClient

    return HttpxClient(url, connect_timeout=connect_timeout)


def lean_serves(url: str, proxies: Mapping[str, str] | None = None) -> bool:
    """Whether the lean client serves `url`: http://, no user part, and no proxy of `proxies` (by default the
    environment's, as httpx reads it: `urllib.request.getproxies()`) applies to it. NO_PROXY exempts the
    host when it names it as it is, or is `*`; any other entry is left to httpx, which then serves the URL
    and applies it (so no request ever goes around a proxy that httpx would use)."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018  (a bad port: httpx says so, as it would for any URL)
    except ValueError:
        return False
    if parts.scheme != "http" or not parts.hostname or parts.username or parts.password:
        return False
    proxies = urllib.request.getproxies() if proxies is None else proxies
    if not (proxies.get("http") or proxies.get("all")):
        return True
    exempt = {name.strip().lower() for name in proxies.get("no", "").split(",")}
    return "*" in exempt or parts.hostname in exempt
