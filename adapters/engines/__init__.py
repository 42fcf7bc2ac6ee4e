"""Model engines: token ids in, sampled token ids and their logprobs out; and where models come from.

* :mod:`~envhub.adapters.engines.base` -- the :class:`Engine` protocol, :class:`SamplingParams`,
  :class:`GenerateResult` (imported here eagerly: they need nothing heavy);
* :mod:`~envhub.adapters.engines.factory` -- :func:`make_engine`, the engine an engine spec names
  (``transformers`` or ``sglang:URL``), for the policies and the trainer alike;
* :mod:`~envhub.adapters.engines.transformers_engine` -- the in-process transformers engine, batching
  with :mod:`~envhub.adapters.engines.continuous_batching`;
* :mod:`~envhub.adapters.engines.sglang_client` -- the SGLang ``/generate`` client and launcher;
* :mod:`~envhub.adapters.engines.scripted` -- a scripted test double of a model;
* :mod:`~envhub.adapters.engines.sampling` -- the sampling distribution, shared with the audit;
* :mod:`~envhub.adapters.engines.models` / :mod:`~envhub.adapters.engines.tiny` -- the default
  small model (``envhub models prepare``), a tiny random test model;
* :mod:`~envhub.adapters.engines.specs` -- ``hf:PATH`` / ``sglang:URL`` policy specs, registered
  with :func:`envhub.policies.make_policy` through the ``envhub.policies`` entry point group.

The backends are imported lazily so that, e.g., the SGLang client works without torch installed.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from envhub.adapters.engines.base import Engine, FinishReason, GenerateResult, SamplingParams

_EXPORTS = {
    "LocalModel": "envhub.adapters.engines.factory",
    "engine_kind": "envhub.adapters.engines.factory",
    "make_engine": "envhub.adapters.engines.factory",
    "TransformersEngine": "envhub.adapters.engines.transformers_engine",
    "score_tokens": "envhub.adapters.engines.transformers_engine",
    "SGLangEngine": "envhub.adapters.engines.sglang_client",
    "SGLangLaunchConfig": "envhub.adapters.engines.sglang_client",
    "build_launch_command": "envhub.adapters.engines.sglang_client",
    "launch_server": "envhub.adapters.engines.sglang_client",
    "ScriptedEngine": "envhub.adapters.engines.scripted",
    "processed_logprobs": "envhub.adapters.engines.sampling",
    "make_model_policy": "envhub.adapters.engines.specs",
}

__all__ = ["Engine", "FinishReason", "GenerateResult", "SamplingParams", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(name)
