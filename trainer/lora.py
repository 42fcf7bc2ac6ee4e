"""LoRA through ``peft``: the trained module is the base model with a low-rank adapter, the base frozen.

With ``lora:`` in the config (:class:`~envhub.trainer.config.LoraConfig`) the model is wrapped by
``peft.get_peft_model`` (:func:`wrap`) before anything copies it, so the KL reference and the in-process
engine's copy are adapter models too. Only the adapter's ``lora_A``/``lora_B`` matrices require grad:
AdamW holds only them, FSDP2 shards the frozen base with them, and gradients exist only for them.

Where the adapter goes:

* **checkpoints** keep only the trainable tensors (:func:`trainable_state`) and their optimizer state;
  a resume loads the base from the model dir and the adapter over it (:func:`complete_state`);
* **the in-process engine** samples through the adapter model (the shared module, or a copy that
  every push replaces with the peft-named weights);
* **an SGLang server** gets the merged weights (:func:`merged_state`) through the same update from
  disk that full fine-tuning uses. SGLang's own LoRA serving (``/load_lora_adapter``, needs
  ``--enable-lora`` and a ``--max-lora-rank`` fixed at launch) adds the adapter's matmuls to every
  decode step and keeps a second weight path to version; a merged push keeps one contract for both
  kinds of run and makes the server sample exactly the weights the trainer scores;
* **``RUN/final``** is the merged model (``--policy hf:RUN/final``) and ``RUN/final/adapter`` the
  adapter as peft writes it (``PeftModel.from_pretrained(base, "RUN/final/adapter")``).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch

from envhub.trainer.config import LoraConfig

#: the one adapter a trained model carries (peft's default name)
ADAPTER = "default"
#: how peft prefixes the wrapped model's state dict keys
PEFT_PREFIX = "base_model.model."


def wrap(model: torch.nn.Module, config: LoraConfig, *, seed: int = 0) -> torch.nn.Module:
    """``model`` (on the CPU) with a fresh LoRA adapter: B is zero (the wrapped model computes what
    ``model`` did), A is drawn from ``seed`` alone, so every rank and every world size start alike."""
    try:
        import peft
    except ImportError as exc:
        raise RuntimeError("lora: needs peft: pip install 'envhub[lora]'") from exc
    target = config.target_modules if isinstance(config.target_modules, str) else list(config.target_modules)
    settings = peft.LoraConfig(r=config.r, lora_alpha=config.alpha, lora_dropout=config.dropout,
                               target_modules=target, bias="none", task_type="CAUSAL_LM")
    try:
        with warnings.catch_warnings():  # peft 0.21 still reads transformers' renamed attribute
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                wrapped = peft.get_peft_model(model, settings, adapter_name=ADAPTER)
    except ValueError as exc:  # target modules that match nothing
        raise ValueError(f"lora.target_modules {config.target_modules!r}: {exc}") from exc
    _check_adapted(wrapped, config)
    return wrapped


def _check_adapted(model: torch.nn.Module, config: LoraConfig) -> None:
    """Only plain linear layers take an adapter (what :func:`merged_state` folds in), and not an output
    head that shares its weight with the embeddings: merged, the two would no longer be one tensor."""
    adapted = {name: module.get_base_layer() for name, module in model.named_modules()
               if hasattr(module, "lora_A") and hasattr(module, "get_base_layer")}
    others = sorted(f"{name.removeprefix(PEFT_PREFIX)} ({type(base).__name__})" for name, base in adapted.items()
                    if type(base) is not torch.nn.Linear)
    if others:
        raise ValueError(f"lora.target_modules {config.target_modules!r}: only nn.Linear layers can take an adapter "
                         f"here; these are not: {', '.join(others)}")
    tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
    head = model.get_base_model().get_output_embeddings()  # the adapter's wrapper when it took one
    if tied and hasattr(head, "lora_A"):
        raise ValueError(f"lora.target_modules {config.target_modules!r}: the output head shares its weight with the "
                         "input embeddings (tie_word_embeddings); an adapter on it would untie them. Leave it out "
                         "(all-linear does) or train a model with its own head")


def is_adapter_key(key: str) -> bool:
    return ".lora_A." in key or ".lora_B." in key


def trainable_state(state: dict[str, torch.Tensor], model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The tensors of ``state`` (a full state dict of ``model``) that training changes."""
    names = {name for name, p in model.named_parameters() if p.requires_grad}
    return {k: v for k, v in state.items() if k in names}


def complete_state(partial: dict[str, torch.Tensor], full: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``full`` with the tensors of ``partial`` (a checkpoint's adapter) in place; a key ``full`` lacks
    is an error (a checkpoint of another adapter)."""
    foreign = sorted(set(partial) - set(full))
    if foreign:
        raise ValueError(f"the checkpoint's adapter does not fit this model: unknown tensors {foreign[:5]}")
    return {**full, **partial}


def merged_state(state: dict[str, torch.Tensor], config: LoraConfig) -> dict[str, torch.Tensor]:
    """The base model's state dict, under its own names, with the adapter folded in:
    ``W + (alpha / r) * B @ A`` for every adapted layer (computed in fp32). ``state`` is the peft
    model's full state dict; it is not modified."""
    scale = config.alpha / config.r
    merged: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if not is_adapter_key(key):
            merged[key.removeprefix(PEFT_PREFIX).replace(".base_layer.", ".")] = value
    suffix = f".lora_A.{ADAPTER}.weight"
    for key in state:
        if not key.endswith(suffix):
            continue
        module = key[: -len(suffix)]
        a, b = state[key].float(), state[f"{module}.lora_B.{ADAPTER}.weight"].float()
        name = f"{module.removeprefix(PEFT_PREFIX)}.weight"
        base = merged[name]
        merged[name] = (base.float() + scale * (b @ a)).to(base.dtype)
    return merged


def write_adapter_dir(state: dict[str, torch.Tensor], config: LoraConfig, base_model_dir: Path,
                      out_dir: Path) -> Path:
    """The adapter of ``state`` (the peft model's full state dict) as peft saves it
    (``adapter_config.json``, ``adapter_model.safetensors``) in ``out_dir``, written atomically."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from envhub.trainer.weight_sync import atomic_dir

    with torch.device("meta"):
        base = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(base_model_dir)))
    model = wrap(base, config)
    model.load_state_dict({k: v for k, v in state.items() if is_adapter_key(k)}, strict=False, assign=True)
    with atomic_dir(Path(out_dir)) as tmp:
        model.save_pretrained(str(tmp), save_embedding_layers=False)  # the base's own weights stay in the base
        _point_at_base(tmp / "adapter_config.json", base_model_dir)
    return Path(out_dir)


def _point_at_base(config_path: Path, base_model_dir: Path) -> None:
    data: dict[str, Any] = json.loads(config_path.read_text(encoding="utf-8"))
    data["base_model_name_or_path"] = str(Path(base_model_dir).resolve())
    config_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
