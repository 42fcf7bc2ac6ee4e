"""The interpreter the Verifiers side runs under: an environment made for ``verifiers``.

``verifiers`` 0.4 pins ``mcp==2.0.0``, which OpenEnv's ``fastmcp`` (in envhub's own environment)
refuses; and a folder named ``verifiers`` on ``sys.path`` would shadow it. So the taskset never
loads into envhub's interpreter: :func:`bridge_python` is :func:`envhub.package_envs.package_python`
with ``verifiers==VERSION`` (made once at ``$ENVHUB_CACHE/envs/verifiers-VERSION``).
``$ENVHUB_VERIFIERS_PYTHON`` names another interpreter instead (one where ``import verifiers.v1``
works).
"""

from __future__ import annotations

import os

from envhub.package_envs import package_python

#: the Verifiers release the bridge is written and tested against
VERIFIERS_VERSION = "0.4.0"


def bridge_python(version: str = VERIFIERS_VERSION) -> str:
    """The path of an interpreter with ``verifiers==version``, made on first use (a minute or so:
    pip installs about 30 packages from the index). Raises PackageEnvError, with pip's last lines,
    when it cannot be made."""
    return os.environ.get("ENVHUB_VERIFIERS_PYTHON") or package_python(f"verifiers-{version}",
                                                                        [f"verifiers=={version}"])


__all__ = ["VERIFIERS_VERSION", "bridge_python"]
