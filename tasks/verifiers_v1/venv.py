"""The interpreter the Verifiers side runs under: an environment made for ``verifiers``.

``verifiers`` 0.4 pins ``mcp==2.0.0``, which OpenEnv's ``fastmcp`` (in envhub's own environment)
refuses; and a folder named ``verifiers`` on ``sys.path`` would shadow it. So the taskset never
loads into envhub's interpreter: :func:`bridge_python` makes (once, under a file lock, atomically)
a virtual environment at ``$ENVHUB_CACHE/bridges/verifiers-VERSION`` that sees this interpreter's
packages (``--system-site-packages``: a user's taskset installed here is found there) with
``verifiers==VERSION`` installed over them. ``$ENVHUB_VERIFIERS_PYTHON`` names another interpreter
instead (one where ``import verifiers.v1`` works).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: the Verifiers release the bridge is written and tested against
VERIFIERS_VERSION = "0.4.0"
READY = ".envhub-ready"


def cache_root() -> Path:
    """``$ENVHUB_CACHE`` or ``~/.cache/envhub``."""
    return Path(os.environ.get("ENVHUB_CACHE") or Path.home() / ".cache" / "envhub")


def bridge_python(version: str = VERIFIERS_VERSION, *, log: bool = True) -> str:
    """The path of an interpreter with ``verifiers==version``, made on first use (a minute or so:
    pip installs about 30 packages from the index). Raises RuntimeError, with pip's last lines,
    when it cannot be made."""
    given = os.environ.get("ENVHUB_VERIFIERS_PYTHON")
    if given:
        return given
    home = cache_root() / "bridges" / f"verifiers-{version}"
    python = home / "bin" / "python"
    if (home / READY).is_file():
        return str(python)
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f".verifiers-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / READY).is_file():  # another process made it while this one waited
            return str(python)
        staging = home.parent / f".verifiers-{version}.staging"
        shutil.rmtree(staging, ignore_errors=True)
        if log:
            print(f"envhub: making the environment for verifiers=={version} at {home} (once) ...",
                  file=sys.stderr, flush=True)
        steps = [[sys.executable, "-m", "venv", "--system-site-packages", str(staging)],
                 [str(staging / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                  f"verifiers=={version}"]]
        for cmd in steps:
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                shutil.rmtree(staging, ignore_errors=True)
                tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
                raise RuntimeError(f"could not make the verifiers=={version} environment ({' '.join(cmd[:4])} ...):"
                                   f"\n{tail}")
        # only ever run as bin/python, which finds its environment from the pyvenv.cfg beside it,
        # so the finished staging folder is renamed into place: a half-made one is never used
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(home)
        staging.rename(home)
        (home / READY).write_text(version + "\n")
    return str(python)


__all__ = ["VERIFIERS_VERSION", "bridge_python", "cache_root"]
