"""The guard's core: the gate in front of the tools, the session recorder and the injection screen.

The names load when first used, so a process that needs one part (a hook: the recorder, and the gate
only to decide) does not load them all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolreplay.guard.approvals import Approvals, Decided, Remember
    from toolreplay.guard.assembly import Guard, GuardConfig, GuardConfigError, build_guard
    from toolreplay.guard.console import ConsoleApprover
    from toolreplay.guard.gate import Gate
    from toolreplay.guard.host import (
        AnswerLost,
        CallCancelled,
        CallRefused,
        CannotConfirmError,
        ConfirmationDeferred,
        ToolHost,
    )
    from toolreplay.guard.inbox import Inbox
    from toolreplay.guard.intents import Intent
    from toolreplay.guard.outcomes import OUTCOMES, STOP_REASONS, Answer, Outcome, Refusal
    from toolreplay.guard.recorder import RecordingError, SessionRecorder
    from toolreplay.guard.screen import DEFAULT_PATTERNS, Screen, ScreenFlag, scan_value

__all__ = ["DEFAULT_PATTERNS", "OUTCOMES", "STOP_REASONS", "Answer", "AnswerLost", "Approvals", "CallCancelled",
           "CallRefused", "CannotConfirmError", "ConfirmationDeferred", "ConsoleApprover", "Decided", "Gate", "Guard",
           "GuardConfig", "GuardConfigError", "Inbox", "Intent", "NotSent", "Outcome", "Refusal", "RecordingError",
           "Remember", "Screen", "ScreenFlag", "SessionRecorder", "ToolHost", "build_guard", "scan_value"]

_HOMES = {"OUTCOMES": "outcomes", "STOP_REASONS": "outcomes", "Answer": "outcomes", "Outcome": "outcomes",
          "Refusal": "outcomes", "AnswerLost": "host", "CallCancelled": "host", "CallRefused": "host",
          "CannotConfirmError": "host", "ConfirmationDeferred": "host", "NotSent": "host", "ToolHost": "host",
          "ConsoleApprover": "console", "Gate": "gate",
          "Intent": "intents", "RecordingError": "recorder", "SessionRecorder": "recorder",
          "DEFAULT_PATTERNS": "screen", "Screen": "screen", "ScreenFlag": "screen", "scan_value": "screen",
          "Approvals": "approvals", "Remember": "approvals", "Decided": "approvals", "Inbox": "inbox",
          "Guard": "assembly", "GuardConfig": "assembly", "GuardConfigError": "assembly", "build_guard": "assembly"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'toolreplay.guard' has no attribute {name!r}")
    return getattr(importlib.import_module(f"toolreplay.guard.{home}"), name)
