"""The MCP proxy's router: what each message means, and which of them go through the gate.

Every message passes through unchanged, byte for byte, except:

- a `tools/list` result, whose tools are filtered to those the policy allows (and, with pins, whose
  definitions match their pins);
- a `tools/call` request, which goes through the `Gate` (the same core as the Python guard, recorder
  included) on a worker thread: an allowed call is forwarded as it came and its reply awaited; a
  refused one is answered by the proxy as a tool result with `isError: true` and the refusal text;
- a `resources/read` or `prompts/get` request, which goes through the gate the same way as a read of
  the pseudo-tool of its method's name (`GUARDED`; with several servers `PREFIX__resources/read`, its
  URI or name without the prefix): a refused one is answered with an Invalid params error.

The router is the gate's `ToolHost`: the gate calls back `run` and `confirm` with the call's own
context (`CallContext`), passed explicitly, never kept in thread-local state.

A write tool needs a person's confirmation, asked through the client (`mcp_confirm`: an
`elicitation/create` request of the proxy's own, or an `input_required` round trip in protocol
2026-07-28); a client that can do neither gets the call refused with "confirmation required".

Batches (JSON arrays) are handled element by element when the negotiated protocol version allows them
(2025-03-26), and answered with an Invalid Request error otherwise. Malformed JSON from either side is
reported on the diagnostics stream and answered with a Parse error (id null).
"""

from __future__ import annotations

import functools
import json
import queue
import re
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from toolreplay.format.text import escape_text
from toolreplay.guard.approvals import Decided, Remember
from toolreplay.guard.gate import Gate
from toolreplay.guard.host import AnswerLost, CallCancelled, CallRefused, CannotConfirmError, Confirm, NotSent
from toolreplay.guard.outcomes import Answer, Refusal
from toolreplay.mcp.confirm import ClientConfirmation, decision
from toolreplay.mcp.pins import ToolPins
from toolreplay.mcp.servers import SEPARATOR, split_name
from toolreplay.mcp.transport import UNPARSED, SessionLink
from toolreplay.mcp.wire import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    Batch,
    Waiter,
    call_key,
    dump_message,
    error_message,
    id_key,
    no_answer_reason,
    not_sent_reason,
    parse_message,
    recordable,
    refusal_result,
    refused_unrun,
)
from toolreplay.policy.model import Policy

if TYPE_CHECKING:
    import asyncio

__all__ = ["BATCH_VERSIONS", "GUARDED", "CallContext", "Router"]

BATCH_VERSIONS = frozenset({"2025-03-26"})

# The requests besides tools/call that go through the gate, each as a read of the pseudo-tool named as
# its method (a name no MCP tool can have: tool names have no "/"), with these fields of its params as
# the arguments; the first is the one a server's prefix is on.
GUARDED: dict[str, tuple[str, ...]] = {"resources/read": ("uri",), "prompts/get": ("name", "arguments")}

# What a reply needs for the record format to hold it may be in it: a surrogate escape, a huge number.
_MAYBE_UNRECORDABLE = re.compile(rb"\\u[dD][89a-fA-F]|[0-9][eE][+]?[0-9]{3}|[0-9]{309}")

_INTERNAL_ERROR = -32603  # a read that failed in the proxy (its server ended before it answered)

# Ids of cancelled calls whose late reply from the server is dropped without a word (the oldest forgotten first).
_CANCELLED_REMEMBERED = 1024


class _Turns:
    """Calls reach the server in the order the client sent them: each takes a ticket on arrival and
    enters the gate only once every earlier ticket is released (forwarded, answered by the proxy, or
    waiting for a person, which holds back no other call)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._next = 0
        self._open: set[int] = set()
        self._waiting = 0  # calls waiting for their turn: a release with none wakes nobody (it costs on every call)

    def take(self) -> int:
        with self._changed:
            ticket = self._next
            self._next += 1
            self._open.add(ticket)
            return ticket

    def wait(self, ticket: int, context: CallContext) -> None:
        """Until every earlier ticket is released, or the call is cancelled."""
        with self._changed:
            self._waiting += 1
            self._changed.wait_for(lambda: context.cancelled or not self._open or min(self._open) >= ticket)
            self._waiting -= 1

    def ready(self, ticket: int) -> bool:
        """Whether every earlier ticket is released already (`wait` would not wait)."""
        with self._changed:
            return not self._open or min(self._open) >= ticket

    def release(self, ticket: int) -> None:
        with self._changed:
            if ticket in self._open:
                self._open.discard(ticket)
                if self._waiting:
                    self._changed.notify_all()

    def wake(self) -> None:
        with self._changed:
            self._changed.notify_all()


class CallContext:
    """One `tools/call` on its way through the proxy: what came, what is forwarded, what is answered."""

    __slots__ = ("cancelled", "key", "line", "message", "reply", "reply_line", "sent", "target", "ticket")

    def __init__(self, message: dict[str, Any], line: bytes, ticket: int = 0) -> None:
        self.message = message  # the request as the client sent it
        self.line = line  # what an allowed call forwards: the request exactly as it came
        self.target = message  # what is answered: the request, or the retry that confirmed it
        self.key = id_key(message["id"])
        self.reply: dict[str, Any] | None = None  # the server's reply, once it came
        self.reply_line: bytes | None = None  # its line as it came (None when it came in a batch)
        self.sent = False  # forwarded to the server
        self.cancelled = False  # the client cancelled it: no answer goes back
        self.ticket = ticket  # its place in the order of the client's calls


class Router:
    """Routes one session's messages between the transport and the gate; the gate's ToolHost."""

    def __init__(self, transport: SessionLink, policy: Policy, pins: ToolPins | None = None,
                 fallback: Confirm | None = None, prefixes: frozenset[str] = frozenset()) -> None:
        """The gate is attached by `serve`, since the gate is built on this router. `fallback` is the guard's
        own confirmation channel (the approvals inbox), asked when the client cannot ask a person.
        `prefixes` are those of the servers behind the proxy (`MultiServer`), none for one server: a
        resource read or prompt of `PREFIX__...` is the gate's `PREFIX__resources/read` or `PREFIX__prompts/get`."""
        self._transport = transport
        self._prefixes = prefixes
        self._policy = policy
        self._pins = pins
        self._fallback = fallback
        self._gate: Gate | None = None
        self._lock = threading.Lock()
        self._calls: dict[str, Waiter] = {}      # forwarded tools/call ids -> the worker awaiting the reply
        self._confirmation = ClientConfirmation(self._to_client)
        # calls the server answered with input_required (the oldest forgotten past _CANCELLED_REMEMBERED)
        self._input_required: OrderedDict[bytes, None] = OrderedDict()
        self._requests: dict[str, str] = {}       # ids of the client's requests sent to the server -> method
        self._inflight: dict[str, CallContext] = {}  # ids of the client's tools/call requests not yet answered
        self._cancelled: OrderedDict[str, None] = OrderedDict()  # ids of cancelled calls sent to the server
        self._batches: dict[str, Batch] = {}     # request id -> the client batch it belongs to
        self._workers: set[threading.Thread] = set()  # the pool running tools/call requests
        self._jobs: queue.SimpleQueue[CallContext | None] = queue.SimpleQueue()
        self._idle = 0
        self._kept = 0  # calls run on the thread that read them (SessionLink.hand_over) or in its loop, not on a worker
        self._loop_tasks: set[asyncio.Task[None]] = set()  # the calls running in the loop (`_loop_call`)
        self._kept_done = threading.Condition(self._lock)
        self._stopping = False  # shutdown waits for the kept calls: the last one tells it
        self._record_error_said = False
        self._version: str | None = None
        self._turns = _Turns()
        self._sending = threading.Lock()  # held while a call is sent, and while one is cancelled

    def serve(self, gate: Gate) -> None:
        """Start routing: every tools/call goes through `gate`."""
        self._gate = gate

    def offer_remember(self, scopes: tuple[str, ...]) -> None:
        """Let a person's yes ask to be remembered for one of `scopes` (approvals.SCOPES); by default not offered."""
        self._confirmation.remember = scopes

    # -- the gate's host ------------------------------------------------------------------------------

    def refusal(self, tool: str) -> Refusal | None:
        """Any allowed tool may be called; with pins, only one whose definition was verified (a resource
        read or a prompt has no definition to pin)."""
        return self._pins.refusal_of(tool) if self._pins is not None and not _pseudo(tool) else None

    def run(self, tool: str, args: dict[str, Any], context: Any) -> Any:
        """Forward the call as it came and wait for the server's reply; the record holds its result."""
        assert isinstance(context, CallContext)
        waiter = Waiter()
        with self._sending:  # a cancellation sees the call either not sent or sent
            with self._lock:
                if context.cancelled:
                    raise CallCancelled("the client cancelled the call before it was sent", started=False)
                self._calls[context.key] = waiter
                context.sent = True
            waiter.pending = self._transport.to_server_call(context.line, context.message)
        self._turns.release(context.ticket)
        if waiter.pending is not None:  # this thread reads the reply itself (no hand-off to the end's thread)
            if waiter.done.is_set():  # the server ended as it was sent
                waiter.pending.abandon()
            waiter.pending.complete()
        waiter.done.wait()
        return self._outcome(waiter, context)

    async def run_on_loop(self, context: CallContext, loop: asyncio.AbstractEventLoop) -> Any:
        """`run` for a call that runs in `loop`, the event loop of the server end (`_loop_call`): the request is
        sent from the loop, and its reply awaited there."""
        import asyncio  # (imported by whoever runs the loop: the stdio proxy does without it)

        woken = loop.create_future()
        waiter = Waiter(functools.partial(_wake, loop, threading.get_ident(), woken))
        with self._sending:  # (as in `run`)
            with self._lock:
                if context.cancelled:
                    raise CallCancelled("the client cancelled the call before it was sent", started=False)
                self._calls[context.key] = waiter
                context.sent = True
            waiter.pending = soon = self._transport.to_server_soon(context.line, context.message)
        self._turns.release(context.ticket)
        if soon is not None:  # this task reads the answer itself (no turn of the loop between it and the call)
            try:
                await soon.answer()
            except asyncio.CancelledError:  # the call was cancelled, or the server end closed: as on a worker
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
        if not waiter.done.is_set():
            await woken
        return self._outcome(waiter, context)

    def _outcome(self, waiter: Waiter, context: CallContext) -> Any:
        """What the reply `waiter` got means for the gate: the response to record, or why there is none."""
        with self._lock:
            self._calls.pop(context.key, None)
            if context.cancelled:
                raise CallCancelled("the client cancelled the call while the server ran it")
        if waiter.reply is None:
            raise AnswerLost("the server ended before it answered")
        lost = no_answer_reason(waiter.reply)
        if lost is not None:  # the transport's stand-in for an answer that will never come
            raise CallRefused(lost) if refused_unrun(waiter.reply) else AnswerLost(lost)
        unsent = not_sent_reason(waiter.reply)
        if unsent is not None:  # the server end did not send it (its server is down): nothing ran
            raise NotSent(unsent)
        context.reply, context.reply_line = waiter.reply, waiter.line
        response = _response_of(waiter.reply)
        if waiter.line is None or _MAYBE_UNRECORDABLE.search(waiter.line):
            response = recordable(response)  # the client still gets the reply as it came
        return response

    def confirm(self, tool: str, args: dict[str, Any], context: Any) -> bool | Remember | Decided:
        """Ask the person through the client (mcp_confirm), or, when it cannot ask, through the guard's own
        channel (the approvals inbox) where it has one; a cancelled call raises CallCancelled."""
        assert isinstance(context, CallContext)
        self._turns.release(context.ticket)  # a call waiting for a person holds back no other call
        if context.cancelled:
            raise CallCancelled("the client cancelled the call before a person was asked", started=False)
        if self._transport.closing:
            raise CannotConfirmError("the proxy is closing")
        answer = self._confirmation.ask(tool, args, context)
        if context.cancelled:
            raise CallCancelled("the client cancelled the call while it waited for a person", started=False)
        if answer is None and self._fallback is not None:  # the client cannot ask: the person answers elsewhere
            return self._fallback(tool, args)
        if not isinstance(answer, dict):  # nobody could be asked, or no answer came (the client went, an error)
            raise CannotConfirmError("the client cannot ask a person, or gave no answer")
        # a person's no, or a cancel of the question: declined; a yes may ask to be remembered
        return decision(answer, self._confirmation.remember)

    # -- lines from either side ---------------------------------------------------------------------------

    def from_client(self, line: bytes, message: Any = UNPARSED, /) -> None:
        """One line the client wrote; `message`: its JSON, when the client end parsed it already."""
        if message is UNPARSED:
            try:
                message = parse_message(line)
            except (ValueError, RecursionError) as exc:
                self._transport.say(f"malformed JSON from the client: {exc}")
                self._to_client(error_message(None, PARSE_ERROR, "Parse error"))
                return
        if isinstance(message, list):
            self._client_batch(message)
        elif self._client_message(message, None, line):
            self._transport.to_server(line, message)

    def from_server(self, line: bytes, message: Any = UNPARSED, /) -> None:
        """One line the server wrote; `message`: its JSON, when the server end parsed it already."""
        if message is UNPARSED:
            try:
                message = parse_message(line)
            except (ValueError, RecursionError) as exc:
                self._transport.say(f"malformed JSON from the server: {exc}")
                self._transport.to_server(dump_message(error_message(None, PARSE_ERROR, "Parse error")))
                return
        if isinstance(message, list):
            kept = [item for item in message if self._server_message(item, [False], None)]
            if kept:
                self._to_client(kept)
            return
        changed = [False]
        if self._server_message(message, changed, line):
            if changed[0]:
                self._to_client(message)
            else:
                self._transport.to_client(line)

    def server_ended(self) -> None:
        """The server's output ended: nothing more will answer a forwarded call."""
        with self._lock:
            calls = list(self._calls.values())
        for waiter in calls:
            _release(waiter)

    def shutdown(self) -> None:
        """The session ends: withdraw open questions and let the workers finish the calls already queued."""
        self._confirmation.close()
        with self._lock:
            workers = list(self._workers)
        for _ in workers:
            self._jobs.put(None)  # after the calls already queued
        for worker in workers:
            worker.join(timeout=5)
        with self._kept_done:
            self._stopping = True
            self._kept_done.wait_for(lambda: self._kept == 0, timeout=5)

    # -- client to server ---------------------------------------------------------------------------

    def _client_message(self, message: Any, batch: Batch | None, line: bytes | None = None) -> bool:
        """Handle one message from the client; True when it is to be forwarded unchanged."""
        if not isinstance(message, dict):
            return True  # not ours to judge: the server answers it
        method = message.get("method")
        if method is None and "id" in message:  # a response: to our elicitation, else the server's request
            return not self._confirmation.answered(message)
        if "id" not in message:
            if method == "tools/call" or method in GUARDED:
                self._transport.say(f"dropped a {method} sent as a notification (no id): it would bypass the guard")
                return False
            if method == "notifications/cancelled":
                self._cancel_call(message.get("params"))
            return True  # the server may be running the call: it gets the cancellation too
        key = id_key(message["id"])
        with self._lock:  # a cancelled call's id stays in use while the server may still answer it
            in_use = key in self._inflight or key in self._requests or key in self._cancelled
        if in_use:  # its reply could not be told from the other's: refused, never forwarded
            self._to_client(error_message(message["id"], INVALID_REQUEST, "Invalid Request: the id is already used "
                                          "by a request in flight"))
            return False
        if batch is not None:
            with self._lock:
                self._batches[key] = batch
        if method == "tools/call" or method in GUARDED:
            if method in GUARDED or not self._confirmation.resumed(message):
                context = CallContext(message, line if line is not None else dump_message(message), self._turns.take())
                with self._lock:
                    self._inflight[key] = context
                if batch is None and self._loop_call(context):  # it runs in the loop it came on
                    pass
                elif batch is None and self._transport.hand_over():  # this thread runs it: no hand-off to a worker
                    self._keep_call(context)
                else:
                    self._start_call(context)
            return False
        if method == "initialize":
            params = message.get("params")
            capabilities = params.get("capabilities") if isinstance(params, dict) else None
            elicitation = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
            # 2025-11-25: {} means form mode; a client declaring only "url" cannot show our form.
            self._confirmation.elicitation = isinstance(elicitation, dict) and (
                "form" in elicitation or "url" not in elicitation)
        with self._lock:
            self._requests[key] = method if isinstance(method, str) else ""
        return True

    def _client_batch(self, messages: list[Any]) -> None:
        if self._version not in BATCH_VERSIONS or not messages:
            self._transport.say("rejected a JSON-RPC batch: the negotiated protocol version does not allow batches")
            self._to_client(error_message(None, INVALID_REQUEST, "Invalid Request: batches are not supported "
                                          "by the negotiated protocol version"))
            return
        expected = {id_key(item["id"]) for item in messages
                    if isinstance(item, dict) and "method" in item and "id" in item}
        batch = Batch(expected)
        forward = [item for item in messages if self._client_message(item, batch if expected else None)]
        if forward:
            self._transport.to_server(dump_message(forward), forward)

    # -- server to client ---------------------------------------------------------------------------

    def _server_message(self, message: Any, changed: list[bool], line: bytes | None) -> bool:
        """Handle one message from the server; True when it goes on to the client."""
        if not isinstance(message, dict) or "method" in message or "id" not in message:
            return True
        key = id_key(message["id"])
        with self._lock:
            waiter = self._calls.pop(key, None)
            method = self._requests.pop(key, None)
            late = waiter is None and key in self._cancelled
            if late:
                del self._cancelled[key]
        if waiter is not None:
            waiter.reply, waiter.line = message, line
            waiter.set()
            return False
        if late:  # the reply to a call the client cancelled: the client ignores it, so does the proxy
            return False
        if method is None and message["id"] is not None:
            # A reply to nothing the client asked the server (say, a forged result for a call that
            # waits for a person): the client never sees it.
            self._transport.say("dropped a response from the server to no request sent to it")
            return False
        initialize, listing = method == "initialize", method == "tools/list"
        if initialize and isinstance(message.get("result"), dict):
            version = message["result"].get("protocolVersion")
            self._version = version if isinstance(version, str) else None
        if listing and isinstance(message.get("result"), dict):
            self._filter_listing(message["result"])
            changed[0] = True
        if self._in_batch(key, message):
            return False
        return True

    def _filter_listing(self, result: dict[str, Any]) -> None:
        tools = result.get("tools")
        if not isinstance(tools, list):
            return
        listed = [tool for tool in tools if isinstance(tool, dict) and isinstance(tool.get("name"), str)]
        hidden: set[str] = set()
        if self._pins is not None:
            for check in self._pins.check(listed):
                if check.status != "pinned":
                    hidden.add(check.name)
                    self._transport.say("pins: " + escape_text(check.describe()) + "; hidden until accepted "
                                        f"(toolreplay mcp-pins accept {escape_text(self._pins.path)})")
        result["tools"] = [tool for tool in listed if tool["name"] in self._policy.allowed_tools
                           and tool["name"] not in hidden and not _pseudo(tool["name"])]

    def _in_batch(self, key: str, reply: Any) -> bool:
        """Keep a reply that belongs to a client batch; send the batch when it is complete."""
        with self._lock:
            batch = self._batches.pop(key, None)
            if batch is None:
                return False
            batch.replies.append(reply)
            batch.expected.discard(key)
            complete = not batch.expected
        if complete:
            self._to_client(batch.replies)
        return True

    def _leave_batch(self, key: str) -> None:
        """A request of a client batch that gets no reply (the client cancelled it): the batch goes without."""
        with self._lock:
            batch = self._batches.pop(key, None)
            if batch is None:
                return
            batch.expected.discard(key)
            complete = not batch.expected and bool(batch.replies)
        if complete:
            self._to_client(batch.replies)

    # -- tools/call through the gate --------------------------------------------------------------

    def _start_call(self, context: CallContext) -> None:
        """Hand the call to an idle worker, or to a new one: a call may wait on a person for long."""
        with self._lock:
            spawn = self._idle == 0
            if spawn:
                worker = threading.Thread(target=self._work, name="mcp-call", daemon=True)
                self._workers.add(worker)
            else:
                self._idle -= 1
        self._jobs.put(context)
        if spawn:
            worker.start()

    def _keep_call(self, context: CallContext) -> None:
        """Run the call on this thread, which read it (the client end reads on with another)."""
        with self._lock:
            self._kept += 1
        try:
            self._call(context)
        finally:
            with self._kept_done:
                self._kept -= 1
                if self._stopping:
                    self._kept_done.notify_all()

    def _work(self) -> None:
        while (context := self._jobs.get()) is not None:
            self._call(context)
            with self._lock:
                self._idle += 1

    def _loop_call(self, context: CallContext) -> bool:
        """Run the call in the event loop it came on, with no hand-off to a worker thread and back, when that loop
        is the server end's too (`SessionLink.call_loop`) and the call is a plain tools/call of a plain read
        (`Gate.plain_read`: no person is ever asked, no intent written) whose turn it is already; False: it was
        not started (a worker runs it)."""
        message = context.message
        params = message.get("params")
        if (message["method"] != "tools/call" or not isinstance(params, dict) or not params.keys() <= _LOOP_FIELDS
                or self._input_required):  # (a task request, a round trip's answer: the worker's way)
            return False
        name, args = params.get("name"), params.get("arguments", {})
        gate = self._gate
        if (not isinstance(name, str) or not isinstance(args, dict) or gate is None or not gate.plain_read(name)
                or _pseudo(name)):
            return False
        loop = self._transport.call_loop()
        if loop is None or not self._turns.ready(context.ticket):
            return False
        with self._lock:
            self._kept += 1
        task = loop.create_task(self._call_on_loop(context, name, args, loop))
        self._loop_tasks.add(task)
        task.add_done_callback(self._loop_tasks.discard)
        return True

    async def _call_on_loop(self, context: CallContext, name: str, args: dict[str, Any],
                            loop: asyncio.AbstractEventLoop) -> None:
        """`_call` in the event loop: the gate's `handle_async`, the call sent and its reply awaited there."""
        assert self._gate is not None
        reply: dict[str, Any] | None
        try:
            try:
                try:
                    answer = await self._gate.handle_async(name, args, lambda _: self.run_on_loop(context, loop),
                                                           call_id=_call_id(context.message["id"]), context=context)
                except ValueError as exc:
                    reply = error_message(context.message["id"], INVALID_PARAMS, f"Invalid params: {exc}")
                else:
                    reply = self._answered(context, name, args, None, answer)
            finally:
                self._turns.release(context.ticket)
            self._answer_client(context, reply)
        finally:
            with self._kept_done:
                self._kept -= 1
                if self._stopping:
                    self._kept_done.notify_all()

    def _call(self, context: CallContext) -> None:
        """One call through the gate, and its answer to the client."""
        try:
            reply = self._guarded(context)
        finally:
            self._turns.release(context.ticket)
        self._answer_client(context, reply)

    def _answer_client(self, context: CallContext, reply: dict[str, Any] | None) -> None:
        """The call is done: its reply to the client (None: the client cancelled it)."""
        with self._lock:
            if self._inflight.get(context.key) is context:
                del self._inflight[context.key]
        if reply is not None:
            # the server's reply to the request as it came is passed on as the bytes it came as
            raw = context.reply_line if reply is context.reply else None
            self._reply(context.target, reply, raw)
        else:
            self._leave_batch(context.key)

    def _guarded(self, context: CallContext) -> dict[str, Any] | None:
        """The call through the gate; the reply to send (None for a call the client cancelled)."""
        message = context.message
        params = message.get("params")
        if message["method"] in GUARDED:
            return self._guarded_read(context, message["method"], params)
        name = params.get("name") if isinstance(params, dict) else None
        args = params.get("arguments", {}) if isinstance(params, dict) else None
        if not isinstance(name, str) or not name or not isinstance(args, dict):
            return error_message(message["id"], INVALID_PARAMS, "Invalid params: tools/call needs a tool name "
                                                                "and an arguments object")
        if _pseudo(name):  # a tool of that name would pass as the policy's resource reads or prompts
            return error_message(message["id"], INVALID_PARAMS, f"Invalid params: {json.dumps(name)} is the name "
                                 "the policy gives resources/read or prompts/get, not a tool's")
        assert isinstance(params, dict) and self._gate is not None
        # calls enter the gate in the order sent, each once the earlier ones were sent, answered or
        # are waiting for a person: so they reach the server in that order, and a call never waits
        # for an identical one that the client sent after it
        self._turns.wait(context.ticket, context)
        continuing = self._continuation(name, args, params)
        try:
            # a continued call (a protocol round trip) was passed in its first round: it runs as a new action
            handle = self._gate.handle if continuing is None else self._gate.handle_continued
            answer = handle(name, args, call_id=_call_id(message["id"]), context=context,
                            variant=_variant(params, _CALL_FIELDS))
        except ValueError as exc:
            return error_message(message["id"], INVALID_PARAMS, f"Invalid params: {exc}")
        return self._answered(context, name, args, continuing, answer)

    def _answered(self, context: CallContext, name: str, args: dict[str, Any], continuing: bytes | None,
                  answer: Answer) -> dict[str, Any] | None:
        """The reply to a tools/call the gate answered (None for a call the client cancelled)."""
        self._note_record_error()
        if context.cancelled:
            return None  # the client gave up on it; a reply to a cancelled request is not sent
        reply = _reply_of(answer, context)
        result = reply.get("result")
        asks = isinstance(result, dict) and result.get("resultType") == "input_required"
        if asks or continuing is not None or self._input_required:  # the key costs a canonical encoding
            self._note_input_required(continuing or call_key(name, args), asks)
        return reply

    def _guarded_read(self, context: CallContext, method: str, params: Any) -> dict[str, Any] | None:
        """A `resources/read` or `prompts/get` through the gate as a read of its pseudo-tool (GUARDED)."""
        message = context.message
        fields = GUARDED[method]
        args = {field: params[field] for field in fields if isinstance(params, dict) and field in params}
        routed = args.get(fields[0])
        if not isinstance(routed, str) or not routed or not isinstance(args.get("arguments", {}), dict):
            what = "a resource URI" if method == "resources/read" else "a prompt name (and an arguments object)"
            return error_message(message["id"], INVALID_PARAMS, f"Invalid params: {method} needs {what}")
        assert isinstance(params, dict) and self._gate is not None
        tool = method
        split = split_name(routed) if self._prefixes else None
        if split is not None and split[0] in self._prefixes:  # PREFIX__URI: the server's own URI, by its prefix
            tool, args[fields[0]] = split[0] + SEPARATOR + method, split[1]
        self._turns.wait(context.ticket, context)
        try:
            answer = self._gate.handle(tool, args, call_id=_call_id(message["id"]), context=context,
                                       variant=_variant(params, frozenset((*fields, "_meta"))))
        except ValueError as exc:
            return error_message(message["id"], INVALID_PARAMS, f"Invalid params: {exc}")
        self._note_record_error()
        if context.cancelled:
            return None
        return _reply_of(answer, context)

    def _note_record_error(self) -> None:
        assert self._gate is not None
        error = self._gate.record_error
        if error is not None and not self._record_error_said:
            self._record_error_said = True
            self._transport.say(f"the session record cannot be written: {error}; refusing every further tools/call")

    def _continuation(self, name: str, args: dict[str, Any], params: dict[str, Any]) -> bytes | None:
        """The call's key when it answers a server's `input_required` result (protocol 2026-07-28) for
        a call the gate already passed; such a retry must reach the server, not the gate's table."""
        if "inputResponses" not in params and "requestState" not in params:
            return None
        key = call_key(name, args)
        with self._lock:
            return key if key in self._input_required else None

    def _note_input_required(self, key: bytes | None, asks: bool) -> None:
        if key is None:
            return
        with self._lock:
            if asks:
                self._input_required[key] = None
                while len(self._input_required) > _CANCELLED_REMEMBERED:
                    self._input_required.popitem(last=False)
            else:
                self._input_required.pop(key, None)

    # -- cancellation ---------------------------------------------------------------------------------

    def _cancel_call(self, params: Any) -> None:
        """The client cancelled a call: release what waits for it (the server's reply, a person's answer);
        the call is recorded as cancelled (a write the server had started: unknown) and not answered."""
        if not isinstance(params, dict) or "requestId" not in params:
            return
        key = id_key(params["requestId"])
        with self._sending, self._lock:
            context = self._inflight.pop(key, None)
            if context is None:
                return  # unknown, or answered already: the notification is ignored (it still reaches the server)
            context.cancelled = True
            waiter = self._calls.pop(key, None)
            if waiter is not None:
                self._cancelled[key] = None
                while len(self._cancelled) > _CANCELLED_REMEMBERED:
                    self._cancelled.popitem(last=False)
        if waiter is not None:
            _release(waiter)
        self._turns.wake()
        self._confirmation.withdraw(key)

    # -- writing ------------------------------------------------------------------------------------

    def _reply(self, message: dict[str, Any], reply: dict[str, Any], raw: bytes | None = None) -> None:
        if not self._in_batch(id_key(message["id"]), reply):
            if raw is not None:  # the server's own reply, as it came (and as it was parsed)
                self._transport.to_client(raw if raw.endswith(b"\n") else raw + b"\n", reply)
            else:
                self._to_client(reply)

    def _to_client(self, message: Any) -> None:
        self._transport.to_client(dump_message(message))


def _release(waiter: Waiter) -> None:
    """Nothing more will answer the call `waiter` waits for (cancelled, or its server ended): its worker goes
    on, also when it is reading the reply itself."""
    if waiter.pending is not None:
        waiter.pending.abandon()
    waiter.set()


def _wake(loop: asyncio.AbstractEventLoop, thread: int, woken: asyncio.Future[None]) -> None:
    """From any thread: the task awaiting `woken` in `loop` (run by `thread`) goes on."""
    if threading.get_ident() == thread:
        _set_once(woken)
        return
    try:
        loop.call_soon_threadsafe(_set_once, woken)
    except RuntimeError:  # the loop is closed: nothing awaits it
        pass


def _set_once(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)


def _response_of(reply: dict[str, Any]) -> dict[str, Any]:
    """What the record holds for a server's reply: its result object, or `{"error": ...}`."""
    result = reply.get("result")
    return result if isinstance(result, dict) else {"error": reply.get("error")}


def _reply_of(answer: Answer, context: CallContext) -> dict[str, Any]:
    """The JSON-RPC reply for the gate's answer, to the request being answered (`context.target`)."""
    answered = context.target["id"]
    if answer.outcome == "ran" and context.reply is not None:  # the server's own reply, as it came
        if context.target is context.message:
            return context.reply
        reply = {key: value for key, value in context.reply.items() if key != "id"}
        reply["id"] = answered
        return reply
    response = answer.response
    error = response.get("error")
    if len(response) == 2 and response.get("ok") is False and isinstance(error, str):  # the gate's refusal
        if context.message["method"] in GUARDED:  # no result of a read can say it failed: an error does
            code = INVALID_PARAMS if answer.refusal is not None else _INTERNAL_ERROR
            return error_message(answered, code, "toolreplay: " + error)
        return {"jsonrpc": "2.0", "id": answered, "result": refusal_result(error, context.message)}
    if set(response) == {"error"}:  # a JSON-RPC error the server gave an identical earlier call
        return {"jsonrpc": "2.0", "id": answered, "error": error}
    return {"jsonrpc": "2.0", "id": answered, "result": response}


_CALL_FIELDS = frozenset({"name", "arguments", "_meta", "inputResponses", "requestState"})
_LOOP_FIELDS = frozenset({"name", "arguments", "_meta"})  # a call with no variant and no round trip's answers


def _pseudo(tool: str) -> bool:
    """Whether `tool` is the gate's name of a resource read or prompt (`resources/read`, `PREFIX__prompts/get`)."""
    if "/" not in tool:
        return False
    split = split_name(tool)
    return tool in GUARDED or (split is not None and split[1] in GUARDED)


def _variant(params: dict[str, Any], fields: frozenset[str]) -> bytes:
    """What else makes a call distinct: every field of its params but `fields` (the tool, its arguments,
    its `_meta` (progress tokens and the like) and a round trip's answers); in practice `task`
    (2025-11-25), whose result is a task handle, not the tool's result."""
    if params.keys() <= fields:
        return b""
    rest = {key: value for key, value in params.items() if key not in fields}
    return call_key("", rest) or dump_message(rest)


def _call_id(message_id: Any) -> str:
    """The request id as the record's meta.call_id holds it: a string as it is, any other id as JSON."""
    return message_id if isinstance(message_id, str) else json.dumps(message_id)
