"""FSDP2 for the bundled trainer: process group, sharding, full state dicts, step statistics.

One process (plain ``envhub train``) or several under ``torchrun``: every function here takes the
:class:`DistInfo` of :func:`init_distributed` and does the right thing for both, so the training
loop has no ``if distributed`` branches. With one process nothing is sharded and no process group
exists; with several, :func:`shard_model` applies ``torch.distributed.fsdp.fully_shard`` (FSDP2)
to every decoder layer and then to the root, on gloo (CPU) or nccl (GPU), with fp32 parameters
(``dtype: bfloat16`` computes the forward passes under autocast; the shards stay fp32).

Gradient contract (the one thing that differs from FSDP2's defaults): the loop computes each
rank's loss with the *full-batch* normalizers, so that the losses of all ranks' micro-batches sum
to the full-batch loss. :func:`shard_model` therefore makes FSDP *sum* gradients across ranks
instead of averaging them (``set_gradient_divide_factor(1.0)`` with sum-only reductions on every
FSDP module): after ``backward`` on every rank, the sharded gradients are exactly the
single-process gradient of the full batch, and the optimizer step equals the single-process one
up to float rounding. ``tests/trainer/test_fsdp.py`` checks this with 2 gloo processes.

State dicts go through ``torch.distributed.checkpoint.state_dict`` with ``full_state_dict=True``:
model weights come back unsharded on every rank (each rank's engine copy needs them), the
optimizer state unsharded on rank 0 only (rank 0 writes checkpoints) and is broadcast from rank
0 when loaded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

__all__ = [
    "DistInfo",
    "all_reduce_sum",
    "barrier",
    "clip_grad_norm",
    "decoder_layers",
    "full_state_dict",
    "init_distributed",
    "is_sharded",
    "load_full_state_dict",
    "load_optimizer_state",
    "optimizer_state",
    "reshard_after_forward_only",
    "shard_model",
    "shutdown_distributed",
]


@dataclass(frozen=True)
class DistInfo:
    """Where this process stands: its rank among ``world_size`` processes, its device, and the
    process group's backend (``None`` when there is no process group: a single process)."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that logs, writes checkpoints and exports."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """A process group (torchrun, even with one process: FSDP2 then shards over one device); every
        helper here is then a collective."""
        return self.backend is not None


def _default_device(local_rank: int, setting: str = "auto") -> torch.device:
    if setting == "cuda" or (setting == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("device: cuda, but torch sees no CUDA device (torch.cuda.is_available() is "
                               "False); use device: cpu or auto")
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def init_distributed(*, device: str = "auto", backend: str | None = None, timeout_s: float = 1800.0) -> DistInfo:
    """Join the process group that ``torchrun`` describes, or describe a single process, on ``device``
    (``auto``: CUDA when torch sees it, else the CPU; ``cuda`` without CUDA is a RuntimeError).

    Under ``torchrun`` (``RANK`` set, any world size: ``--nproc_per_node 1`` is FSDP2 on one device)
    this initializes the default process group with ``backend`` (default: nccl on CUDA, gloo on the CPU; the device is
    then ``cuda:LOCAL_RANK`` or the CPU). Otherwise it returns a single-process :class:`DistInfo`
    with ``backend=None`` and creates no process group.
    Idempotent: a second call returns the same description without re-initializing.
    """
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    if dist.is_available() and dist.is_initialized():
        device_ = _device_for(dist.get_backend(), local_rank)
        return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, device_, dist.get_backend())
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return DistInfo(0, 1, 0, _default_device(0, device), None)
    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available in this torch build; run with one process")
    chosen = backend or ("nccl" if _default_device(local_rank, device).type == "cuda" else "gloo")
    device_ = _device_for(chosen, local_rank)
    if device_.type == "cuda":
        torch.cuda.set_device(device_)
    dist.init_process_group(backend=chosen, timeout=timedelta(seconds=timeout_s),
                            **({"device_id": device_} if device_.type == "cuda" else {}))
    return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, device_, chosen)


def _device_for(backend: str, local_rank: int) -> torch.device:
    if backend == "nccl":
        return torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
    return torch.device("cpu")


# ---- sharding -------------------------------------------------------------------------------------

def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder blocks: ``model.model.layers`` for Hugging Face Llama-likes, else the
    ``nn.ModuleList`` holding the most parameters; :class:`ValueError` when there is none. A ``peft``
    model (LoRA) is looked into: its blocks are the wrapped model's."""
    if callable(getattr(model, "get_base_model", None)):
        model = model.get_base_model()
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if isinstance(layers, nn.ModuleList) and len(layers) > 0:
        return layers
    candidates = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 0]
    if not candidates:
        raise ValueError(f"cannot shard {type(model).__name__}: no decoder layers found (no model.model.layers "
                         "and no nn.ModuleList of blocks)")
    return max(candidates, key=lambda m: sum(p.numel() for p in m.parameters()))


def shard_model(model: nn.Module, dist_info: DistInfo, *, dtype: torch.dtype = torch.float32) -> nn.Module:
    """Shard ``model`` with FSDP2 across the process group; returns the (same, now sharded) module.

    World size 1: the model is returned unchanged. Otherwise the model is cast to ``dtype`` (fp32:
    no mixed precision), moved to ``dist_info.device``, and ``fully_shard`` is applied to every
    decoder layer (:func:`decoder_layers`) and then to the root. Gradients are summed across ranks,
    not averaged (see the module docstring): every rank's loss must use the full-batch normalizers.
    """
    if not dist_info.distributed:
        return model
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard

    model.to(device=dist_info.device, dtype=dtype)
    mesh = init_device_mesh(dist_info.device.type, (dist_info.world_size,))
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            # SUM of the ranks' gradients (factor 1, no AVG/PREMUL_SUM ops, which gloo lacks).
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return model


def is_sharded(model: nn.Module) -> bool:
    """Whether every parameter is currently a sharded ``DTensor`` (true of a sharded model
    between steps; false while FSDP holds unsharded parameters, and for a plain model)."""
    from torch.distributed.tensor import DTensor

    params = list(model.parameters())
    return bool(params) and all(isinstance(p, DTensor) for p in params)


def reshard_after_forward_only(model: nn.Module) -> None:
    """Free the unsharded parameters after a forward without backward (scoring, reference
    logprobs). FSDP2 reshards a layer after its forward, but not the root, whose parameters
    (embeddings, final norm, head) it keeps for the backward that never comes; call this so
    memory stays flat and the next forward/backward starts from sharded parameters. No-op for an
    unsharded model."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


# ---- state dicts -----------------------------------------------------------------------------------

def _options(**kwargs: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(**kwargs)


def full_state_dict(model: nn.Module, dist_info: DistInfo) -> dict[str, torch.Tensor]:
    """The full (unsharded) weights as detached CPU tensors, on EVERY rank (a collective: all
    ranks must call it). World size 1: CPU clones of ``model.state_dict()`` (tied weights keep
    both names, each its own clone)."""
    if not dist_info.distributed:
        return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    # cpu_offload=True would gather onto rank 0 only; gather everywhere, then copy to the CPU.
    state = get_model_state_dict(model, options=_options(full_state_dict=True, cpu_offload=False))
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}


def load_full_state_dict(model: nn.Module, state: dict[str, torch.Tensor], dist_info: DistInfo) -> None:
    """Load full (unsharded) weights, given on every rank, into ``model`` (sharded or not; a
    collective when sharded). ``state`` is not modified.

    Strict: a missing or unexpected key raises; tied weights may be given under either name."""
    if not dist_info.distributed:
        missing, unexpected = model.load_state_dict(state, strict=False)
        _check_keys(model, state, missing, unexpected)
        return
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    # set_model_state_dict replaces the dict's values by shards: hand it a copy of the mapping.
    set_model_state_dict(model, dict(state), options=_options(full_state_dict=True, strict=True))


def _check_keys(model: nn.Module, state: dict[str, Any], missing: list[str], unexpected: list[str]) -> None:
    own = model.state_dict()
    by_storage: dict[int, set[str]] = {}
    for name, tensor in own.items():
        by_storage.setdefault(tensor.data_ptr(), set()).add(name)
    really_missing = [k for k in missing if not any(a in state for a in by_storage[own[k].data_ptr()])]
    if really_missing or unexpected:
        raise ValueError(f"state dict does not match the model: missing {really_missing[:5]}, "
                         f"unexpected {list(unexpected)[:5]}")


def optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, dist_info: DistInfo) -> dict[str, Any]:
    """The optimizer's full state keyed by parameter names (a collective: all ranks call it).

    Rank 0 gets the full unsharded state on the CPU (what a checkpoint saves; rank 0 writes it);
    other ranks get ``{}``. The format is the same at every world size, so a checkpoint taken
    with N processes resumes with M."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    state = get_optimizer_state_dict(model, optimizer,
                                     options=_options(full_state_dict=True, cpu_offload=True))
    # Tensors that were not gathered (e.g. Adam's CPU ``step``) come back as the optimizer's own
    # live tensors: copy them, or the next step would change the saved state.
    state = _to_cpu(state, _live_storages(optimizer))
    return state if dist_info.is_main else {}


def load_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any],
                         dist_info: DistInfo) -> None:
    """Load what :func:`optimizer_state` returned (a collective). Rank 0 must pass the full state;
    other ranks may pass it too or ``{}``: rank 0's copy is broadcast to them. ``state`` is not
    modified."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    # Loaded tensors may alias the ones given (CPU ``step``, shards as views): give copies.
    state = _to_cpu(state) if dist_info.is_main else {}
    if dist_info.distributed:
        options = _options(full_state_dict=True, broadcast_from_rank0=True)
        set_optimizer_state_dict(model, optimizer, state, options=options)
    else:
        # Unsharded parameters take a full state as it is (full_state_dict=True needs a process group).
        set_optimizer_state_dict(model, optimizer, state, options=_options(full_state_dict=False))


def _live_storages(optimizer: torch.optim.Optimizer) -> set[int]:
    ptrs: set[int] = set()
    for per_param in optimizer.state.values():
        for value in per_param.values():
            if isinstance(value, torch.Tensor):
                local = getattr(value, "to_local", None)
                ptrs.add((local() if local is not None else value).untyped_storage().data_ptr())
    return ptrs


def _to_cpu(value: Any, only: set[int] | None = None) -> Any:
    """The same nested dicts and lists with their tensors copied to the CPU (all of them, or
    only those whose storage is in ``only``; the others are moved to the CPU if needed)."""
    if isinstance(value, torch.Tensor):
        if only is None or value.untyped_storage().data_ptr() in only:
            return value.detach().to("cpu", copy=True)
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v, only) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_cpu(v, only) for v in value]
    return value


# ---- collectives for the loop ------------------------------------------------------------------------

def clip_grad_norm(model: nn.Module, max_norm: float) -> float:
    """Clip the gradients' global L2 norm to ``max_norm`` (sharded or not); returns the norm
    before clipping. Every rank must call it (with FSDP the norm is a collective over shards)."""
    params = [p for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    full = getattr(norm, "full_tensor", None)
    return float(full() if full is not None else norm)


def all_reduce_sum(values: dict[str, float], dist_info: DistInfo) -> dict[str, float]:
    """Sum each statistic over the ranks (a collective; every rank passes the same keys). World
    size 1: the values unchanged."""
    if not dist_info.distributed:
        return dict(values)
    keys = sorted(values)
    tensor = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=dist_info.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return dict(zip(keys, tensor.cpu().tolist(), strict=True))


def all_reduce_max(values: dict[str, float], dist_info: DistInfo) -> dict[str, float]:
    """The maximum of each statistic over the ranks (a collective, like :func:`all_reduce_sum`)."""
    if not dist_info.distributed:
        return dict(values)
    keys = sorted(values)
    tensor = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=dist_info.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return dict(zip(keys, tensor.cpu().tolist(), strict=True))


def all_gather_lists(items: list[Any], dist_info: DistInfo) -> list[Any]:
    """Every rank's ``items`` (picklable), concatenated in rank order (a collective)."""
    if not dist_info.distributed:
        return list(items)
    gathered: list[Any] = [None] * dist_info.world_size
    dist.all_gather_object(gathered, list(items))
    return [x for part in gathered for x in part]


def shutdown_distributed() -> None:
    """Leave the process group :func:`init_distributed` joined (no-op without one). A rank that exits
    with the group still up can abort at interpreter exit (gloo's threads: "terminate called without an
    active exception", SIGABRT) and turn a finished run into a failed launch."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def barrier(dist_info: DistInfo) -> None:
    """Wait for every rank (no-op with one process)."""
    if dist_info.distributed:
        if dist_info.device.type == "cuda":
            dist.barrier(device_ids=[dist_info.device.index])
        else:
            dist.barrier()
