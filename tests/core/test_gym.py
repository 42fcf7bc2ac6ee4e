import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envhub
from envhub.gym import INFO_SCHEMA, GymEnv, PrintableText
from envhub.parsing import format_tool_call

ANSWER = format_tool_call("answer", {"answer": "0"})


def _types(info: dict) -> dict:
    """key -> type (nested for dicts) of one env's info."""
    return {k: _types(v) if isinstance(v, dict) else type(v) for k, v in info.items()}


def _batched(info: dict) -> dict:
    """key -> dtype (nested for dicts) of a vector env's info, masks included."""
    return {k: _batched(v) if isinstance(v, dict) else np.asarray(v).dtype.str for k, v in info.items()}


def _masks(info: dict) -> list[bool]:
    """Every ``_key`` mask of a vector env's info, flattened."""
    out: list[bool] = []
    for k, v in info.items():
        if isinstance(v, dict):
            out += _masks(v)
        elif k.startswith("_"):
            out += [bool(x) for x in v]
    return out


@pytest.mark.parametrize("env_id", [spec.env_id for spec in envhub.list_envs()])
def test_every_registered_env_passes_gymnasiums_checker(env_id):
    env = gymnasium.make(env_id)
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def test_gymnasium_make_and_a_full_episode():
    env = gymnasium.make("envhub/Computation-v0")
    obs, info = env.reset(seed=0)
    assert isinstance(obs, str) and "[user]" in obs
    assert env.observation_space.contains(obs)
    answer = env.unwrapped.env.episode.task.hidden["answer"]
    answer = ", ".join(f"{n}={v}" for n, v in zip("xyz", answer, strict=False)) if isinstance(answer, list) else answer
    obs, reward, terminated, truncated, info = env.step(format_tool_call("answer", {"answer": answer}))
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["observation"]["outcome"] == "success"
    env.close()


def test_budget_cut_is_truncated_not_terminated():
    env = gymnasium.make("envhub/Computation-v0", budget={"max_turns": 1, "max_format_errors": 5})
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step("thinking...")
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["observation"]["outcome"] == "budget_exhausted"


def test_printable_text_space_admits_any_printable_unicode_and_newlines():
    space = PrintableText(100)
    assert space.contains("línea 1\nline 2\t✓ 数学")
    assert not space.contains("bell\x07")
    assert not space.contains("x" * 101)
    assert all(space.contains(space.sample()) for _ in range(50))


def test_sync_vector_env():
    envs = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("envhub/Computation-v0") for _ in range(3)])
    obs, _ = envs.reset(seed=[1, 2, 3])
    assert len(obs) == 3 and all("[user]" in o for o in obs)
    obs, rewards, term, trunc, _infos = envs.step(["nonsense"] * 3)
    assert list(rewards) == [0.0, 0.0, 0.0] and not any(term) and not any(trunc)
    assert all("Format error" in o for o in obs)
    envs.close()


def test_wrapper_exposes_the_envhub_env():
    env = gymnasium.make("envhub/Computation-v0")
    assert isinstance(env.unwrapped, GymEnv)
    assert env.unwrapped.env.env_id == "envhub/Computation-v0"


def test_every_info_has_the_fixed_schema_at_reset_mid_episode_and_at_the_end():
    env = gymnasium.make("envhub/Computation-v0")
    _, info = env.reset(seed=0)
    seen = [info, env.step("nonsense")[4], env.step(ANSWER)[4]]
    for info in seen:
        assert _types(info) == INFO_SCHEMA
    assert [i["outcome"] for i in seen][:2] == ["", ""] and seen[2]["outcome"] in {"wrong_answer", "success"}
    assert seen[0]["observation"]["verdict"]["outcome"] == "" and seen[2]["observation"]["verdict"]["layers"]
    assert [i["turn"] for i in seen] == [0, 1, 2]
    env.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("vector", ["sync", "async"])
def test_vector_env_whose_sub_envs_finish_at_different_steps(vector):
    """Sub-env 0 ends at step 1 (and autoresets at step 2), sub-env 1 at step 3: every step's
    batched info has the same keys, dtypes and full masks (Gymnasium crashed on main when one
    sub-env sent a verdict dict where another sent None, and the async env then hung in close)."""
    fns = [lambda: gymnasium.make("envhub/Computation-v0") for _ in range(2)]
    if vector == "sync":
        envs = gymnasium.vector.SyncVectorEnv(fns)
    else:
        envs = gymnasium.vector.AsyncVectorEnv(fns, shared_memory=False)
    try:
        _, info = envs.reset(seed=[1, 2])
        signature = _batched(info)
        script = [[ANSWER, "nonsense"], ["nonsense", "nonsense"], ["nonsense", ANSWER], [ANSWER, "nonsense"]]
        ends = []
        for actions in script:
            obs, _, term, trunc, info = envs.step(actions)
            assert _batched(info) == signature and all(_masks(info))
            assert all(isinstance(o, str) for o in obs)
            ends.append([bool(t or u) for t, u in zip(term, trunc, strict=True)])
            assert [bool(o) for o in info["outcome"]] == ends[-1]
        assert ends == [[True, False], [False, False], [False, True], [True, False]]
        assert list(info["turn"]) == [2, 0] and info["observation"]["verdict"]["layers"][0]
    finally:
        envs.close()


def test_async_vector_env_with_shared_memory_fails_clearly():
    """Gymnasium's shared memory reads Text observations once ('0' strings at every step)."""
    fns = [lambda: gymnasium.make("envhub/Computation-v0") for _ in range(2)]
    with pytest.raises(ValueError, match=r"shared_memory=False"):
        gymnasium.vector.AsyncVectorEnv(fns)
    with pytest.raises(ValueError, match=r"shared_memory=False"):
        gymnasium.make_vec("envhub/Computation-v0", num_envs=2, vectorization_mode="async")
