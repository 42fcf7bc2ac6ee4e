"""veRL: the export validates as veRL's own ``AgentLoopOutput``, the YAML instantiates the loop the
way veRL's worker does, and :class:`EnvhubAgentLoop` plays envhub episodes through a server manager.

The real ``verl`` package is used where it imports (CPU install: ``pip install --no-deps verl``
plus its import-time dependencies, see docs/integrations.md); the schema test runs regardless.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from token_runs import shared_token_run, smollm2_tokenizer

from envhub.adapters.export import export_run, load_records
from envhub.adapters.export.verl import AGENT_NAME, to_agent_loop_output

#: ``AgentLoopOutput``'s documented fields that envhub fills.
DOCUMENTED = {"prompt_ids", "response_ids", "response_mask", "response_logprobs", "reward_score", "num_turns",
              "metrics", "extra_fields"}
TASK = {"env_id": "envhub/Computation-v0", "task_id": "comp-bigint-L1-0"}
ANSWER = '<tool_call>{"name": "answer", "arguments": {"answer": "113784534491018915559968"}}</tool_call>'


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_token_run(tmp_path_factory.getbasetemp())


def test_records_follow_the_documented_schema(run_dir: Path, tmp_path: Path) -> None:
    export_run(run_dir, "verl", tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "agent_loop_outputs.jsonl").read_text().splitlines()]
    assert rows
    for row in rows:
        assert set(row) == DOCUMENTED
        assert len(row["response_ids"]) == len(row["response_mask"]) == len(row["response_logprobs"])
        assert set(row["metrics"]) == {"generate_sequences", "tool_calls", "compute_score", "num_preempted"}
    yaml_text = (tmp_path / "agent_loop.yaml").read_text()
    assert f"- name: {AGENT_NAME}" in yaml_text and "_target_: envhub.adapters.verl.EnvhubAgentLoop" in yaml_text


def test_truncation_to_response_length(run_dir: Path) -> None:
    rec = next(r for r in load_records(run_dir) if len(r.response_ids) > 10 and r.reward == 1.0)
    out = to_agent_loop_output(rec, response_length=10)
    assert out["response_ids"] == rec.response_ids[:10] and len(out["response_mask"]) == 10
    assert out["extra_fields"]["truncated_response"] is True
    assert out["reward_score"] == 0.0  # not the success reward of the uncut episode
    whole = to_agent_loop_output(rec, response_length=len(rec.response_ids))
    assert whole["extra_fields"]["truncated_response"] is False and whole["reward_score"] == 1.0


# ---- against the real veRL classes -----------------------------------------------------------------------

try:
    import verl.experimental.agent_loop.agent_loop as verl_loop
except ImportError:  # the verl extra is not installed: the schema tests above still run
    verl_loop = None
needs_verl = pytest.mark.skipif(verl_loop is None, reason="verl is not installed")


@needs_verl
def test_export_validates_as_agent_loop_output(run_dir: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    export_run(run_dir, "verl", tmp_path)
    for line in (tmp_path / "agent_loop_outputs.jsonl").read_text().splitlines():
        out = verl_loop.AgentLoopOutput.model_validate(json.loads(line))
        tensors = out.as_dict()  # what veRL's worker builds from it
        assert tensors["prompts"].tolist() == out.prompt_ids
        assert tensors["rm_scores"][-1].item() == pytest.approx(out.reward_score)
    tasks = pq.read_table(tmp_path / "tasks.parquet").to_pylist()
    assert {t["extra_info"]["task_id"] for t in tasks} == {r.task_id for r in load_records(run_dir)
                                                          if r.outcome.value != "engine_error"}
    assert all(t["agent_name"] == AGENT_NAME for t in tasks)


class FakeServerManager:
    """veRL's ``server_manager.generate`` contract, answering from a script with real tokens."""

    def __init__(self, script: list[str], *, fail_on: int | None = None, honor_max_tokens: bool = True) -> None:
        self.tok = smollm2_tokenizer()
        self.end = self.tok.convert_tokens_to_ids("<|im_end|>")
        self.script, self.fail_on = script, fail_on
        self.honor_max_tokens = honor_max_tokens  # vLLM / SGLang do; False stands for one that does not
        self.requests: list[tuple[str, int, dict[str, Any]]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        turn = len([r for r in self.requests if r[0] == request_id])
        self.requests.append((request_id, len(prompt_ids), dict(sampling_params)))
        if turn == self.fail_on:
            raise RuntimeError("replica died")
        ids = [*self.tok.encode(self.script[turn], add_special_tokens=False), self.end]
        stop = "completed"
        if self.honor_max_tokens and len(ids) > sampling_params["max_tokens"]:
            ids, stop = ids[: sampling_params["max_tokens"]], "length"
        return TokenOutput(token_ids=ids, log_probs=[-0.3] * len(ids), stop_reason=stop)


def _make_loop(server: FakeServerManager, yaml_path: Path, response_length: int = 512,
               prompt_length: int = 2048) -> Any:
    import hydra
    from omegaconf import OmegaConf

    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": prompt_length,
                                                                 "response_length": response_length}},
                               "data": {}})
    entry = OmegaConf.load(yaml_path)[0]
    # exactly what veRL's AgentLoopWorker._run_agent_loop does
    return hydra.utils.instantiate(
        config=entry, trainer_config=verl_loop.DictConfigWrap(config=config), server_manager=server,
        tokenizer=smollm2_tokenizer(), processor=None, hf_model_type=None, dataset_cls=None,
        data_config=verl_loop.DictConfigWrap(config.data), tools=verl_loop.ToolListWrap([]),
    )


def _run(loop: Any) -> Any:
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    return asyncio.run(loop.run(params, raw_prompt=[], extra_info=TASK, agent_name=AGENT_NAME))


@needs_verl
def test_agent_loop_plays_an_episode(run_dir: Path, tmp_path: Path) -> None:
    export_run(run_dir, "verl", tmp_path)
    server = FakeServerManager(['Let me look.\n<tool_call>{"name": "lookup", "arguments": {}}</tool_call>', ANSWER])
    loop = _make_loop(server, tmp_path / "agent_loop.yaml")
    assert isinstance(loop, verl_loop.AgentLoopBase)
    out = _run(loop)
    assert isinstance(out, verl_loop.AgentLoopOutput)
    assert out.reward_score == 1.0 and out.extra_fields["envhub"]["outcome"] == "success"
    assert out.num_turns == 4  # user, assistant, tool reply, assistant
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    # both requests of the episode share one sticky request id; the second extends the first
    assert len({r[0] for r in server.requests}) == 1 and server.requests[1][1] > server.requests[0][1]
    tok = smollm2_tokenizer()
    sampled = [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 1]
    assert tok.decode(sampled).endswith(ANSWER + "<|im_end|>")
    assert 0 in out.response_mask
    assert all(lp == -0.3 for lp, m in zip(out.response_logprobs, out.response_mask, strict=True) if m)
    out.as_dict()


@needs_verl
def test_agent_loop_bounds_the_response_and_masks_infra(run_dir: Path, tmp_path: Path) -> None:
    export_run(run_dir, "verl", tmp_path)
    server = FakeServerManager(['Let me look.\n<tool_call>{"name": "lookup", "arguments": {}}</tool_call>', ANSWER])
    out = _run(_make_loop(server, tmp_path / "agent_loop.yaml", response_length=12))
    # the turn may sample only what fits: the episode runs out of room instead of being cut
    assert server.requests[0][2]["max_tokens"] == 12
    assert len(out.response_ids) <= 12 and out.extra_fields["envhub"]["truncated_response"] is False
    assert out.extra_fields["envhub"]["outcome"] == "context_overflow" and out.reward_score == 0.0

    failing = FakeServerManager(['Let me look.\n<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'],
                                fail_on=1)
    out = _run(_make_loop(failing, tmp_path / "agent_loop.yaml"))
    assert out.extra_fields["envhub"]["outcome"] == "engine_error"
    assert out.response_ids and set(out.response_mask) == {0}  # our failure: no gradient
    assert out.reward_score == 0.0


@needs_verl
def test_agent_loop_fits_env_replies_into_the_response_length(run_dir: Path, tmp_path: Path) -> None:
    """Observation tokens count against ``response_length``: the second turn may sample only the
    room left after the tool reply, and a success fits (full reward) only when it all fits."""
    export_run(run_dir, "verl", tmp_path)
    script = ['Let me look.\n<tool_call>{"name": "lookup", "arguments": {}}</tool_call>', ANSWER]
    full = _run(_make_loop(FakeServerManager(script), tmp_path / "agent_loop.yaml"))
    assert full.reward_score == 1.0
    n = len(full.response_ids)
    sampled_last = len(full.response_ids) - max(i for i, m in enumerate(full.response_mask) if m == 0) - 1

    server = FakeServerManager(script)
    exact = _run(_make_loop(server, tmp_path / "agent_loop.yaml", response_length=n))
    assert exact.reward_score == 1.0 and exact.response_ids == full.response_ids
    assert server.requests[1][2]["max_tokens"] == sampled_last  # what was left after the reply

    server = FakeServerManager(script)
    short = _run(_make_loop(server, tmp_path / "agent_loop.yaml", response_length=n - 3))
    assert len(short.response_ids) <= n - 3 and short.extra_fields["envhub"]["truncated_response"] is False
    assert short.extra_fields["envhub"]["outcome"] != "success" and short.reward_score == 0.0


@needs_verl
def test_a_cut_response_earns_no_reward(run_dir: Path, tmp_path: Path) -> None:
    """A server that ignores ``max_tokens`` returns more than fits: the response is cut to
    ``response_length`` and the success reward of the uncut episode is not handed on."""
    export_run(run_dir, "verl", tmp_path)
    server = FakeServerManager([ANSWER], honor_max_tokens=False)
    out = _run(_make_loop(server, tmp_path / "agent_loop.yaml", response_length=10))
    meta = out.extra_fields["envhub"]
    assert meta["outcome"] == "success" and meta["reward"] == 1.0  # the verifier saw the whole answer
    assert len(out.response_ids) == 10 and meta["truncated_response"] is True
    assert out.reward_score == 0.0


@needs_verl
def test_a_prompt_longer_than_prompt_length_is_refused(run_dir: Path, tmp_path: Path) -> None:
    from envhub.adapters.verl import PromptTooLongError

    export_run(run_dir, "verl", tmp_path)
    server = FakeServerManager([ANSWER])
    with pytest.raises(PromptTooLongError, match="prompt_length 16"):
        _run(_make_loop(server, tmp_path / "agent_loop.yaml", prompt_length=16))
    assert server.requests == []  # never played


@pytest.mark.slow
@needs_verl
def test_verls_length_filter_measures_the_prompt_the_loop_renders(run_dir: Path, tmp_path: Path) -> None:
    """veRL's ``max_prompt_length`` filter templates the ``prompt`` column; without the env's tools
    that counts a few hundred tokens too few, so veRL kept rows the loop then refused
    (PromptTooLongError mid-batch). The export records the tools and the run's prompt length, and
    ``EnvhubRLHFDataset``, loaded as veRL loads ``data.custom_cls``, filters on the real rendering."""
    import pyarrow.parquet as pq
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset, get_dataset_class

    from envhub.adapters.export.verl import DATASET_NAME, DATASET_PATH, PROMPT_LENGTH_KEY
    from envhub.adapters.verl import PromptTooLongError, rendered_prompt_length

    export_run(run_dir, "verl", tmp_path)
    parquet = tmp_path / "tasks.parquet"
    rows = pq.read_table(parquet).to_pylist()
    tok = smollm2_tokenizer()
    recorded = {r.task_id: len(r.prompt_ids) for r in load_records(run_dir)}
    lengths = {}
    for row in rows:
        extra = row["extra_info"]
        lengths[extra["task_id"]] = rendered_prompt_length(tok, row)
        assert extra[PROMPT_LENGTH_KEY] == recorded[extra["task_id"]] == lengths[extra["task_id"]]
        plain = len(tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True))
        assert plain < lengths[extra["task_id"]] - 100  # what veRL alone measures: no tools block

    def load(cls: Any, limit: int) -> Any:
        config = OmegaConf.create({"max_prompt_length": limit, "filter_overlong_prompts": True,
                                   "filter_overlong_prompts_workers": 1, "cache_dir": str(tmp_path / "cache")})
        return cls(data_files=[str(parquet)], tokenizer=tok, config=config)

    ours = get_dataset_class(OmegaConf.create({"custom_cls": {"path": DATASET_PATH, "name": DATASET_NAME}}))
    assert issubclass(ours, RLHFDataset) and ours is not RLHFDataset
    shortest, longest = min(lengths.values()), max(lengths.values())
    assert len(load(RLHFDataset, shortest - 1)) == len(rows)  # veRL's own measure keeps every row...
    assert len(load(ours, shortest - 1)) == 0  # ...none of which the loop could play
    kept = load(ours, shortest)
    assert [r["extra_info"]["task_id"] for r in kept.dataframe] == \
        [t for t, n in lengths.items() if n == shortest]
    assert len(load(ours, longest)) == len(rows)

    row = next(r for r in rows if lengths[r["extra_info"]["task_id"]] == shortest)
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}

    def play(prompt_length: int) -> Any:
        loop = _make_loop(FakeServerManager([ANSWER]), tmp_path / "agent_loop.yaml", prompt_length=prompt_length)
        return asyncio.run(loop.run(params, raw_prompt=row["prompt"], extra_info=row["extra_info"],
                                    agent_name=AGENT_NAME))

    assert isinstance(play(shortest), verl_loop.AgentLoopOutput)  # a row the filter keeps, the loop plays
    with pytest.raises(PromptTooLongError):
        play(shortest - 1)
