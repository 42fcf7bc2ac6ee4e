"""``TokenRecord``: the one token record, and the one check of an engine's answer, that the model
policy and the TITO server share (TITO once accepted non-finite, positive and aborted samples)."""

from __future__ import annotations

import math

import pytest
from token_runs import smollm2_tokenizer

from envhub.adapters.engines.base import GenerateResult, SamplingParams
from envhub.adapters.engines.scripted import ScriptedEngine
from envhub.adapters.tito import TitoError, TitoServer
from envhub.adapters.token_record import TokenRecord
from envhub.errors import EngineError

START = [{"role": "system", "content": "You are precise."}, {"role": "user", "content": "What is 6*7?"}]


def test_appends_keep_masks_logprobs_and_lengths_together() -> None:
    rec = TokenRecord([1, 2, 3])
    rec.append_sampled([10, 11], [-0.5, -1.0])
    rec.append_observation([20, 21, 22])
    rec.append_sampled([12], [0.0])
    view = rec.token_view()
    assert view.prompt_ids == [1, 2, 3] and view.response_ids == [10, 11, 20, 21, 22, 12]
    assert view.response_mask == [1, 1, 0, 0, 0, 1]
    assert view.response_logprobs == [-0.5, -1.0, 0.0, 0.0, 0.0, 0.0]
    assert rec.length == 9 and rec.ids() == [1, 2, 3, 10, 11, 20, 21, 22, 12] and rec.room(10) == 1
    view.response_ids.append(99)  # the view is a copy
    assert len(rec.response_ids) == 6
    rec.truncate(2)
    assert (rec.response_ids, rec.response_mask, rec.response_logprobs) == ([10, 11], [1, 1], [-0.5, -1.0])
    with pytest.raises(ValueError, match="2 sampled tokens but 1 logprobs"):
        rec.append_sampled([1, 2], [-0.1])
    assert len(rec.response_ids) == len(rec.response_mask) == len(rec.response_logprobs) == 2


BAD_RESULTS = [
    (GenerateResult([1, 2], [-0.1], "stop"), "2 tokens but 1 logprobs"),
    (GenerateResult([1], [math.nan], "stop"), "not finite"),
    (GenerateResult([1], [-math.inf], "stop"), "not finite"),
    (GenerateResult([1], [0.25], "stop"), "> 0"),
    (GenerateResult([], [], "abort", meta={"message": "preempted"}), "aborted the request: preempted"),
]


@pytest.mark.parametrize("result,message", BAD_RESULTS)
def test_unrecordable_engine_answers_are_engine_errors(result: GenerateResult, message: str) -> None:
    with pytest.raises(EngineError, match=message.replace(">", "[>]")):
        TokenRecord.check_result(result)


def test_recordable_answers_pass() -> None:
    TokenRecord.check_result(GenerateResult([1, 2], [0.0, -3.0], "length"))
    TokenRecord.check_result(GenerateResult([], [], "stop"))


class _Answers(ScriptedEngine):
    """The scripted engine, whose answers are then replaced by fixed (possibly broken) ones."""

    def __init__(self, tokenizer, results: list[GenerateResult]) -> None:
        super().__init__(tokenizer, ["unused"])
        self.results = results

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerateResult:
        super().generate(prompt_ids, params)
        return self.results.pop(0)


@pytest.mark.parametrize("result,message", BAD_RESULTS)
def test_tito_answers_502_and_keeps_no_trace_of_an_unrecordable_sample(result: GenerateResult,
                                                                        message: str) -> None:
    tok = smollm2_tokenizer()
    ids = tok.encode("The answer is 42.", add_special_tokens=False)
    good = GenerateResult(ids, [-0.5] * len(ids), "stop")
    server = TitoServer(_Answers(tok, [result, good]), tok)
    session = server.create_session()
    with pytest.raises(TitoError) as caught:
        server.chat(session.id, {"messages": START})
    assert caught.value.status == 502 and caught.value.code == "engine_error" and message in caught.value.message
    assert server.get(session.id).trajectory()["response_ids"] == [] and session.failed_requests == 1
    server.chat(session.id, {"messages": START})  # the retry finds the record as it was
    traj = session.trajectory()
    assert traj["response_ids"] == good.token_ids and traj["response_mask"] == [1] * len(good.token_ids)
    assert len(traj["segments"]) == 1 and traj["num_turns"] == 1
