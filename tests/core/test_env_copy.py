"""Pickling and copying an env (``envhub.rebuild``): a new env made with the same constructor
arguments; refused, with the reason, while the env holds an episode."""

from __future__ import annotations

import copy
import pickle

import cloudpickle
import gymnasium
import pytest

import envhub
from envhub.parsing import format_tool_call

ENV = "envhub/Computation-v0"


def _fresh() -> envhub.Env:
    return envhub.make(ENV, split="validation", sandbox="process", sandbox_pool=0, kinds=["bigint"],
                       budget={"max_turns": 4})


@pytest.mark.parametrize("how", ["pickle", "deepcopy", "copy"])
def test_an_env_without_an_episode_copies_as_a_new_env_with_its_arguments(how: str):
    env = _fresh()
    twin = {"pickle": lambda e: pickle.loads(pickle.dumps(e)), "deepcopy": copy.deepcopy, "copy": copy.copy}[how](env)
    assert type(twin) is type(env) and twin is not env
    assert (twin.env_id, twin.split, twin.sandbox_backend, twin.sandbox_pool) == (ENV, "validation", "process", 0)
    assert twin.budget == env.budget and twin.budget.max_turns == 4
    assert list(twin.tasks.task_ids("validation")) == list(env.tasks.task_ids("validation"))  # kinds=["bigint"]
    assert twin.sandboxes is not env.sandboxes and twin.episode is None
    task_id = twin.tasks.task_ids("validation")[0]
    try:
        assert twin.play(task_id, twin.gold_actions).outcome == "success"  # its own sandbox, a whole episode
        assert env.episode is None  # the original is untouched
    finally:
        twin.close()
        env.close()


def test_an_env_holding_an_episode_refuses_to_copy_with_the_reason():
    env = _fresh()
    try:
        env.reset(task_id=env.tasks.task_ids("validation")[0])
        env.step(format_tool_call("python", {"code": "print(1)"}))  # a live sandbox now
        for attempt in (pickle.dumps, copy.deepcopy):
            with pytest.raises(TypeError, match=r"while it holds an episode.*Pickle the env id and kwargs instead"):
                attempt(env)
        env.close()  # no episode any more: it copies again
        assert pickle.loads(pickle.dumps(env)).episode is None
    finally:
        env.close()


def test_gymnasium_envs_and_factories_that_close_over_one_pickle():
    """What vector envs and Ray hand over: the gymnasium wrapper itself, or a cloudpickled factory
    (``AsyncVectorEnv`` pickles its env factories; one that closes over a made env pickles it)."""
    made = gymnasium.make(ENV, sandbox="process", sandbox_pool=0)
    again = pickle.loads(pickle.dumps(made))
    assert again.unwrapped.env.sandbox_backend == "process" and again.unwrapped.env is not made.unwrapped.env
    factory = cloudpickle.loads(cloudpickle.dumps(lambda: made))
    env = factory()
    try:
        obs, info = env.reset(seed=3)
        assert info["task_id"] and "[tools]" in obs
    finally:
        env.close()
        again.close()
        made.close()
