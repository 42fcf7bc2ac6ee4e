"""Which engine a spec names, and the engine built for it: the one place that decides (:func:`make_engine`).

Specs: ``transformers`` (in process) or ``sglang:URL`` (a client of an SGLang server). The policies
(``hf:PATH`` and ``sglang:URL`` of :mod:`~envhub.adapters.engines.specs`) and the trainer (its config's
``engine``) build their engines here; the trainer's weight sync is picked by the engine built
(:func:`envhub.trainer.weight_sync.weight_sync_for`).

The backends are imported only for the kind built, so the SGLang client works without torch.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envhub.adapters.engines.base import Engine

if TYPE_CHECKING:
    import torch

#: every kind of engine, as a spec names it: ``KIND`` (in process) or ``KIND:ADDRESS`` (a server)
ENGINE_SPECS = ("transformers", "sglang:URL")


@dataclass(frozen=True)
class LocalModel:
    """A model this process already holds, for an engine that runs in process (a server runs its own
    model and ignores this).

    ``share``: the engine samples from ``module`` itself, which its owner trains in place (then only
    the version changes, :meth:`~envhub.adapters.engines.TransformersEngine.mark_weights_updated`);
    otherwise from an unsharded copy (generating through FSDP's all-gathers is ~5x slower) that weight
    pushes replace. The other fields are the in-process engine's settings.
    """

    module: torch.nn.Module
    tokenizer: Any
    share: bool = False
    max_batch_size: int = 16
    weight_version: str = "0"
    seed: int | None = None
    model_id: str | None = None
    compute_dtype: torch.dtype | None = None


def engine_kind(spec: str) -> str:
    """``transformers`` or ``sglang``: the kind of engine ``spec`` names; :class:`ValueError` for any other spec."""
    kind, sep, address = spec.partition(":")
    for known in ENGINE_SPECS:
        known_kind, takes_address, _ = known.partition(":")
        if kind == known_kind and (bool(address) if takes_address else not sep):
            return kind
    raise ValueError(f"engine must be {' or '.join(repr(s) for s in ENGINE_SPECS)}, got {spec!r}")


def make_engine(spec: str, *, model: LocalModel | str | Path | None = None, max_context: int | None = None,
                **options: Any) -> Engine:
    """The engine ``spec`` names (see :data:`ENGINE_SPECS`), with context ``max_context`` (None: the model's).

    ``transformers``: over ``model``, a :class:`LocalModel` or a local model dir to load, in fp32; with a
    dir the options are ``device`` (default ``cpu``), ``threads`` (torch's intra-op threads: 1 on the CPU
    unless given, 0 keeps torch's default), ``max_batch_size`` and ``weight_version``.
    ``sglang:URL``: a client of the server at URL (``model`` is ignored); option ``timeout`` (seconds per request).

    An option the kind does not take is refused with :class:`ValueError`.
    """
    kind = engine_kind(spec)
    if kind == "sglang":
        from envhub.adapters.engines.sglang_client import SGLangEngine

        timeout = options.pop("timeout", 600.0)
        _refuse_unknown(kind, options)
        return SGLangEngine(spec.partition(":")[2], max_context=max_context, timeout=timeout)

    import torch

    from envhub.adapters.engines.transformers_engine import TransformersEngine

    if isinstance(model, LocalModel):
        _refuse_unknown(kind, options)
        module = model.module if model.share else copy.deepcopy(model.module).eval()
        return TransformersEngine(module, model.tokenizer, max_context=max_context,
                                  max_batch_size=model.max_batch_size, weight_version=model.weight_version,
                                  seed=model.seed, model_id=model.model_id,
                                  compute_dtype=model.compute_dtype or torch.float32)
    if model is None:
        raise ValueError("a transformers engine needs a model: a LocalModel or a model dir")
    device = options.pop("device", "cpu")
    # The episodes' sandboxes and env threads share the cores, and OpenMP workers spinning at barriers
    # while descheduled cost far more than they gain (measured on a busy 2-core machine with the 135M
    # model: 0.5 s per decode step with 1 thread, 12.5 s with 2).
    threads = options.pop("threads", 1 if device == "cpu" else 0)
    settings = {k: options.pop(k) for k in ("max_batch_size", "weight_version") if k in options}
    _refuse_unknown(kind, options)
    return TransformersEngine.from_pretrained(model, device=device, dtype=torch.float32, max_context=max_context,
                                              num_threads=threads or None, **settings)


def _refuse_unknown(kind: str, options: dict[str, Any]) -> None:
    if options:
        raise ValueError(f"unknown options for the {kind} engine: {', '.join(sorted(options))}")
