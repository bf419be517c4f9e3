"""Kept so `from toolreplay.recorder import SessionRecorder` works in 0.7; use `toolreplay.guard` instead."""

from toolreplay.guard.recorder import SessionRecorder

__all__ = ["SessionRecorder"]
