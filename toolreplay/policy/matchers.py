"""The string tests of the rule language: a path under a folder, a URL's host, a glob.

Each is strict in the direction of refusing: a value that could be read two ways is not read at all.
`MatchError` says why, and the rule engine makes that a rule error (deny and ask rules fire on it),
never a plain "does not match" that a `deny ... when` rule would let through.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from urllib.parse import urlsplit

__all__ = ["MatchError", "path_segments", "resolve_path", "is_under", "url_host", "normalise_host",
           "host_matches", "normalise_host_pattern", "compile_glob"]

_DRIVE = re.compile(r"[A-Za-z]:")
_URL_UNSAFE = re.compile(r"[\x00-\x20\x7f\\]")
_NAME = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*")
_NUMBER = re.compile(r"0[xX][0-9a-fA-F]*|[0-9]+")  # a label an IPv4 parser reads as a number
_DIGITS = {16: re.compile(r"[0-9a-f]+"), 8: re.compile(r"[0-7]+"), 10: re.compile(r"[0-9]+")}
# Characters IDNA 2003 (Python's codec) and IDNA 2008 / UTS 46 (browsers) turn into different names.
_IDNA_DEVIATIONS = re.compile("[\u00df\u03c2\u200c\u200d]")


class MatchError(ValueError):
    """A value a matcher will not interpret; the message completes "argument X ..." and says why."""


# ---- paths ----------------------------------------------------------------------------------------

def _segments(path: str) -> tuple[bool, tuple[str, ...]]:
    """(absolute, segments) of a POSIX path: `.` and empty segments drop out, `..` removes the one before."""
    if not path:
        raise MatchError("is an empty path")
    if "\x00" in path:
        raise MatchError("holds a NUL character")
    if "\\" in path:
        raise MatchError("holds a backslash, which a path rule reads neither as a separator nor as a name")
    if path[0] == "~":
        raise MatchError("starts with ~ (a home folder, which a path rule cannot resolve)")
    if _DRIVE.match(path):
        raise MatchError("starts with a drive letter")
    absolute = path[0] == "/"
    if "." not in path and "//" not in path:  # the common case: nothing to normalise
        return absolute, tuple(path.strip("/").split("/")) if path.strip("/") else ()
    kept: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not kept:
                raise MatchError("climbs above " + ("/" if absolute else "its start") + ' with ".."')
            kept.pop()
        else:
            kept.append(segment)
    return absolute, tuple(kept)


def path_segments(path: str) -> tuple[str, ...]:
    """The segments of a relative path after normalisation; MatchError for one that is absolute or escapes."""
    absolute, segments = _segments(path)
    if absolute:
        raise MatchError("is an absolute path")
    return segments


def resolve_path(path: str, root: tuple[str, ...] | None) -> tuple[str, ...]:
    """The segments of `path` relative to `root` (the segments of an absolute folder; None: no root declared).

    A relative path is relative to the root and may not climb above its start; an absolute path must
    lie inside the root. Anything else is a MatchError, never "not under": a `deny ... when` rule fires.
    """
    absolute, segments = _segments(path)
    if not absolute:
        return segments
    if root is None:
        raise MatchError("is an absolute path and the policy declares no root")
    if segments[:len(root)] != root:
        raise MatchError("is an absolute path outside the policy's root")
    return segments[len(root):]


def is_under(path: str, folders: tuple[tuple[str, ...], ...], root: tuple[str, ...] | None = None) -> bool:
    """Whether the resolved path is one of the folders or inside one, segment by segment (MatchError: unreadable)."""
    segments = resolve_path(path, root)
    return any(segments[:len(folder)] == folder for folder in folders)


# ---- hosts ----------------------------------------------------------------------------------------

def _ipv4(host: str) -> str:
    """The dotted quad of a host whose last label is a number, read as inet_aton reads it (`127.1`,
    `2130706433`, `0x7f.1`, `0177.0.0.1`); MatchError when it is not an address."""
    parts = host.split(".")
    if len(parts) > 4:
        raise MatchError("has a host that ends in a number but is not an IPv4 address")
    numbers = []
    for part in parts:
        if part[:2] in ("0x", "0X"):
            digits, base = part[2:].lower(), 16
        elif len(part) > 1 and part[0] == "0":
            digits, base = part[1:], 8
        else:
            digits, base = part, 10
        if not _DIGITS[base].fullmatch(digits):
            raise MatchError("has a host that ends in a number but is not an IPv4 address")
        numbers.append(int(digits, base))
    last = numbers.pop()
    if any(number > 255 for number in numbers) or last >= 256 ** (4 - len(numbers)):
        raise MatchError("has a host that ends in a number but is not an IPv4 address")
    value = last
    for position, number in enumerate(numbers):
        value += number << (8 * (3 - position))
    return ".".join(str((value >> shift) & 255) for shift in (24, 16, 8, 0))


def normalise_host(host: str) -> str:
    """A host in the one form rules compare (MatchError when it is neither a name nor an address):

    lower case, one trailing dot dropped, a Unicode name in its IDNA (punycode) form, an IPv4 address
    in any spelling as a dotted quad, an IPv6 address compressed in brackets (`[::1]`), and an
    IPv4-mapped IPv6 address (`[::ffff:127.0.0.1]`) as its IPv4 address.
    """
    if host.startswith("["):
        inner = host[1:-1] if host.endswith("]") else ""
        if "%" in inner:
            raise MatchError("has an IPv6 address with a zone")
        try:
            address = ipaddress.IPv6Address(inner)
        except ValueError:
            raise MatchError("has a host in brackets that is not an IPv6 address") from None
        mapped = address.ipv4_mapped
        return str(mapped) if mapped is not None else f"[{address.compressed}]"
    if not host.isascii():
        if _IDNA_DEVIATIONS.search(host):
            raise MatchError("has a host name that IDNA versions read differently (ß, ς, ZWJ or ZWNJ)")
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise MatchError("has a host name that is not valid IDNA") from None
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]
    if not _NAME.fullmatch(host):
        raise MatchError("has a host that is not a name or an address")
    if _NUMBER.fullmatch(host.rpartition(".")[2]):
        return _ipv4(host)
    return host


def url_host(url: str) -> str:
    """The normalised host of an http(s) URL; MatchError for anything this rule will not read.

    No white space, control character or backslash anywhere (parsers disagree on them), scheme http
    or https followed by `//`, no user info (`user@host` reads as another host to a person), a valid
    port, and a host that `normalise_host` reads.
    """
    if _URL_UNSAFE.search(url):
        raise MatchError("is a URL with white space, a control character or a backslash")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        raise MatchError("is not a URL this rule can read") from None
    if parts.scheme.lower() not in ("http", "https") or not url[len(parts.scheme) + 1:].startswith("//"):
        raise MatchError("is not an http or https URL")
    if "@" in parts.netloc:
        raise MatchError("is a URL with user info (user@)")
    host = parts.hostname
    if not host:
        raise MatchError("is a URL without a host")
    return normalise_host(f"[{host}]" if parts.netloc.startswith("[") else host)


def normalise_host_pattern(pattern: str) -> str | None:
    """An allowlist entry in the form `normalise_host` gives (`api.example.com`, `127.0.0.1`, `[::1]`) or
    `*.` and a name; None when malformed."""
    wildcard = pattern.startswith("*.")
    try:
        host = normalise_host(pattern[2:] if wildcard else pattern)
    except MatchError:
        return None
    if wildcard:
        if host.startswith("[") or _NUMBER.fullmatch(host.rpartition(".")[2]):
            return None  # an address has no subdomains
        return "*." + host
    return host


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
