"""The trainer on a device, in one prepared run (``scripts/gpu-check.sh`` runs it after the trainer's tests):

1. an SFT stage and a GRPO step in one process, in ``--dtype`` (bf16 by default: fp32 master weights,
   bf16 forward passes), on ``--device``;
2. one GRPO step under ``torchrun --nproc_per_node 1``: FSDP2 over one device (nccl on CUDA, gloo on
   the CPU), in the same dtype; 3. the same with a LoRA adapter (peft, r 16, all linear layers).

Each prints one ``gpu-check:`` line with tokens/s (sampled tokens over rollout seconds; for SFT, trained
tokens over its seconds) and peak memory (CUDA: torch's max allocated; CPU: the process's peak RSS), and
the last line says ``gpu-check: ok``. The env is the trainer tests' one-turn letter env, so nothing but
this repository and its installed packages is needed. ``--device cpu`` runs the same checks on the CPU (CI).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests" / "trainer"
sys.path.insert(0, str(TESTS))

from letter_env import register_test_env  # noqa: E402
from trainer_fixtures import letter_config  # noqa: E402


def _config(run_dir: Path, model: Path, args: argparse.Namespace, *, lr: float = 1e-5, **sections: object) -> dict:
    return letter_config(run_dir, model, device=args.device, dtype=args.dtype, steps=1, threads=0,
                         sampling={"max_new_tokens": args.max_new_tokens, "temperature": 1.0},
                         rollout={"groups_per_step": 2, "group_size": 8, "concurrency": 16,
                                  "max_response_tokens": args.max_new_tokens, "max_context": 512},
                         optim={"lr": lr, "micro_batch_size": 8}, **sections)


def _peak(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return f"peak {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB allocated on {torch.cuda.get_device_name()}"
    return f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"


def in_process(model: Path, gold: Path, out: Path, args: argparse.Namespace) -> None:
    from envhub.trainer.config import parse_config
    from envhub.trainer.loop import Trainer

    sft = {"runs": [str(gold)], "epochs": 1, "lr": 1e-4, "batch_size": 16, "micro_batch_size": 8}
    trainer = Trainer(parse_config(_config(out / "one-process", model, args, sft=sft)), log=print)
    try:
        device = str(trainer.dist.device)
        t0 = time.monotonic()
        trainer.sft_stage()
        sft_s = time.monotonic() - t0
        tokens = sum(s.sampled_tokens for s in trainer.sft_examples)
        print(f"gpu-check: SFT on {device} in {args.dtype}: {len(trainer.sft_examples)} examples, "
              f"{tokens / sft_s:.0f} trained tokens/s, {_peak(device)}", flush=True)
        record = trainer.train_step()
        assert record["trained_samples"] > 0, record
        print(f"gpu-check: GRPO step on {device} in {args.dtype}: {record['tokens_per_second']:.0f} sampled tokens/s, "
              f"train {record['time']['train_s']:.1f}s, {_peak(device)}", flush=True)
    finally:
        trainer.close()


def under_torchrun(model: Path, out: Path, args: argparse.Namespace, *, lora: bool = False) -> None:
    name = "fsdp-lora" if lora else "fsdp"
    run = out / name
    config = _config(run, model, args, algorithm={"drop_zero_variance": False},
                     **({"lora": {"r": 16, "alpha": 32.0}, "lr": 1e-4} if lora else {}))
    path = out / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--standalone",
               str(TESTS / "train_script.py"), str(path)]
    subprocess.run(command, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(TESTS)})
    record = json.loads((run / "steps.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    peak = record.get("device_peak_mb")
    memory = f"peak {peak:.0f} MiB allocated" if peak is not None else f"RSS {record['rss_mb']:.0f} MiB"
    print(f"gpu-check: FSDP2 {'LoRA ' if lora else ''}step under torchrun (1 process) in {args.dtype}: "
          f"{record['tokens_per_second']:.0f} sampled tokens/s, train {record['time']['train_s']:.1f}s, {memory}",
          flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16")
    parser.add_argument("--model", default="tiny", help="a model dir, smollm2-135m, or tiny (a random 2-layer model)")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--out", type=Path, default=None, help="where the runs go (default: a temp dir)")
    args = parser.parse_args()

    from envhub.adapters.engines.models import resolve_model
    from envhub.adapters.engines.tiny import build_tiny_model
    from envhub.policies import make_policy
    from envhub.rollout.runner import run_rollouts

    register_test_env()
    model = build_tiny_model(layers=2, hidden=64, init_std=0.02) if args.model == "tiny" else resolve_model(args.model)
    out = args.out or Path(tempfile.mkdtemp(prefix="envhub-gpu-check-"))
    gold = out / "gold"
    run_rollouts("test/FirstLetter-v0", make_policy("gold"), out_dir=gold, episodes=16)
    in_process(model, gold, out, args)
    under_torchrun(model, out, args)
    under_torchrun(model, out, args, lora=True)
    print(f"gpu-check: ok ({out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
