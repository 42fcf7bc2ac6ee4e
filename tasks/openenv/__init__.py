"""The OpenEnv bridge: ``envhub.make("openenv:http://HOST:PORT")`` runs a running OpenEnv 0.10
server as an envhub env (:class:`envhub.tasks.openenv.env.OpenEnvBridge`).

It is the bridge of the ``openenv:`` prefix, declared in the entry point group ``envhub.bridges``
(pyproject.toml) by import path, so neither the bridge nor ``openenv`` is imported until an
``openenv:`` id is made.
"""

PREFIX = "openenv"
BRIDGE = "envhub.tasks.openenv.env:OpenEnvBridge"

__all__ = ["BRIDGE", "PREFIX"]
