"""``hf:PATH`` and ``sglang:URL`` policies: resolve the model and engine, then a :class:`ModelPolicy`.

The token-in/token-out policy itself lives in :mod:`envhub.adapters.model_policy`; this module only
knows where models and tokenizers come from: the engines are built by
:func:`~envhub.adapters.engines.factory.make_engine`. :func:`hf_policy` and :func:`sglang_policy` are the
``hf`` and ``sglang`` kinds of :func:`envhub.policies.make_policy` (entry point group
``envhub.policies`` in pyproject.toml), so core reaches them without importing adapters.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from envhub.adapters.engines.base import Engine, SamplingParams
from envhub.adapters.engines.factory import make_engine
from envhub.adapters.model_policy import DEFAULT_SAMPLING, ModelPolicy

_SAMPLING_KEYS = {"max_new_tokens": int, "temperature": float, "top_p": float, "top_k": int}
_ENGINE_KEYS = {"max_batch_size": int, "max_context": int, "device": str, "weight_version": str, "timeout": float,
                "threads": int}


def _split_target(target: str) -> tuple[str, dict[str, str]]:
    """``PATH?temperature=0.7&max_new_tokens=128``: options in a policy spec, since the CLI passes
    only the spec string."""
    base, sep, query = target.partition("?")
    options: dict[str, str] = {}
    if sep:
        for pair in query.split("&"):
            key, eq, value = pair.partition("=")
            if not eq or not key:
                raise ValueError(f"bad option {pair!r} in policy spec; use key=value pairs after '?'")
            options[key] = value
    return base, options


def make_model_policy(prefix: str, target: str, **options: Any) -> ModelPolicy:
    """The policy for ``hf:PATH_OR_NAME`` or ``sglang:URL`` (see :func:`envhub.policies.make_policy`).

    Options (keyword arguments, or ``?key=value&...`` after the target): ``max_new_tokens``,
    ``temperature``, ``top_p``, ``top_k``, ``stop`` (a tuple of strings), ``max_context``;
    hf: ``max_batch_size``, ``device``, ``threads`` (torch intra-op threads on CPU, default 1;
    0 keeps torch's default), ``weight_version``; sglang: ``tokenizer`` (a tokenizer dir when the
    server's model path is not readable here), ``timeout``; ``chat_format`` (the chat family, e.g.
    ``llama3`` or ``qwen3_nothink``, instead of the detected one); and ``engine`` (an
    :class:`~envhub.adapters.engines.Engine` to use instead of building one; the tokenizer then
    comes from ``target``).
    """
    target, spec_options = _split_target(target)
    for key, value in spec_options.items():
        cast: Callable[[str], Any] | None = _SAMPLING_KEYS.get(key) or _ENGINE_KEYS.get(key)
        if cast is None and key not in ("tokenizer", "chat_format"):
            raise ValueError(f"unknown policy option {key!r}")
        options.setdefault(key, cast(value) if cast else value)
    sampling = {k: options.pop(k) for k in list(options) if k in _SAMPLING_KEYS or k == "stop"}
    if "stop" in sampling:
        sampling["stop"] = tuple(sampling["stop"])
    params = DEFAULT_SAMPLING.with_(**sampling)
    engine: Engine | None = options.pop("engine", None)
    max_context = options.pop("max_context", None)
    chat_format: str | None = options.pop("chat_format", None)
    if prefix == "hf":
        return _hf_policy(target, params, engine, max_context, chat_format, options)
    if prefix == "sglang":
        return _sglang_policy(target, params, engine, max_context, chat_format, options)
    raise ValueError(f"unknown model policy prefix {prefix!r}; use hf: or sglang:")


def hf_policy(target: str, **options: Any) -> ModelPolicy:
    """``make_policy("hf:PATH_OR_NAME", ...)`` (see :func:`make_model_policy`)."""
    return make_model_policy("hf", target, **options)


def sglang_policy(target: str, **options: Any) -> ModelPolicy:
    """``make_policy("sglang:URL", ...)`` (see :func:`make_model_policy`)."""
    return make_model_policy("sglang", target, **options)


def _load_tokenizer(path: str | Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def _hf_policy(target: str, params: SamplingParams, engine: Engine | None, max_context: int | None,
               chat_format: str | None, options: dict[str, Any]) -> ModelPolicy:
    from envhub.adapters.engines.models import resolve_model

    path = resolve_model(target)
    tokenizer = _load_tokenizer(path)
    from envhub.adapters.chat_format import chat_format_for

    fmt = chat_format_for(tokenizer, chat_format)  # refuse an unsupported template before loading the model
    engine = _engine("transformers", engine, path, max_context, options)
    return ModelPolicy(engine, tokenizer, params=params, max_context=max_context, name=f"hf:{target}",
                       model_id=str(path), tokenizer_id=str(path), chat_format=fmt)


def _sglang_policy(url: str, params: SamplingParams, engine: Engine | None, max_context: int | None,
                   chat_format: str | None, options: dict[str, Any]) -> ModelPolicy:
    tokenizer_path = options.pop("tokenizer", None)
    engine = _engine(f"sglang:{url}", engine, None, max_context, options)
    if tokenizer_path is None:
        model_info = getattr(engine, "model_info", None)
        info = model_info() if callable(model_info) else {}
        tokenizer_path = info.get("tokenizer_path") or info.get("model_path")
        if not tokenizer_path:
            raise ValueError("sglang: the server does not report its tokenizer path; pass ?tokenizer=DIR")
    from envhub.adapters.engines.models import resolve_tokenizer_dir

    tokenizer_dir = resolve_tokenizer_dir(str(tokenizer_path))
    return ModelPolicy(engine, _load_tokenizer(tokenizer_dir), params=params, max_context=max_context,
                       name=f"sglang:{url}", model_id=url, tokenizer_id=str(tokenizer_dir), chat_format=chat_format)


def _engine(spec: str, engine: Engine | None, model_dir: Path | None, max_context: int | None,
            options: dict[str, Any]) -> Engine:
    """``engine`` if given (then no engine option may be left in ``options``), else the engine ``spec`` names,
    over ``model_dir`` when it runs in process."""
    if engine is None:
        return make_engine(spec, model=model_dir, max_context=max_context, **options)
    if options:
        raise ValueError(f"unknown policy options: {', '.join(sorted(options))}")
    return engine
