"""Interpreters made for other hubs' packages: a virtual environment per package set, made once.

Bridges run foreign code whose dependencies can clash with envhub's own (Verifiers pins
``mcp==2.0.0``, which OpenEnv's ``fastmcp`` refuses; ``openenv-core`` ships the same top-level
``openenv`` as ``openenv``). :func:`package_python` makes, under a file lock and in a staging folder
renamed into place only once it works, a virtual environment at ``$ENVHUB_CACHE/envs/NAME`` that
sees this interpreter's packages (``--system-site-packages``: a user's package installed here is
found there) with ``requirements`` installed over them. Only its ``bin/python`` is ever run, which
finds its environment from the ``pyvenv.cfg`` beside it wherever the folder is.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

READY = ".envhub-ready"


class PackageEnvError(RuntimeError):
    """An environment could not be made; the message ends with pip's last lines."""


def cache_root() -> Path:
    """``$ENVHUB_CACHE`` or ``~/.cache/envhub``."""
    return Path(os.environ.get("ENVHUB_CACHE") or Path.home() / ".cache" / "envhub")


def package_python(name: str, requirements: Sequence[str], *, log: bool = True, timeout_s: float = 1800.0) -> str:
    """The path of an interpreter with ``requirements`` installed (pip's syntax: ``pkg==1.2``, a local
    directory), made on first use under ``name`` (say ``verifiers-0.4.0``). The marker of a made
    environment records the requirements, so changed ones make it afresh."""
    home = cache_root() / "envs" / name
    python = home / "bin" / "python"
    want = "\n".join(requirements) + "\n"
    if _ready(home, want):
        return str(python)
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _ready(home, want):  # another process made it while this one waited
            return str(python)
        staging = home.parent / f".{name}.staging"
        shutil.rmtree(staging, ignore_errors=True)
        if log:
            print(f"envhub: making the environment {home} for {', '.join(requirements)} (once) ...",
                  file=sys.stderr, flush=True)
        steps = [[sys.executable, "-m", "venv", "--system-site-packages", str(staging)],
                 [str(staging / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                  *requirements]]
        for cmd in steps:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            if done.returncode != 0:
                shutil.rmtree(staging, ignore_errors=True)
                raise PackageEnvError(f"could not make the environment {name} ({' '.join(cmd[:4])} ...):\n"
                                      f"{pip_tail(done)}")
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(home)
        staging.rename(home)
        (home / READY).write_text(want)
    return str(python)


def requirements_key(requirements: Sequence[str]) -> str:
    """A short stable name part for a set of requirements (say, a local package directory's)."""
    return hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]


def pip_tail(done: subprocess.CompletedProcess[str], lines: int = 8) -> str:
    """pip's last lines, without the index locations it reports as missing."""
    kept = [ln for ln in (done.stdout + done.stderr).splitlines() if "is ignored: it is neither" not in ln]
    return "\n".join(kept[-lines:])


def _ready(home: Path, want: str) -> bool:
    with contextlib.suppress(OSError):
        return (home / READY).read_text() == want
    return False


__all__ = ["PackageEnvError", "cache_root", "package_python", "pip_tail", "requirements_key"]
