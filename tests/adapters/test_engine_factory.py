"""make_engine: the one place that decides which engine a spec names, for policies and the trainer."""

from __future__ import annotations

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from envhub.adapters.engines import SamplingParams
from envhub.adapters.engines.factory import LocalModel, engine_kind, make_engine
from envhub.adapters.engines.sglang_client import SGLangEngine
from envhub.adapters.engines.tiny import build_tiny_model
from envhub.adapters.engines.transformers_engine import TransformersEngine

GREEDY = SamplingParams(max_new_tokens=6, temperature=0.0)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_engine_specs_name_a_kind_or_are_refused():
    assert engine_kind("transformers") == "transformers"
    assert engine_kind("sglang:http://127.0.0.1:30000") == "sglang"
    for spec in ("sglang", "sglang:", "transformers:/models/x", "hf:/models/x", "vllm:http://h", ""):
        with pytest.raises(ValueError, match=r"engine must be 'transformers' or 'sglang:URL'"):
            engine_kind(spec)


def test_a_local_model_is_sampled_from_itself_when_shared_else_from_a_copy():
    path = build_tiny_model()
    module = AutoModelForCausalLM.from_pretrained(str(path))
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    shared = make_engine("transformers", model=LocalModel(module, tokenizer, share=True, weight_version="3"))
    copied = make_engine("transformers", model=LocalModel(module, tokenizer, seed=0, model_id="tiny"), max_context=64)
    try:
        assert isinstance(shared, TransformersEngine) and shared.model is module and shared.weight_version == "3"
        assert isinstance(copied, TransformersEngine) and copied.model is not module
        assert (copied.max_context, copied.model_id) == (64, "tiny")
        prompt = tokenizer.encode("hello there", add_special_tokens=False)
        assert shared.generate(prompt, GREEDY).token_ids == copied.generate(prompt, GREEDY).token_ids
    finally:
        shared.close()
        copied.close()


def test_a_model_dir_is_loaded_with_the_options_of_its_kind():
    path = build_tiny_model()
    engine = make_engine("transformers", model=path, threads=1, max_batch_size=3, weight_version="w")
    try:
        assert isinstance(engine, TransformersEngine)
        assert (engine.model_id, engine.max_batch_size, engine.weight_version) == (str(path), 3, "w")
    finally:
        engine.close()
    with pytest.raises(ValueError, match="unknown options for the transformers engine: timeout"):
        make_engine("transformers", model=path, timeout=5.0)
    with pytest.raises(ValueError, match="needs a model"):
        make_engine("transformers")


def test_a_server_spec_builds_its_client_and_ignores_a_local_model():
    engine = make_engine("sglang:127.0.0.1:9", max_context=64, timeout=5.0,
                         model=LocalModel(module=None, tokenizer=None))
    assert isinstance(engine, SGLangEngine)
    assert (engine.url, engine.timeout, engine.max_context) == ("http://127.0.0.1:9", 5.0, 64)
    with pytest.raises(ValueError, match="unknown options for the sglang engine: device"):
        make_engine("sglang:127.0.0.1:9", device="cpu")
