"""The learning-rate schedule (:func:`envhub.trainer.update.lr_factor`): linear warm-up, then
constant, cosine or linear decay over the run's optimizer steps."""

import pytest

from envhub.trainer.config import TrainConfig


def _config(**optim) -> TrainConfig:
    return TrainConfig.model_validate({"run_dir": "run", "model": "tiny", "env": {"id": "envhub/Computation-v0"},
                                       "steps": 10, "optim": optim})


def test_warm_up_then_each_schedule():
    from envhub.trainer.update import lr_factor

    cosine = _config(warmup_steps=2, schedule="cosine", updates_per_step=2)  # 20 updates, 4 of warm-up
    assert [lr_factor(cosine, u) for u in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor(cosine, 4) == 1.0 and lr_factor(cosine, 12) == pytest.approx(0.5)
    assert lr_factor(cosine, 20) == pytest.approx(0.0, abs=1e-12) and lr_factor(cosine, 99) == lr_factor(cosine, 20)
    linear = _config(schedule="linear")
    assert [lr_factor(linear, u) for u in (0, 5, 10)] == [1.0, 0.5, 0.0]
    constant = _config()
    assert {lr_factor(constant, u) for u in range(12)} == {1.0}


def test_schedule_follows_the_training_step_when_steps_do_not_update():
    """A zero-variance step trains nothing, but the schedule moves on: the LR is a function of the
    training step (position (step - 1) * updates_per_step + mini-batch), not of the updates done."""
    import torch

    from envhub.trainer import fsdp
    from envhub.trainer.update import lr_factor, update_policy

    config = _config(warmup_steps=4, schedule="cosine", updates_per_step=2, lr=1.0)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.optim.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda u: lr_factor(config, u))
    local = fsdp.DistInfo(0, 1, 0, torch.device("cpu"), None)
    for step in (1, 2, 3):
        stats = update_policy(model, optimizer, scheduler, [], config=config, dist=local, reference=None, pad_id=0)
        assert not stats["updated"]
        assert optimizer.param_groups[0]["lr"] == pytest.approx(lr_factor(config, step * 2))
    assert scheduler.last_epoch == 6 and optimizer.param_groups[0]["lr"] == pytest.approx(7 / 8)
