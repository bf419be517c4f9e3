"""What the SQLite history keeps of each call (`toolreplay.audit.fleet_sqlite`): one small row per record.

The row holds the call's canonical arguments, the size and digest of its response, and what its `meta`
says (outcome, time, duration, call id, turn, server, approval); `ChainHead` follows the session's chain
head (the last link's digest of a sealed file; for a plain one, the head `seal` would give it), which
with the path names a session in the history.
"""

from __future__ import annotations

import hashlib
from typing import Any

from toolreplay.audit.chain import GENESIS, link_digest
from toolreplay.audit.outcomes import APPROVAL_KEYS
from toolreplay.format.records import Record, canonical_record_bytes

__all__ = ["CallRow", "call_row", "ChainHead", "approval_value", "follow"]

# (tool, canonical args JSON, response bytes, response SHA-256, outcome, ts, duration_ms, call_id, turn,
#  server, approval)
CallRow = tuple[str, str, int, str, "str | None", "str | None", "float | None", "str | None", "int | None",
                "str | None", "str | None"]


def approval_value(meta: dict[str, Any]) -> str | None:
    """The person's yes as the history names it: the approval's id (`x-approval`, `x-remembered`), or `once`
    for a yes not remembered (`x-confirmed`, `x-remember-error`)."""
    for key in APPROVAL_KEYS:
        value = meta.get(key)
        if isinstance(value, str):
            return value if key in ("x-approval", "x-remembered") else "once"
    return None


def call_row(record: Record, args: bytes | None = None, response: bytes | None = None) -> CallRow:
    """The row of one call (its index is its position in the session); `args` and `response`: their canonical
    bytes, when already made."""
    args = record.canonical_args if args is None else args
    response = record.canonical_response if response is None else response
    meta = record.meta or {}
    server = meta.get("x-server")
    duration = meta.get("duration_ms")
    return (record.tool, args.decode("utf-8"), len(response), hashlib.sha256(response).hexdigest(),
            meta.get("outcome", "ran" if meta else None), meta.get("ts"),
            None if duration is None else float(duration), meta.get("call_id"), meta.get("turn"),
            server if isinstance(server, str) else None, approval_value(meta) if meta.get("outcome", "ran") == "ran"
            else None)


class ChainHead:
    """The head of a session's chain, record by record: a link's stated digest, or the digest `seal` makes."""

    def __init__(self) -> None:
        self.head = GENESIS

    def add(self, record: Record, args: bytes | None = None, response: bytes | None = None) -> None:
        """Follow the chain one record further (`args`, `response`: their canonical bytes, when already made)."""
        if record.digest is not None:
            self.head = record.digest
            return
        args = record.canonical_args if args is None else args
        response = record.canonical_response if response is None else response
        self.head = link_digest(self.head, canonical_record_bytes(record.index, record.canonical_tool, args, response,
                                                                  record.canonical_meta))


def follow(record: Record, head: ChainHead) -> CallRow:
    """The record's row, and `head` followed past it: each canonical form made once."""
    args, response = record.canonical_args, record.canonical_response
    head.add(record, args, response)
    return call_row(record, args, response)
