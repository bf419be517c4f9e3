"""One request as the gate handles it (internal to the guard's core)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolreplay.policy.rules import Ruling

__all__ = ["Request"]


@dataclass(frozen=True, slots=True)
class Request:
    """One request as the gate handles it: `identity` is the canonical call, `key` the host's idempotency key,
    `call_id` the id the model or protocol gave it, `context` the front end's own per-call value."""

    tool: str
    args: dict[str, Any]
    identity: bytes
    key: str | None
    write: bool
    fresh: bool  # a repeatable tool's call without a key (or a continued one): a new action
    call_id: str | None = None
    turn: int | None = None  # the model turn that asked for it, where the front end knows (meta.turn)
    context: Any = None
    passed: bool = False  # continues a call the gate passed (a protocol round trip): no rules, no confirmation
    variant: bytes = b""  # what else makes the request distinct for its front end (an MCP task request)
    started_ns: int = 0  # when the request reached the gate: wall clock, ns since the epoch (meta.ts)
    started: float = 0.0  # the same moment on the performance counter (meta.duration_ms)
    owner: Any = None  # handle_async: the asyncio task that runs the tool itself (the gate hands it back)
    # (meta key, value): the remembered approval that answered its confirmation (`x-approval`), the one a
    # person's answer made (`x-remembered`), why that answer could not be remembered (`x-remember-error`),
    # or a plain yes (`x-confirmed`: `once`)
    approval: tuple[str, str] | None = None
    # what the rules said (set once by `Gate._decide`): what they counted, taken back unless the call ran,
    # and what the shadow rules would have decided (`x-shadow`)
    ruling: Ruling | None = field(default=None, compare=False)
    decided_by: str | None = field(default=None, compare=False)  # who answered its confirmation (`x-decided-by`)

    @property
    def slot(self) -> bytes:
        """The call's key in this session's tables: its identity and its variant."""
        return self.identity + b"\n" + self.variant if self.variant else self.identity
