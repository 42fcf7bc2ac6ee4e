import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import envhub
from envhub.gym import GymEnv, PrintableText
from envhub.parsing import format_tool_call


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


def test_async_vector_env_without_shared_memory():
    envs = gymnasium.vector.AsyncVectorEnv(
        [lambda: gymnasium.make("envhub/Computation-v0") for _ in range(2)], shared_memory=False
    )
    try:
        obs, infos = envs.reset(seed=[5, 6])
        assert all("[user]" in o for o in obs)
        obs, rewards, term, _trunc, infos = envs.step([format_tool_call("answer", {"answer": "0"})] * 2)
        assert all(term) and list(rewards) == [0.0, 0.0]
        assert set(infos["observation"]["outcome"]) <= {"wrong_answer", "format_error"}
    finally:
        envs.close()


def test_wrapper_exposes_the_envhub_env():
    env = gymnasium.make("envhub/Computation-v0")
    assert isinstance(env.unwrapped, GymEnv)
    assert env.unwrapped.env.env_id == "envhub/Computation-v0"
