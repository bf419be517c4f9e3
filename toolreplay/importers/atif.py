"""ATIF trajectories (Agent Trajectory Interchange Format, Harbor / Terminal-Bench): `steps[]`.

A trajectory is `{"schema_version": "ATIF-v1.x", "session_id", "agent", "steps": [STEP, ...]}`; a
step has `step_id`, `timestamp`, `source` (`system`, `user` or `agent`), `message`, and may have
`tool_calls[]` (`tool_call_id`, `function_name`, `arguments`: an object) and `observation.results[]`
(`source_call_id`: the call answered, `content`: a string or content parts). A call's `ts` is its
step's `timestamp`; every agent step is a model turn. A result without `source_call_id` answers no
tool call (the spec's "action that doesn't use the standard tool calling format") and is not
imported, with a warning; one with only `subagent_trajectory_ref` (the call delegated to a sub-agent)
keeps that reference as its response. ATIF has no error flag on a result.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import (
    MISSING,
    Event,
    Note,
    ToolCall,
    ToolReply,
    call_id,
    call_times,
    iso_time,
    reply_response,
)

__all__ = ["read_events"]


def _result_reply(result: dict[str, Any], source: str, position: int) -> ToolReply:
    content = result.get("content", MISSING)
    if (content is MISSING or content is None) and "subagent_trajectory_ref" in result:
        return ToolReply(source, {"subagent_trajectory_ref": result["subagent_trajectory_ref"]}, position)
    return ToolReply(source, reply_response(content, False), position)


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The calls and replies of one trajectory, in step order; each agent step is a turn."""
    turn = -1
    noted = False
    for position, step in enumerate(conversation.messages):
        if not isinstance(step, dict):
            raise conversation.error(position, "an ATIF step must be an object")
        agent = step.get("source") == "agent"
        turn += agent
        calls: Any = step.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise conversation.error(position, '"tool_calls" must be an array')
        for call in calls or ():
            if not isinstance(call, dict) or not isinstance(call.get("function_name"), str) \
                    or not call["function_name"]:
                raise conversation.error(position, 'a tool call must be an object with a "function_name" string')
            yield ToolCall(call_id(call.get("tool_call_id")), call["function_name"], call.get("arguments", MISSING),
                           position, turn=turn if agent else None,
                           **call_times(step.get("timestamp"), None, iso_time))
        observation: Any = step.get("observation")
        if observation is None:
            continue
        if not isinstance(observation, dict) or not isinstance(observation.get("results"), list):
            raise conversation.error(position, '"observation" must be an object with a "results" array')
        for result in observation["results"]:
            if not isinstance(result, dict):
                raise conversation.error(position, "an observation result must be an object")
            source = call_id(result.get("source_call_id"))
            if source is not None:
                yield _result_reply(result, source, position)
            elif not noted:
                noted = True
                yield Note('an observation result without "source_call_id" answers no tool call; not imported '
                           "(nor any later one)", position)
