"""Running episodes: one episode (:mod:`.episodes`), many on per-thread envs (:mod:`.collect`),
a resumable run into a directory (:mod:`.runner`), the Ray backend (:mod:`.ray_backend`), the
report.json summary (:mod:`.summary`), Prometheus series (:mod:`.metrics`), pass@k profiles
(:mod:`.profile`) and the rollout benchmarks."""

from envhub.rollout.collect import EpisodeCollector, collect
from envhub.rollout.episodes import EpisodePlan, plan_episodes, run_episode
from envhub.rollout.runner import RolloutOutputError, RolloutResult, run_rollouts
from envhub.rollout.summary import summarize

__all__ = ["EpisodeCollector", "EpisodePlan", "RolloutOutputError", "RolloutResult", "collect", "plan_episodes",
           "run_episode", "run_rollouts", "summarize"]
