"""Redaction before sealing: secrets in a call's arguments and response replaced by a keyed hash.

A policy's optional `redact` section (docs/policy.md) says what to redact:

    "redact": {"builtin": true, "fields": ["password", "headers.Authorization"],
               "patterns": [{"name": "ticket", "regex": "TCK-[0-9]{6}"}]}

- `builtin` (default true): the built-in patterns (`BUILTIN_PATTERNS`: cloud and API keys, tokens,
  JWTs, private keys, e-mail addresses) and values under the usual secret field names
  (`SECRET_FIELDS`), or a list naming the ones to use;
- `fields`: values to redact whole, by field name anywhere (`password`) or by dotted path from the
  arguments or the response (`headers.Authorization`, `response.token`);
  names match in any case style (`accessToken`, `access_token`, `access-token`, `ACCESS_TOKEN`);
- `patterns`: your own, each a name and a regular expression (bounded like rule regexes).

Each secret is replaced by `[redacted:NAME:HASH]`, HASH the first 24 hex characters of
HMAC-SHA256(key, secret): the same secret always gives the same text, so `replay` still sees two
identical calls as identical, and a different secret a different text; the key stays off the record,
so nobody holding only the record can test a guess. Strings are scanned; numbers, booleans and the
structure are kept; a whole-field redaction replaces the value whatever its type: a string's text is
what is hashed (as for a pattern's match), any other value's canonical JSON after a 0xFF byte, which
no text holds, so `"1234"` and `1234` get different marks. A text already shaped like a mark is
itself replaced (`[redacted:mark:HASH]`): every mark on record stands for what was redacted, and a
call that quotes another call's mark never passes for it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolreplay.format.canonical import canonical_bytes
from toolreplay.policy.regexbound import compile_bounded

__all__ = ["BUILTIN_PATTERNS", "SECRET_FIELDS", "Redaction", "Redactor", "parse_redaction", "MIN_KEY_BYTES",
           "MARK", "holds_marks"]

MIN_KEY_BYTES = 16
# The shape of the text that stands for a secret.
MARK = re.compile(r"\[redacted:[a-z0-9][a-z0-9-]*:[0-9a-f]{24}\]")
# What precedes a non-string value's canonical JSON when it is hashed: a byte no UTF-8 text holds.
_NOT_TEXT = b"\xff"

# name -> pattern; a group named `secret`, when present, is the part replaced (the rest is kept).
BUILTIN_PATTERNS: dict[str, str] = {
    "private-key": r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    "jwt": r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}",
    "aws-access-key": r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b",
    "aws-secret-key": (r"(?i)aws.{0,20}?(?:secret|key).{0,20}?[\"'=: ]{1,4}"
                       r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"),
    "github-token": r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
    "slack-token": r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
    "api-key": r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}",
    "google-api-key": r"\bAIza[0-9A-Za-z_-]{35}\b",
    "bearer-token": r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/=-]{16,})",
    "email": r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b",
}
# Field names whose values are secrets whatever they hold; a name matches in any case style (`_normal`).
SECRET_FIELDS = frozenset({"password", "passwd", "secret", "client_secret", "api_key", "apikey", "access_token",
                           "refresh_token", "id_token", "auth_token", "authorization", "private_key", "token",
                           "cookie", "set_cookie", "x_api_key"})
_SECTION_FIELDS = ("builtin", "fields", "patterns")


@dataclass(frozen=True, slots=True)
class Redaction:
    """What a policy's `redact` section names: patterns (name, compiled), field names and field paths."""

    patterns: tuple[tuple[str, re.Pattern[str]], ...]
    names: frozenset[str]  # normalised field names, redacted wherever they appear
    paths: tuple[tuple[str, ...], ...]  # ("args" | "response", key, key, ...)


def _normal(name: str) -> str:
    """A field name as names are compared: case, `_` and `-` left out, so `access_token`, `access-token`,
    `accessToken`, `AccessToken` and `ACCESS_TOKEN` are one name."""
    return name.lower().replace("_", "").replace("-", "")  # replaces: faster than translate on short names


def parse_redaction(value: Any) -> Redaction:
    """Read a policy's `redact` section; raise ValueError naming what is wrong."""
    if not isinstance(value, dict):
        raise ValueError('field "redact" must be an object')
    for key in value:
        if key not in _SECTION_FIELDS:
            raise ValueError(f'field "redact" has an unknown field {json.dumps(key)} '
                             f'(known: {", ".join(_SECTION_FIELDS)})')
    builtin = value.get("builtin", True)
    if builtin is True:
        chosen = list(BUILTIN_PATTERNS)
        names = set(SECRET_FIELDS)
    elif builtin is False:
        chosen, names = [], set()
    elif isinstance(builtin, list) and all(isinstance(item, str) for item in builtin):
        unknown = [item for item in builtin if item not in BUILTIN_PATTERNS and item != "secret-fields"]
        if unknown:
            raise ValueError(f'field "redact.builtin": unknown pattern {json.dumps(unknown[0])} '
                             f'(known: {", ".join(BUILTIN_PATTERNS)}, secret-fields)')
        chosen = [item for item in builtin if item != "secret-fields"]
        names = set(SECRET_FIELDS) if "secret-fields" in builtin else set()
    else:
        raise ValueError('field "redact.builtin" must be true, false or a list of built-in pattern names')
    names = {_normal(name) for name in names}
    patterns = [(name, re.compile(BUILTIN_PATTERNS[name])) for name in chosen]
    paths: list[tuple[str, ...]] = []
    fields = value.get("fields", [])
    if not isinstance(fields, list):
        raise ValueError('field "redact.fields" must be an array of field names or dotted paths')
    for position, item in enumerate(fields):
        parts = tuple(_normal(part) for part in item.split(".")) if isinstance(item, str) else ("",)
        if "" in parts:  # nothing left of a name once case and separators are left out
            raise ValueError(f'field "redact.fields" item {position} must be a field name or a dotted path')
        if len(parts) == 1:
            names.add(parts[0])
        else:
            paths.append(parts if parts[0] in ("args", "response") else ("args", *parts))
    own = value.get("patterns", [])
    if not isinstance(own, list):
        raise ValueError('field "redact.patterns" must be an array of {"name", "regex"} objects')
    for position, item in enumerate(own):
        where = f'field "redact.patterns" item {position}'
        if not isinstance(item, dict) or set(item) != {"name", "regex"}:
            raise ValueError(f'{where} must be an object with exactly "name" and "regex"')
        name, regex = item["name"], item["regex"]
        if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
            raise ValueError(f"{where}: name must be lower-case letters, digits and -")
        if not isinstance(regex, str) or not regex:
            raise ValueError(f"{where}: regex must be a non-empty string")
        try:
            compiled = compile_bounded(regex)
        except re.error as exc:
            raise ValueError(f"{where}: invalid regex: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"{where}: the regex {exc}") from None
        patterns.append((name, compiled))
    return Redaction(tuple(patterns), frozenset(names), tuple(paths))


class Redactor:
    """Applies a `Redaction` with a key: the same input, the same output."""

    def __init__(self, redaction: Redaction, key: bytes) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"a redaction key must be at least {MIN_KEY_BYTES} bytes")
        self.redaction = redaction
        self._key = key

    def same_as(self, other: Redactor) -> bool:
        """Whether `other` redacts every value exactly as this one does (the same section, the same key)."""
        import hmac

        return other is self or (other.redaction == self.redaction and hmac.compare_digest(other._key, self._key))

    def mark(self, name: str, secret: bytes) -> str:
        """The text that stands for `secret` in the record."""
        import hashlib  # here: a policy without a redaction key (most hook runs) need not load them
        import hmac

        digest = hmac.new(self._key, secret, hashlib.sha256).hexdigest()[:24]
        return f"[redacted:{name}:{digest}]"

    def args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as they go on record."""
        return self._object(args, ("args",))

    def response(self, response: Mapping[str, Any]) -> dict[str, Any]:
        """The response as it goes on record."""
        return self._object(response, ("response",))

    def _object(self, value: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, item in value.items():
            name = _normal(key)
            where = (*path, name)
            if name in self.redaction.names or where in self.redaction.paths:
                secret = (item.encode("utf-8", "surrogatepass") if isinstance(item, str)
                          else _NOT_TEXT + canonical_bytes(item))
                result[key] = self.mark("field", secret)
            else:
                result[key] = self._value(item, where)
        return result

    def _value(self, value: Any, path: tuple[str, ...]) -> Any:
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, dict):
            return self._object(value, path)
        if isinstance(value, list):
            return [self._value(item, path) for item in value]
        return value

    def _text(self, text: str) -> str:
        if "[redacted:" in text:  # a mark's shape that is no mark of ours: first, so no pattern's mark is taken
            text = MARK.sub(lambda match: self._replace("mark", match), text)
        for name, pattern in self.redaction.patterns:
            if pattern.search(text) is None:
                continue
            text = pattern.sub(lambda match, name=name: self._replace(name, match), text)  # type: ignore[misc]
        return text

    def _replace(self, name: str, match: re.Match[str]) -> str:
        if "secret" in match.re.groupindex and match.group("secret") is not None:
            start, end = match.span("secret")
            whole_start = match.start()
            secret = match.group("secret")
            text = match.group(0)
            return text[:start - whole_start] + self.mark(name, secret.encode("utf-8")) + text[end - whole_start:]
        return self.mark(name, match.group(0).encode("utf-8", "surrogatepass"))


def holds_marks(value: Any) -> bool:
    """Whether a redacted value holds a mark: without one, redaction changed nothing in it."""
    if isinstance(value, str):
        return "[redacted:" in value and MARK.search(value) is not None
    if isinstance(value, dict):
        return any(holds_marks(item) for item in value.values())
    if isinstance(value, list):
        return any(holds_marks(item) for item in value)
    return False
