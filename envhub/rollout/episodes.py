"""One episode, start to verdict, and its trajectory record.

:func:`plan_episodes` derives episode ids from (env, seed, group, task, sample), so the same
arguments always plan the same ids; :func:`plan_group` is that one recipe for one group (the
trainer plans its groups with it). :func:`run_episode` plays one planned episode and returns its
:class:`~envhub.types.TrajectoryRecord`; it never raises for the episode's failure (a crash, an
engine error), which becomes an infrastructure outcome with the traceback. Each turn's sample
(token ids, logprobs, finish reason, weight version, the policy's time) rides with the action
into the env's :class:`~envhub.types.Turn`; the ids the agent appended for the env's reply to a
turn come with its next turn's output and are recorded on that turn then
(``Env.record_observation_ids``), so the record is built from the env's episode alone, plus the
agent's token view. Many episodes run through :mod:`envhub.rollout.collect`.
"""

from __future__ import annotations

import hashlib
import random
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envhub._version import __version__
from envhub.episode import EpisodeEnv
from envhub.errors import ContextOverflowError, EngineError
from envhub.policies import Policy
from envhub.types import Outcome, TrajectoryRecord, Verdict, Versions


@dataclass(frozen=True)
class EpisodePlan:
    episode_id: str
    group_id: str
    task_id: str
    sample_index: int
    seed: int


def group_id(env_id: str, seed: int, index: int, task_id: str, *, stream: str | None = None) -> str:
    """The id of group ``index`` (a group of samples of ``task_id``) of a run of ``env_id`` seeded
    ``seed``. ``stream`` keeps several series of groups of one run apart (the trainer's training
    groups are ``stream="train"``); without it the id is a rollout's (:func:`plan_episodes`)."""
    key = "|".join([env_id, str(seed), *([stream] if stream is not None else []), str(index), task_id])
    return hashlib.sha1(key.encode()).hexdigest()[:16]


def plan_group(env_id: str, task_id: str, index: int, *, seed: int, group_size: int,
               stream: str | None = None) -> list[EpisodePlan]:
    """The ``group_size`` episodes of group ``index`` (see :func:`group_id`): episode ``k`` is
    ``GROUP-k``, sampled with a seed derived from the group id and ``k``."""
    gid = group_id(env_id, seed, index, task_id, stream=stream)
    seeds = [int(hashlib.sha1(f"{gid}|{k}".encode()).hexdigest()[:8], 16) for k in range(group_size)]
    return [EpisodePlan(f"{gid}-{k}", gid, task_id, k, sample_seed) for k, sample_seed in enumerate(seeds)]


def plan_episodes(
    env_id: str, task_ids: Sequence[str], *, episodes: int, group_size: int = 1, seed: int = 0
) -> list[EpisodePlan]:
    """``episodes`` in groups of ``group_size`` samples of one task (GRPO's groups): the tasks in a
    seeded shuffle, pass after pass, each group planned by :func:`plan_group`."""
    if episodes < 1 or group_size < 1:
        raise ValueError("--episodes and --group-size must be positive")
    if episodes % group_size:
        raise ValueError(f"--episodes ({episodes}) must be a multiple of --group-size ({group_size})")
    if not task_ids:
        raise ValueError(f"{env_id} has no tasks in this split")
    rng = random.Random(f"{env_id}/{seed}")
    order: list[str] = []
    while len(order) < episodes // group_size:
        batch = list(task_ids)
        rng.shuffle(batch)
        order.extend(batch)
    return [plan for g, task_id in enumerate(order[: episodes // group_size])
            for plan in plan_group(env_id, task_id, g, seed=seed, group_size=group_size)]


def describe_policy(policy: Policy) -> dict[str, Any]:
    """The ``policy_info`` of a run: the policy's name, versions and sampling parameters."""
    return {"policy": policy.name, **policy.describe()}


def run_episode(env: EpisodeEnv, policy: Policy, plan: EpisodePlan,
                policy_info: dict[str, Any]) -> TrajectoryRecord:
    """One episode of ``env`` (a local env or a served one), start to verdict. Never raises:
    failures become infra outcomes."""
    t0 = time.monotonic()
    try:
        record = _run_episode(env, policy, plan, policy_info, t0)
    except Exception as exc:  # building the record failed (token view, validation, ...): still one record
        record = infra_record(plan, policy_info, crash_detail(exc, "recording the episode failed"),
                              env_id=env.env_id, versions=_versions_or_bare(env, policy_info),
                              wall=time.monotonic() - t0)
    record.metrics.finished_at = time.time()
    return record


def crash_detail(exc: BaseException, what: str | None = None) -> str:
    """``what: repr(exc)`` and the traceback: the ``outcome_detail`` of a crashed episode."""
    head = f"{what}: {exc!r}" if what else repr(exc)
    return f"{head}\n{''.join(traceback.format_exception(exc))}"


def _run_episode(env: EpisodeEnv, policy: Policy, plan: EpisodePlan, policy_info: dict[str, Any],
                 t0: float) -> TrajectoryRecord:
    agent = None
    try:
        obs = env.reset(seed=plan.seed, task_id=plan.task_id)
        agent = policy.start(env, obs, seed=plan.seed)
        while not obs.done:
            ta = time.monotonic()
            try:
                out = agent.act(obs)
            except EngineError as exc:
                obs = env.abort(Outcome.ENGINE_ERROR, f"{exc}")
                break
            except ContextOverflowError as exc:
                obs = env.abort(Outcome.CONTEXT_OVERFLOW, f"{exc}")
                break
            sample = out.sample.model_copy(update={"agent_seconds": time.monotonic() - ta})
            if out.observation_ids:  # the tokens of the reply it just read: the latest turn's
                env.record_observation_ids(out.observation_ids)
            obs = env.step(out.text, sample=sample)
    except Exception as exc:
        detail = crash_detail(exc)
        if env.episode is not None and env.episode.task.task_id == plan.task_id and not env.episode.done:
            env.abort(Outcome.ENV_ERROR, detail)
        else:
            return infra_record(plan, policy_info, detail, env_id=env.env_id,
                                versions=_versions_or_bare(env, policy_info), wall=time.monotonic() - t0)
    return _record(env, plan, policy_info, agent, time.monotonic() - t0)


def _record(env: EpisodeEnv, plan: EpisodePlan, policy_info: dict[str, Any], agent: Any,
            wall: float) -> TrajectoryRecord:
    """The record of the finished episode of ``env``: its turns carry their samples and the ids of
    the env's replies already; the agent adds the token view."""
    episode = env.episode
    assert episode is not None and episode.verdict is not None
    turns = list(episode.turns)
    view = agent.token_view() if agent is not None else None
    metrics = episode.metrics.model_copy(update={"wall_seconds": wall})
    metrics.agent_seconds = sum(t.timings.get("agent_s", 0.0) for t in turns)
    if view is not None:
        metrics.prompt_tokens = len(view.prompt_ids)
        metrics.response_tokens = len(view.response_ids)
        metrics.sampled_tokens = sum(view.response_mask)
    verdict = episode.verdict
    return TrajectoryRecord(
        episode_id=plan.episode_id, task_id=plan.task_id, env_id=env.env_id, group_id=plan.group_id,
        sample_index=plan.sample_index, split=episode.task.split, policy=policy_info.get("policy", ""),
        versions=env_versions(env, policy_info, [t.weight_version for t in turns],
                              sandbox_image=getattr(episode, "sandbox_image", None)),
        sampling_params=policy_info.get("sampling_params", {}),
        messages=episode.messages, tools=episode.tools, turns=turns,
        prompt_ids=view.prompt_ids if view else [], response_ids=view.response_ids if view else [],
        response_mask=view.response_mask if view else [],
        response_logprobs=view.response_logprobs if view else [],
        num_turns=len(turns), reward=verdict.reward, verdict=verdict, outcome=verdict.outcome,
        outcome_detail=verdict.detail, metrics=metrics,
    )


def infra_record(plan: EpisodePlan, policy_info: dict[str, Any], detail: str, *, env_id: str,
                 versions: Versions | None = None, wall: float = 0.0) -> TrajectoryRecord:
    """An ``env_error`` record for an episode that produced none of its own; built from plain values
    (without ``versions``: envhub's and ``env_id``'s)."""
    record = TrajectoryRecord(
        episode_id=plan.episode_id, task_id=plan.task_id, env_id=env_id,
        group_id=plan.group_id, sample_index=plan.sample_index, policy=str(policy_info.get("policy", "")),
        versions=versions or Versions(envhub=__version__, env=env_id), outcome=Outcome.ENV_ERROR,
        verdict=Verdict(reward=0.0, outcome=Outcome.ENV_ERROR, detail=detail), outcome_detail=detail,
    )
    record.metrics.wall_seconds = wall
    return record


def env_versions(env: EpisodeEnv, policy_info: dict[str, Any], weight_versions: list[str | None], *,
                 sandbox_image: str | None = None) -> Versions:
    """The record's versions: envhub, ``env_id@version``, the task set, the policy's model."""
    try:
        task_set = env.tasks.version
    except Exception:
        task_set = ""
    return Versions(
        envhub=__version__, env=f"{env.env_id}@{env.version}", task_set=task_set,
        sandbox_image=sandbox_image, model=policy_info.get("model"),
        tokenizer=policy_info.get("tokenizer"), chat_template_hash=policy_info.get("chat_template_hash"),
        weight_versions=weight_versions,
    )


def _versions_or_bare(env: EpisodeEnv, policy_info: dict[str, Any]) -> Versions | None:
    """The versions of ``env`` and its episode, or None when they cannot be read (an env in pieces)."""
    try:
        return env_versions(env, policy_info, [], sandbox_image=getattr(env.episode, "sandbox_image", None))
    except Exception:
        return None
