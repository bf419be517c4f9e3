"""What a hook process answers its agent for one event: an exit code, standard output and standard error, as
the agent's hook contract reads them (exit 0 with the decision as JSON; exit 2 with one line, which blocks
the call). The command line (`toolreplay hook AGENT`), the hook server and the fast client's own decision
all answer through `reply_to_event`, so their answers are the same bytes."""

from __future__ import annotations

import json
from dataclasses import dataclass

from toolreplay.format.text import escape_text
from toolreplay.hooks import core
from toolreplay.hooks.cache import HookCache

__all__ = ["Reply", "fault_reply", "reply_to_event"]


@dataclass(frozen=True, slots=True)
class Reply:
    """The exit code and the text of standard output and standard error of one hook event."""

    code: int
    stdout: str = ""
    stderr: str = ""


def reply_to_event(data: bytes, policy: str, records: str, redact_key: str | None, agent: str,
                   inbox: str | None = None, inbox_timeout: str | None = None, cache: HookCache | None = None) -> Reply:
    """Decide on and record one event (the bytes the agent wrote on stdin) for `agent` (claude-code,
    gemini-cli or codex): the decision, or the one line that blocks the call when it cannot be decided or recorded.
    `inbox` and `inbox_timeout` are the `--inbox DIR` and `--inbox-timeout SECONDS` options as given; `cache` is
    a hook server's memory between events (the same answers)."""
    profile = core.AGENTS[agent]
    try:
        timeout = core.inbox_timeout(inbox_timeout)
        if inbox_timeout is not None and inbox is None:
            raise core.HookError("--inbox-timeout needs --inbox DIR")
        answer = core.handle_hook(data, policy, records, redact_key, profile, cache, inbox=inbox, timeout=timeout)
    except core.HookError as exc:  # fail closed: exit 2 blocks the call, and the model reads why
        return Reply(2, "", f"error: toolreplay hook: {escape_text(str(exc))}\n")
    except Exception as exc:  # noqa: BLE001 - a fault of ours: any other exit status lets the agent run the tool
        return fault_reply(exc)
    output = profile.output(answer)
    if output is None:
        return Reply(0)
    return Reply(0, json.dumps(output, ensure_ascii=True, sort_keys=True) + "\n")


def fault_reply(exc: Exception) -> Reply:
    """The answer to a fault of ours (not of the input): exit 2, which blocks the call, and what went wrong."""
    why = f"{type(exc).__name__}: {escape_text(str(exc))[:500]}"
    return Reply(2, "", f"error: toolreplay hook: internal error ({why}); the call is blocked\n")
