"""OpenEnv-compatible serving of envhub envs: ``envhub serve`` and :func:`create_app`.

Needs the ``serve`` extra (fastapi, uvicorn, websockets). Importing this package alone imports
none of them, so ``envhub --help`` works without the extra; see docs/serving.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envhub.server.app import create_app
    from envhub.server.hub import ServerConfig

__all__ = ["ServerConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from envhub.server.app import create_app

        return create_app
    if name == "ServerConfig":
        from envhub.server.hub import ServerConfig

        return ServerConfig
    raise AttributeError(name)
