"""Model engines: in-process transformers, an SGLang client, and a scripted test double.

Imported lazily so that, e.g., the SGLang client works without torch installed.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "TransformersEngine": "envhub.trainer.engines.transformers_engine",
    "score_tokens": "envhub.trainer.engines.transformers_engine",
    "SGLangEngine": "envhub.trainer.engines.sglang_client",
    "SGLangLaunchConfig": "envhub.trainer.engines.sglang_client",
    "build_launch_command": "envhub.trainer.engines.sglang_client",
    "launch_server": "envhub.trainer.engines.sglang_client",
    "ScriptedEngine": "envhub.trainer.engines.scripted",
    "processed_logprobs": "envhub.trainer.engines.sampling",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(name)
