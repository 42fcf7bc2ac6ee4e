"""SkyRL: the exported ``GeneratorOutput`` follows its documented TypedDict, and envhub envs run as
real SkyRL-Gym ``BaseTextEnv`` environments made by ``skyrl_gym.make`` from the exported dataset.

``skyrl-gym`` installs on CPU and is used for real; ``skyrl-train`` (the trainer, which defines
``GeneratorOutput``) needs vLLM and GPUs, so the batch is checked against its documented keys.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from token_runs import shared_token_run, smollm2_tokenizer

from envhub.adapters.export import export_run, load_records

#: ``skyrl_train.generators.base.GeneratorOutput`` keys envhub fills.
GENERATOR_OUTPUT_KEYS = {"prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons",
                         "rollout_metrics", "rollout_logprobs", "trajectory_ids"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    run = shared_token_run(tmp_path_factory.getbasetemp())
    out = tmp_path_factory.mktemp("skyrl")
    export_run(run, "skyrl", out)
    return run, out


def test_generator_output_schema(exported: tuple[Path, Path]) -> None:
    run, out = exported
    batch = json.loads((out / "generator_output.json").read_text())
    assert set(batch) == GENERATOR_OUTPUT_KEYS
    n = len(batch["response_ids"])
    assert n == sum(r.outcome_class.value != "infra_failure" for r in load_records(run))
    for key in ("prompt_token_ids", "rewards", "loss_masks", "stop_reasons", "rollout_logprobs", "trajectory_ids"):
        assert len(batch[key]) == n, key
    for ids, mask, lps in zip(batch["response_ids"], batch["loss_masks"], batch["rollout_logprobs"], strict=True):
        assert len(ids) == len(mask) == len(lps)
    assert all(set(t) == {"instance_id", "repetition_id"} for t in batch["trajectory_ids"])
    assert set(batch["stop_reasons"]) <= {"stop", "length", "abort"}
    assert 0.0 <= batch["rollout_metrics"]["envhub/strict_success_rate"] <= 1.0


try:
    import skyrl_gym
except ImportError:  # the skyrl extra is not installed: the schema test above still runs
    skyrl_gym = None
needs_skyrl_gym = pytest.mark.skipif(skyrl_gym is None, reason="skyrl-gym is not installed")


@needs_skyrl_gym
def test_dataset_rows_make_real_skyrl_envs(exported: tuple[Path, Path]) -> None:
    import pyarrow.parquet as pq
    from skyrl_gym.envs.base_text_env import BaseTextEnv

    from envhub.adapters.skyrl import ENV_CLASS, EnvhubTextEnv, register_skyrl_env
    from envhub.registry import make

    register_skyrl_env()
    register_skyrl_env()  # idempotent
    _, out = exported
    rows = pq.read_table(out / "dataset.parquet").to_pylist()
    assert rows and all(r["env_class"] == ENV_CLASS for r in rows)
    row = rows[0]
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}  # what SkyRL passes
    env = skyrl_gym.make(row["env_class"], env_config={}, extras=extras)
    assert isinstance(env, EnvhubTextEnv) and isinstance(env, BaseTextEnv)
    messages, info = env.init(row["prompt"])
    assert messages[0]["role"] == "system" and "<tools>" in messages[0]["content"]
    assert messages[1] == row["prompt"][1]
    assert {t["function"]["name"] for t in info["tools"]} >= {"answer"}

    first = env.step('<tool_call>{"name": "lookup", "arguments": {}}</tool_call>')
    assert first["done"] is False and first["reward"] == 0.0
    assert first["observations"] and first["observations"][0]["role"] == "user"
    assert first["observations"][0]["content"].startswith("<tool_response>\n")  # an unknown tool's error

    ref = make(row["extra_info"]["env_id"])
    gold = ref.gold_actions(ref.tasks.get(row["extra_info"]["task_id"]))[-1].text
    ref.close()
    last = env.step(gold)
    assert last["done"] is True and last["reward"] == 1.0
    assert last["metadata"]["outcome"] == "success" and last["metadata"]["infra_failure"] is False
    assert env.get_metrics()["success"] == 1.0
    env.close()


@needs_skyrl_gym
def test_missing_task_is_a_clear_error() -> None:
    from envhub.adapters.skyrl import EnvhubTextEnv

    with pytest.raises(ValueError, match=r"extra_info\.env_id"):
        EnvhubTextEnv({}, {"extra_info": {}})


@needs_skyrl_gym
def test_the_skyrl_conversation_renders_as_envhubs_model_policy_records_it() -> None:
    """SkyRL's generator templates the env's messages with the model's chat template (and no tool
    list). Templated, the conversation must be the very text envhub's model policy records for
    the same episode -- tools block, ``<tool_response>`` turns and all -- not bare user text."""
    from envhub.adapters.chat_format import ChatMLFormat
    from envhub.adapters.engines import SamplingParams
    from envhub.adapters.engines.scripted import ScriptedEngine
    from envhub.adapters.model_policy import ModelPolicy
    from envhub.adapters.skyrl import register_skyrl_env
    from envhub.registry import make
    from envhub.rollout.runner import EpisodePlan, run_episode

    env_id, kwargs = "envhub/Computation-v0", {"sandbox": "process"}  # the python tool must really run
    ref = make(env_id, **kwargs)
    task_id = ref.tasks.task_ids("train")[4]
    gold = ref.gold_actions(ref.tasks.get(task_id))
    actions = [gold[0].text, "I will answer now.\n" + gold[-1].text]
    tok = smollm2_tokenizer()
    policy = ModelPolicy(ScriptedEngine(tok, actions), tok, params=SamplingParams(max_new_tokens=256))
    with warnings.catch_warnings():  # the process backend warns once per process, if at all here
        warnings.simplefilter("ignore", RuntimeWarning)
        record = run_episode(ref, policy, EpisodePlan("e", "g", task_id, 0, 1), {"policy": "scripted"})
    ref.close()
    assert record.outcome.value == "success" and record.messages[3].role == "tool"
    recorded = tok.decode(record.prompt_ids + record.response_ids)

    register_skyrl_env()
    env = skyrl_gym.make("envhub", env_config={"env_kwargs": kwargs},
                         extras={"extra_info": {"env_id": env_id, "task_id": task_id}})
    conversation, _ = env.init()
    for action in actions:
        out = env.step(action)
        conversation += [{"role": "assistant", "content": action}, *out["observations"]]
    env.close()
    assert out["done"] and out["reward"] == 1.0
    assert conversation[3]["role"] == "user" and conversation[3]["content"].startswith("<tool_response>\n")
    rendered = tok.apply_chat_template(conversation, tokenize=False)  # no tools: SkyRL passes none
    assert rendered == recorded + "\n"  # the template closes the last turn with a newline
    assert tok.chat_template == ChatMLFormat.template  # the tiny model's template is envhub's
