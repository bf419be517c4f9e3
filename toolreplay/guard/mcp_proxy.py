"""An MCP stdio proxy: the gate and the sealed recorder between any MCP client and any stdio MCP server.

The proxy starts the server as a child process and serves the client on its own stdin/stdout, one
JSON-RPC message per line (the MCP stdio transport). Two reader threads, one per side, pass every
message through unchanged, byte for byte, except:

- a `tools/list` result, whose tools are filtered to those the policy allows (and, with pins, whose
  definitions match their pins);
- a `tools/call` request, which goes through the `Gate` on a thread of its own: an allowed call is
  forwarded as it came and its reply awaited; a refused one is answered by the proxy as a tool result
  with `isError: true` and the refusal text, so the model sees why.

A write tool needs a person's confirmation: when the client declared the elicitation capability at
`initialize`, the proxy asks through an `elicitation/create` request of its own (ids the server never
sees); in protocol 2026-07-28, when the call's `_meta` declares it, through an `input_required` result
that the client's retry answers; otherwise the call is refused with "confirmation required".

Batches (JSON arrays) are handled element by element when the negotiated protocol version allows them
(2025-03-26), and answered with an Invalid Request error otherwise. Malformed JSON from either side is
reported on the diagnostics stream and answered with a Parse error (id null).
"""

from __future__ import annotations

import json
import queue
import secrets
import subprocess
import threading
from collections.abc import Callable, Iterable
from typing import IO, Any, TextIO

from toolreplay.errors import UsageError
from toolreplay.format.text import escape_text
from toolreplay.guard.gate import Gate
from toolreplay.guard.mcp_pins import ToolPins
from toolreplay.guard.mcp_wire import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    Batch,
    Waiter,
    call_key,
    declares_form_elicitation,
    dump_message,
    error_message,
    id_key,
    parse_message,
    read_lines,
    refusal_result,
)
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.policy.model import Policy

__all__ = ["BATCH_VERSIONS", "McpProxy"]

BATCH_VERSIONS = frozenset({"2025-03-26"})
class McpProxy:
    """Runs one proxied session; `run` blocks until either side ends or `stop` is called."""

    def __init__(self, command: list[str], policy: Policy, *, client_in: IO[bytes], client_out: IO[bytes],
                 diagnostics: TextIO, recorder: SessionRecorder | None = None, pins: ToolPins | None = None,
                 mutators: Iterable[str] = (), repeatable: Iterable[str] = (), read_cache: bool = False) -> None:
        """Nothing starts before `run`; `diagnostics` receives the proxy's own messages.

        `mutators`, `repeatable` and `read_cache` go to the Gate: tools that change state without
        needing a confirmation, tools whose identical calls are each a new action, and whether an
        identical read may be answered from an earlier one while no write has run since.
        """
        self._command = command
        self._policy = policy
        self._client_in = client_in
        self._client_out = client_out
        self._diagnostics = diagnostics
        self._recorder = recorder
        self._pins = pins
        self._child: subprocess.Popen[bytes] | None = None
        self._client_lock = threading.Lock()
        self._server_lock = threading.Lock()
        self._diag_lock = threading.Lock()
        self._table_lock = threading.Lock()
        self._calls: dict[str, Waiter] = {}      # forwarded tools/call ids -> the worker awaiting the reply
        self._confirms: dict[str, Waiter] = {}   # our elicitation ids -> the worker awaiting the answer
        self._confirming: dict[str, str] = {}     # ids of calls awaiting confirmation -> our elicitation id
        self._input_required: set[bytes] = set()  # calls the server answered with input_required
        self._round_trips: dict[str, Waiter] = {}  # our inputRequests keys (2026-07-28) -> the waiting worker
        self._requests: dict[str, str] = {}       # ids of the client's requests sent to the server -> method
        self._batches: dict[str, Batch] = {}     # request id -> the client batch it belongs to
        self._workers: set[threading.Thread] = set()  # the pool running tools/call requests
        self._jobs: queue.SimpleQueue[tuple[dict[str, Any], bytes] | None] = queue.SimpleQueue()
        self._idle = 0
        self._elicitation = False
        self._record_error: str | None = None
        self._version: str | None = None
        self._local = threading.local()
        self._finished = threading.Event()
        self._closing = False
        self.exit_reason = ""
        tools = {name: self._forwarder(name) for name in policy.allowed_tools}
        self._gate = Gate(tools, policy, confirm=self._confirm, mutators=mutators, repeatable=repeatable,
                          read_cache=read_cache)

    # -- running and stopping -------------------------------------------------------------------

    def run(self) -> int:
        """Start the server, pass messages until one side ends; return the server's exit status.

        A server that cannot be started is a UsageError."""
        try:
            self._child = subprocess.Popen(self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        except OSError as exc:
            raise UsageError(f"cannot start the server {self._command[0]}: {exc.strerror or exc}") from None
        server_reader = threading.Thread(target=self._read_server, name="mcp-server-reader", daemon=True)
        client_reader = threading.Thread(target=self._read_client, name="mcp-client-reader", daemon=True)
        server_reader.start()
        client_reader.start()
        self._finished.wait()
        self._shutdown()
        server_reader.join(timeout=5)
        if self._child.stdout is not None:
            self._child.stdout.close()
        return self._child.returncode if self._child.returncode is not None else 0

    def stop(self, reason: str = "stopped") -> None:
        """End the session from any thread (a signal handler, a test)."""
        if not self._finished.is_set():
            self.exit_reason = self.exit_reason or reason
            self._finished.set()

    def _shutdown(self) -> None:
        child = self._child
        assert child is not None
        self._closing = True
        with self._table_lock:  # a client that is gone answers no confirmation
            confirms = [*self._confirms.values(), *self._round_trips.values()]
        for waiter in confirms:
            waiter.done.set()
        with self._table_lock:
            workers = list(self._workers)
        for _ in workers:
            self._jobs.put(None)  # after the calls already queued
        for worker in workers:
            worker.join(timeout=5)
        try:
            if child.stdin is not None:
                child.stdin.close()
        except OSError:
            pass
        try:
            child.wait(timeout=3)
        except subprocess.TimeoutExpired:
            child.terminate()
            try:
                child.wait(timeout=3)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        with self._table_lock:  # the server is gone: nothing more will answer
            calls = list(self._calls.values())
        for waiter in calls:
            waiter.done.set()

    # -- the two sides ------------------------------------------------------------------------------

    def _read_client(self) -> None:
        try:
            for line in read_lines(self._client_in):
                if line.strip():
                    self._from_client(line)
        except (OSError, ValueError) as exc:
            self._say(f"client input failed: {exc}")
        self.stop("client closed its input")

    def _read_server(self) -> None:
        child = self._child
        assert child is not None and child.stdout is not None
        try:
            for line in iter(child.stdout.readline, b""):
                if line.strip():
                    self._from_server(line)
        except (OSError, ValueError) as exc:
            self._say(f"server output failed: {exc}")
        if not self._closing:
            self.stop("server exited")
        with self._table_lock:
            calls = list(self._calls.values())
        for waiter in calls:
            waiter.done.set()

    def _from_client(self, line: bytes) -> None:
        try:
            message = parse_message(line)
        except (ValueError, RecursionError) as exc:
            self._say(f"malformed JSON from the client: {exc}")
            self._to_client(error_message(None, PARSE_ERROR, "Parse error"))
            return
        if isinstance(message, list):
            self._client_batch(message)
        elif self._client_message(message, None, line):
            self._to_server(line)

    def _from_server(self, line: bytes) -> None:
        try:
            message = parse_message(line)
        except (ValueError, RecursionError) as exc:
            self._say(f"malformed JSON from the server: {exc}")
            self._to_server(dump_message(error_message(None, PARSE_ERROR, "Parse error")))
            return
        if isinstance(message, list):
            kept = [item for item in message if self._server_message(item, [False])]
            if kept:
                self._to_client(kept)
            return
        changed = [False]
        if self._server_message(message, changed):
            if changed[0]:
                self._to_client(message)
            else:
                self._to_client_bytes(line)

    # -- client to server ---------------------------------------------------------------------------

    def _client_message(self, message: Any, batch: Batch | None, line: bytes | None = None) -> bool:
        """Handle one message from the client; True when it is to be forwarded unchanged."""
        if not isinstance(message, dict):
            return True  # not ours to judge: the server answers it
        method = message.get("method")
        if method is None and "id" in message:  # a response: to our elicitation, else the server's request
            key = id_key(message["id"])
            with self._table_lock:
                waiter = self._confirms.pop(key, None)
            if waiter is None:
                return True
            waiter.reply = message
            waiter.done.set()
            return False
        if "id" not in message:
            if method == "tools/call":
                self._say("dropped a tools/call sent as a notification (no id): it would bypass the guard")
                return False
            if method == "notifications/cancelled":
                self._cancel_confirmation(message.get("params"))
            return True  # the server may be running the call: it gets the cancellation too
        key = id_key(message["id"])
        if batch is not None:
            with self._table_lock:
                self._batches[key] = batch
        if method == "tools/call":
            if not self._resume_confirmation(message):
                self._start_call(message, line if line is not None else dump_message(message))
            return False
        if method == "initialize":
            params = message.get("params")
            capabilities = params.get("capabilities") if isinstance(params, dict) else None
            elicitation = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
            # 2025-11-25: {} means form mode; a client declaring only "url" cannot show our form.
            self._elicitation = isinstance(elicitation, dict) and ("form" in elicitation or "url" not in elicitation)
        with self._table_lock:
            self._requests[key] = method if isinstance(method, str) else ""
        return True

    def _client_batch(self, messages: list[Any]) -> None:
        if self._version not in BATCH_VERSIONS or not messages:
            self._say("rejected a JSON-RPC batch: the negotiated protocol version does not allow batches")
            self._to_client(error_message(None, INVALID_REQUEST, "Invalid Request: batches are not supported "
                                   "by the negotiated protocol version"))
            return
        expected = {id_key(item["id"]) for item in messages
                    if isinstance(item, dict) and "method" in item and "id" in item}
        batch = Batch(expected)
        forward = [item for item in messages if self._client_message(item, batch if expected else None)]
        if forward:
            self._to_server(dump_message(forward))

    # -- server to client ---------------------------------------------------------------------------

    def _server_message(self, message: Any, changed: list[bool]) -> bool:
        """Handle one message from the server; True when it goes on to the client."""
        if not isinstance(message, dict) or "method" in message or "id" not in message:
            return True
        key = id_key(message["id"])
        with self._table_lock:
            waiter = self._calls.pop(key, None)
            method = self._requests.pop(key, None)
        if waiter is not None:
            waiter.reply = message
            waiter.done.set()
            return False
        if method is None and message["id"] is not None:
            # A reply to nothing the client asked the server (say, a forged result for a call that
            # waits for a person): the client never sees it.
            self._say("dropped a response from the server to no request sent to it")
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
                    self._say("pins: " + escape_text(check.describe()) + "; hidden until accepted "
                              f"(toolreplay mcp-pins accept {escape_text(self._pins.path)})")
        result["tools"] = [tool for tool in listed
                           if tool["name"] in self._policy.allowed_tools and tool["name"] not in hidden]

    def _in_batch(self, key: str, reply: Any) -> bool:
        """Keep a reply that belongs to a client batch; send the batch when it is complete."""
        with self._table_lock:
            batch = self._batches.pop(key, None)
            if batch is None:
                return False
            batch.replies.append(reply)
            batch.expected.discard(key)
            complete = not batch.expected
        if complete:
            self._to_client(batch.replies)
        return True

    # -- tools/call through the gate --------------------------------------------------------------

    def _start_call(self, message: dict[str, Any], line: bytes) -> None:
        """Hand the call to an idle worker, or to a new one: a call may wait on a person for long."""
        with self._table_lock:
            spawn = self._idle == 0
            if spawn:
                worker = threading.Thread(target=self._work, name="mcp-call", daemon=True)
                self._workers.add(worker)
            else:
                self._idle -= 1
        self._jobs.put((message, line))
        if spawn:
            worker.start()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            message, line = job
            self._local.line = line  # what an allowed call forwards: the request exactly as it came
            self._local.target = message  # what is answered: the request, or the retry that confirmed it
            reply = self._guarded(message)
            self._reply(self._local.target, reply)
            with self._table_lock:
                self._idle += 1

    def _guarded(self, message: dict[str, Any]) -> dict[str, Any]:
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        args = params.get("arguments", {}) if isinstance(params, dict) else None
        if not isinstance(name, str) or not name or not isinstance(args, dict):
            return error_message(message["id"], INVALID_PARAMS, "Invalid params: tools/call needs a tool name "
                                                          "and an arguments object")
        assert isinstance(params, dict)
        refusal = self._record_error or (self._pins.refusal(name) if self._pins is not None else None)
        self._local.message = message
        continuing = self._continuation(name, args, params)
        if refusal is not None:
            response: dict[str, Any] = {"ok": False, "error": refusal}
        elif continuing is not None:  # the gate passed this call in its first round: only the server runs it
            try:
                response = self._forwarder(name)(**args)
            except ConnectionError as exc:
                response = {"ok": False, "error": f"ConnectionError: {exc}"}
        else:
            try:
                response = self._gate.call(name, args)
            except ValueError as exc:
                return error_message(message["id"], INVALID_PARAMS, f"Invalid params: {exc}")
        answered = self._local.target["id"]
        if "reply" in response and isinstance(response["reply"], dict):
            reply = dict(response["reply"])
            reply["id"] = answered  # a repeated call answered from the gate carries the first id
        else:
            reply = {"jsonrpc": "2.0", "id": answered, "result": refusal_result(str(response.get("error")), message)}
        result = reply.get("result")
        asks = isinstance(result, dict) and result.get("resultType") == "input_required"
        if asks or continuing is not None or self._input_required:  # the key costs a canonical encoding
            self._note_input_required(continuing or call_key(name, args), asks)
        self._record(name, args, reply)
        return reply

    def _continuation(self, name: str, args: dict[str, Any], params: dict[str, Any]) -> bytes | None:
        """The call's key when it answers a server's `input_required` result (protocol 2026-07-28) for
        a call the gate already passed; such a retry must reach the server, not the gate's table."""
        if "inputResponses" not in params and "requestState" not in params:
            return None
        key = call_key(name, args)
        with self._table_lock:
            return key if key in self._input_required else None

    def _note_input_required(self, key: bytes | None, asks: bool) -> None:
        if key is None:
            return
        with self._table_lock:
            if asks:
                self._input_required.add(key)
            else:
                self._input_required.discard(key)

    def _forwarder(self, name: str) -> Callable[..., dict[str, Any]]:
        def forward(**args: Any) -> dict[str, Any]:
            message: dict[str, Any] = self._local.message
            waiter = Waiter()
            with self._table_lock:
                self._calls[id_key(message["id"])] = waiter
            self._to_server(self._local.line)
            waiter.done.wait()
            if waiter.reply is None:
                raise ConnectionError("the server ended before it answered")
            reply = {key: value for key, value in waiter.reply.items() if key != "id"}
            return {"reply": reply}
        forward.__name__ = name
        return forward

    def _confirm(self, tool: str, args: dict[str, Any]) -> bool:
        if self._closing:
            return False
        shown = json.dumps(args, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
        question = {"message": f"Allow the tool call {json.dumps(tool, ensure_ascii=True)} with arguments {shown}?",
                    "requestedSchema": {"type": "object", "properties": {"approve": {
                        "type": "boolean", "title": "Run this call", "default": False}}, "required": ["approve"]}}
        if self._elicitation:
            answer = self._ask_by_request(question)
        elif declares_form_elicitation(self._local.message):
            answer = self._ask_by_round_trip(question)
        else:
            return False
        return (isinstance(answer, dict) and answer.get("action") == "accept"
                and isinstance(answer.get("content"), dict) and answer["content"].get("approve") is True)

    def _ask_by_request(self, question: dict[str, Any]) -> Any:
        """Ask with an `elicitation/create` request of the proxy's own; return the client's result."""
        own_id = "toolreplay-confirm-" + secrets.token_hex(16)  # never seen by the server
        waiter = Waiter()
        call_key = id_key(self._local.message["id"])
        with self._table_lock:
            self._confirms[id_key(own_id)] = waiter
            self._confirming[call_key] = own_id
        self._to_client({"jsonrpc": "2.0", "id": own_id, "method": "elicitation/create", "params": question})
        waiter.done.wait()
        with self._table_lock:
            self._confirms.pop(id_key(own_id), None)
            self._confirming.pop(call_key, None)
        return waiter.reply.get("result") if waiter.reply is not None else None

    def _ask_by_round_trip(self, question: dict[str, Any]) -> Any:
        """Protocol 2026-07-28: answer the call with `input_required`; the client's retry carries the
        answer, and the call's outcome then goes to the retry."""
        key = "toolreplay-confirm-" + secrets.token_hex(16)
        waiter = Waiter()
        with self._table_lock:
            self._round_trips[key] = waiter
        self._to_client({"jsonrpc": "2.0", "id": self._local.message["id"], "result": {
            "resultType": "input_required",
            "inputRequests": {key: {"method": "elicitation/create", "params": {"mode": "form", **question}}}}})
        waiter.done.wait()
        with self._table_lock:
            self._round_trips.pop(key, None)
        retry = waiter.reply
        if retry is None:
            return None
        self._local.target = retry
        original, params = self._local.message["params"], retry.get("params")
        if not isinstance(params, dict) or (params.get("name"), params.get("arguments", {})) != (
                original.get("name"), original.get("arguments", {})):
            return None  # the retry is not the call that was asked about
        return params["inputResponses"][key]

    def _resume_confirmation(self, message: dict[str, Any]) -> bool:
        """Hand a retry answering one of our `input_required` questions to the call waiting for it."""
        params = message.get("params")
        responses = params.get("inputResponses") if isinstance(params, dict) else None
        if not isinstance(responses, dict):
            return False
        with self._table_lock:
            key = next((key for key in responses if key in self._round_trips), None)
            waiter = self._round_trips.pop(key) if key is not None else None
        if waiter is None:
            return False
        waiter.reply = message
        waiter.done.set()
        return True

    def _cancel_confirmation(self, params: Any) -> None:
        """The client cancelled a call that waits for a person: withdraw the question, refuse the call."""
        if not isinstance(params, dict) or "requestId" not in params:
            return
        with self._table_lock:
            own_id = self._confirming.pop(id_key(params["requestId"]), None)
            waiter = self._confirms.pop(id_key(own_id), None) if own_id is not None else None
        if waiter is None:
            return
        self._to_client({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": own_id, "reason": "the tool call was cancelled"}})
        waiter.done.set()

    def _reply(self, message: dict[str, Any], reply: dict[str, Any]) -> None:
        if not self._in_batch(id_key(message["id"]), reply):
            self._to_client(reply)

    def _record(self, tool: str, args: dict[str, Any], reply: dict[str, Any]) -> None:
        if self._recorder is None:
            return
        response = reply["result"] if isinstance(reply.get("result"), dict) else {"error": reply.get("error")}
        try:
            self._recorder.append(tool, args, response)
        except ValueError as exc:  # a value with no JSON form: this call only
            self._say(f"not recorded: {exc}")
        except OSError as exc:  # the record cannot grow: no further call runs unrecorded
            if self._record_error is None:
                self._record_error = f"the session record cannot be written: {exc.strerror or exc}"
                self._say(self._record_error + "; refusing every further tools/call")

    # -- writing ------------------------------------------------------------------------------------

    def _to_client(self, message: Any) -> None:
        self._to_client_bytes(dump_message(message))

    def _to_client_bytes(self, data: bytes) -> None:
        with self._client_lock:
            try:
                self._client_out.write(data)
                self._client_out.flush()
            except (OSError, ValueError):
                self.stop("client closed its output")

    def _to_server(self, data: bytes) -> None:
        child = self._child
        with self._server_lock:
            try:
                assert child is not None and child.stdin is not None
                child.stdin.write(data)
                child.stdin.flush()
            except (OSError, ValueError):
                self._say("the server no longer reads its input")

    def _say(self, text: str) -> None:
        with self._diag_lock:
            try:
                self._diagnostics.write("toolreplay mcp-proxy: " + text + "\n")
                self._diagnostics.flush()
            except (OSError, ValueError):
                pass
