"""The guard: the gate in front of the tools, the session recorder and the injection screen."""

from toolreplay.guard.approvals import Approvals, Remember
from toolreplay.guard.gate import (
    OUTCOMES,
    STOP_REASONS,
    Answer,
    CallCancelled,
    CannotConfirmError,
    ConfirmationDeferred,
    ConsoleApprover,
    Gate,
    ToolHost,
)
from toolreplay.guard.intents import Intent
from toolreplay.guard.recorder import RecordingError, SessionRecorder
from toolreplay.guard.screen import DEFAULT_PATTERNS, Screen, ScreenFlag, scan_value

__all__ = ["DEFAULT_PATTERNS", "OUTCOMES", "STOP_REASONS", "Answer", "Approvals", "CallCancelled", "CannotConfirmError",
           "ConfirmationDeferred", "ConsoleApprover", "Gate", "Intent", "RecordingError", "Remember", "Screen",
           "ScreenFlag", "SessionRecorder", "ToolHost", "scan_value"]
