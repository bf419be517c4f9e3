"""What a front end gives the gate: the tools to run and a way to ask a person (a `ToolHost`), and the
signals a host raises back (`CallCancelled`, `AnswerLost`, `CallRefused`, `CannotConfirmError`,
`ConfirmationDeferred`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from toolreplay.errors import ToolReplayError
from toolreplay.guard.approvals import Decided, Remember
from toolreplay.guard.outcomes import Refusal

__all__ = ["AnswerLost", "CallCancelled", "CallRefused", "CannotConfirmError", "Confirm", "ConfirmationDeferred",
           "FunctionHost", "ToolHost"]

Confirm = Callable[[str, dict[str, Any]], bool | Remember | Decided]


class CannotConfirmError(ToolReplayError):
    """Raised by a `confirm` callback that has no way to ask a person (no terminal, a client that cannot ask)."""


class CallCancelled(Exception):
    """Raised by a host's `run` or `confirm` when the client cancelled the call: no answer will come.

    `started` says whether the call may have reached the tool: a write cancelled after it started has
    an unknown outcome; one cancelled before (or while waiting for a person) did not run."""

    def __init__(self, reason: str, *, started: bool = True) -> None:
        super().__init__(reason)
        self.started = started


class AnswerLost(ConnectionError):
    """Raised by a host's `run` when the call was sent but its answer will never come (the server ended,
    the connection dropped, the server failed): a read failed; a write may or may not have taken effect,
    so its outcome is unknown (refused until a person resolves it, as a write cut short)."""


class NotSent(ConnectionError):
    """Raised by a host's `run` when the call never reached the tool (its server ended and is being started
    again): nothing ran, so the call is refused as such (`server unavailable: ...`) and not held to answer a
    repeat: an identical call later runs anew."""


class CallRefused(Exception):
    """Raised by a host's `run` when the call was sent but the other side refused it before running it (a
    remote server's 401 or 403: the client must authorize, or ask for more scope): it did not run, a write
    included, so it is recorded `refused` (reason "server") and may be made again."""


class ConfirmationDeferred(ToolReplayError):
    """Raised by a `confirm` callback whose answer comes later, out of band (a framework's approval request or
    interrupt): the gate records nothing, does not count the request, and lets this propagate; the host asks,
    then makes the same call again. The framework adapters (toolreplay/adapters) use it."""


class ToolHost(Protocol):
    """A front end that runs the tools itself; `context` is the per-call value given to `Gate.handle`."""

    def refusal(self, tool: str) -> Refusal | str | None:
        """None when the host can run `tool` (an allowed tool), else why not (a `Refusal`, or the text of one
        whose reason is "host")."""

    def run(self, tool: str, args: dict[str, Any], context: Any) -> Any:
        """Run the call and return its response (a dict); raise CallCancelled when it was cancelled."""

    def confirm(self, tool: str, args: dict[str, Any], context: Any) -> bool | Remember | Decided:
        """Ask a person (never the model) whether this exact call may run; True (or a `Remember`) only for a yes;
        a `Decided` wraps either answer with who gave it.

        Raise CallCancelled(started=False) when the client cancelled the call while it waited."""


class FunctionHost:
    """The library front end: tools are `func(**args)`, confirmation is `confirm(tool, args)`."""

    def __init__(self, tools: Mapping[str, Callable[..., Any]], confirm: Confirm | None) -> None:
        self._tools = dict(tools)
        self._confirm = confirm

    def refusal(self, tool: str) -> Refusal | None:
        return None if tool in self._tools else Refusal("not_allowed", "tool not allowed: " + tool)

    def run(self, tool: str, args: dict[str, Any], context: Any) -> Any:
        return self._tools[tool](**args)  # the gate hands every host a copy

    def confirm(self, tool: str, args: dict[str, Any], context: Any) -> bool | Remember | Decided:
        if self._confirm is None:
            raise CannotConfirmError("no confirm callback")
        # passed through: the gate tells False from a non-bool
        answer: bool | Remember | Decided = self._confirm(tool, args)
        return answer
