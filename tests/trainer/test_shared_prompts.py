"""A GRPO group's prompt runs once per micro-batch: the logprobs and the gradients equal those of every
row running its own copy of the prompt, and nothing is shared where prompts differ or activations are
recomputed."""

import dataclasses

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from envhub.trainer.batch import TrainingSample, collate, policy_logprobs


def _model():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)
    return LlamaForCausalLM(config).to(torch.float32).train()


def _samples():
    """Two groups with prompts of different lengths; responses of different lengths, tool output masked."""
    long, short = [5, 6, 7, 8, 9, 10, 11], [12, 13, 14]
    responses = [([1, 2, 3, 4], [1, 1, 0, 1]), ([2, 3], [1, 1]), ([4, 4, 4, 4, 4, 4], [1, 0, 0, 1, 1, 1]),
                 ([7, 8, 9], [1, 1, 1]), ([9], [1])]
    prompts = [long, long, long, short, short]
    return [TrainingSample(f"e{i}", p, r, m, [0.0] * len(r), advantage=float(i) - 2.0)
            for i, (p, (r, m)) in enumerate(zip(prompts, responses, strict=True))]


def _logprobs_and_grads(model, batch):
    model.zero_grad(set_to_none=True)
    logp, ent = policy_logprobs(model, batch, temperature=0.7, with_entropy=True)
    (logp * batch.mask * batch.advantages[:, None]).sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), ent, grads


def test_a_shared_prompt_gives_the_same_logprobs_and_gradients():
    model = _model()
    batch = collate(_samples(), pad_id=0)
    assert batch.shared is not None
    assert batch.shared.rows.tolist() == [0, 3] and batch.shared.index.tolist() == [0, 0, 0, 1, 1]
    shared_logp, shared_ent, shared_grads = _logprobs_and_grads(model, batch)
    plain_logp, plain_ent, plain_grads = _logprobs_and_grads(model, dataclasses.replace(batch, shared=None))
    assert shared_logp.shape == plain_logp.shape == batch.targets.shape
    torch.testing.assert_close(shared_logp, plain_logp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(shared_ent, plain_ent, atol=1e-5, rtol=1e-5)
    assert shared_grads.keys() == plain_grads.keys() and shared_grads
    for name, grad in plain_grads.items():
        torch.testing.assert_close(shared_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)
    # the embedding rows of the prompt tokens got gradient through the shared keys and values
    embed = shared_grads["model.embed_tokens.weight"]
    assert all(embed[t].abs().sum() > 0 for t in (5, 11, 12, 14))


def test_nothing_is_shared_between_distinct_prompts_or_while_recomputing():
    distinct = [dataclasses.replace(s, prompt_ids=[*s.prompt_ids, 20 + i]) for i, s in enumerate(_samples())]
    assert collate(distinct, pad_id=0).shared is None
    model = _model()
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    batch = collate(_samples(), pad_id=0)
    shared_logp, _, _ = _logprobs_and_grads(model, batch)  # recomputing layers run without a cache
    plain_logp, _, _ = _logprobs_and_grads(model, dataclasses.replace(batch, shared=None))
    torch.testing.assert_close(shared_logp, plain_logp, atol=1e-6, rtol=1e-6)
