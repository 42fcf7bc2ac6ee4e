"""New weights from the trainer to the rollout engine, and model directories transformers loads.

After every optimizer step the trainer calls ``sync.push(state_dict, version, dist)`` on every rank;
the engine then generates with the new weights and stamps ``version`` on every later turn. Each kind
of engine (:func:`envhub.adapters.engines.factory.make_engine`) has one sync class, picked by
:func:`weight_sync_for` from :data:`SYNC_CLASSES`; the sync decides which ranks push and how every
rank learns the outcome:

* the in-process :class:`~envhub.adapters.engines.transformers_engine.TransformersEngine`
  (:class:`InProcessSync`): every rank copies the state dict into its own engine's unsharded model
  between decode steps (``staged``, asynchronous training: handed over at once and loaded once the
  requests in flight are done; the push then returns the version the engine samples with next);
* an SGLang server (:class:`SGLangDiskSync`), one for every rank: rank 0 pushes and every rank
  learns whether it worked (:func:`push_from_rank0`). The weights are written as a Hugging Face model
  dir under ``staging_dir/<version>`` (:func:`write_hf_dir`) and the server is told to load it
  with ``POST /update_weights_from_disk`` (SGLang's ``UpdateWeightFromDiskReqInput``:
  ``model_path``, ``weight_version``, ``flush_cache``, ``abort_all_requests``; answer
  ``{"success", "message", "num_paused_requests"}``, status 400 when ``success`` is false), then
  ``GET /get_model_info`` must report the new ``weight_version``. ``model_path`` must be a path the
  *server* can read (same machine or a shared filesystem). ``staged`` (asynchronous training, the
  engine a :class:`~envhub.trainer.async_sglang.PausingSGLangEngine`): the dir is written while
  generation goes on, and the load and its confirmation run inside the engine's ``weight_update``
  window (``POST /pause_generation`` with mode ``abort`` before, ``POST /continue_generation`` after;
  the aborted requests are sent again on the new weights).

Contract: a push either returns the engine's new version, or raises :class:`WeightSyncError`
(refused, failed, unconfirmed, or no answer within ``timeout_s``) on every rank that relies on that
engine. The run must stop then: it
must never go on sampling from stale weights while recording them as new. The SGLang path is
tested against a loopback server that speaks SGLang's documented fields, not against SGLang.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch

from envhub.errors import EngineError
from envhub.trainer import fsdp

__all__ = [
    "SYNC_CLASSES",
    "InProcessSync",
    "SGLangDiskSync",
    "WeightSync",
    "WeightSyncError",
    "push_from_rank0",
    "weight_sync_for",
    "write_hf_dir",
]

StateDict = dict[str, torch.Tensor]

# Files of a model dir that write_hf_dir writes itself (weights, config) or must not carry over.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx")
_WRITTEN = {"config.json", "generation_config.json", "envhub_model.json"}
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class WeightSyncError(RuntimeError):
    """A weight update that failed, was refused, or hung: the run must stop (never train on, or
    record samples of, weights the engine does not have)."""


class WeightSync(Protocol):
    def push(self, state_dict: StateDict, version: str, dist: fsdp.DistInfo | None = None) -> str:
        """Give the engine the trained module's full (unsharded, CPU) weights as ``version``, called
        by every rank of ``dist`` (None: a single process); returns the engine's version afterwards,
        or raises :class:`WeightSyncError`."""
        ...


# ---- model directories ---------------------------------------------------------------------------

def write_hf_dir(state_dict: dict[str, torch.Tensor], base_model_dir: Path, out_dir: Path) -> Path:
    """Write ``state_dict`` as a model dir that ``AutoModelForCausalLM.from_pretrained`` loads; returns it.

    The architecture comes from ``base_model_dir``'s config: the weights are loaded into a
    model built on the meta device (no copy) and written with ``save_pretrained`` (safetensors;
    a tied alias such as ``lm_head.weight`` is stored once, as transformers does, so safetensors'
    shared-tensor refusal never triggers), with its ``config.json`` and ``generation_config.json``
    (the base's, with the weights' dtype). Every other top-level file of the base dir except
    weights (tokenizer files, chat template) is copied. ``state_dict`` must cover the model
    exactly (a tied weight may be given under either name; if both are given they must be equal)
    or :class:`ValueError` is raised and nothing is written. Atomic: written into a temp dir beside
    ``out_dir`` and renamed into place; an existing ``out_dir`` is replaced only once the new one is
    complete.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    base_model_dir, out_dir = Path(base_model_dir), Path(out_dir)
    if not (base_model_dir / "config.json").is_file():
        raise ValueError(f"{base_model_dir} is not a model dir (no config.json)")
    config = AutoConfig.from_pretrained(str(base_model_dir))
    dtype = next((t.dtype for t in state_dict.values() if t.is_floating_point()), torch.float32)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    state = _untie(model, state_dict)
    try:
        result = model.load_state_dict(state, strict=False, assign=True)
    except RuntimeError as exc:  # shape mismatches
        raise ValueError(f"the state dict does not fit {type(model).__name__}: {exc}") from exc
    tied = set(_tied_pairs(model))
    missing = sorted(set(result.missing_keys) - tied)
    if missing or result.unexpected_keys:
        raise ValueError(f"the state dict does not fit {type(model).__name__} of {base_model_dir}: "
                         f"missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
                         f"unexpected {sorted(result.unexpected_keys)[:5]}")
    model.tie_weights()
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(str(tmp))
        for item in sorted(base_model_dir.iterdir()):
            name = item.name
            if item.is_file() and name not in _WRITTEN and not name.endswith(_WEIGHT_SUFFIXES) \
                    and not name.endswith(".index.json") and not name.startswith("."):
                shutil.copy2(item, tmp / name)
    return out_dir


def _tied_pairs(model: Any) -> dict[str, str]:
    """``{alias: source}`` for the weights this model ties (e.g. ``lm_head.weight`` to the input
    embedding when the config ties them)."""
    pairs = getattr(model, "all_tied_weights_keys", None)
    return dict(pairs) if isinstance(pairs, dict) else {}


def _untie(model: Any, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state without tied aliases (``tie_weights`` restores them), each tied weight present
    under its source name."""
    state = dict(state_dict)
    for alias, source in _tied_pairs(model).items():
        if alias not in state:
            continue
        value = state.pop(alias)
        if source not in state:
            state[source] = value
        elif state[source].shape != value.shape or not torch.equal(state[source], value):
            raise ValueError(f"{alias} and {source} are tied in this model but differ in the state dict")
    return state


class atomic_dir:
    """``with atomic_dir(final) as tmp``: fill ``tmp``; on success it replaces ``final``."""

    def __init__(self, final: Path) -> None:
        self.final = final
        self.tmp = final.parent / f".{final.name}.tmp-{os.getpid()}-{time.monotonic_ns()}"

    def __enter__(self) -> Path:
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir()
        return self.tmp

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        try:
            if exc_type is None:
                old = self.final.parent / f".{self.final.name}.old-{os.getpid()}-{time.monotonic_ns()}"
                replacing = self.final.exists()
                if replacing:
                    os.rename(self.final, old)
                try:
                    os.rename(self.tmp, self.final)
                except OSError:
                    if replacing:
                        os.rename(old, self.final)
                    raise
                shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


# ---- engines ------------------------------------------------------------------------------------

class InProcessSync:
    """Weights into a :class:`TransformersEngine` in this process (``engine.update_weights``).

    Every rank has its own engine, and pushes to it. The engine checks the state dict against its
    model (keys and shapes) and refuses a mismatch without changing anything; that refusal, like any
    other failure, is a :class:`WeightSyncError`. The staging settings of :func:`weight_sync_for` are
    not needed: the weights move in memory, as the trained module holds them.

    ``staged`` (asynchronous training): the push hands the engine ``state_dict`` (a copy the caller
    never touches again) and returns at once; the engine loads it into its own model once the
    requests in flight are done (``engine.stage_weights``), while the trainer goes on updating its
    module. Without, the push returns once the engine samples with the new weights.
    """

    def __init__(self, engine: Any, *, staged: bool = False, **_staging: Any) -> None:
        self.engine, self.staged = engine, staged

    def push(self, state_dict: StateDict, version: str, dist: fsdp.DistInfo | None = None) -> str:
        try:
            if self.staged:
                return str(self.engine.stage_weights(state_dict, version))
            new = self.engine.update_weights(state_dict, version)
        except EngineError as exc:
            raise WeightSyncError(f"in-process weight update to version {version} failed: {exc}") from exc
        if new != version or self.engine.weight_version != version:
            raise WeightSyncError(f"the engine reports weight version {self.engine.weight_version!r} after an "
                                  f"update to {version!r}")
        return new


class SGLangDiskSync:
    """Weights into an SGLang server through a model dir on disk (see the module docstring).

    One server serves every rank: rank 0 pushes, and every rank learns whether it worked
    (:func:`push_from_rank0`). Each push writes ``staging_dir/<version>`` (``version`` must be a plain
    name: letters, digits, ``._-``) from ``model_dir_state(state_dict)`` (the trained module's weights
    as the base model's, e.g. with a LoRA adapter merged in; default: as they are), asks the server to
    load it with at most ``timeout_s`` seconds for the request and the confirmation together, and
    afterwards keeps only the newest ``keep`` staged dirs.
    """

    def __init__(self, engine: Any, *, base_model_dir: Path, staging_dir: Path, timeout_s: float = 300.0,
                 keep: int = 2, model_dir_state: Callable[[StateDict], StateDict] | None = None,
                 staged: bool = False) -> None:
        from envhub.adapters.engines.sglang_client import SGLangEngine

        if timeout_s <= 0 or keep < 1:
            raise ValueError(f"timeout_s must be > 0 and keep >= 1, got {timeout_s}, {keep}")
        if staged and not callable(getattr(engine, "weight_update", None)):
            raise TypeError("staged sglang pushes need an engine that pauses its requests "
                            "(envhub.trainer.async_sglang.PausingSGLangEngine)")
        self.engine = engine
        self.staged = staged
        self.base_model_dir = Path(base_model_dir)
        self.staging_dir = Path(staging_dir)
        self.timeout_s = timeout_s
        self.keep = keep
        self.model_dir_state = model_dir_state or (lambda state: state)
        # The deadline is the join below; this client's socket timeout, a little later, only makes
        # sure that the thread of a hung request ends too.
        self._updater = SGLangEngine(engine.url, timeout=timeout_s + 5.0)

    def push(self, state_dict: StateDict, version: str, dist: fsdp.DistInfo | None = None) -> str:
        return push_from_rank0(lambda: self._push(self.model_dir_state(state_dict), version), version, dist,
                               f"the SGLang server at {self.engine.url}")

    def _push(self, state_dict: StateDict, version: str) -> str:
        if not _VERSION.fullmatch(version):
            raise WeightSyncError(f"weight version {version!r} cannot name a staging dir (letters, digits, ._-)")
        try:
            path = write_hf_dir(state_dict, self.base_model_dir, self.staging_dir / version).resolve()
        except (ValueError, OSError) as exc:
            raise WeightSyncError(f"cannot stage weight version {version} for sglang: {exc}") from exc
        deadline = time.monotonic() + self.timeout_s
        # staged (async): the dir is written while generation goes on; the load runs with generation
        # paused, every request in flight answered (aborted ones are sent again afterwards)
        window = self.engine.weight_update(self.timeout_s) if self.staged else contextlib.nullcontext()
        try:
            with window:
                self._load(path, version, deadline)
        except EngineError as exc:  # the pause or the continue
            raise WeightSyncError(f"sglang weight update to version {version}: {exc}") from exc
        self._prune(keep_path=path)
        return version

    def _load(self, path: Path, version: str, deadline: float) -> None:
        # Only the updater's client runs the POST: if it hangs and answers after the deadline,
        # the late answer changes nothing here.
        self._within(deadline, version, path, lambda: self._updater.update_weights_from_disk(
            str(path), weight_version=version, flush_cache=True, abort_all_requests=False))
        # Confirmed through the engine's own client, which thereby reports the new version too.
        info = self._within(deadline, version, path, self.engine.model_info)
        reported = info.get("weight_version")
        if str(reported) != version:
            raise WeightSyncError(f"sglang answered success for weight version {version} but /get_model_info "
                                  f"reports {reported!r}")

    def _within(self, deadline: float, version: str, path: Path, call: Callable[[], Any]) -> Any:
        """``call()``'s result, or :class:`WeightSyncError` if it raised or did not return by
        ``deadline`` (it is then left running on a daemon thread; its result is dropped)."""
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["value"] = call()
            except Exception as exc:  # handed to the caller below
                outcome["error"] = exc

        worker = threading.Thread(target=run, name=f"envhub-weight-sync-{version}", daemon=True)
        worker.start()
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            raise WeightSyncError(f"sglang at {self.engine.url} did not finish loading weight version {version} "
                                  f"from {path} within {self.timeout_s:g}s; stopping rather than sampling from "
                                  "stale weights")
        if "error" in outcome:
            raise WeightSyncError(f"sglang weight update to version {version} failed: {outcome['error']}") \
                from outcome["error"]
        return outcome["value"]

    def _prune(self, keep_path: Path) -> None:
        """Remove all but the newest ``keep`` staged dirs (never ``keep_path``), and temp dirs
        that a killed writer left behind."""
        staged = []
        for item in self.staging_dir.iterdir():
            if not item.is_dir():
                continue
            if item.name.startswith(".") and (".tmp-" in item.name or ".old-" in item.name):
                shutil.rmtree(item, ignore_errors=True)
            elif _VERSION.fullmatch(item.name) and (item / "config.json").is_file():
                staged.append(item)
        staged.sort(key=lambda p: (p.stat().st_mtime_ns, p.name), reverse=True)
        for old in staged[self.keep:]:
            if old.resolve() != keep_path:
                shutil.rmtree(old, ignore_errors=True)


def push_from_rank0(push: Callable[[], str], version: str, dist: fsdp.DistInfo | None, engine: str) -> str:
    """``push()`` on rank 0 of ``dist`` only (None: a single process), for an engine that every rank
    shares (a server); every rank learns whether it worked (a collective when distributed). Returns the
    version; raises on every rank if it failed: rank 0 its own error, the others :class:`WeightSyncError`."""
    error: Exception | None = None
    if dist is None or dist.is_main:
        try:
            push()
        except Exception as exc:  # the other ranks must learn of any failure, or they wait forever
            error = exc
    failed = error is not None
    if dist is not None:
        failed = fsdp.all_reduce_sum({"failed": float(failed)}, dist)["failed"] > 0
    if error is not None:
        raise error
    if failed:
        raise WeightSyncError(f"rank 0 could not give {engine} weight version {version}; see its log")
    return version


#: the sync class of each kind of engine (an engine's ``name`` is its kind, as its spec names it)
SYNC_CLASSES: dict[str, Callable[..., WeightSync]] = {"transformers": InProcessSync, "sglang": SGLangDiskSync}


def weight_sync_for(engine: Any, *, base_model_dir: Path, staging_dir: Path, timeout_s: float = 300.0,
                    keep: int = 2, model_dir_state: Callable[[StateDict], StateDict] | None = None,
                    staged: bool = False) -> WeightSync:
    """The :class:`WeightSync` of ``engine``'s kind (:data:`SYNC_CLASSES`), given the settings a sync
    through model dirs uses (see :class:`SGLangDiskSync`); :class:`TypeError` for an engine of no kind
    there (its weights cannot be updated), or ``staged`` pushes (:class:`InProcessSync`) to another."""
    sync_class = SYNC_CLASSES.get(str(getattr(engine, "name", "")))
    if sync_class is None:
        raise TypeError(f"no weight sync for engine {type(engine).__name__}: use the transformers engine or "
                        "sglang:URL")
    if staged and sync_class is not InProcessSync and not callable(getattr(engine, "weight_update", None)):
        raise TypeError(f"staged weight pushes need the in-process engine, or an sglang engine that pauses its "
                        f"requests (PausingSGLangEngine), not {type(engine).__name__}")
    options = {"staged": True} if staged else {}
    return sync_class(engine, base_model_dir=base_model_dir, staging_dir=staging_dir, timeout_s=timeout_s, keep=keep,
                      model_dir_state=model_dir_state, **options)
