"""The episode model: every value that crosses a boundary (env, policy, verifier, trainer, disk).

All models are pydantic v2 and round-trip through JSON unchanged. Names and outcome values are
fixed (the record: docs/trajectory-schema.md; the outcomes and their classes: README.md,
"Outcomes"); external trainers and old runs read them, so they change only with ``SCHEMA_VERSION``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class OutcomeClass(StrEnum):
    SUCCESS = "success"
    POLICY_FAILURE = "policy_failure"
    TRUNCATION = "truncation"
    INFRA_FAILURE = "infra_failure"


class Outcome(StrEnum):
    """Exactly one per finished episode.

    The class decides what a trainer may learn from it: a policy failure is the model's fault
    and carries signal; an infra failure is ours and must never be scored as the model's.
    """

    SUCCESS = "success"
    WRONG_ANSWER = "wrong_answer"
    FORMAT_ERROR = "format_error"
    BUDGET_EXHAUSTED = "budget_exhausted"
    CONTEXT_OVERFLOW = "context_overflow"
    ENV_ERROR = "env_error"
    VERIFIER_ERROR = "verifier_error"
    ENGINE_ERROR = "engine_error"

    @property
    def outcome_class(self) -> OutcomeClass:
        return _OUTCOME_CLASS[self]

    @property
    def is_infra(self) -> bool:
        return self.outcome_class is OutcomeClass.INFRA_FAILURE

    @property
    def is_truncation(self) -> bool:
        return self.outcome_class is OutcomeClass.TRUNCATION


_OUTCOME_CLASS = {
    Outcome.SUCCESS: OutcomeClass.SUCCESS,
    Outcome.WRONG_ANSWER: OutcomeClass.POLICY_FAILURE,
    Outcome.FORMAT_ERROR: OutcomeClass.POLICY_FAILURE,
    Outcome.BUDGET_EXHAUSTED: OutcomeClass.TRUNCATION,
    Outcome.CONTEXT_OVERFLOW: OutcomeClass.TRUNCATION,
    Outcome.ENV_ERROR: OutcomeClass.INFRA_FAILURE,
    Outcome.VERIFIER_ERROR: OutcomeClass.INFRA_FAILURE,
    Outcome.ENGINE_ERROR: OutcomeClass.INFRA_FAILURE,
}


class ToolSpec(_Model):
    """A tool as the model sees it: name, description, JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI / Hermes function-tool form that chat templates expect."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class ToolCall(_Model):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


Role = Literal["system", "user", "assistant", "tool"]


class Message(_Model):
    role: Role
    content: str
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolCall] | None = None


class Action(_Model):
    """What the policy did in one turn: its raw text, or tool calls it made structurally.

    Raw text is the normal case for a language model: the env parses the tool calls out of it
    so that the recorded text is exactly what was sampled. Structured ``tool_calls`` serve
    clients that already parsed (OpenAI-style function calling, scripted policies).
    """

    text: str = ""
    tool_calls: list[ToolCall] | None = None


class Sample(_Model):
    """How a policy produced one action: the model's exact sampled ids and their logprobs (empty
    for scripted policies), why sampling stopped, which weights sampled it, and how long the policy
    took. It is recorded on the action's :class:`Turn` and never read by the env's logic."""

    token_ids: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    finish_reason: str | None = None
    weight_version: str | None = None
    agent_seconds: float | None = None

    def record_on(self, turn: Turn) -> None:
        """Write this sample into ``turn`` (its ids, logprobs, finish reason, weight version and
        ``timings["agent_s"]``)."""
        turn.token_ids = list(self.token_ids)
        turn.logprobs = list(self.logprobs)
        turn.finish_reason = self.finish_reason
        turn.weight_version = self.weight_version
        if self.agent_seconds is not None:
            turn.timings["agent_s"] = self.agent_seconds


class LayerResult(_Model):
    """One verifier layer's finding. ``score`` is in [0, 1]."""

    layer: Literal["gate", "correctness", "quality"]
    name: str
    score: float
    passed: bool
    reason: str = ""
    details: dict[str, Any] = Field(default_factory=dict)


class Verdict(_Model):
    reward: float
    outcome: Outcome
    layers: list[LayerResult] = Field(default_factory=list)
    detail: str = ""


class Observation(_Model):
    """What the env returns from ``reset`` and ``step``.

    ``messages`` are only the *new* messages of this step (system and user on reset, tool
    results after a step), so a client that appends them never duplicates history.
    ``tools`` is filled on reset. When ``done`` is true, ``reward``, ``outcome`` and ``verdict``
    are final; ``truncated`` tells a Gymnasium user that the episode was cut, not decided.
    """

    messages: list[Message] = Field(default_factory=list)
    tools: list[ToolSpec] = Field(default_factory=list)
    done: bool = False
    truncated: bool = False
    reward: float = 0.0
    outcome: Outcome | None = None
    verdict: Verdict | None = None
    info: dict[str, Any] = Field(default_factory=dict)

    def text(self) -> str:
        """A plain-text rendering for text-only interfaces (Gymnasium's Text space)."""
        blocks = []
        if self.tools:
            blocks.append("[tools]\n" + "\n".join(f"- {t.name}: {t.description}" for t in self.tools))
        for m in self.messages:
            head = f"[{m.role}{':' + m.name if m.name else ''}]"
            blocks.append(f"{head}\n{m.content}")
        if self.done:
            blocks.append(f"[done] outcome={self.outcome} reward={self.reward}")
        return "\n\n".join(blocks)


class Task(_Model):
    """One problem instance. ``hidden`` holds what the agent must never see (answers, tests)."""

    task_id: str
    family: str
    split: Literal["train", "validation", "test"]
    difficulty: int = 1
    prompt: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    hidden: dict[str, Any] = Field(default_factory=dict, repr=False)

    def public(self) -> dict[str, Any]:
        return self.model_dump(exclude={"hidden"})


class Turn(_Model):
    """One policy turn and the env's answer to it.

    ``token_ids`` / ``logprobs`` / ``finish_reason`` / ``weight_version`` come with the action
    (a :class:`Sample`: the model's exact samples, empty for scripted policies);
    ``observation_ids`` are the tokens the policy appended for the env's reply (mask 0), known
    when it produces the next turn and recorded then (``Env.record_observation_ids``).
    """

    index: int
    action_text: str
    token_ids: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    finish_reason: str | None = None
    weight_version: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    parse_error: str | None = None
    observation: list[Message] = Field(default_factory=list)
    observation_ids: list[int] = Field(default_factory=list)
    timings: dict[str, float] = Field(default_factory=dict)


class Versions(_Model):
    envhub: str
    env: str
    task_set: str = ""
    sandbox_image: str | None = None
    model: str | None = None
    tokenizer: str | None = None
    chat_template_hash: str | None = None
    weight_versions: list[str | None] = Field(default_factory=list)


class EpisodeMetrics(_Model):
    tool_calls: int = 0
    format_errors: int = 0
    prompt_tokens: int = 0
    response_tokens: int = 0
    sampled_tokens: int = 0
    agent_seconds: float = 0.0
    sandbox_seconds: float = 0.0
    verifier_seconds: float = 0.0
    wall_seconds: float = 0.0
    #: when the episode's record was made (Unix seconds); None in records made before it was kept
    finished_at: float | None = None
    extra: dict[str, float] = Field(default_factory=dict)


class TokenView(_Model):
    """The trainer's view of an episode: one prompt and one masked response sequence."""

    prompt_ids: list[int] = Field(default_factory=list)
    response_ids: list[int] = Field(default_factory=list)
    response_mask: list[int] = Field(default_factory=list)
    response_logprobs: list[float] = Field(default_factory=list)


class TrajectoryRecord(_Model):
    """One JSON object per episode: a line of a run's ``trajectories.jsonl`` (docs/trajectory-schema.md)."""

    schema_version: int = SCHEMA_VERSION
    episode_id: str
    task_id: str
    env_id: str
    group_id: str
    sample_index: int
    split: str = "train"
    policy: str = ""
    versions: Versions
    sampling_params: dict[str, Any] = Field(default_factory=dict)
    messages: list[Message] = Field(default_factory=list)
    tools: list[ToolSpec] = Field(default_factory=list)
    turns: list[Turn] = Field(default_factory=list)
    prompt_ids: list[int] = Field(default_factory=list)
    response_ids: list[int] = Field(default_factory=list)
    response_mask: list[int] = Field(default_factory=list)
    response_logprobs: list[float] = Field(default_factory=list)
    num_turns: int = 0
    reward: float = 0.0
    verdict: Verdict | None = None
    outcome: Outcome
    outcome_class: OutcomeClass | None = None
    outcome_detail: str = ""
    metrics: EpisodeMetrics = Field(default_factory=EpisodeMetrics)

    def model_post_init(self, __context: Any) -> None:
        if self.outcome_class is None:
            self.outcome_class = self.outcome.outcome_class
