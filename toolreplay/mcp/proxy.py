"""An MCP stdio proxy: the gate and the sealed recorder between any MCP client and any stdio MCP server.

Three parts, each in its own module: the transport (`mcp_transport`: a client end and a server end,
by default the client on the proxy's own stdin/stdout and the server as a child process, one JSON-RPC
message per line), the router
(`mcp_router`: what each message means; listings filtered, calls sent through the gate in the order
sent, cancellations; confirmation asked through the client by `mcp_confirm`) and the core, the same
`Gate` and `SessionRecorder` as the Python guard: a write's intent is synced before it is forwarded,
every call is recorded before its answer is sent, a call is refused when the record cannot be
written, and a proxy restarted on the same record brings back the writes, budgets and rule history
it holds and refuses a write whose outcome is unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import IO, Any, TextIO

from toolreplay.guard.approvals import SCOPES, Approvals
from toolreplay.guard.assembly import Guard, GuardConfig, build_guard
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.mcp.pins import ToolPins
from toolreplay.mcp.router import BATCH_VERSIONS, Router
from toolreplay.mcp.transport import ClientEnd, ServerEnd, SessionLink, StdioClient, StdioServer
from toolreplay.policy.model import Policy

__all__ = ["BATCH_VERSIONS", "McpProxy"]


class McpProxy:
    """Runs one proxied session; `run` blocks until either side ends or `stop` is called."""

    def __init__(self, server: list[str] | ServerEnd, guard: Guard | Policy, *, client_in: IO[bytes] | None = None,
                 client_out: IO[bytes] | None = None, client: ClientEnd | None = None,
                 diagnostics: TextIO, recorder: SessionRecorder | None = None, pins: ToolPins | None = None,
                 mutators: Iterable[str] = (), repeatable: Iterable[str] = (), read_cache: bool = False,
                 record_meta: Callable[[str], Mapping[str, Any] | None] | None = None,
                 approvals: Approvals | None = None) -> None:
        """Nothing starts before `run`; `diagnostics` receives the proxy's own messages.

        `server` is a command to run as a stdio server, or any `ServerEnd`; the client is `client`, or
        else the streams `client_in` and `client_out`. `guard` is the assembled guard (the gate of this
        session is its `gate`); a bare Policy is a guard of that policy with the options below.

        `mutators`, `repeatable` and `read_cache` (with a bare Policy) go to the Gate: tools that change state without
        needing a confirmation, tools whose identical calls are each a new action, and whether an
        identical read may be answered from an earlier one while no write has run since; `record_meta`
        too: more `x-` keys of a record's meta by tool (by default the server end's own `record_meta`, if it
        has one: `MultiServer` says which server served the call). A recorder that continues a record
        brings its writes, budgets, rule history and unknown outcomes back.
        `approvals` (by default the guard's for a session) answer confirmations a person asked to remember;
        with them the question offers to remember a yes (`session`, and `always` when they have a file).
        """
        if isinstance(guard, Policy):
            guard = build_guard(GuardConfig(guard, mutators=tuple(mutators), repeatable=tuple(repeatable),
                                            read_cache=read_cache))
        if approvals is None:
            approvals = guard.session_approvals()
        if client is None:
            if client_in is None or client_out is None:
                raise TypeError("McpProxy needs a client end, or client_in and client_out")
            client = StdioClient(client_in, client_out)
        upstream = StdioServer(server) if isinstance(server, list) else server
        if record_meta is None:
            record_meta = getattr(upstream, "record_meta", None)
        self._transport = SessionLink(client, upstream, diagnostics=diagnostics)
        fallback = guard.confirmation("mcp-proxy", None if recorder is None else recorder.path)
        prefixes: frozenset[str] = getattr(upstream, "prefixes", frozenset())  # MultiServer: names carry them
        self._router = Router(self._transport, guard.policy, pins, fallback, prefixes)
        self._gate = guard.gate(self._router, recorder=recorder, record_meta=record_meta, approvals=approvals)
        if approvals is not None:
            self._router.offer_remember(SCOPES if approvals.path is not None else SCOPES[:2])
        self._router.serve(self._gate)

    @property
    def exit_reason(self) -> str:
        """Why the session ended: the client closed its input or output, the server exited, a signal."""
        return self._transport.exit_reason

    def run(self) -> int:
        """Start the server, pass messages until one side ends; return the server's exit status.

        A server that cannot be started is a UsageError."""
        self._transport.start(self._router.from_client, self._router.from_server, self._router.server_ended)
        self._transport.wait()
        self._transport.closing = True
        self._router.shutdown()
        status = self._transport.close_server()
        self._router.server_ended()  # the server is gone: nothing more will answer
        return status

    def stop(self, reason: str = "stopped") -> None:
        """End the session from any thread (a signal handler, a test)."""
        self._transport.stop(reason)
