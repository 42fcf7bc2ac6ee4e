"""How a finished Verifiers episode becomes one envhub verdict.

Verifiers attributes every failure to a boundary (``verifiers.v1.errors``). Which of them may be
infra is decided by one rule, so that an agent can never make its own failure an outcome the loss
leaves out: **before the agent's first turn nothing it did can have caused anything**, so a failure
then is ``env_error``; after it, a failure the agent's output can reach is the agent's
(``wrong_answer``), and only the framework's own plumbing stays infra:

| Verifiers | before the first turn | after it |
|---|---|---|
| ``ProviderError`` (the model endpoint: our relay) | ``engine_error`` | ``engine_error`` |
| ``ToolsetError``, ``InterceptionError``, ``TunnelError``, ``EnvError`` | ``env_error`` | ``env_error`` |
| ``TaskError`` (the taskset's setup, finalize or reward raised) | ``env_error`` | ``wrong_answer`` |
| ``HarnessError``, ``SandboxError``, anything else | ``env_error`` | ``wrong_answer`` |
| a stage deadline, a turn or token cap (``is_truncated``) | ``budget_exhausted`` | ``budget_exhausted`` |
| scored: the sum of the taskset's weighted rewards ``r`` | | ``success`` at ``r >= success_reward``, else ``wrong_answer`` |
| a reward that is no finite number, or scoring that never ran | | ``wrong_answer``, reward 0 |

A reward function that raises on what the agent answered, or a harness that dies on it, is thus
never a way out of the loss; the price is that a taskset's own bug after the first turn is
scored as the policy's, which ``envhub verify``'s fidelity check (the oracle at the top, nothing
done at the floor) exists to show.
"""

from __future__ import annotations

import math
from typing import Any

from envhub.types import LayerResult, Outcome, Verdict

#: the framework's own plumbing: out of the agent's reach whatever it answers
PLUMBING = frozenset({"ToolsetError", "InterceptionError", "TunnelError", "EnvError"})
_TRUNCATED_STOPS = frozenset({"max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens",
                              "compaction_failed"})


def verdict_of(trace: dict[str, Any], *, acted: bool, success_reward: float, floor: float = 0.0) -> Verdict:
    """The verdict of one finished episode, from the worker's summary of its trace (see the
    module docstring); ``acted``: whether the agent took a turn. A policy or truncation outcome the
    taskset did not score earns ``floor`` (the bottom of the taskset's declared reward range; 0 would
    pay an agent for failing where the taskset's own floor is below 0); infra outcomes earn 0."""
    errors = [*trace.get("errors", []), *trace.get("episode_errors", [])]
    if trace.get("is_timeout"):
        return Verdict(reward=floor, outcome=Outcome.BUDGET_EXHAUSTED, detail="a Verifiers stage deadline expired")
    if errors:
        kind, message = str(errors[-1].get("type")), str(errors[-1].get("message", ""))
        detail = f"Verifiers {kind}: {message}"
        if kind == "TimeoutError":
            return Verdict(reward=floor, outcome=Outcome.BUDGET_EXHAUSTED, detail=detail)
        if kind == "ProviderError":
            return Verdict(reward=0.0, outcome=Outcome.ENGINE_ERROR, detail=detail)
        if kind in PLUMBING or not acted:
            return Verdict(reward=0.0, outcome=Outcome.ENV_ERROR, detail=detail)
        return Verdict(reward=floor, outcome=Outcome.WRONG_ANSWER, detail=f"after the agent's turns: {detail}")
    if trace.get("stop_condition") in _TRUNCATED_STOPS:
        return Verdict(reward=floor, outcome=Outcome.BUDGET_EXHAUSTED,
                       detail=f"Verifiers stopped the episode: {trace.get('stop_condition')}")
    if trace.get("is_truncated"):  # Verifiers' rule: a last turn cut at the token limit is no answer
        return Verdict(reward=floor, outcome=Outcome.BUDGET_EXHAUSTED,
                       detail="the model's last turn was cut at its token limit (Verifiers counts it truncated)")
    reward = trace.get("reward")
    rewards = trace.get("rewards") or {}
    layer = LayerResult(layer="correctness", name="verifiers", score=0.0, passed=False,
                        details={"rewards": rewards, "stop_condition": trace.get("stop_condition")})
    if not isinstance(reward, int | float) or not math.isfinite(reward):
        why = "scoring did not run" if reward is None else f"the taskset's reward {reward!r} is no finite number"
        return Verdict(reward=floor if acted else 0.0, layers=[layer], detail=why,
                       outcome=Outcome.WRONG_ANSWER if acted else Outcome.ENV_ERROR)
    passed = reward >= success_reward
    layer = layer.model_copy(update={"score": min(max(float(reward), 0.0), 1.0), "passed": passed})
    return Verdict(reward=float(reward), outcome=Outcome.SUCCESS if passed else Outcome.WRONG_ANSWER,
                   layers=[layer], detail=f"the taskset's reward {reward}")


__all__ = ["PLUMBING", "verdict_of"]
