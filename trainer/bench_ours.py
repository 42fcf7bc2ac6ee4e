"""Our side of ``envhub bench train``: the bundled trainer's steps, timed from outside.

Run only as a child of :mod:`envhub.trainer.bench` (one subprocess per side, so the parent reads
this process's peak RSS alone): full fine-tuning against TRL, or with ``--lora`` an adapter run
against full fine-tuning.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

OURS_DOES = ("rollout through the env (the engine samples from the training module, env steps, verifier grades) + "
             "token audit + advantages + update (forward, backward, AdamW) + new weight version to the engine")


def ours_child(trainer_config: dict[str, Any]) -> dict[str, Any]:
    """Our side: ``Trainer.train_step`` timed from outside, for every step of ``trainer_config``."""
    from envhub.run_dir import TrainingRun
    from envhub.trainer.config import parse_config
    from envhub.trainer.loop import Trainer

    config = parse_config(trainer_config, where="bench config")
    trainer = Trainer(config, log=lambda line: None)
    steps = []
    try:
        for step in range(1, config.steps + 1):
            t0 = time.perf_counter()
            rec = trainer.train_step()
            seconds = time.perf_counter() - t0
            steps.append({"step": step, "seconds": seconds, "rss_mb": rec["rss_mb"], "time": rec["time"],
                          "reward_mean": rec["reward_mean"], "loss": rec.get("loss"),
                          "trained_samples": rec.get("trained_samples"), "optimizer_steps": rec.get("optimizer_steps")})
    finally:
        trainer.close()
    prompt_lens = []
    for line in steps:  # the sampled tokens of each step's episodes, read back after the timing
        records = list(TrainingRun(config.run_dir).step_rollouts(line["step"]).rows())
        line["completion_tokens"] = statistics.fmean(sum(r["response_mask"]) for r in records)
        prompt_lens += [len(r["prompt_ids"]) for r in records]
    does = OURS_DOES + (f"; a LoRA adapter (r={config.lora.r}) trained, the base frozen" if config.lora else "")
    return {"steps": steps, "does": does, "prompt_tokens_mean": statistics.fmean(prompt_lens)}
