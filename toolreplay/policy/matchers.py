"""The string tests of the rule language: a path under a folder, a URL's host, a glob.

Each is strict in the direction of refusing: a path or URL that could be read two ways does not pass.
"""

from __future__ import annotations

import fnmatch
import re
from urllib.parse import urlsplit

__all__ = ["path_segments", "is_under", "url_host", "host_matches", "normalise_host_pattern", "compile_glob"]

_DRIVE = re.compile(r"[A-Za-z]:")
_URL_UNSAFE = re.compile(r"[\x00-\x20\x7f\\]")
_HOST_PATTERN = re.compile(r"(\*\.)?[a-z0-9_-]+(\.[a-z0-9_-]+)*|\[[0-9a-f:.]+\]")


def path_segments(path: str) -> tuple[str, ...] | None:
    """The segments of a relative path after normalisation, or None when it is absolute or escapes.

    `/` and `\\` both separate; `.` and empty segments drop out; `..` removes the segment before it.
    An absolute path (`/x`, `\\x`, `C:x`), a home path (`~x`), a NUL byte or a `..` that climbs above
    the start gives None: such a path is under no folder.
    """
    if not path or "\x00" in path or path[0] in "/\\~" or _DRIVE.match(path):
        return None
    kept: list[str] = []
    for segment in path.replace("\\", "/").split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not kept:
                return None
            kept.pop()
        else:
            kept.append(segment)
    return tuple(kept)


def is_under(path: str, folders: tuple[tuple[str, ...], ...]) -> bool:
    """Whether the normalised path is one of the folders or inside one, segment by segment."""
    segments = path_segments(path)
    if segments is None:
        return False
    return any(segments[:len(folder)] == folder for folder in folders)


def url_host(url: str) -> str | None:
    """The lower-case host of an http(s) URL, or None for anything else.

    No white space, control character or backslash anywhere (parsers disagree on them), scheme http
    or https, no user info (`user@host` reads as another host to a person), a valid port, a host.
    One trailing dot is dropped (`example.com.` is `example.com`).
    """
    if _URL_UNSAFE.search(url):
        return None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or "@" in parts.netloc:
        return None
    host = parts.hostname
    if not host or not url[len(parts.scheme) + 1:].startswith("//"):
        return None
    if parts.netloc.startswith("[") and not host.startswith("["):
        host = f"[{host}]"
    return host[:-1] if host.endswith(".") else host


def normalise_host_pattern(pattern: str) -> str | None:
    """An allowlist entry in lower case (`api.example.com` or `*.example.com`), or None when malformed."""
    lowered = pattern.lower()
    lowered = lowered[:-1] if lowered.endswith(".") else lowered
    return lowered if _HOST_PATTERN.fullmatch(lowered) else None


def host_matches(host: str, patterns: tuple[str, ...]) -> bool:
    """Exact host, or `*.suffix` matching any host that ends with `.suffix` (not `suffix` itself)."""
    for pattern in patterns:
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]):
                return True
        elif host == pattern:
            return True
    return False


def compile_glob(patterns: list[str]) -> re.Pattern[str]:
    """One regular expression matching a whole string against any of the shell-style patterns."""
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns), re.DOTALL)
