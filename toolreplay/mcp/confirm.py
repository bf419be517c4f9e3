"""Asking a person through the MCP client whether a call may run (the proxy's confirmation channel).

Two ways, as the client allows: an `elicitation/create` request of the proxy's own (when the client
declared the elicitation capability at `initialize`; its ids are random and never reach the server),
or, in protocol 2026-07-28, an `input_required` result that the client's retry of the call answers
(when the call's own `_meta` declares the capability). Without either, nobody can be asked.

When the proxy keeps approvals, the question also offers `remember` (`once`, `session`, `always`):
`decision` turns a yes that asks for one of the offered scopes into a `Remember` for the gate.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable
from typing import Any, Protocol

from toolreplay.guard.approvals import Remember
from toolreplay.mcp.wire import Waiter, declares_form_elicitation, id_key

__all__ = ["Asked", "ClientConfirmation", "approves", "decision", "question_text"]


class Asked(Protocol):
    """The call a question is about: the request as it came, its id key, and what is answered."""

    message: dict[str, Any]
    key: str
    target: dict[str, Any]


def approves(answer: Any) -> bool:
    """Only `accept` with `approve: true` approves; a decline, a cancel, an error or nothing refuses."""
    return (isinstance(answer, dict) and answer.get("action") == "accept"
            and isinstance(answer.get("content"), dict) and answer["content"].get("approve") is True)


def decision(answer: Any, offered: tuple[str, ...] = ()) -> bool | Remember:
    """What the gate gets for an answer: False unless it approves; a yes asking to remember it for a scope
    that was `offered` is a `Remember`, any other yes (a missing, unknown or `once` scope) is True."""
    if not approves(answer):
        return False
    scope = answer["content"].get("remember")
    return Remember(scope) if scope in offered and scope != "once" else True


# How the question offers to remember the answer (when the proxy keeps approvals: `offered` scopes).
_REMEMBER_HELP = {"once": "once: this call only", "session": "session: identical calls until this session ends",
                  "always": "always: identical calls from now on (kept in the approvals file)"}
def question_text(tool: str, args: dict[str, Any]) -> str:
    """The question the person is asked about a call (an HTTP client end finds the call it belongs to by it)."""
    shown = json.dumps(args, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return f"Allow the tool call {json.dumps(tool, ensure_ascii=True)} with arguments {shown}?"


class ClientConfirmation:
    """The open questions of one session; thread-safe. `send` writes one message to the client."""

    def __init__(self, send: Callable[[dict[str, Any]], None]) -> None:
        self._send = send
        self._lock = threading.Lock()
        self._requests: dict[str, Waiter] = {}   # our elicitation ids -> the worker awaiting the answer
        self._asking: dict[str, str] = {}        # id keys of calls awaiting a person -> our elicitation id
        self._round_trips: dict[str, Waiter] = {}  # our inputRequests keys (2026-07-28) -> the waiting worker
        self.elicitation = False  # the client declared form elicitation at initialize
        self.remember: tuple[str, ...] = ()  # the scopes a person may ask to remember a yes for (none: not offered)

    def ask(self, tool: str, args: dict[str, Any], call: Asked) -> Any:
        """Ask about this exact call and wait; the client's answer, or None when nobody can be asked."""
        question: dict[str, Any] = {
            "message": question_text(tool, args),
            "requestedSchema": {"type": "object", "properties": {"approve": {
                "type": "boolean", "title": "Run this call", "default": False}}, "required": ["approve"]}}
        if self.remember:
            question["requestedSchema"]["properties"]["remember"] = {
                "type": "string", "title": "Remember this answer", "enum": list(self.remember), "default": "once",
                "description": "; ".join(_REMEMBER_HELP[scope] for scope in self.remember)}
        if self.elicitation:
            return self._by_request(question, call)
        if call.message.get("method") == "tools/call" and declares_form_elicitation(call.message):
            return self._by_round_trip(question, call)  # only a tool's result can be input_required
        return None

    def answered(self, message: dict[str, Any]) -> bool:
        """Take a client's response if it answers one of our questions."""
        with self._lock:
            waiter = self._requests.pop(id_key(message["id"]), None)
        if waiter is None:
            return False
        waiter.reply = message
        waiter.done.set()
        return True

    def resumed(self, message: dict[str, Any]) -> bool:
        """Hand a retry answering one of our `input_required` questions to the call waiting for it."""
        params = message.get("params")
        responses = params.get("inputResponses") if isinstance(params, dict) else None
        if not isinstance(responses, dict):
            return False
        with self._lock:
            key = next((key for key in responses if key in self._round_trips), None)
            waiter = self._round_trips.pop(key) if key is not None else None
        if waiter is None:
            return False
        waiter.reply = message
        waiter.done.set()
        return True

    def withdraw(self, call_key: str) -> None:
        """The client cancelled the call `call_key`: withdraw our question about it, if one is open."""
        with self._lock:
            own_id = self._asking.pop(call_key, None)
            waiter = self._requests.pop(id_key(own_id), None) if own_id is not None else None
        if waiter is None:
            return
        self._send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": own_id, "reason": "the tool call was cancelled"}})
        waiter.done.set()

    def close(self) -> None:
        """The session ends: a client that is gone answers no question."""
        with self._lock:
            waiters = [*self._requests.values(), *self._round_trips.values()]
        for waiter in waiters:
            waiter.done.set()

    def _by_request(self, question: dict[str, Any], call: Asked) -> Any:
        own_id = "toolreplay-confirm-" + secrets.token_hex(16)  # never seen by the server
        waiter = Waiter()
        with self._lock:
            self._requests[id_key(own_id)] = waiter
            self._asking[call.key] = own_id
        self._send({"jsonrpc": "2.0", "id": own_id, "method": "elicitation/create", "params": question})
        waiter.done.wait()
        with self._lock:
            self._requests.pop(id_key(own_id), None)
            self._asking.pop(call.key, None)
        return waiter.reply.get("result") if waiter.reply is not None else None

    def _by_round_trip(self, question: dict[str, Any], call: Asked) -> Any:
        """Protocol 2026-07-28: answer the call with `input_required`; the client's retry carries the
        answer, and the call's outcome then goes to the retry (`call.target`)."""
        key = "toolreplay-confirm-" + secrets.token_hex(16)
        waiter = Waiter()
        with self._lock:
            self._round_trips[key] = waiter
        self._send({"jsonrpc": "2.0", "id": call.message["id"], "result": {
            "resultType": "input_required",
            "inputRequests": {key: {"method": "elicitation/create", "params": {"mode": "form", **question}}}}})
        waiter.done.wait()
        with self._lock:
            self._round_trips.pop(key, None)
        retry = waiter.reply
        if retry is None:
            return None
        call.target = retry
        original, params = call.message["params"], retry.get("params")
        if not isinstance(params, dict) or (params.get("name"), params.get("arguments", {})) != (
                original.get("name"), original.get("arguments", {})):
            return None  # the retry is not the call that was asked about
        return params["inputResponses"][key]
