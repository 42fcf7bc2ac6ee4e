"""The in-process transformers engine: batching, logprobs, stops, limits, failures.

A tiny random Llama with SmolLM2's real tokenizer (built once, cached) stands in for the model.
"""

from __future__ import annotations

import threading

import pytest
import torch

from envhub.adapters.engines import SamplingParams
from envhub.adapters.engines.sampling import processed_logprobs
from envhub.adapters.engines.tiny import build_tiny_model
from envhub.adapters.engines.transformers_engine import TransformersEngine
from envhub.errors import ContextOverflowError, EngineError

GREEDY = SamplingParams(max_new_tokens=12, temperature=0.0)
TEXTS = ["hello there", "what is the answer to two plus two, please tell me", "x",
         "<|im_start|>user\nCompute 17 * 23.<|im_end|>\n<|im_start|>assistant\n"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def engine():
    eng = TransformersEngine.from_pretrained(build_tiny_model(), max_batch_size=8, seed=0)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def prompts(engine):
    return [engine.tokenizer.encode(t, add_special_tokens=False) for t in TEXTS]


@pytest.fixture(scope="module")
def singles(engine, prompts):
    """Each prompt decoded alone: the reference for batched decoding."""
    return [engine.generate(p, GREEDY) for p in prompts]


def test_batched_greedy_equals_unbatched(engine, prompts, singles):
    with engine.paused():  # all four are queued before the worker's next step: one prefill batch
        futures = [engine.submit(p, GREEDY) for p in prompts]
    batched = [f.result() for f in futures]
    assert engine.stats["max_rows"] >= 2
    for one, many in zip(singles, batched, strict=True):
        assert many.token_ids == one.token_ids
        assert max(abs(a - b) for a, b in zip(many.logprobs, one.logprobs, strict=True)) < 1e-4


def _wait_until_taken(engine: TransformersEngine) -> None:
    while engine._queue.qsize():
        threading.Event().wait(0.001)


def test_requests_join_a_running_batch_and_leave_it(engine, prompts, singles):
    """The first request is decoding when the others arrive; rows of different lengths leave."""
    assert all(len(s.token_ids) == GREEDY.max_new_tokens for s in singles)  # no early stop: rows overlap
    with engine.paused():
        first = engine.submit(prompts[0], GREEDY)
        _wait_until_taken(engine)  # the worker holds it and waits for the lock
        rest = [engine.submit(p, GREEDY.with_(max_new_tokens=4 + 2 * i)) for i, p in enumerate(prompts[1:])]
    results = [first.result()] + [f.result() for f in rest]
    assert engine.stats["max_rows"] >= 2
    for i, (one, got) in enumerate(zip(singles, results, strict=True)):
        n = GREEDY.max_new_tokens if i == 0 else 4 + 2 * (i - 1)
        assert got.token_ids == one.token_ids[:n] and got.finish_reason == "length"
        assert max(abs(a - b) for a, b in zip(got.logprobs, one.logprobs, strict=False)) < 1e-4


def test_logprobs_are_those_of_the_sampled_distribution(engine, prompts):
    for params in (GREEDY, SamplingParams(max_new_tokens=12, temperature=0.7, top_k=40, top_p=0.9, seed=5),
                   SamplingParams(max_new_tokens=12, temperature=1.3, seed=6)):
        out = engine.generate(prompts[1], params)
        assert len(out.token_ids) == len(out.logprobs) > 0
        assert all(lp <= 0.0 for lp in out.logprobs)
        fresh = engine.score(prompts[1] + out.token_ids, len(prompts[1]), params)
        assert max(abs(a - b) for a, b in zip(fresh, out.logprobs, strict=True)) < 1e-4


def test_seeded_sampling_is_reproducible_in_any_batch(engine, prompts):
    params = SamplingParams(max_new_tokens=10, temperature=1.0, seed=11)
    alone = engine.generate(prompts[0], params)
    with engine.paused():
        futures = [engine.submit(prompts[0], params), engine.submit(prompts[2], params.with_(seed=12))]
    assert futures[0].result().token_ids == alone.token_ids


def test_processed_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]])
    assert torch.allclose(processed_logprobs(logits, 0.0), torch.log_softmax(logits, -1))
    hot = processed_logprobs(logits, 2.0)
    assert torch.allclose(hot, torch.log_softmax(logits / 2.0, -1))
    top2 = processed_logprobs(logits, 1.0, top_k=2)
    assert torch.isinf(top2[0, 2:]).all() and torch.allclose(top2[0, :2].exp().sum(), torch.tensor(1.0))
    probs = torch.softmax(logits, -1)[0]
    nucleus = processed_logprobs(logits, 1.0, top_p=float(probs[0]) + 1e-3)  # needs the first two tokens
    assert torch.isfinite(nucleus[0, :2]).all() and torch.isinf(nucleus[0, 2:]).all()
    assert torch.allclose(nucleus[0, :2], torch.log(probs[:2] / probs[:2].sum()))


def test_stop_token_ids_and_stop_strings_keep_the_stopping_token(engine, prompts, singles):
    ref = singles[1]
    stop_id = ref.token_ids[3]
    first = ref.token_ids.index(stop_id)
    out = engine.generate(prompts[1], GREEDY.with_(stop_token_ids=(stop_id,)))
    assert out.finish_reason == "stop" and out.token_ids == ref.token_ids[: first + 1]
    assert out.meta["matched"] == stop_id
    text = engine.tokenizer.decode(ref.token_ids)
    stop = text[len(engine.tokenizer.decode(ref.token_ids[:4])) - 3:][:3]
    out = engine.generate(prompts[1], GREEDY.with_(stop=(stop,)))
    assert out.finish_reason == "stop" and stop in engine.tokenizer.decode(out.token_ids)
    assert stop not in engine.tokenizer.decode(out.token_ids[:-1])
    assert out.token_ids == ref.token_ids[: len(out.token_ids)]


def test_limits(engine, prompts):
    out = engine.generate(prompts[0], GREEDY.with_(max_new_tokens=3))
    assert len(out.token_ids) <= 3
    assert engine.generate(prompts[0], GREEDY.with_(max_new_tokens=0)).token_ids == []
    long_prompt = prompts[0] * (engine.max_context // len(prompts[0]))
    with pytest.raises(ContextOverflowError):
        engine.generate(long_prompt + prompts[0], GREEDY)
    near = long_prompt[: engine.max_context - 2]
    out = engine.generate(near, GREEDY.with_(max_new_tokens=50))
    assert len(out.token_ids) <= 2 and len(near) + len(out.token_ids) <= engine.max_context
    with pytest.raises(EngineError):
        engine.generate([engine.vocab_size + 5], GREEDY)


def test_model_failure_is_an_engine_error_and_the_engine_survives(engine, prompts, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: device-side assert triggered")

    monkeypatch.setattr(engine.model, "forward", broken)
    with pytest.raises(EngineError, match="generation failed"):
        engine.generate(prompts[0], GREEDY)
    monkeypatch.undo()
    assert engine.generate(prompts[0], GREEDY.with_(max_new_tokens=2)).token_ids


def test_weight_update_sets_the_version(engine, prompts):
    state = {k: v.clone() for k, v in engine.model.state_dict().items()}
    version = engine.update_weights(state, version="step-7")
    assert version == "step-7" == engine.weight_version
    assert engine.generate(prompts[0], GREEDY.with_(max_new_tokens=2)).weight_version == "step-7"


def test_a_state_dict_that_does_not_match_is_refused(engine, prompts):
    """A wrong state dict must not load nothing and still bump the version."""
    before = {k: v.clone() for k, v in engine.model.state_dict().items()}
    version = engine.weight_version
    wrong_names = {f"module.{k}": torch.zeros_like(v) for k, v in before.items()}  # e.g. a wrapper's prefix
    with pytest.raises(EngineError, match=r"missing.*unexpected"):
        engine.update_weights(wrong_names, version="bad-1")
    ptrs = [v.data_ptr() for v in engine.model.state_dict().values()]
    untied = next(k for k, v in engine.model.state_dict().items() if ptrs.count(v.data_ptr()) == 1)
    partial = {k: torch.zeros_like(v) for k, v in before.items() if k != untied}
    with pytest.raises(EngineError, match=f"1 missing \\({untied}\\)"):
        engine.update_weights(partial, version="bad-2")
    name = next(iter(before))
    with pytest.raises(EngineError, match="wrong shape"):
        engine.update_weights({**before, name: torch.zeros(3, 3)}, version="bad-3")
    with pytest.raises(EngineError, match="1 unexpected"):
        engine.update_weights({**before, "extra.weight": torch.zeros(1)}, version="bad-4")
    assert engine.weight_version == version  # nothing changed
    assert all(torch.equal(v, before[k]) for k, v in engine.model.state_dict().items())
    assert engine.generate(prompts[0], GREEDY.with_(max_new_tokens=2)).weight_version == version


def test_a_tied_weight_may_come_under_one_name(engine):
    state = engine.model.state_dict()
    tied = [k for k, v in state.items() for j, w in state.items()
            if k < j and v.data_ptr() == w.data_ptr() and v.numel()]
    if not tied:
        pytest.skip("the tiny model ties no weights")
    version = engine.update_weights({k: v.clone() for k, v in state.items() if k != tied[0]}, version="tied-ok")
    assert version == "tied-ok"


def test_closed_engine_refuses(prompts):
    eng = TransformersEngine.from_pretrained(build_tiny_model())
    eng.generate(prompts[0], GREEDY.with_(max_new_tokens=1))
    eng.close()
    with pytest.raises(EngineError, match="closed"):
        eng.generate(prompts[0], GREEDY)
