"""Real small judge models for the tests: the tiny random model (its replies are almost never the
closed answer form) and a "lenient" copy of it trained for a few seconds to answer every judge
prompt with the top score -- a judge with a known, real behaviour (it rates everything highly)."""

from __future__ import annotations

import shutil
from pathlib import Path

from envhub.verifiers.judge.rubric import REPLY_PREFIX, Rubric, render

RUBRIC = Rubric(
    name="capital",
    criterion="Is the answer the capital the question asks for?",
    levels=("wrong", "partly right", "right"),
)


def lenient_judge(out: Path, score: int = 2, steps: int = 25) -> Path:
    """A copy of the tiny model trained to put ``score`` after ``SCORE: `` on judge prompts."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envhub.adapters.engines.tiny import build_tiny_model

    shutil.copytree(build_tiny_model(), out)
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    torch.manual_seed(0)
    prompts = []
    for question, answer in (("What is the capital of France?", "Paris"), ("Name a colour.", "blue " * 40)):
        rendered = render(RUBRIC, question, answer, ["Paris is the capital of France."])
        text = tok.apply_chat_template(rendered.messages(), add_generation_prompt=True, tokenize=False)
        prompts.append(tok.encode(text + REPLY_PREFIX, add_special_tokens=False))
    target = torch.tensor([tok.encode(str(score), add_special_tokens=False)[0]])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        loss = sum(
            torch.nn.functional.cross_entropy(model(torch.tensor([ids])).logits[0, -1][None], target)
            for ids in prompts
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(out)
    return out
