"""Kept for one release: this adapter moved to `toolreplay.adapters.pydantic_ai`; import it from there."""

from toolreplay.adapters.pydantic_ai import *  # noqa: F403 - the old import path names the same objects
from toolreplay.adapters.pydantic_ai import __all__  # noqa: F401
