"""The best checkpoint: ``RUN/best`` holds the weights of the highest validation strict success (the
earliest on a tie), ``best.json`` says which eval it is, and the eval history survives a resume."""

import json

import torch
from safetensors.torch import load_file
from trainer_fixtures import letter_config

from envhub.policies import make_policy
from envhub.rollout.runner import run_rollouts
from envhub.run_dir import TrainingRun
from envhub.store import write_json_atomic
from envhub.trainer.config import parse_config
from envhub.trainer.evaluation import improves_best
from envhub.trainer.loop import train


def _evals(run):
    return [json.loads(line) for line in (run / "evals.jsonl").read_text().splitlines()]


def test_a_tie_keeps_the_earlier_weights_and_another_split_starts_over(tmp_path):
    files = TrainingRun(tmp_path)
    result = {"split": "validation", "episodes": 8, "weight_version": "3", "strict_success": 0.5}
    assert improves_best(files, result)  # nothing kept yet
    write_json_atomic(files.best_path, {**result, "weight_version": "1"})
    assert not improves_best(files, result)  # a tie: the earlier, less trained weights stay
    assert improves_best(files, {**result, "strict_success": 0.625})
    assert not improves_best(files, {**result, "weight_version": "1", "strict_success": 0.625})  # already it
    assert improves_best(files, {**result, "episodes": 16, "strict_success": 0.1})  # other episodes: not comparable


def test_best_holds_the_best_evals_weights_and_survives_a_resume(tmp_path, scratch_model, one_torch_thread):
    gold = tmp_path / "gold"
    run_rollouts("test/FirstLetter-v0", make_policy("gold"), out_dir=gold, episodes=8)
    run = tmp_path / "run"
    sections = {"env": {"validation_split": "validation"}, "eval": {"episodes": 4, "every": 1},
                "sft": {"runs": [str(gold)], "epochs": 2, "lr": 0.01, "batch_size": 4},
                "algorithm": {"drop_zero_variance": False}, "steps": 2, "checkpoint_every": 1, "keep_checkpoints": 5}
    lines = []
    summary = train(parse_config(letter_config(run, scratch_model, **sections)), log=lines.append)
    evals = {e["tag"]: e for e in _evals(run)}
    assert {"before", "after-sft", "step-000001", "final"} <= set(evals)
    assert evals["after-sft"]["strict_success"] > evals["before"]["strict_success"]  # SFT on gold answers
    best = json.loads((run / "best.json").read_text())
    top = max(e["strict_success"] for e in evals.values())
    first_top = next(e for e in _evals(run) if e["strict_success"] == top)
    assert best["strict_success"] == top and best["tag"] == first_top["tag"]
    assert summary["best"] == best and best["weights"] == str(run / "best")
    assert any(line.startswith(f"best: eval {best['tag']}") for line in lines)
    # best/ is a model dir of that eval's weights: the checkpoint of its step
    saved = torch.load(run / "checkpoints" / f"step-{best['step']:06d}" / "model.pt", weights_only=True)
    weights = load_file(str(run / "best" / "model.safetensors"))
    assert weights and all(torch.equal(weights[k], saved[k]) for k in weights)
    make_policy(f"hf:{run / 'best'}").close()  # --policy hf:RUN/best loads it

    train(parse_config(letter_config(run, scratch_model, **{**sections, "steps": 3})), resume=True,
          log=lambda line: None)
    after = {e["tag"]: e for e in _evals(run)}
    assert set(evals) - {"final"} <= set(after) and "step-000002" in after  # the history is kept
    for tag in set(evals) - {"final"}:
        assert after[tag]["strict_success"] == evals[tag]["strict_success"]
    resumed_best = json.loads((run / "best.json").read_text())
    assert resumed_best["strict_success"] == max(e["strict_success"] for e in after.values())
    assert resumed_best["strict_success"] >= best["strict_success"]
