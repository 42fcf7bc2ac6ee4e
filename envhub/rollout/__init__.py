"""Running episodes: one episode (:mod:`.episodes`), many on per-thread envs (:mod:`.collect`),
a resumable run into a directory (:mod:`.runner`), the Ray backend (:mod:`.ray_backend`), the
report.json summary (:mod:`.summary`), Prometheus series (:mod:`.metrics`), pass@k profiles
(:mod:`.profile`) and the rollout benchmarks.

``envhub.rollout.run_rollouts`` and the runner's types are loaded on first use: ``import envhub``
needs the episode and collector modules (the verifier suites play on them), not the runner.
"""

from typing import Any

from envhub.rollout.collect import EpisodeCollector, collect
from envhub.rollout.episodes import EpisodePlan, plan_episodes, run_episode

_RUNNER = ("RolloutOutputError", "RolloutResult", "run_rollouts")


def __getattr__(name: str) -> Any:
    if name in _RUNNER:
        from envhub.rollout import runner

        return getattr(runner, name)
    if name == "summarize":
        from envhub.rollout.summary import summarize

        return summarize
    raise AttributeError(f"module 'envhub.rollout' has no attribute {name!r}")


__all__ = ["EpisodeCollector", "EpisodePlan", "RolloutOutputError", "RolloutResult", "collect", "plan_episodes",
           "run_episode", "run_rollouts", "summarize"]
