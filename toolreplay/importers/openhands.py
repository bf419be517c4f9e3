"""OpenHands event streams: V0's actions and observations, and the agent SDK's typed events (`kind`).

V0 (the events of `sessions/ID/events/N.json`, a downloaded trajectory, an evaluation output's
`history`): an action (`action`, `args`, `source`) that the model asked for by function calling has
`tool_call_metadata` (`function_name`, `tool_call_id`, `model_response`): it is the call, named
`function_name`, with the arguments the model sent (the `tool_calls[]` entry of `model_response` with
that id), else the event's own `args`. The observation that answers it (`observation`, `content`,
`cause`: the action's `id`) has the same `tool_call_metadata`, or at least the `cause`; its `content`
is the response, an error when the observation is `error` or `user_rejected`, or says
`"success": false`. One model response (`model_response.id`) is one turn, and so is an agent
`message` action (a reply without a call). Other observations (a state change, a recalled memory)
answer no call and are skipped; an agent action without `tool_call_metadata` (no function calling)
is not imported, with a warning.

The agent SDK (OpenHands/software-agent-sdk): an `ActionEvent` (`tool_name`, `tool_call_id`,
`tool_call.arguments`, `action`, `llm_response_id`) is a call with the arguments the model sent
(`tool_call.arguments`), else its `action` object without `kind`; an `ObservationEvent`
(`tool_call_id`, `observation.content`, `observation.is_error`) is its reply, an `AgentErrorEvent`
(`error`) or a `UserRejectObservation` (`rejection_reason`) a failed one. One `llm_response_id` is
one turn, an agent `MessageEvent` without one a turn of its own.

A call's `ts` is its event's `timestamp` when that has a UTC offset; OpenHands writes the machine's
local time without one, which is left out without a word (as for tau2).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import (
    MISSING,
    CallId,
    Event,
    Note,
    ToolCall,
    ToolReply,
    call_id,
    call_times,
    iso_time,
    reply_response,
)

__all__ = ["read_events", "is_openhands_event"]

# The agent SDK's event kinds that tell an OpenHands stream.
_KINDS = frozenset({"ActionEvent", "ObservationEvent", "MessageEvent", "SystemPromptEvent", "AgentErrorEvent",
                    "UserRejectObservation", "ConversationStateUpdateEvent"})
_FAILED_OBSERVATIONS = frozenset({"error", "user_rejected"})


def is_openhands_event(message: dict[str, Any]) -> bool:
    """Whether a message is an OpenHands event: a V0 action or observation, or an SDK event (`kind`)."""
    kind = message.get("kind")
    if isinstance(kind, str) and kind in _KINDS:
        return True
    if "role" in message or message.get("source") not in ("agent", "user", "environment"):
        return False  # SWE-agent's history messages have an "action" too, and a "role"
    action = "action" in message and isinstance(message.get("args"), dict)
    return action or ("observation" in message and "cause" in message)


def _model_arguments(metadata: dict[str, Any], wanted: str | None) -> Any:
    """The arguments the model sent for call `wanted`, from the response V0 keeps beside the call."""
    response = metadata.get("model_response")
    choices = response.get("choices") if isinstance(response, dict) else None
    for choice in choices if isinstance(choices, list) else ():
        message = choice.get("message") if isinstance(choice, dict) else None
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for call in calls if isinstance(calls, list) else ():
            if not isinstance(call, dict) or wanted is None or call.get("id") != wanted:
                continue
            function = call.get("function")
            if isinstance(function, dict):
                return function.get("arguments", MISSING)
    return MISSING


class _Reader:
    """What reading one stream keeps: the turns met so far and each call action's pairing key."""

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self.turns: dict[Any, int] = {}
        self.keys: dict[Any, CallId] = {}  # an action event's `id` -> its call's pairing key
        self.noted = False

    def turn(self, response_id: Any, position: int) -> int:
        key = ("response", response_id) if isinstance(response_id, str) and response_id else ("event", position)
        return self.turns.setdefault(key, len(self.turns))

    def call(self, event: dict[str, Any], position: int, tool: str, key: CallId, arguments: Any,
             turn: int) -> ToolCall:
        event_id = event.get("id")
        if isinstance(event_id, (str, int)) and not isinstance(event_id, bool):
            self.keys[event_id] = key
        return ToolCall(key, tool, arguments, position, turn=turn,
                        **call_times(event.get("timestamp"), None, iso_time, quiet_local=True))

    def reply_key(self, event: dict[str, Any], own: Any, cause_key: str) -> tuple[bool, CallId]:
        """Whether an observation answers a call, and the pairing key of that call."""
        if call_id(own) is not None:
            return True, call_id(own)
        cause = event.get(cause_key)
        if isinstance(cause, (str, int)) and not isinstance(cause, bool) and cause in self.keys:
            return True, self.keys[cause]
        return False, None

    def v0_action(self, event: dict[str, Any], position: int) -> Iterator[Event]:
        metadata = event.get("tool_call_metadata")
        if metadata is None:
            if event.get("source") == "agent" and event.get("action") == "message":
                self.turn(None, position)  # the model's reply without a call
            elif event.get("source") == "agent" and event.get("action") != "system" and not self.noted:
                self.noted = True
                yield Note(f'an agent action without "tool_call_metadata" (not a function call) is not '
                           f'imported: {_shown(event.get("action"))} (and any later ones)', position)
            return
        if not isinstance(metadata, dict) or not isinstance(metadata.get("function_name"), str) \
                or not metadata["function_name"]:
            raise self.conversation.error(position, '"tool_call_metadata" must be an object with a "function_name" '
                                                    'string')
        key = call_id(metadata.get("tool_call_id"))
        arguments = _model_arguments(metadata, key)
        if arguments is MISSING:
            arguments = event.get("args", MISSING)
        response = metadata.get("model_response")
        turn = self.turn(response.get("id") if isinstance(response, dict) else None, position)
        yield self.call(event, position, metadata["function_name"], key, arguments, turn)

    def v0_observation(self, event: dict[str, Any], position: int) -> Iterator[Event]:
        metadata = event.get("tool_call_metadata")
        own = metadata.get("tool_call_id") if isinstance(metadata, dict) else None
        answers, key = self.reply_key(event, own, "cause")
        if answers:
            kind = event.get("observation")
            error = isinstance(kind, str) and kind in _FAILED_OBSERVATIONS or event.get("success") is False
            yield ToolReply(key, reply_response(event.get("content", MISSING), error), position)

    def sdk_event(self, event: dict[str, Any], position: int, kind: str) -> Iterator[Event]:
        if kind == "ActionEvent":
            tool = event.get("tool_name")
            if not isinstance(tool, str) or not tool:
                raise self.conversation.error(position, 'an ActionEvent has no "tool_name" string')
            request = event.get("tool_call")
            if isinstance(request, dict) and "arguments" in request:
                arguments = request["arguments"]
            elif isinstance(event.get("action"), dict):
                arguments = {name: value for name, value in event["action"].items() if name != "kind"}
            else:
                arguments = event.get("action", MISSING)
            turn = self.turn(event.get("llm_response_id"), position)
            yield self.call(event, position, tool, call_id(event.get("tool_call_id")), arguments, turn)
        elif kind == "MessageEvent" and event.get("source") == "agent":
            self.turn(event.get("llm_response_id"), position)
        elif kind in ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation"):
            answers, key = self.reply_key(event, event.get("tool_call_id"), "action_id")
            if not answers:
                return
            if kind == "AgentErrorEvent":
                response = reply_response(event.get("error", MISSING), True)
            elif kind == "UserRejectObservation":
                response = reply_response(event.get("rejection_reason", MISSING), True)
            else:
                observation = event.get("observation", MISSING)
                if isinstance(observation, dict):
                    response = reply_response(observation.get("content", MISSING), observation.get("is_error") is True)
                else:
                    response = reply_response(observation, False)
            yield ToolReply(key, response, position)


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:56] + '..."'


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The calls and replies of one event stream, in event order."""
    reader = _Reader(conversation)
    for position, event in enumerate(conversation.messages):
        if not isinstance(event, dict):
            raise conversation.error(position, "not an OpenHands event (an object)")
        kind = event.get("kind")
        if isinstance(kind, str):
            yield from reader.sdk_event(event, position, kind)
        elif "action" in event:
            yield from reader.v0_action(event, position)
        elif "observation" in event:
            yield from reader.v0_observation(event, position)
