"""The trainer's models, built from its config (:class:`PolicyModels`): the trained module (FSDP2-
sharded, :mod:`envhub.trainer.fsdp`), its frozen reference for the KL term (the policy GRPO starts
from, after the SFT stage: :meth:`PolicyModels.freeze_reference`), AdamW and the LR schedule,
the rollout engine (:func:`~envhub.adapters.engines.factory.make_engine`: in process, or an SGLang server)
with the model policy over it, and the weight push from the trained module to the engine
(:mod:`envhub.trainer.weight_sync`).

Everything is on the run's device (``device``; :func:`envhub.trainer.fsdp.init_distributed`) and computes its
forward passes in ``dtype`` (:mod:`envhub.adapters.engines.precision`); the weights stay fp32.
The in-process engine samples from the trained module itself when ``rollout.share_weights`` allows
(one process, the transformers engine): no second copy of the model and no weight copy per step,
only a new weight version. Otherwise it samples from an unsharded copy that every push replaces;
with ``rollout.mode: async`` always, the push staged (the engine swaps the copy's weights once the
requests in flight are done, while this module trains on). An SGLang server with ``rollout.mode: async``
is paused around each push (:mod:`envhub.trainer.async_sglang`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from envhub.adapters.engines.factory import LocalModel, make_engine
from envhub.adapters.engines.precision import COMPUTE_DTYPES
from envhub.adapters.model_policy import ModelPolicy
from envhub.trainer import fsdp, lora
from envhub.trainer.activations import ActivationCheckpointing
from envhub.trainer.config import TrainConfig
from envhub.trainer.update import adamw, lr_factor
from envhub.trainer.weight_sync import weight_sync_for, write_hf_dir


class PolicyModels:
    """Everything of ``config`` that holds weights, for the model in ``model_dir``; ``staging_dir``
    is where weights for the engine are staged. :meth:`close` stops the engine."""

    def __init__(self, config: TrainConfig, model_dir: Path, dist: fsdp.DistInfo, *, staging_dir: Path) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.config, self.model_dir, self.dist = config, model_dir, dist
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        # fp32 master weights on this rank's device before anything copies them (reference, engine)
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
        model.config.use_cache = False
        if config.lora is not None:  # before anything copies it: the reference and the engine's copy carry it too
            model = lora.wrap(model, config.lora, seed=config.seed)
        model = model.to(dist.device)
        self.compute_dtype = COMPUTE_DTYPES[config.dtype]
        self.pad_id = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None
                          else self.tokenizer.eos_token_id)
        self.reference = None  # holds the base weights until freeze_reference or load_reference
        if config.algorithm.kl_coef > 0:
            self.reference = copy.deepcopy(model).eval().requires_grad_(False)
        self.reference_ready = False
        # async: the engine samples from its own copy while this module trains (weight_sync's staged push)
        self.overlapped = config.rollout.mode == "async"
        share = config.rollout.share_weights and not dist.distributed and not self.overlapped
        local = LocalModel(model, self.tokenizer, share=share,
                           max_batch_size=max(config.rollout.concurrency, 1), weight_version="0",
                           seed=config.seed + dist.rank, model_id=str(model_dir), compute_dtype=self.compute_dtype)
        # Any: the trainer also uses what engines offer beyond the protocol (sampler_rng, mark_weights_updated)
        self.engine: Any = make_engine(config.engine, model=local, max_context=config.rollout.max_context)
        if self.overlapped and self.engine.name == "sglang":  # paused (and its aborted requests resent) at pushes
            from envhub.trainer.async_sglang import PausingSGLangEngine

            self.engine = PausingSGLangEngine(self.engine)
        self.shared = getattr(self.engine, "model", None) is model
        try:
            optim = config.optim
            self.checkpointing = ActivationCheckpointing(model, optim.activation_checkpointing,
                                                         optim.activation_memory_fraction)
            self.model = fsdp.shard_model(model, dist)
            self.model.eval()  # train mode only inside an update: the engine may sample from this module
            self.optimizer = adamw(self.model.parameters(), fused=optim.fused_optimizer and not dist.distributed,
                                   lr=optim.lr, betas=optim.betas, eps=optim.eps, weight_decay=optim.weight_decay)
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(
                self.optimizer, lambda update: lr_factor(self.config, update))
            self.sync = weight_sync_for(self.engine, base_model_dir=model_dir, staging_dir=staging_dir,
                                        timeout_s=config.weight_sync_timeout_s, model_dir_state=self.model_dir_state,
                                        staged=self.overlapped)
        except BaseException:
            self.engine.close()
            raise

    def policy(self, params: Any, *, name: str | None = None) -> ModelPolicy:
        """The model policy over the engine, sampling with ``params``; ``name`` (default: the model dir it
        started from) is what records and reports call it. Async: with a tokenizer of its own (a Rust
        tokenizer must not serve two threads, and the trainer's audits use ``self.tokenizer`` meanwhile)."""
        r = self.config.rollout
        tokenizer = copy.deepcopy(self.tokenizer) if self.overlapped else self.tokenizer
        return ModelPolicy(self.engine, tokenizer, params=params, max_context=r.max_context,
                           chat_format=self.config.chat_format,
                           name=name or f"hf:{self.model_dir}", model_id=str(self.model_dir), tokenizer_id=str(self.model_dir),
                           fit_turns=r.fit_turns, max_response_tokens=r.max_response_tokens)

    def freeze_reference(self) -> None:
        """The KL reference becomes a frozen copy of the trained module as it is now: called at the start
        of GRPO, after SFT (every rank: a collective when sharded). No-op without a KL term."""
        if self.reference is not None:
            self.load_reference(fsdp.full_state_dict(self.model, self.dist))

    def load_reference(self, state: dict[str, torch.Tensor]) -> None:
        """The KL reference's weights (a checkpoint's ``reference.pt``, or the policy's full state dict)."""
        if self.reference is not None:
            if self.config.lora is not None:  # a checkpoint keeps only the reference's adapter
                state = lora.complete_state(state, self.reference.state_dict())
            fsdp.load_full_state_dict(self.reference, state, fsdp.DistInfo(0, 1, 0, self.dist.device, None))
            self.reference_ready = True

    def reference_state(self) -> dict[str, torch.Tensor] | None:
        """The KL reference's weights once it is fixed (what a checkpoint saves); None before, or without one."""
        if self.reference is None or not self.reference_ready:
            return None
        state = self.reference.state_dict()
        return {k: v for k, v in state.items() if lora.is_adapter_key(k)} if self.config.lora is not None else state

    def model_dir_state(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``state`` (the trained module's full state dict) as the base model's weights, what a model
        dir holds and an SGLang server loads: with LoRA, the adapter merged in."""
        return lora.merged_state(state, self.config.lora) if self.config.lora is not None else state

    def write_model_dir(self, state: dict[str, torch.Tensor], out_dir: Path) -> Path:
        """``state`` (the trained module's full state dict) as a model dir ``--policy hf:OUT_DIR``
        evaluates; with LoRA the merged weights, and the adapter as peft saves it in ``OUT_DIR/adapter``."""
        write_hf_dir(self.model_dir_state(state), self.model_dir, out_dir)
        if self.config.lora is not None:
            lora.write_adapter_dir(state, self.config.lora, self.model_dir, out_dir / "adapter")
        return out_dir

    def checkpoint_weights(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """What a checkpoint keeps of ``state``: every weight, or with LoRA only the adapter's."""
        return lora.trainable_state(state, self.model) if self.config.lora is not None else state

    def full_weights(self, saved: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A checkpoint's weights as a full state dict of the trained module (a collective when
        sharded): with LoRA, the base weights it was built from with the saved adapter over them."""
        if self.config.lora is None:
            return saved
        return lora.complete_state(saved, fsdp.full_state_dict(self.model, self.dist))

    def publish(self, version: str, state: dict[str, torch.Tensor] | None = None) -> None:
        """The engine samples with the trained weights as ``version`` from now on (every rank calls it): a
        shared module only changes its version; otherwise the sync pushes the full weights (``state``, or
        gathered now), and a failed or hung update stops the run (WeightSyncError)."""
        if self.shared:
            self.engine.mark_weights_updated(version)
            return
        self.sync.push(state if state is not None else fsdp.full_state_dict(self.model, self.dist), version, self.dist)

    def close(self) -> None:
        """Stop the engine (idempotent)."""
        self.engine.close()
