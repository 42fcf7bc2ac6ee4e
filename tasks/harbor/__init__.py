"""The Harbor bridge: ``envhub.make("harbor:DIR")`` runs a Harbor task directory (or a directory
of them) as an envhub env (:class:`envhub.tasks.harbor.env.HarborBridge`).

It is the bridge of the ``harbor:`` prefix, declared in the entry point group ``envhub.bridges``
(pyproject.toml) by import path, so nothing of it is imported until a ``harbor:`` id is made.
"""

PREFIX = "harbor"
BRIDGE = "envhub.tasks.harbor.env:HarborBridge"

__all__ = ["BRIDGE", "PREFIX"]
