"""Miles integration: a generate function and an agent function that play envhub episodes.

Miles (a fork of slime, same ``Sample``) loads two kinds of plug-ins:

* ``--custom-generate-function-path envhub.adapters.miles.generate``: ``await generate(input)``
  with ``input.sample``, ``input.sampling_params``, ``input.args`` (``GenerateFnInput``) returning
  ``GenerateFnOutput(samples=...)``. Here the sample's task is played token in, token out over
  Miles' SGLang router, exactly as :func:`envhub.adapters.slime.generate` does for slime.
* ``--custom-agent-function-path envhub.adapters.miles.run_agent`` with Miles' own agentic
  generate function (``miles.rollout.generate_hub.agentic_tool_call.generate`` and its session
  server): ``await run_agent(base_url=..., prompt=..., request_kwargs=..., metadata=...)``. The agent
  talks to the session's OpenAI-compatible ``base_url + /v1/chat/completions``; Miles' session
  server keeps the token record, envhub keeps the env and the verifier. The returned dict is
  merged into the sample's metadata; :func:`reward` (``--custom-rm-path``) reads the reward
  from it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from envhub.adapters.export.common import envhub_metadata
from envhub.adapters.slime import play, play_sample, reward, task_of

__all__ = ["generate", "reward", "run_agent"]


def _output_type() -> Any:
    try:
        from miles.rollout.base_types import GenerateFnOutput
    except ImportError as exc:  # pragma: no cover - only reachable inside Miles
        raise ImportError("envhub.adapters.miles.generate runs inside Miles (miles.rollout.base_types)") from exc
    return GenerateFnOutput


async def generate(input: Any) -> Any:
    """Miles' generate function (``GenerateFnInput`` -> ``GenerateFnOutput``)."""
    output_type = _output_type()
    sample = await play_sample(input.args, input.sample, dict(input.sampling_params))
    return output_type(samples=sample)


async def run_agent(base_url: str, prompt: Any, request_kwargs: dict[str, Any] | None = None,
                    metadata: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Miles' agent function: one envhub episode through the session's chat endpoint.

    ``prompt`` is not used: the env renders its own opening messages for the task, so the
    conversation is the one the verifier expects.
    """
    from envhub.adapters.openai_policy import OpenAIChatPolicy

    env_id, task_id, env_kwargs = task_of(metadata)
    policy = OpenAIChatPolicy(base_url, request_kwargs=dict(request_kwargs or {}))
    try:
        record = await asyncio.to_thread(play, env_id, task_id, policy, env_kwargs=env_kwargs,
                                         episode_id=f"miles-{task_id}")
    finally:
        policy.close()
    meta = envhub_metadata(record) | {"reward": record.reward, "verdict": record.verdict.model_dump(mode="json")
                                      if record.verdict else None}
    return {"envhub": meta, "agent_metrics": {"total_tool_time": record.metrics.sandbox_seconds}}
