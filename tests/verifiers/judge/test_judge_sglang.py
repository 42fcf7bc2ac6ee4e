"""An ``sglang:URL`` judge against the SGLang contract server of the SGLang client tests (SGLang does
not run on our CPU machines; the server answers ``/generate`` in SGLang's documented format): the
judge's request is one token after ``SCORE: ``, greedy, and the reply is read as the closed form."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "adapters"))

from test_engine_sglang import FakeSGLang, fixture

from envhub.adapters.engines.models import prepare_tokenizer
from envhub.judges import close_shared_judge_engines
from envhub.verifiers.judge.check import JudgeCheck, JudgeSettings
from envhub.verifiers.judge.rubric import Rubric

RUBRIC = Rubric(name="t", criterion="Is it right?", levels=("no", "partly", "yes"))


def answer(token_id: int) -> dict:
    body = fixture("generate_response_length")
    body["output_ids"] = [token_id]
    body["meta_info"]["output_token_logprobs"] = [[-0.1, token_id, None]]
    body["meta_info"]["finish_reason"] = {"type": "length", "length": 1}
    return body


def test_an_sglang_judge_asks_for_one_token_after_the_prefix_and_parses_it():
    server = FakeSGLang()
    tokenizer = str(prepare_tokenizer())
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer)
        two, comma = tok.encode("2", add_special_tokens=False)[0], tok.encode(",", add_special_tokens=False)[0]
        server.generate_answers += [(200, answer(two)), (200, answer(comma))]
        check = JudgeCheck(RUBRIC, JudgeSettings(spec=f"sglang:{server.url}", options={"tokenizer": tokenizer}))
        first = check.score_text("What is 2+2?", "4")
        second = check.score_text("What is 2+2?", "5")
        assert (first.score, first.details["samples"]) == (1.0, [2])
        assert (second.score, second.details["samples"], second.details["unparseable"]) == (0.0, [None], 1)
        pin = check.pin()
        assert pin.model == f"sglang:{server.url}" and pin.sampling["temperature"] == 0.0
        generate = [body for method, path, body in server.requests if path == "/generate"]
        assert len(generate) == 2 and generate[0]["sampling_params"]["max_new_tokens"] == 1
        assert generate[0]["sampling_params"]["temperature"] == 0.0
        assert tok.decode(generate[0]["input_ids"]).endswith("<|im_start|>assistant\nSCORE: ")
    finally:
        close_shared_judge_engines()
        server.close()
