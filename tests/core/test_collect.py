"""The episode collector: per-thread envs closed however a run ends, stop / abandon, infra faults as records."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import envhub
from envhub.parsing import format_tool_call
from envhub.policies import PolicyOutput
from envhub.rollout.collect import EnvWorkers, EpisodeCollector, collect
from envhub.rollout.episodes import plan_episodes
from envhub.types import Observation, Outcome, Sample, TokenView

ENV = "envhub/Computation-v0"
ComputationEnv = type(envhub.make(ENV))


class Tracked(ComputationEnv):  # type: ignore[misc, valid-type]
    """The real env, counting how often it was made and closed."""

    made: list[Tracked] = []
    lock = threading.Lock()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.closes = 0
        with Tracked.lock:
            Tracked.made.append(self)

    def close(self) -> None:
        self.closes += 1
        super().close()


@pytest.fixture
def made() -> list[Tracked]:
    Tracked.made = []
    return Tracked.made


def plans(n: int) -> list[Any]:
    return plan_episodes(ENV, envhub.make(ENV).tasks.task_ids("train"), episodes=n)


class Answering:
    """Answers the hidden answer at once (no sandbox), after ``delay`` seconds, as a model would:
    with token ids, logprobs and a weight version. With ``release``, each turn first waits until it
    is set (at most a minute: a hang guard); ``acted`` counts the turns that came back."""

    name = "answering"

    def __init__(self, delay: float = 0.0, crash_on: str | None = None,
                 release: threading.Event | None = None) -> None:
        self.delay, self.crash_on, self.release = delay, crash_on, release
        self.started: list[str] = []
        self.start_times: list[float] = []
        self.acted = 0
        self.lock = threading.Lock()

    def describe(self) -> dict[str, Any]:
        return {"model": "scripted:answering", "sampling_params": {"temperature": 1.0}}

    def start(self, env: Any, observation: Observation, *, seed: int) -> Any:
        task = env.episode.task
        with self.lock:
            self.started.append(task.task_id)
            self.start_times.append(time.monotonic())
        if task.task_id == self.crash_on:
            raise RuntimeError("boom at start")
        text = format_tool_call("answer", {"answer": task.hidden["answer"]})
        policy = self

        class Agent:
            def act(self, obs: Observation) -> PolicyOutput:
                time.sleep(policy.delay)
                if policy.release is not None:
                    policy.release.wait(60)
                with policy.lock:
                    policy.acted += 1
                return PolicyOutput(text=text, sample=Sample(token_ids=[7, 8, 9], logprobs=[-0.1, -0.2, -0.3],
                                                             finish_reason="stop", weight_version="w3"))

            def token_view(self) -> TokenView:
                return TokenView(prompt_ids=[1, 2], response_ids=[7, 8, 9], response_mask=[1, 1, 1],
                                 response_logprobs=[-0.1, -0.2, -0.3])

        return Agent()


def test_a_normal_run_yields_one_record_per_plan_and_closes_every_env(made):
    todo = plans(12)
    with EpisodeCollector(Tracked, Answering(), concurrency=3) as collector:
        records = list(collector.run(todo))
        assert 1 <= len(made) <= 3 and all(e.closes == 0 for e in made)  # envs outlive a run
        again = list(collector.run(todo[:3]))
        assert len(made) <= 3  # ... and serve the next one
    assert sorted(r.episode_id for r in records) == sorted(p.episode_id for p in todo) and len(again) == 3
    assert all(e.closes == 1 for e in made)
    rec = records[0]
    assert rec.outcome is Outcome.SUCCESS and rec.policy == "answering" and rec.sampling_params == {"temperature": 1.0}
    # the sample rode with the action into the turn
    [turn] = rec.turns
    assert (turn.token_ids, turn.logprobs, turn.finish_reason, turn.weight_version) == (
        [7, 8, 9], [-0.1, -0.2, -0.3], "stop", "w3")
    assert turn.timings["agent_s"] >= 0 and "env_s" in turn.timings
    assert rec.versions.weight_versions == ["w3"] and rec.versions.model == "scripted:answering"
    assert (rec.prompt_ids, rec.response_ids, rec.metrics.sampled_tokens) == ([1, 2], [7, 8, 9], 3)


def test_crashing_episodes_are_infra_records_and_a_crashing_consumer_still_closes_the_envs(made):
    todo = plans(6)
    policy = Answering(crash_on=todo[2].task_id)
    records = list(collect(todo, Tracked, policy, concurrency=2))
    bad = [r for r in records if r.task_id == todo[2].task_id]
    assert len(records) == 6 and bad and all(r.outcome is Outcome.ENV_ERROR for r in bad)
    assert "boom at start" in bad[0].outcome_detail and "Traceback" in bad[0].outcome_detail
    assert made and all(e.closes == 1 for e in made)

    made.clear()
    with pytest.raises(RuntimeError, match="consumer broke"), \
            EpisodeCollector(Tracked, Answering(), concurrency=2) as collector:
        for _ in collector.run(plans(6)):
            raise RuntimeError("consumer broke")
    assert made and all(e.closes == 1 for e in made)


def test_closing_the_iterator_early_cancels_the_queued_episodes(made):
    policy = Answering(delay=0.05)
    records = collect(plans(40), Tracked, policy, concurrency=2)
    first = next(records)
    records.close()
    assert first.outcome is Outcome.SUCCESS
    assert len(policy.started) <= 4, policy.started  # the one yielded, the others in flight, no more
    assert made and all(e.closes == 1 for e in made)


def test_stop_lets_the_episodes_in_flight_finish_and_starts_no_other(made):
    policy = Answering(delay=0.1)
    stop = threading.Event()
    got = []
    with EpisodeCollector(Tracked, policy, concurrency=3) as collector:
        for record in collector.run(plans(30), stop=stop):
            got.append(record)
            if not stop.is_set():
                stop.set()
                stopped_at = time.monotonic()
    assert all(t < stopped_at for t in policy.start_times)  # nothing started after the stop
    assert len(got) == len(policy.started) < 30  # every episode that started was yielded
    assert all(r.outcome is Outcome.SUCCESS for r in got)
    assert all(e.closes == 1 for e in made)


def test_abandon_ends_the_iterator_at_once_and_drops_the_episodes_in_flight(made):
    release = threading.Event()
    policy = Answering(release=release)
    abandon = threading.Event()

    def abandon_once_two_run() -> None:
        deadline = time.monotonic() + 60  # a hang guard: both start within a second
        while len(policy.started) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        abandon.set()

    threading.Thread(target=abandon_once_two_run, daemon=True).start()
    with EpisodeCollector(Tracked, policy, concurrency=2) as collector:
        got = list(collector.run(plans(10), abandon=abandon))
        # "at once": the iterator ended while both episodes in flight were still held in their turn
        assert got == [] and policy.acted == 0
        release.set()
    assert len(policy.started) == 2 and policy.acted == 2  # the two in flight ran to their end; nothing else started
    assert all(e.closes == 1 for e in made)


def test_an_env_factory_that_raises_gives_infra_records_not_a_crash():
    calls = []

    def broken() -> envhub.Env:
        calls.append(1)
        raise OSError("docker is down")

    records = list(collect(plans(4), broken, Answering(), concurrency=2, env_id=ENV))
    assert len(records) == 4 and len(calls) == 4  # each episode tries again
    for r in records:
        assert r.outcome is Outcome.ENV_ERROR and r.env_id == ENV and r.policy == "answering"
        assert "env construction failed: OSError('docker is down')" in r.outcome_detail
        assert "Traceback" in r.outcome_detail


def test_env_workers_map_keeps_order_and_raises_what_the_factory_raises():
    with EnvWorkers(lambda: envhub.make(ENV), concurrency=3) as workers:
        assert workers.map(lambda env, i: (env.env_id, i), range(20)) == [(ENV, i) for i in range(20)]
        assert len(workers.envs) <= 3

    def broken() -> envhub.Env:
        raise OSError("no env")

    with EnvWorkers(broken, concurrency=2) as workers, pytest.raises(OSError, match="no env"):
        workers.map(lambda env, i: i, range(3))
    with pytest.raises(RuntimeError, match="closed"):
        workers.map(lambda env, i: i, range(3))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_concurrency_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="must be a positive integer"):
        EpisodeCollector(Tracked, Answering(), concurrency=bad)
