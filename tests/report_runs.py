"""A short real rollout with every outcome class for report and metrics tests.

``MixedPolicy`` plays, by episode seed: the gold solution (success), the random policy (policy
failures), a hostile answer that tries to inject HTML and script into any page that shows it
(policy failure; its turns carry sampled-token ids like a model's), or an engine that fails
(``engine_error``, an infra outcome).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envhub.errors import EngineError
from envhub.parsing import format_tool_call
from envhub.policies import GoldPolicy, PolicyOutput, RandomPolicy
from envhub.rollout.runner import RolloutResult, run_rollouts
from envhub.types import Observation, Sample, TokenView

ENV = "envhub/Computation-v0"
#: Model-written text that would run, fetch or break out of a tag if a report did not escape it.
HOSTILE = ("</pre></td></table><script>console.error('injected script ran')</script>"
           "<img src=\"https://attacker.invalid/x.png\" onerror=\"console.error('injected img')\">"
           "<style>body{display:none}</style>\"'><iframe src=\"javascript:alert(1)\"></iframe>")


class _HostileAgent:
    def __init__(self) -> None:
        self.turn = 0

    def act(self, observation: Observation) -> PolicyOutput:
        self.turn += 1
        if self.turn == 1:
            text = format_tool_call("python", {"code": f"print({HOSTILE!r})"})
        else:
            text = format_tool_call("answer", {"answer": HOSTILE})
        ids = list(text.encode("utf-8"))[:64]  # a byte-level "tokenizer": the record marks sampled tokens
        sample = Sample(token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason="stop", weight_version="w1")
        return PolicyOutput(text=text, sample=sample)

    def token_view(self) -> TokenView | None:
        return None


class _BrokenEngineAgent(_HostileAgent):
    def act(self, observation: Observation) -> PolicyOutput:
        raise EngineError("inference server unreachable (test)")


class MixedPolicy:
    name = "mixed"

    def start(self, env: Any, observation: Observation, *, seed: int) -> Any:
        kind = seed % 4
        if kind == 0:
            return GoldPolicy().start(env, observation, seed=seed)
        if kind == 1:
            return RandomPolicy().start(env, observation, seed=seed)
        if kind == 2:
            return _HostileAgent()
        return _BrokenEngineAgent()

    def describe(self) -> dict[str, Any]:
        return {"model": "scripted:mixed", "sampling_params": {}}


def mixed_rollout(out: Path, *, episodes: int = 16, sandbox: str = "bwrap", **kwargs: Any) -> RolloutResult:
    return run_rollouts(ENV, MixedPolicy(), out_dir=out, episodes=episodes, concurrency=2,
                        env_kwargs={"sandbox": sandbox}, **kwargs)
