"""The trainer's one config: plain data, saved into the run directory, validated before anything runs.

It nests the types envhub already has -- the env id, split and env args, :class:`~envhub.env.Budget`,
:class:`~envhub.adapters.engines.SamplingParams` -- so a trainer config reads like a rollout command.
Every section forbids unknown keys: a typo (``lerning_rate``) is an error, not a silent default.

``load_config(path, overrides)`` reads YAML (or JSON) and applies ``--set key.sub=value`` overrides,
whose values are parsed as YAML scalars (``--set optim.lr=3e-5``, ``--set algorithm.loss=dapo``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from envhub.adapters.engines.base import SamplingParams
from envhub.env import Budget

LossName = Literal["grpo", "dr_grpo", "dapo", "gspo", "cispo"]
#: the experiment trackers of ``TrainConfig.loggers`` (envhub.trainer.trackers)
LoggerName = Literal["tensorboard", "wandb", "mlflow", "trackio"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EnvConfig(_Section):
    """What to train on: ``id`` as in ``envhub list``; ``args`` go to ``envhub.make`` (sandbox, parser, ...)."""

    id: str
    split: str = "train"
    validation_split: str | None = "validation"
    args: dict[str, Any] = Field(default_factory=dict)
    budget: Budget | None = None
    #: a ``curriculum.json`` from ``envhub profile``: train only on its tasks (those with 0 < pass rate < 1)
    curriculum: Path | None = None


class RolloutConfig(_Section):
    groups_per_step: int = Field(4, ge=1)
    group_size: int = 8
    concurrency: int = Field(8, ge=1)
    #: the most tokens of one episode's whole response (sampled turns and env replies)
    max_response_tokens: int = Field(512, ge=1)
    #: the longest sequence (prompt and response) the model is asked to hold
    max_context: int = Field(2048, ge=2)
    #: shrink a turn's ``max_new_tokens`` to the room left instead of ending as context_overflow
    fit_turns: bool = True
    #: one process with the in-process engine: the engine samples from the training module itself
    #: (no second copy of the model, no weight copy per step); false: from a copy synced every step
    #: (always a copy with mode async)
    share_weights: bool = True
    #: DAPO's dynamic sampling (veRL's filter_groups): when zero-variance groups leave a step with
    #: fewer than groups_per_step informative groups, more groups are drawn from the task order, at
    #: most ``max_extra_rounds`` times; informative groups beyond groups_per_step are not trained
    dynamic_sampling: bool = False
    max_extra_rounds: int = Field(3, ge=1)
    #: ``sync``: a step samples its groups, then trains on them. ``async``: rollout workers keep
    #: producing whole groups while the trainer trains (envhub/trainer/async_rollouts.py); the
    #: trainer takes the first ``groups_per_step`` finished groups
    mode: Literal["sync", "async"] = "sync"
    #: async: a group starts only while the groups started stay within ``(max_staleness + steps
    #: trained + 1) * groups_per_step``; a sample whose first turn is more weight versions than this
    #: behind the trainer when its batch is formed is ``stale_samples`` (>= 0, checked by preflight)
    max_staleness: int = 1
    #: async: a stale sample is dropped (counted), or kept and weighted by the importance-sampling
    #: correction of ``algorithm.mismatch`` (``reweight`` needs its ``decoupled`` mode)
    stale_samples: Literal["drop", "reweight"] = "drop"
    #: async: the most groups running or finished and not yet trained (>= groups_per_step);
    #: None: ``(max_staleness + 1) * groups_per_step``, what the staleness bound lets start anyway
    buffer_groups: int | None = None


class MismatchConfig(_Section):
    """Train/inference mismatch correction with the engine's sampled logprobs.

    ``bypass``: the engine's logprobs are the old policy of the PPO ratio (one forward pass less).
    ``decoupled``: the old policy is recomputed by the trainer before the update, and the engine
    mismatch is corrected by importance weights pi_old/pi_engine, truncated (``truncate``) or
    zeroed (``mask``) above ``cap``, per token or per sequence. ``normalize: group`` rescales the weights
    within each GRPO group to a mean of 1 and re-centres its advantages on the weighted mean reward, so the
    weights never tilt a group's zero-sum advantages (:func:`envhub.trainer.grpo.group_normalized_weights`).
    """

    mode: Literal["bypass", "decoupled"] = "bypass"
    level: Literal["token", "sequence"] = "token"
    weight: Literal["truncate", "mask"] = "truncate"
    cap: float = Field(2.0, gt=0)
    normalize: Literal["none", "group"] = "none"


class AlgorithmConfig(_Section):
    loss: LossName = "grpo"
    clip_low: float = Field(0.2, ge=0)
    #: None: the same as clip_low (dapo's paper uses 0.28)
    clip_high: float | None = Field(None, ge=0)
    std_normalize: bool = True
    #: outcome classes whose episodes never enter the loss (infra failures are ours, not the policy's); a list
    #: without infra_failure is refused unless train_on_infra is true
    exclude_classes: tuple[str, ...] = ("infra_failure",)
    #: train on infra outcomes (env_error, verifier_error, engine_error) as reward-0 failures anyway
    train_on_infra: bool = False
    drop_zero_variance: bool = True
    #: this many consecutive steps with every group zero-variance (nothing trained): a warning, and
    #: with stop_when_untrained the run stops there (final eval and export still happen)
    zero_variance_patience: int = Field(3, ge=1)
    stop_when_untrained: bool = False
    #: give truncated episodes (budget_exhausted, context_overflow) loss weight 0 instead of reward 0
    mask_truncated: bool = False
    mismatch: MismatchConfig = MismatchConfig()
    #: > 0: k3 KL to a frozen copy of the policy GRPO starts from (after the SFT stage, if any)
    kl_coef: float = Field(0.0, ge=0)
    #: dual clip (veRL's clip_ratio_c) of grpo, dr_grpo and dapo: a negative-advantage token's loss
    #: is capped at -A * clip_ratio_c, so a ratio beyond it no longer grows its push; None: no cap
    clip_ratio_c: float | None = Field(3.0, gt=1)
    #: sampling temperature the trainer scores with; None: the rollout's temperature
    temperature: float | None = None

    @field_validator("exclude_classes")
    @classmethod
    def _known_classes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from envhub.types import OutcomeClass

        known = {c.value for c in OutcomeClass}
        bad = [c for c in value if c not in known]
        if bad:
            raise ValueError(f"unknown outcome classes {bad}; choose from {sorted(known)}")
        return value


class OptimConfig(_Section):
    lr: float = Field(1e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    grad_clip: float | None = Field(1.0, gt=0)
    warmup_steps: int = Field(0, ge=0)
    schedule: Literal["constant", "cosine", "linear"] = "constant"
    micro_batch_size: int = Field(4, ge=1)
    #: recompute activations in the backward pass (transformers' gradient checkpointing): much less
    #: memory for long sequences, about a third more compute. ``auto``: only the micro-batches whose
    #: saved activations would exceed ``activation_memory_fraction`` of the training state
    #: (weights, gradients, AdamW moments); see envhub/trainer/activations.py
    activation_checkpointing: bool | Literal["auto"] = "auto"
    activation_memory_fraction: float = Field(0.25, gt=0)
    #: AdamW's fused kernel (CPU and CUDA; one pass over the parameters instead of a loop of ops):
    #: about 4x faster than the for-each implementation on this CPU, the same update
    fused_optimizer: bool = True
    #: optimizer steps per training step, each on its share of the step's samples (PPO mini-batches);
    #: with more than one, later updates are off-policy and the clip bounds come into play
    updates_per_step: int = Field(1, ge=1)


class SFTConfig(_Section):
    """The supervised warm start: accepted trajectories of run directories, loss on mask-1 tokens only.

    Gold-policy runs have no tokens: their messages are re-encoded with the model's chat format through
    the same token record the model policy builds (tool replies mask 0), so the model learns the
    tool-call syntax it will be asked to sample. Runs of a model keep their sampled tokens as they are
    (rejection sampling)."""

    runs: list[Path]
    epochs: int = Field(1, ge=1)
    lr: float = Field(1e-4, gt=0)
    #: examples per optimizer step
    batch_size: int = Field(16, ge=1)
    micro_batch_size: int = Field(4, ge=1)
    max_examples: int | None = Field(None, ge=1)
    outcomes: tuple[str, ...] = ("success",)
    #: stop SFT once the mean token entropy (nats, temperature 1) of a step's examples falls below
    #: this: a policy that no longer explores gives GRPO all-equal groups (None: run every epoch)
    min_entropy: float | None = Field(None, gt=0)


class LoraConfig(_Section):
    """Train a low-rank adapter (``peft``'s LoRA) instead of every weight: ``W + (alpha / r) * B @ A`` on
    each ``target_modules`` linear layer, the base weights frozen (envhub/trainer/lora.py)."""

    r: int = Field(16, ge=1)
    alpha: float = Field(32.0, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    #: module names (the last part of a dotted name: ``q_proj``) or ``all-linear`` (every linear layer but
    #: the output head)
    target_modules: tuple[str, ...] | Literal["all-linear"] = "all-linear"


class EvalConfig(_Section):
    every: int = Field(0, ge=0)  # 0: only before and after training
    episodes: int = Field(32, ge=1)
    temperature: float = 0.0


class TrainConfig(_Section):
    """``envhub train CONFIG.yaml``: see docs/training.md for every field."""

    run_dir: Path
    #: ``smollm2-135m``, a local model dir, or ``hf:PATH``
    model: str
    #: ``transformers`` (in process, the default) or ``sglang:URL``
    engine: str = "transformers"
    #: the model's chat family by name (``chatml``, ``qwen3``, ``llama3``, ``mistral``; docs/training.md):
    #: detection is skipped, the tokenizer's template still checked against the family. None: detected
    chat_format: str | None = None
    env: EnvConfig
    sampling: SamplingParams = SamplingParams(max_new_tokens=128, temperature=1.0)
    rollout: RolloutConfig = RolloutConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    optim: OptimConfig = OptimConfig()
    sft: SFTConfig | None = None
    #: a LoRA adapter is trained instead of every weight (None: full fine-tuning)
    lora: LoraConfig | None = None
    eval: EvalConfig = EvalConfig()
    steps: int = Field(10, ge=0)
    seed: int = 0
    checkpoint_every: int = Field(5, ge=1)
    keep_checkpoints: int = Field(2, ge=1)
    #: a trajectory failing the token audit: dropped and counted, or the run stops
    audit_failure: Literal["drop", "stop"] = "drop"
    weight_sync_timeout_s: float = Field(300.0, gt=0)
    metrics_port: int | None = None
    tensorboard: bool = False
    #: experiment trackers the run logs to, any of tensorboard, wandb, mlflow, trackio (each a pip extra:
    #: ``envhub[wandb]``); ``tensorboard: true`` is ``tensorboard`` in this list (docs/training.md)
    loggers: tuple[LoggerName, ...] = ()
    #: torch intra-op threads (0: torch's default)
    threads: int = Field(1, ge=0)
    #: where the model, its reference, the in-process engine and every batch live: ``auto`` is CUDA when
    #: torch sees a GPU (under torchrun ``cuda:LOCAL_RANK`` with nccl), else the CPU (gloo)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    #: the forward passes' dtype: ``bfloat16`` runs them under autocast while weights, gradients and AdamW
    #: state stay fp32 (master weights); fp32 is the CPU default (bf16 is 7-25x slower on these CPUs)
    dtype: Literal["float32", "bfloat16"] = "float32"

    @field_validator("loggers", mode="before")
    @classmethod
    def _known_loggers(cls, value: Any) -> Any:
        names, valid = [value] if isinstance(value, str) else value, LoggerName.__args__
        unknown = [name for name in names if name not in valid] if isinstance(names, (list, tuple)) else []
        if unknown:
            raise ValueError(f"unknown tracker(s) {unknown}; valid: {', '.join(valid)}")
        return names

    @field_validator("chat_format")
    @classmethod
    def _known_chat_format(cls, value: str | None) -> str | None:
        if value is not None:
            from envhub.adapters.chat_format import format_named

            format_named(value)  # an unknown name is refused with the known ones
        return value

    @model_validator(mode="after")
    def _engine_spec(self) -> TrainConfig:
        from envhub.adapters.engines.factory import engine_kind

        engine_kind(self.engine)  # an unknown spec is refused with the known ones
        return self

    def dump(self) -> dict[str, Any]:
        return json.loads(self.model_dump_json())


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ValueError(f"--set {dotted}: {key} is not a section")
        node = child
    node[keys[-1]] = value


def load_config(path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """The config at ``path`` with ``key.sub=value`` overrides applied; ValueError says what is wrong."""
    source = Path(path)
    try:
        data = yaml.safe_load(source.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read config {source}: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{source}: a config is a mapping of sections, got {type(data).__name__}")
    for item in overrides or []:
        key, eq, raw = item.partition("=")
        if not eq or not key:
            raise ValueError(f"--set {item!r}: use key.sub=value")
        _set(data, key.strip(), yaml.safe_load(raw))
    return parse_config(data, where=str(source))


def parse_config(data: dict[str, Any], *, where: str = "config") -> TrainConfig:
    from pydantic import ValidationError

    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        lines = [f"  {'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()]
        raise ValueError(f"{where} is not a valid trainer config:\n" + "\n".join(lines)) from None
