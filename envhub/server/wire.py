"""Wire models: what crosses the network, in OpenEnv's shapes, with envhub's types inside.

OpenEnv's clients read a step result as ``{"observation": {...}, "reward": r, "done": d,
"metadata": {...}}``, with ``reward`` and ``done`` lifted out of the observation. The models here
keep exactly that envelope, so ``openenv``'s own ``EnvClient`` works unchanged, while the fields
inside are envhub's (messages, tools, verdict, outcome) and are typed, so ``/schema`` and
``/openapi.json`` say precisely what is accepted. Every request model forbids unknown fields: a
misspelt key is a 422 that names it, never a silently ignored option.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter

from envhub.env import Env
from envhub.types import (
    Action,
    EpisodeMetrics,
    Message,
    Observation,
    Outcome,
    ToolSpec,
    Turn,
    Verdict,
)

#: The HTTP / WebSocket header (and WebSocket handshake response header) carrying a session id.
SESSION_HEADER = "X-Envhub-Session"
#: OpenEnv's query parameter for attaching a WebSocket to an existing session.
SESSION_QUERY = "session_id"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WireAction(Action):
    """An envhub :class:`~envhub.types.Action` plus OpenEnv's base ``metadata`` field.

    OpenEnv's ``Action`` base class always carries ``metadata``; its typed clients send it, so it
    is accepted (and ignored) rather than rejected as an unknown field.
    """

    metadata: dict[str, Any] = Field(default_factory=dict, description="accepted for OpenEnv; ignored")

    def to_action(self) -> Action:
        return Action(text=self.text, tool_calls=self.tool_calls)


class ListToolsWire(_Strict):
    """OpenEnv's ``ListToolsAction``: the env's tools, as OpenEnv's ``MCPEnvironment`` answers it.
    It needs no episode and changes nothing."""

    type: Literal["list_tools"]
    metadata: dict[str, Any] = Field(default_factory=dict, description="accepted for OpenEnv; ignored")


class CallToolWire(_Strict):
    """OpenEnv's ``CallToolAction``: one env step with one structured tool call."""

    type: Literal["call_tool"]
    tool_name: str = Field(min_length=1, max_length=256)
    arguments: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict, description="accepted for OpenEnv; ignored")


def _action_kind(value: Any) -> str:
    """An action's tag: OpenEnv's ``type`` discriminator, or ``envhub`` for envhub's own action."""
    kind = value.get("type", "envhub") if isinstance(value, dict) else getattr(value, "type", "envhub")
    return kind if isinstance(kind, str) else "(not a string)"


#: Every action ``/step`` and ``/ws`` accept: envhub's ``{"text"}`` / ``{"tool_calls"}``, or OpenEnv's
#: MCP actions ``{"type": "call_tool", "tool_name", "arguments"}`` and ``{"type": "list_tools"}``.
StepAction = Annotated[
    Annotated[WireAction, Tag("envhub")] | Annotated[CallToolWire, Tag("call_tool")]
    | Annotated[ListToolsWire, Tag("list_tools")],
    Discriminator(_action_kind, custom_error_type="invalid_action_type",
                  custom_error_message="type must be 'call_tool' or 'list_tools' (OpenEnv's MCP actions), "
                                       "or absent (envhub's text / tool_calls action)"),
]
STEP_ACTION: TypeAdapter[WireAction | CallToolWire | ListToolsWire] = TypeAdapter(StepAction)


class ResetRequest(_Strict):
    """``reset`` parameters. ``episode_id`` is OpenEnv's; the rest are ``Env.reset``'s."""

    seed: int | None = Field(default=None, ge=0, le=2**63 - 1, description="picks a task of the split")
    task_id: str | None = Field(default=None, min_length=1, max_length=256)
    episode_id: str | None = Field(default=None, max_length=255, description="caller's episode label")
    options: dict[str, Any] | None = None


class StepRequest(_Strict):
    """OpenEnv's HTTP ``/step`` body, with a typed action."""

    action: StepAction
    timeout_s: float | None = Field(default=None, gt=0, description="accepted for OpenEnv; ignored")
    request_id: str | None = Field(default=None, max_length=255)


class AbortRequest(_Strict):
    """End the running episode from outside (engine failure, context overflow, ...)."""

    outcome: Outcome
    detail: str = Field(default="", max_length=65_536)


class ObservationBody(_Strict):
    """The ``observation`` object of a step result: an envhub Observation less reward and done."""

    messages: list[Message] = Field(default_factory=list)
    tools: list[ToolSpec] = Field(default_factory=list)
    truncated: bool = False
    outcome: Outcome | None = None
    verdict: Verdict | None = None
    info: dict[str, Any] = Field(default_factory=dict)


class StepResult(_Strict):
    """OpenEnv's ``ResetResponse`` / ``StepResponse`` envelope."""

    observation: ObservationBody
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] | None = None


class McpTool(_Strict):
    """One tool of OpenEnv's ``ListToolsObservation`` (MCP's tool shape)."""

    name: str
    description: str
    input_schema: dict[str, Any] = Field(description="JSON schema of the tool's arguments")


class ListToolsBody(_Strict):
    """The ``observation`` of a ``list_tools`` step: OpenEnv's ``ListToolsObservation``."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    tools: list[McpTool]


class ListToolsResult(_Strict):
    """``/step``'s answer to ``{"type": "list_tools"}``: the env's tools; no episode, no step."""

    observation: ListToolsBody
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] | None = None


class McpToolResult(_Strict):
    """The result of one tool call, in the shape of FastMCP's ``CallToolResult``."""

    content: list[dict[str, Any]]
    structured_content: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None
    data: str | None = Field(default=None, description="the tool's text (what OpenEnv's client returns)")
    is_error: bool = False


class McpToolError(_Strict):
    """OpenEnv's ``ToolError``: the call was not made (e.g. ``tool_not_found``)."""

    error_type: str
    message: str


class CallToolBody(_Strict):
    """The ``observation`` of a ``call_tool`` step: OpenEnv's ``CallToolObservation``, plus the
    step's messages, outcome and verdict for clients that read them (none when no step was taken)."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    tool_name: str
    result: McpToolResult | None = None
    error: McpToolError | None = None
    messages: list[Message] = Field(default_factory=list)
    truncated: bool = False
    outcome: Outcome | None = None
    verdict: Verdict | None = None


class CallToolResult(_Strict):
    """``/step``'s answer to ``{"type": "call_tool", ...}``: one env step with one tool call."""

    observation: CallToolBody
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] | None = None


#: Every answer of ``/step``: the envelope of envhub's action, or of one of OpenEnv's MCP actions.
StepReply = StepResult | ListToolsResult | CallToolResult


class EpisodeState(BaseModel):
    """OpenEnv's ``State`` (``episode_id``, ``step_count``) extended with the episode record.

    It carries everything a remote client needs to rebuild the local ``env.episode`` view --
    public task, messages, turns, verdict, metrics -- and never the task's hidden fields.
    """

    model_config = ConfigDict(extra="allow")

    episode_id: str | None = None
    step_count: int = 0
    env_id: str = ""
    task: dict[str, Any] | None = None
    tools: list[ToolSpec] = Field(default_factory=list)
    messages: list[Message] = Field(default_factory=list)
    turns: list[Turn] = Field(default_factory=list)
    done: bool = False
    outcome: Outcome | None = None
    reward: float | None = None
    verdict: Verdict | None = None
    metrics: EpisodeMetrics | None = None
    tool_calls: int = 0
    format_errors: int = 0


class SchemaResponse(_Strict):
    """OpenEnv's ``/schema``: JSON schemas of action, observation and state."""

    action: dict[str, Any]
    observation: dict[str, Any]
    state: dict[str, Any]
    reset_observation: dict[str, Any] | None = None


class HealthResponse(_Strict):
    status: str = "healthy"


class MetadataResponse(_Strict):
    """OpenEnv's ``EnvironmentMetadata``."""

    name: str
    description: str
    readme_content: str | None = None
    version: str | None = None
    author: str | None = None
    documentation_url: str | None = None


class SessionCreated(_Strict):
    session_id: str
    ttl_s: float


class ServerInfo(_Strict):
    """``/envhub/info``: what a remote client needs to stand in for a local env."""

    env_id: str
    env_version: str
    envhub_version: str
    split: str
    task_set: str
    tools: list[ToolSpec]
    terminal_tool: str | None
    max_sessions: int
    active_sessions: int
    session_ttl_s: float
    gold_exposed: bool
    #: Where env code runs now: ``inline`` (on the event loop) or ``thread``.
    executor: str


class TaskList(_Strict):
    split: str
    version: str
    task_ids: list[str]


class GoldActions(_Strict):
    actions: list[Action]


class ErrorBody(_Strict):
    """Every 4xx/5xx body: a stable ``code`` to branch on and a ``message`` for people."""

    code: str
    message: str
    errors: list[dict[str, Any]] | None = None


# ---- conversions -----------------------------------------------------------------------------

_BODY_EXCLUDE = {"done", "reward"}
_INFO: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


def step_result_json(obs: Observation) -> str:
    """The OpenEnv step envelope as JSON text, built without an intermediate dict.

    This is the hot path of every step: pydantic's serializer writes the observation, and the
    envelope around it is two string joins.
    """
    body = obs.model_dump_json(exclude=_BODY_EXCLUDE)
    meta = obs.info
    tail = f',"metadata":{_INFO.dump_json(meta).decode()}' if meta else ""
    return f'{{"observation":{body},"reward":{_num(obs.reward)},"done":{"true" if obs.done else "false"}{tail}}}'


def step_result_dict(obs: Observation) -> dict[str, Any]:
    out: dict[str, Any] = {
        "observation": obs.model_dump(mode="json", exclude=_BODY_EXCLUDE),
        "reward": obs.reward,
        "done": obs.done,
    }
    if obs.info:
        out["metadata"] = obs.info
    return out


def parse_step_result(payload: dict[str, Any]) -> Observation:
    """The inverse of :func:`step_result_json`, for clients."""
    body = dict(payload.get("observation") or {})
    body.pop("metadata", None)
    reward = payload.get("reward")
    return Observation.model_validate(
        {**body, "done": bool(payload.get("done", False)), "reward": float(reward or 0.0)}
    )


def episode_state(env: Env, episode_id: str | None) -> EpisodeState:
    episode = env.episode
    if episode is None:
        return EpisodeState(episode_id=None, env_id=env.env_id, tools=env.tool_specs)
    verdict = episode.verdict
    return EpisodeState(
        episode_id=episode_id,
        step_count=len(episode.turns),
        env_id=env.env_id,
        task=episode.task.public(),
        tools=episode.tools,
        messages=episode.messages,
        turns=episode.turns,
        done=episode.done,
        outcome=verdict.outcome if verdict else None,
        reward=verdict.reward if verdict else None,
        verdict=verdict,
        metrics=episode.metrics,
        tool_calls=episode.tool_calls,
        format_errors=episode.format_errors,
    )


def _num(x: float | None) -> str:
    if x is None:
        return "null"
    if x != x or x in (float("inf"), float("-inf")):  # JSON has no NaN; a verifier bug must not break framing
        return "null"
    return repr(float(x))
