"""``envhub bench concurrency``: how close the episode collectors come to ideal concurrency.

:class:`SleepyEnv` (``envhub-bench/Sleepy-v0``, registered when this module is imported, never
listed otherwise) is an env whose tool ``wait`` takes ``tool_s`` seconds of sleep and no CPU, and
needs no sandbox: the gold policy makes ``tool_calls`` such calls and then answers. With ``C``
episodes in flight, ``N`` episodes can take no less than ``ceil(N / C)`` waves of ``tool_calls *
tool_s`` seconds; the bench prints episodes per second and the ratio to that ideal, in process
(:class:`~envhub.rollout.collect.EpisodeCollector`) and through Ray (:class:`~envhub.rollout.ray_backend.RayCollector`,
when ray is installed), measured in the same run.

The same env serves the Ray backend's fault tests: ``die_on_worker=K`` makes a tool call SIGKILL
its own process when that process is Ray rollout worker ``K`` (:data:`~envhub.rollout.ray_backend.WORKER_INDEX_ENV`).
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

from envhub.budget import Budget
from envhub.env import Env
from envhub.episode import Episode
from envhub.parsing import format_tool_call
from envhub.registry import register
from envhub.rollout.episodes import plan_episodes
from envhub.tools import tool
from envhub.types import Action, Outcome, Task, Verdict

ENV_ID = "envhub-bench/Sleepy-v0"
#: Set in each Ray rollout worker's process (mirrors :data:`envhub.rollout.ray_backend.WORKER_INDEX_ENV`,
#: kept here so that this module does not import the Ray backend).
WORKER_INDEX_ENV = "ENVHUB_RAY_WORKER_INDEX"
TASKS_PER_SPLIT = 32


class _Tasks:
    name = "sleepy"
    version = "1"

    def task_ids(self, split: str) -> Sequence[str]:
        return [f"sleepy-{split}-{i}" for i in range(TASKS_PER_SPLIT)]

    def get(self, task_id: str) -> Task:
        _, split, number = task_id.split("-")
        return Task(task_id=task_id, family="sleepy", split=split,  # type: ignore[arg-type]
                    prompt=f"Wait, then answer {number}.", hidden={"answer": number})


class _ExactAnswer:
    def verify(self, task: Task, submission: dict[str, Any], episode: Episode) -> Verdict:
        ok = submission.get("answer") == task.hidden["answer"]
        return Verdict(reward=float(ok), outcome=Outcome.SUCCESS if ok else Outcome.WRONG_ANSWER,
                       detail="" if ok else "wrong answer")


class SleepyEnv(Env):
    """Each ``wait`` call sleeps ``tool_s`` seconds; the gold play is ``tool_calls`` waits, then the answer."""

    env_id = ENV_ID
    family = "sleepy"

    def __init__(self, *, tool_s: float = 0.1, tool_calls: int = 4, die_on_worker: int | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("budget", Budget(max_turns=tool_calls + 2, max_tool_calls=tool_calls + 1))
        super().__init__(**kwargs)
        self.tool_s, self.tool_calls, self.die_on_worker = float(tool_s), int(tool_calls), die_on_worker

    def load_tasks(self) -> _Tasks:
        return _Tasks()

    def make_verifier(self) -> _ExactAnswer:
        return _ExactAnswer()

    @tool
    def wait(self) -> str:
        """Wait a moment."""
        if self.die_on_worker is not None and os.environ.get(WORKER_INDEX_ENV) == str(self.die_on_worker):
            os.kill(os.getpid(), signal.SIGKILL)  # fault injection: this worker process dies mid-episode
        time.sleep(self.tool_s)
        return "waited"

    @tool(terminal=True)
    def answer(self, answer: str) -> str:
        """Submit the answer."""
        return answer

    def gold_actions(self, task: Task) -> list[Action]:
        waits = [Action(text=format_tool_call("wait", {})) for _ in range(self.tool_calls)]
        return [*waits, Action(text=format_tool_call("answer", {"answer": task.hidden["answer"]}))]


register(ENV_ID, SleepyEnv, description="bench/test env: tool calls that sleep, no sandbox")


def ideal_episodes_per_second(episodes: int, concurrency: int, tool_calls: int, tool_s: float) -> float:
    """Episodes per second if every episode took exactly ``tool_calls * tool_s`` and ``concurrency``
    ran at once: ``episodes / (ceil(episodes / concurrency) * tool_calls * tool_s)``."""
    return episodes / (math.ceil(episodes / concurrency) * tool_calls * tool_s)


def _timed(run: Callable[[], list[Any]]) -> tuple[float, list[Any]]:
    t0 = time.perf_counter()
    records = run()
    return time.perf_counter() - t0, records


def run_bench(out: Callable[[str], object] = print, *, episodes: int = 256, concurrency: int = 64,
              tool_calls: int = 4, tool_s: float = 0.1, ray_cpus: int = 2) -> dict[str, Any]:
    """Measure and print the figures; returns them by name. The Ray side starts a local cluster of
    ``ray_cpus`` CPUs (or joins ``RAY_ADDRESS``) and is skipped, and said so, without ray."""
    from envhub.policies import GoldPolicy
    from envhub.rollout.collect import EpisodeCollector

    kwargs = {"tool_s": tool_s, "tool_calls": tool_calls}
    probe = SleepyEnv(**kwargs)
    plans = plan_episodes(ENV_ID, probe.tasks.task_ids("train"), episodes=episodes)
    ideal = ideal_episodes_per_second(episodes, concurrency, tool_calls, tool_s)
    out(f"{episodes} episodes of {tool_calls} tool calls x {tool_s * 1000:.0f} ms, {concurrency} in flight: "
        f"ideal {ideal:.1f} episodes/s")
    result: dict[str, Any] = {"episodes": episodes, "concurrency": concurrency, "ideal_eps": ideal}

    def local() -> list[Any]:
        with EpisodeCollector(lambda: SleepyEnv(**kwargs), GoldPolicy(), concurrency=concurrency) as collector:
            return list(collector.run(plans))

    seconds, records = _timed(local)
    result.update(_figures("in_process", seconds, records, ideal, out, "in process (threads, envs made on first use)"))
    result.update(_ray_side(plans, kwargs, concurrency, ideal, ray_cpus, out))
    return result


def _figures(name: str, seconds: float, records: list[Any], ideal: float, out: Callable[[str], object],
             label: str) -> dict[str, Any]:
    ok = sum(r.outcome is Outcome.SUCCESS for r in records)
    eps = len(records) / seconds
    out(f"{label:<52} {eps:7.1f} episodes/s  {eps / ideal:5.2f} of ideal  ({seconds:.2f} s, {ok}/{len(records)} success)")
    return {f"{name}_s": seconds, f"{name}_eps": eps, f"{name}_ratio": eps / ideal, f"{name}_success": ok}


def _ray_side(plans: list[Any], kwargs: dict[str, Any], concurrency: int, ideal: float, ray_cpus: int,
              out: Callable[[str], object]) -> dict[str, Any]:
    try:
        import ray
    except ImportError:
        out("through Ray: skipped (ray is not installed: pip install 'envhub[ray]')")
        return {}
    from envhub.rollout.ray_backend import PolicySpec, RayCollector, RayEnvSpec

    started = not ray.is_initialized()
    if started:
        ray.init(address=os.environ.get("RAY_ADDRESS"), num_cpus=None if os.environ.get("RAY_ADDRESS") else ray_cpus,
                 include_dashboard=False, object_store_memory=None if os.environ.get("RAY_ADDRESS") else 100 * 1024**2,
                 log_to_driver=False)
    try:
        t0 = time.perf_counter()
        spec = RayEnvSpec(ENV_ID, kwargs=kwargs, imports=(__name__,))
        with RayCollector(spec, PolicySpec("gold"), concurrency=concurrency) as collector:
            setup = time.perf_counter() - t0
            seconds, records = _timed(lambda: list(collector.run(plans)))
            workers = collector.stats()["workers"]
        label = f"through Ray ({workers} actors x {math.ceil(concurrency / workers)} threads)"
        figures = _figures("ray", seconds, records, ideal, out, label)
        out(f"{'':<52} (actors up in {setup:.1f} s, not counted)")
        return {**figures, "ray_setup_s": setup}
    finally:
        if started:
            ray.shutdown()


__all__ = ["ENV_ID", "SleepyEnv", "ideal_episodes_per_second", "run_bench"]
