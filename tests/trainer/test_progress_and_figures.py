"""Progress and figures a user can trust: eval counters with an ETA (no terminal needed), a GRPO ETA from
GRPO steps only, evals with intervals and per-kind counts, the same weights never evaluated twice, an
SFT stage that stops while the policy still explores, and ``sft.runs`` checked before a model loads."""

import json
import subprocess
import sys

import pytest
import torch
import yaml
from trainer_fixtures import letter_config

from envhub.trainer import grpo
from envhub.trainer.config import parse_config
from envhub.trainer.evaluation import EvalProgress
from envhub.trainer.loop import Trainer, train
from envhub.trainer.preflight import check_config, solved_warning
from envhub.trainer.telemetry import Telemetry


class _Record:
    def __init__(self, outcome):
        self.outcome = type("O", (), {"value": outcome})()


def test_eval_progress_counts_episodes_with_an_eta_without_a_terminal():
    lines: list[str] = []
    progress = EvalProgress("before", total=4, done=1, log=lines.append, every_s=0.0)
    for outcome in ("success", "wrong_answer", "success"):
        progress.on_episode(_Record(outcome))
    assert lines[0].startswith("eval before: 2/4 episodes (1 kept from before), 1 successes sampled, ETA ")
    assert lines[-1].startswith("eval before: 4/4 episodes (1 kept from before), 2 successes sampled, ETA 0.0s")
    quiet: list[str] = []
    progress = EvalProgress("final", total=3, done=0, log=quiet.append, every_s=3600.0)
    for _ in range(3):
        progress.on_episode(_Record("success"))
    assert len(quiet) == 1 and quiet[0].startswith("eval final: 3/3")  # throttled, but the last line always


def test_the_grpo_eta_counts_only_the_steps_timed_since_the_loop_began(tmp_path):
    telemetry = Telemetry(env_id="e", run_dir=tmp_path, total_steps=10, metrics_port=None, tensorboard=False,
                          enabled=True, log=lambda line: None)
    telemetry.started -= 3600  # an hour of evals and SFT before GRPO
    telemetry.start_steps(8)   # resumed at step 8
    telemetry._steps_started -= 60  # one GRPO step took a minute
    line = telemetry.progress_line({"step": 9, "reward_mean": 0.5, "strict_success": 0.5, "tokens_per_second": 1.0,
                                    "time": {"rollout_s": 50.0, "train_s": 10.0}})
    assert line.endswith("ETA 1m00s"), line


def test_an_eval_line_has_its_interval_and_per_kind_counts_and_same_weights_are_not_evaluated_twice(
        tmp_path, scratch_model, one_torch_thread):
    config = parse_config(letter_config(tmp_path / "run", scratch_model, env={"validation_split": "validation"},
                                        eval={"episodes": 8}, steps=0))
    lines: list[str] = []
    trainer = Trainer(config, log=lines.append)
    try:
        first = trainer.evaluate("before")
        again = trainer.evaluate("final")
    finally:
        trainer.close()
    low, high = first["interval"]
    assert 0.0 <= low <= first["strict_success"] <= high <= 1.0 and first["successes"] <= 8
    assert first["by_group"]["validation"]["n"] == 8  # letter-env ids are validation-0..3
    assert again["same_as"] == "before" and again["strict_success"] == first["strict_success"]
    assert not (tmp_path / "run" / "eval" / "final").exists()
    assert any(line.startswith("eval before: 8/8 episodes") for line in lines)
    assert any(line.startswith("eval before: strict success ") and "[" in line for line in lines)


def test_the_run_warns_when_grpo_starts_from_an_eval_that_already_solves_the_tasks():
    eval_line = {"tag": "after-sft", "strict_success": 0.97, "episodes": 128, "split": "validation"}
    warning = solved_warning(eval_line)
    assert "already solves 97% of 128 validation episodes" in warning and "envhub profile" in warning
    assert solved_warning({**eval_line, "strict_success": 0.5}) is None and solved_warning(None) is None


def test_entropy_is_the_mean_over_mask_one_positions_only():
    torch.manual_seed(0)
    logits, mask = torch.randn(2, 5, 7), torch.tensor([[1, 1, 0, 0, 0], [0, 1, 1, 1, 0]]).float()
    full = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    assert torch.isclose(grpo.entropy(logits, mask), full[mask > 0].mean(), atol=1e-6)
    hot = grpo.entropy(logits, mask, temperature=0.5)
    scaled = logits / 0.5
    expected = -(torch.softmax(scaled, -1) * torch.log_softmax(scaled, -1)).sum(-1)[mask > 0].mean()
    assert torch.isclose(hot, expected, atol=1e-6) and float(grpo.entropy(logits, torch.zeros(2, 5))) == 0.0


def _gold(tmp_path):
    from envhub.policies import make_policy
    from envhub.rollout.runner import run_rollouts

    gold = tmp_path / "gold"
    run_rollouts("test/FirstLetter-v0", make_policy("gold"), out_dir=gold, episodes=16)
    return gold


def test_sft_stops_at_its_entropy_floor_and_records_its_curve(tmp_path, scratch_model, one_torch_thread):
    lines: list[str] = []
    config = parse_config(letter_config(tmp_path / "run", scratch_model, sampling={"max_new_tokens": 1},
                                        sft={"runs": [str(_gold(tmp_path))], "epochs": 3, "batch_size": 4,
                                             "lr": 0.01, "min_entropy": 50.0}, steps=0))
    train(config, log=lines.append)
    record = json.loads((tmp_path / "run" / "sft.json").read_text())
    assert record["examples"] == 16 and len(record["steps"]) == 1  # the floor is above any entropy: one step
    assert record["steps"][0]["entropy"] > 0 and record["steps"][0]["loss"] > 0
    assert any("sft: stopped at step 1/12" in line for line in lines)
    full = parse_config(letter_config(tmp_path / "full", scratch_model, sampling={"max_new_tokens": 1},
                                      sft={"runs": [str(tmp_path / "gold")], "epochs": 2, "batch_size": 4,
                                           "lr": 0.01}, steps=0))
    train(full, log=lambda line: None)
    curve = json.loads((tmp_path / "full" / "sft.json").read_text())["steps"]
    assert [c["step"] for c in curve] == list(range(1, 9)) and curve[-1]["loss"] < curve[0]["loss"]


def test_sft_runs_without_trajectories_are_refused_from_the_config(tmp_path, scratch_model):
    empty = tmp_path / "empty"
    empty.mkdir()
    failed = tmp_path / "failed"
    failed.mkdir()
    (failed / "trajectories.jsonl").write_text('{"outcome": "wrong_answer"}\n')
    config = parse_config(letter_config(tmp_path / "run", scratch_model, sft={"runs": [str(empty), str(failed)]}))
    problems = check_config(config)
    assert len(problems) == 2
    assert "holds no trajectories" in problems[0] and "envhub rollout test/FirstLetter-v0 --policy gold" in problems[0]
    assert "no episode with outcome in ['success']" in problems[1]


def test_the_train_command_refuses_empty_sft_runs_before_loading_a_model(tmp_path, scratch_model):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(letter_config(tmp_path / "run", str(tmp_path / "no-such-model"),
                                                 sft={"runs": [str(tmp_path / "nothing")]})))
    done = subprocess.run([sys.executable, "-m", "envhub.cli", "train", str(path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert "holds no trajectories" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) < 8


@pytest.mark.parametrize("tag", ["after-sft"])
def test_the_paired_count_compares_the_same_episodes(tag, tmp_path):
    from envhub.run_dir import TrainingRun
    from envhub.trainer.evaluation import paired_evals
    from envhub.types import TrajectoryRecord, Versions

    files = TrainingRun(tmp_path)
    for name, wins in ((tag, [True, False, False, True]), ("final", [True, True, True, False])):
        out = files.eval_run(name)
        out.path.mkdir(parents=True)
        out.trajectories_path.write_text("".join(
            TrajectoryRecord(episode_id=f"e{i}", task_id="t", env_id="e", group_id=f"e{i}", sample_index=0,
                             versions=Versions(envhub="0", env="0"),
                             outcome="success" if w else "wrong_answer").model_dump_json() + "\n"
            for i, w in enumerate(wins)))
    result = paired_evals(files, tag, "final")
    assert (result["n"], result["wins"], result["losses"], result["ties"]) == (4, 2, 1, 1)
    assert result["first"] == tag and result["difference"] == 0.25


def test_a_run_saved_before_a_setting_existed_resumes_with_its_default(tmp_path, scratch_model, one_torch_thread):
    config = parse_config(letter_config(tmp_path / "run", scratch_model, steps=0))
    Trainer(config, log=lambda line: None).close()
    saved = tmp_path / "run" / "config.json"
    old = json.loads(saved.read_text())
    del old["rollout"]["dynamic_sampling"], old["algorithm"]["stop_when_untrained"]
    saved.write_text(json.dumps(old))
    Trainer(config, resume=True, log=lambda line: None).close()  # not "holds another run"
    faster = parse_config(letter_config(tmp_path / "run", scratch_model, steps=0,
                                        optim={"activation_checkpointing": True, "fused_optimizer": False}))
    Trainer(faster, resume=True, log=lambda line: None).close()  # the same update, computed another way
    other = parse_config(letter_config(tmp_path / "run", scratch_model, steps=0, rollout={"dynamic_sampling": True}))
    with pytest.raises(Exception, match=r"different rollout.dynamic_sampling: False there, True here"):
        Trainer(other, resume=True, log=lambda line: None)
