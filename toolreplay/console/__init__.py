"""The console (`toolreplay serve`): a local web page over records folders, live, with the approvals inbox.

`index` keeps the sessions' counts as their records grow; `pages` renders them (with the HTML report's
timeline); `server` answers requests, with the console's own checks (host, token, CSRF).
"""

from __future__ import annotations

from toolreplay.console.server import Console, serve

__all__ = ["Console", "serve"]
