#!/usr/bin/env bash
# The tool-using learning demonstration, one command (docs/training.md, "Learning demonstrations"):
#   bash examples/train/learning/run.sh
# Each stage is resumable; rerunning the script continues where it stopped.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=runs/learn-computation
env_args=(--env-arg 'kinds=["bigint","fraction","date"]' --env-arg 'levels=[1,2]')
budget='budget={"max_turns":3,"max_tool_calls":2,"max_format_errors":0}'
# 1. gold episodes for the SFT warm start
envhub rollout envhub/Computation-v0 --policy gold --episodes 48 --split train "${env_args[@]}" --out "$out/gold"
# 2. a short SFT warm start, evaluated before and after on 128 validation episodes
envhub train examples/train/learning/sft.yaml $( [ -e "$out/sft/checkpoints/latest" ] && echo --resume )
# 3. the training tasks the post-SFT model solves sometimes (pass@4 at temperature 1)
envhub profile envhub/Computation-v0 --policy "hf:$out/sft/final?temperature=1.0&max_new_tokens=128" \
    --k 4 --limit 48 --split train --concurrency 8 "${env_args[@]}" --env-arg "$budget" --out "$out/profile"
# 4. GRPO on them, evaluated before (= post-SFT) and after on the same 128 validation episodes
envhub train examples/train/learning/grpo.yaml $( [ -e "$out/grpo/checkpoints/latest" ] && echo --resume )
# 5. the report: after GRPO against its start (= post-SFT) on the same episodes, paired, with 95 % intervals
envhub report "$out/grpo"
