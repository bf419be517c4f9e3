"""Which host names are this machine's loopback: what every listening front end (the MCP listener, the
HTTP hook endpoint, the console) binds by default and checks each request's Host header against."""

from __future__ import annotations

import functools
import ipaddress

__all__ = ["is_loopback"]


@functools.lru_cache(maxsize=256)  # every request's Host header is checked: a few names, over and over
def is_loopback(host: str) -> bool:
    """Whether a host name or address is this machine's loopback (`localhost`, 127.0.0.0/8, ::1)."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
