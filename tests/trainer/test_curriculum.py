"""``envhub profile`` writes the tasks worth training on (0 < pass rate < 1); the trainer draws only those."""

import json

from trainer_fixtures import letter_config

from envhub.policies import make_policy
from envhub.rollout.profile import run_profile
from envhub.trainer.config import parse_config
from envhub.trainer.loop import Trainer


def test_trainer_draws_only_the_profiled_curriculum(tmp_path, scratch_model, one_torch_thread):
    policy = make_policy(f"hf:{scratch_model}?max_new_tokens=1&temperature=1.0")
    try:
        profile = run_profile("test/FirstLetter-v0", policy, out_dir=tmp_path / "profile", k=8)
    finally:
        policy.close()
    curriculum = json.loads((tmp_path / "profile" / "curriculum.json").read_text())["task_ids"]
    informative = {t["task_id"] for t in profile["tasks"] if 0 < t["c"] < t["n"]}
    assert curriculum and set(curriculum) == informative
    config = parse_config(letter_config(tmp_path / "run", scratch_model,
                                        env={"curriculum": str(tmp_path / "profile" / "curriculum.json")}))
    trainer = Trainer(config, log=lambda line: None)
    try:
        assert sorted(trainer.tasks) == sorted(curriculum)
        drawn = {p.task_id for step in range(1, 9) for p in trainer.plans(step)}
        assert drawn == set(curriculum)
    finally:
        trainer.close()
