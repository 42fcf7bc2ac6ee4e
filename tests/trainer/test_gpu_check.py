"""``scripts/gpu-check.sh`` (the prepared run for a GPU machine) runs on the CPU too: an SFT stage and a
GRPO step in bf16, then an FSDP2 step under torchrun with one process (gloo), with and without LoRA,
each reporting tokens/s and peak memory."""

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_check_runs_every_stage_on_the_cpu(tmp_path):
    env = {**os.environ, "GPU_CHECK_TESTS": "0", "GPU_CHECK_OUT": str(tmp_path)}
    done = subprocess.run(["bash", "scripts/gpu-check.sh", "cpu"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("gpu-check:")]
    assert any(re.match(r"gpu-check: SFT on cpu in bfloat16: 16 examples, \d+ trained tokens/s, peak RSS \d+ MiB", line)
               for line in lines), lines
    assert any(re.match(r"gpu-check: GRPO step on cpu in bfloat16: \d+ sampled tokens/s", line) for line in lines), lines
    assert any(re.match(r"gpu-check: FSDP2 step under torchrun \(1 process\) in bfloat16: \d+ sampled tokens/s", line)
               for line in lines), lines
    assert any(re.match(r"gpu-check: FSDP2 LoRA step under torchrun \(1 process\) in bfloat16: \d+ sampled tokens/s",
                        line) for line in lines), lines
    assert lines[-1].startswith("gpu-check: ok")
    assert (tmp_path / "one-process" / "sft.json").is_file()  # the SFT stage, then one step's episodes
    assert (tmp_path / "one-process" / "rollouts" / "step-000001" / "trajectories.jsonl").is_file()
    assert (tmp_path / "fsdp" / "steps.jsonl").is_file()
    assert (tmp_path / "fsdp" / "final" / "model.safetensors").is_file()
    assert (tmp_path / "fsdp-lora" / "final" / "adapter" / "adapter_config.json").is_file()
