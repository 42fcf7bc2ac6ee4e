"""LoRA through ``peft``: only the adapter trains, checkpoints hold only it and its optimizer state,
``RUN/final`` is the merged model (what ``--policy hf:`` evaluates) beside the adapter as peft writes it,
and a resumed LoRA run equals the uninterrupted one."""

import copy

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from trainer_fixtures import assert_same_run, final_weights, letter_config, steps_of
from transformers import AutoModelForCausalLM

from envhub.policies import make_policy
from envhub.rollout.runner import run_rollouts
from envhub.trainer import lora
from envhub.trainer.checkpoint import load_checkpoint
from envhub.trainer.config import LoraConfig, parse_config
from envhub.trainer.loop import train
from envhub.trainer.weight_sync import write_hf_dir
from envhub.types import Outcome, TrajectoryRecord

LORA = {"r": 4, "alpha": 8.0}
TOKENS = torch.tensor([[1, 5, 9, 33, 2, 70, 11]])


def _load(model_dir):
    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()


def _logits(model):
    with torch.no_grad():
        return model(TOKENS).logits


def _adapted(model_dir, config):
    """The model with an adapter whose B is not zero (a fresh one computes what the base does)."""
    model = lora.wrap(_load(model_dir), config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    return model.eval()


def _assert_adapter_loads_as_the_merged_model(adapter_dir, merged_dir, base_dir):
    base_logits = _logits(_load(base_dir))
    with_adapter = _logits(PeftModel.from_pretrained(_load(base_dir), str(adapter_dir)).eval())
    torch.testing.assert_close(_logits(_load(merged_dir)), with_adapter, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(with_adapter, base_logits, atol=1e-4), "the adapter changes nothing: vacuous"


@pytest.mark.parametrize("model_fixture, targets", [("scratch_model", "all-linear"),
                                                     ("untied_scratch_model", ("q_proj", "lm_head"))])
def test_the_merged_weights_are_peft_merge_and_unload(request, tmp_path, model_fixture, targets):
    scratch_model = request.getfixturevalue(model_fixture)
    config = LoraConfig(**LORA, target_modules=targets)
    model = _adapted(scratch_model, config)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    merged = lora.merged_state(state, config)
    expected = copy.deepcopy(model).merge_and_unload().state_dict()
    assert merged.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(merged[key], expected[key], rtol=1e-5, atol=1e-6)
    write_hf_dir(merged, scratch_model, tmp_path / "merged")
    lora.write_adapter_dir(state, config, scratch_model, tmp_path / "adapter")
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in (tmp_path / "adapter").iterdir()}
    _assert_adapter_loads_as_the_merged_model(tmp_path / "adapter", tmp_path / "merged", scratch_model)


def test_target_modules_that_match_nothing_are_refused_by_name(scratch_model):
    with pytest.raises(ValueError, match=r"lora.target_modules \('no_such_proj',\)"):
        lora.wrap(_load(scratch_model), LoraConfig(target_modules=("no_such_proj",)))


def test_a_checkpoint_of_another_adapter_is_refused():
    with pytest.raises(ValueError, match="does not fit this model"):
        lora.complete_state({"x.lora_A.default.weight": torch.zeros(1)}, {"y.weight": torch.zeros(1)})


@pytest.mark.slow
def test_a_lora_run_with_sft_and_grpo_trains_only_the_adapter(tmp_path, scratch_model, one_torch_thread):
    gold = tmp_path / "gold"
    run_rollouts("test/FirstLetter-v0", make_policy("gold"), out_dir=gold, episodes=8)
    run = tmp_path / "run"
    train(parse_config(letter_config(
        run, scratch_model, lora=LORA, algorithm={"kl_coef": 0.01},
        sft={"runs": [str(gold)], "epochs": 2, "lr": 0.01, "batch_size": 4}, steps=2)), log=lambda line: None)
    assert [s["step"] for s in steps_of(run)] == [1, 2]
    assert any(s["optimizer_steps"] for s in steps_of(run)), "GRPO never updated: the checks prove nothing"

    checkpoint = load_checkpoint(run / "checkpoints" / "step-000002", rank=0)
    trained = set(checkpoint.model)
    assert trained and all(lora.is_adapter_key(k) for k in trained)
    assert set(checkpoint.optimizer["state"]) == trained  # AdamW's moments exist only for the adapter
    assert checkpoint.reference and all(lora.is_adapter_key(k) for k in checkpoint.reference)

    base, final = load_file(str(scratch_model / "model.safetensors")), load_file(str(run / "final" / "model.safetensors"))
    assert final.keys() == base.keys()  # the merged model under the base model's own names
    changed = {k for k in base if not torch.equal(base[k], final[k])}
    assert changed, "the merged model equals the base: nothing was trained"
    assert all(k.endswith("_proj.weight") for k in changed), sorted(changed)  # embeddings, norms frozen
    _assert_adapter_loads_as_the_merged_model(run / "final" / "adapter", run / "final", scratch_model)

    evaluated = tmp_path / "eval"
    result = run_rollouts("test/FirstLetter-v0", make_policy(f"hf:{run / 'final'}"), out_dir=evaluated,
                          episodes=2, split="validation")
    records = [TrajectoryRecord.model_validate_json(line) for line in result.trajectories.read_text().splitlines()]
    assert len(records) == 2 and not any(Outcome(r.outcome).is_infra for r in records), records
    assert all(r.response_ids for r in records)  # the merged model sampled them


@pytest.mark.slow
def test_two_lora_steps_then_resume_equal_four(tmp_path, scratch_model, one_torch_thread):
    def config(run, steps):
        return parse_config(letter_config(run, scratch_model, lora=LORA, algorithm={"kl_coef": 0.01},
                                          optim={"lr": 1e-2}, steps=steps))

    train(config(tmp_path / "full", 4), log=lambda line: None)
    train(config(tmp_path / "resumed", 2), log=lambda line: None)
    train(config(tmp_path / "resumed", 4), resume=True, log=lambda line: None)
    assert sum(s["optimizer_steps"] for s in steps_of(tmp_path / "full")) >= 2
    base, final = load_file(str(scratch_model / "model.safetensors")), final_weights(tmp_path / "full")
    assert any(not torch.equal(base[k], final[k]) for k in base), "nothing trained: the comparison is vacuous"
    assert_same_run(tmp_path / "full", tmp_path / "resumed")


def test_layers_an_adapter_cannot_be_merged_into_are_refused(scratch_model):
    with pytest.raises(ValueError, match=r"only nn.Linear layers .* model.embed_tokens \(Embedding\)"):
        lora.wrap(_load(scratch_model), LoraConfig(target_modules=("q_proj", "embed_tokens")))
    with pytest.raises(ValueError, match="shares its weight with the input embeddings"):
        lora.wrap(_load(scratch_model), LoraConfig(target_modules=("q_proj", "lm_head")))


def test_the_adapter_starts_from_the_run_seed_alone(scratch_model):
    """Every rank and every world size wrap the same adapter, whatever the process drew before."""
    def adapter(seed):
        state = lora.wrap(_load(scratch_model), LoraConfig(**LORA), seed=seed).state_dict()
        return {k: v for k, v in state.items() if lora.is_adapter_key(k)}

    first = adapter(0)
    torch.rand(1000)  # the global generator moves on
    again, other = adapter(0), adapter(1)
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert any(not torch.equal(first[k], other[k]) for k in first if ".lora_A." in k)
    assert all(not v.any() for k, v in first.items() if ".lora_B." in k)


def test_an_sglang_server_is_pushed_the_merged_weights(tmp_path, scratch_model):
    """``engine: sglang:URL`` with LoRA: the server loads a model dir of the base's own tensors with the
    adapter folded in (the loopback server of test_weight_sync implements the documented update)."""
    from test_weight_sync import LoopbackSGLang

    from envhub.trainer.fsdp import DistInfo
    from envhub.trainer.models import PolicyModels

    server = LoopbackSGLang()
    try:
        config = parse_config(letter_config(tmp_path / "run", scratch_model, lora=LORA, engine=f"sglang:{server.url}"))
        models = PolicyModels(config, scratch_model, DistInfo(0, 1, 0, torch.device("cpu"), None),
                              staging_dir=tmp_path / "weights")
        try:
            with torch.no_grad():
                for name, param in models.model.named_parameters():
                    if ".lora_B." in name:
                        param.fill_(0.1)
            state = {k: v.detach().clone() for k, v in models.model.state_dict().items()}
            models.publish("1")
        finally:
            models.close()
    finally:
        server.close()
    expected = lora.merged_state(state, LoraConfig(**LORA))
    assert server.version == "1" and server.loaded.keys() == expected.keys()
    assert all(torch.equal(server.loaded[k], expected[k]) for k in expected)
    base = load_file(str(scratch_model / "model.safetensors"))
    assert not torch.equal(server.loaded["model.layers.0.mlp.up_proj.weight"], base["model.layers.0.mlp.up_proj.weight"])
