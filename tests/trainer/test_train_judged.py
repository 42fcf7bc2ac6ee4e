"""Training against an env with an LLM judge (issue #43): the judge's bounded term is in every step
line and the training report, its pin is claimed in the run directory, and a run continued under
another judge is refused before anything trains."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "verifiers" / "judge"))

from judge_models import RUBRIC, lenient_judge
from letter_env import FirstLetterEnv

from envhub.judges import PIN_FILE, close_shared_judge_engines
from envhub.registry import register
from envhub.run_dir import TrainingRun
from envhub.types import Task
from envhub.verifiers import LayeredVerifier
from envhub.verifiers.judge.check import JudgeCheck, JudgeSettings
from envhub.verifiers.layered import Graded

ENV = "test/JudgedLetter-v0"
WEIGHT = 0.2


class StartsWithCOrP:
    name = "first_letter"

    def __call__(self, task: Task, submission: dict[str, Any], episode: Any) -> Graded:
        word = str(submission.get("answer", "")).strip().lower()
        ok = word[:1] in task.hidden["letters"]
        return Graded(1.0 if ok else 0.0, ok, f"{word[:20]!r}")


class JudgedLetterEnv(FirstLetterEnv):
    """The first-letter env with an LLM judge on a bounded weight (env arg ``judge``: a spec)."""

    env_id = ENV

    def __init__(self, *, judge: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.judge = judge

    def make_verifier(self) -> LayeredVerifier:
        check = JudgeCheck(RUBRIC, JudgeSettings(spec=self.judge), question=lambda task: task.prompt)
        return LayeredVerifier(gate=[], correctness=StartsWithCOrP(), quality=[(check, WEIGHT)])


@pytest.mark.slow
def test_training_with_a_judge_reports_its_term_and_refuses_another_judge(tmp_path):
    import torch

    from envhub.adapters.engines.tiny import build_tiny_model
    from envhub.reports.html import write_report
    from envhub.trainer import checkpoint, fsdp
    from envhub.trainer.config import parse_config
    from envhub.trainer.loop import train

    register(ENV, JudgedLetterEnv, description="test env: first letter, judged")
    judge = lenient_judge(tmp_path / "judge")
    run_dir = tmp_path / "run"
    config = parse_config({
        "run_dir": str(run_dir), "model": str(build_tiny_model(layers=1, hidden=64, init_std=0.02, seed=0)),
        "env": {"id": ENV, "args": {"judge": f"hf:{judge}"}, "validation_split": None},
        "sampling": {"max_new_tokens": 2, "temperature": 1.0},
        "rollout": {"groups_per_step": 2, "group_size": 8, "concurrency": 2, "max_response_tokens": 4,
                    "max_context": 512},
        "optim": {"lr": 1e-3, "micro_batch_size": 8},
        "steps": 3, "checkpoint_every": 3, "seed": 0,
    })
    try:
        train(config, log=lambda line: None)
        files = TrainingRun(run_dir)
        lines = [json.loads(line) for line in files.steps_path.read_text().splitlines()]
        judged = sum(line["judge"]["judged"] for line in lines)
        assert judged == sum(line["outcomes"]["success"] for line in lines) > 0  # every success, nothing else
        terms = [line["judge"]["term_mean"] for line in lines if line["judge"]["judged"]]
        assert all(0.0 <= t <= WEIGHT for t in terms)
        pins = json.loads((run_dir / PIN_FILE).read_text())
        assert pins["judge:capital"]["model"] == f"hf:{judge}"
        html = write_report(run_dir, tmp_path / "report.html").html.read_text(encoding="utf-8")
        assert "judge term" in html and "judge unparseable" in html
        close_shared_judge_engines()
        other = tmp_path / "other"
        lenient_judge(other, score=1, steps=2)
        with pytest.raises(checkpoint.TrainingError, match="weights_sha256"):
            checkpoint.claim_judges(files, lambda: JudgedLetterEnv(judge=f"hf:{other}"), fsdp.DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend=None))
    finally:
        close_shared_judge_engines()
