"""The guard in front of agent frameworks' tools: one module per framework, each importing its framework
(an optional extra), none imported here, so the core stays standard library only.

- `toolreplay.adapters.pydantic_ai`: `PydanticAIGuard`, a pydantic-ai capability;
- `toolreplay.adapters.langgraph`: `LangGraphGuard`, a LangGraph `ToolNode` tool-call wrapper;
- `toolreplay.adapters.openai_agents`: `OpenAIAgentsGuard`, wrapped Agents SDK `FunctionTool`s.

What they share (`_core.GuardCore`): one Gate per session whose tools are whatever the framework runs
for the current call; `GuardCore.call` is the one place any adapter calls `Gate.call`.
"""
