"""SkyRL integration: any envhub env as a SkyRL-Gym ``BaseTextEnv``.

SkyRL's generator makes one env per trajectory with ``skyrl_gym.make(env_class, env_config=...,
extras=row)`` (``row`` = the dataset row's fields besides the prompt), calls ``init(prompt)`` for
the opening conversation, then ``step(action_text)`` with each model turn, expecting
``BaseTextEnvStepOutput(observations=[messages], reward, done, metadata)``. SkyRL owns the tokens
(its generator is token in, token out); envhub owns the env, the tools and the verifier.

The task comes from the row's ``extra_info`` (``env_id``, ``task_id``), as written by
``envhub export RUN --format skyrl`` (``dataset.parquet``). SkyRL's generator templates the
conversation with the model's chat template and no tool list, so the env speaks in the rendering
envhub's model policy uses (:mod:`envhub.adapters.chat_format`): the system message carries the
template's own tool instructions (:meth:`~envhub.adapters.chat_format.ChatFormat.system_with_tools`),
and tool results come back as the user turn of ``<tool_response>`` blocks the template writes for
them (:meth:`~envhub.adapters.chat_format.ChatFormat.observation_messages`). Templated, the
conversation is then the text a model trained through envhub's other integrations sees.
``env_config.observation_role`` (``user`` or ``tool``) hands tool results over bare in that role
instead, for a template that renders tool messages itself. The final step carries the verifier's
reward; infra failures are flagged in ``metadata`` and in :meth:`get_metrics` so a run can filter
them out.
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from envhub.adapters.chat_format import format_named
from envhub.types import Observation, OutcomeClass

ENV_CLASS = "envhub"


def register_skyrl_env(env_class: str = ENV_CLASS) -> None:
    """Register :class:`EnvhubTextEnv` with SkyRL-Gym as ``env_class`` (idempotent)."""
    from skyrl_gym.envs.registration import register, registry

    if env_class not in registry:
        register(id=env_class, entry_point="envhub.adapters.skyrl:EnvhubTextEnv")


def _cfg(env_config: Any) -> dict[str, Any]:
    if env_config is None:
        return {}
    if isinstance(env_config, dict):
        return dict(env_config)
    try:
        from omegaconf import OmegaConf

        return dict(OmegaConf.to_container(env_config, resolve=True))  # type: ignore[arg-type]
    except Exception:
        return dict(env_config)


class EnvhubTextEnv(BaseTextEnv):
    """See the module docstring. ``env_config`` keys: ``env_id`` (default when rows carry none),
    ``env_kwargs``, ``split``, ``chat_format`` (the model's family, default ``chatml``; the tools ride in
    the system message only for families whose template puts them there: ``chatml``, ``qwen3``),
    ``observation_role`` (unset: the chat format's rendering; ``user`` / ``tool``: bare results in
    that role), ``tools_in_system``."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        from envhub.registry import make

        cfg = _cfg(env_config)
        extras = dict(extras or {})
        info = dict(extras.get("extra_info") or {})
        env_id = info.get("env_id") or extras.get("env_id") or cfg.get("env_id")
        task_id = info.get("task_id") or extras.get("task_id")
        if not env_id or not task_id:
            raise ValueError("envhub SkyRL env: the row needs extra_info.env_id and extra_info.task_id "
                             "(write the dataset with `envhub export RUN --format skyrl`)")
        self.env_id, self.task_id = str(env_id), str(task_id)
        role = cfg.get("observation_role")
        if role not in (None, "user", "tool"):
            raise ValueError(f"observation_role must be unset, 'user' or 'tool', not {role!r}")
        self.observation_role: str | None = role
        self.format = format_named(str(cfg.get("chat_format", "chatml")))()
        self.tools_in_system = bool(cfg.get("tools_in_system", True))
        self.env = make(self.env_id, split=str(info.get("split") or cfg.get("split", "train")),
                        **dict(cfg.get("env_kwargs") or {}))
        self.max_turns = self.env.budget.max_turns
        self.last: Observation | None = None

    def init(self, prompt: list[dict[str, Any]] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The env's own opening messages for the task (the dataset's ``prompt`` is its copy)."""
        obs = self.env.reset(task_id=self.task_id)
        self.turns = 0
        messages = [{"role": m.role, "content": m.content} for m in obs.messages]
        if self.tools_in_system and obs.tools:
            if messages and messages[0]["role"] == "system":
                messages[0] = {"role": "system", "content": self.format.system_with_tools(messages[0]["content"],
                                                                                         obs.tools)}
            else:
                messages.insert(0, {"role": "system", "content": self.format.system_with_tools("", obs.tools).strip()})
        return messages, {"env_id": self.env_id, "task_id": self.task_id,
                          "tools": [t.to_openai() for t in obs.tools]}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        obs = self.env.step(action)
        self.last = obs
        if self.observation_role is None:
            observations = self.format.observation_messages(obs.messages)
        else:
            observations = [{"role": self.observation_role if m.role == "tool" else m.role, "content": m.content}
                            for m in obs.messages]
        metadata: dict[str, Any] = {"env_id": self.env_id, "task_id": self.task_id, "turn": self.turns}
        if obs.done:
            outcome = obs.outcome
            metadata.update({
                "outcome": outcome.value if outcome else None,
                "outcome_class": outcome.outcome_class.value if outcome else None,
                "infra_failure": bool(outcome and outcome.outcome_class is OutcomeClass.INFRA_FAILURE),
                "verdict": obs.verdict.model_dump(mode="json") if obs.verdict else None,
            })
        return BaseTextEnvStepOutput(observations=observations, reward=float(obs.reward) if obs.done else 0.0,
                                     done=bool(obs.done), metadata=metadata, postprocessed_action=None)

    def get_metrics(self) -> dict[str, Any]:
        obs = self.last
        done = bool(obs and obs.done)
        outcome = obs.outcome if obs and obs.done else None
        return {
            "reward": float(obs.reward) if done and obs else 0.0,
            "success": float(bool(outcome) and outcome.value == "success"),
            "infra_failure": float(bool(outcome) and outcome.outcome_class is OutcomeClass.INFRA_FAILURE),
            "turns": float(self.turns),
        }

    def close(self) -> None:
        self.env.close()
