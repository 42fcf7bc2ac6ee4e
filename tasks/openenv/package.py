"""An OpenEnv package directory (``openenv.yaml``) started as a local server for the bridge.

:class:`PackageServer` reads the manifest's ``app`` (``server.app:app``) and starts it the way the
template's Dockerfile and README do, with uvicorn, in this interpreter, from the package directory:
``python -m uvicorn APP --host 127.0.0.1 --port 0``. It waits until uvicorn names its port and
``/health`` answers, and stops the server at :meth:`PackageServer.stop` (SIGTERM to its process
group, then SIGKILL). The server also dies with this process, ``kill -9`` included: it is started
with ``PR_SET_PDEATHSIG`` = SIGKILL from envhub's process-lifetime spawner thread.

The manifest's ``validation.reward.range`` is read as :attr:`PackageServer.reward_range`: a reward
outside it is ``wrong_answer`` at the floor (the bridge's rule: never infra).

The server runs with the packages of this interpreter, or of ``python``: :func:`package_python`
makes one for the package (the directory pip-installed, with its dependencies, into an environment
that sees envhub's packages). Its Dockerfile is the third way (:mod:`.container`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from envhub.sandboxes.spawner import die_with_parent, popen

from .session import ServerFault

MANIFEST = "openenv.yaml"
_LISTENING = re.compile(rb"Uvicorn running on http://127\.0\.0\.1:(\d+)")


def is_package(target: str) -> bool:
    """Whether ``target`` is a directory holding an ``openenv.yaml``."""
    return (Path(target) / MANIFEST).is_file()


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The package's ``openenv.yaml``. Raises ValueError when it is not a mapping with an ``app``."""
    import yaml

    data = yaml.safe_load((Path(directory) / MANIFEST).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("app"), str):
        raise ValueError(f"{Path(directory) / MANIFEST} names no app (say `app: server.app:app`)")
    return data


def package_python(directory: str | Path) -> str:
    """An interpreter made for the package: its directory pip-installed (so its ``pyproject.toml``'s
    dependencies come with it), made once per content of the directory's requirements."""
    from envhub.package_envs import package_python as made_for
    from envhub.package_envs import requirements_key

    root = Path(directory).resolve()
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        raise ValueError(f"{root} has no pyproject.toml: venv=True installs the package from it")
    key = requirements_key([str(root), pyproject.read_text()])
    return made_for(f"openenv-{root.name}-{key}", [str(root)])


def reward_range_of(manifest: dict[str, Any]) -> tuple[float, float] | None:
    """The manifest's ``validation.reward.range`` (a reward outside it is ``wrong_answer`` at its floor)."""
    reward = ((manifest.get("validation") or {}).get("reward") or {}).get("range")
    return (float(reward[0]), float(reward[1])) if isinstance(reward, list) and len(reward) == 2 else None


class PackageServer:
    """One running server of an OpenEnv package directory (see the module docstring)."""

    def __init__(self, directory: str | Path, *, python: str | None = None, startup_timeout_s: float = 120.0
                 ) -> None:
        self.directory = Path(directory).resolve()
        self.manifest = read_manifest(self.directory)
        self.reward_range = reward_range_of(self.manifest)
        cmd = [python or sys.executable, "-m", "uvicorn", self.manifest["app"], "--host", "127.0.0.1", "--port", "0"]
        self.proc: subprocess.Popen[bytes] = popen(
            cmd, cwd=self.directory, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=die_with_parent, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            self.url = self._await(startup_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _await(self, timeout_s: float) -> str:
        found: list[str] = []
        seen: list[bytes] = []
        ready = threading.Event()
        out = self.proc.stdout
        assert out is not None

        def pump() -> None:  # keeps draining the log so the server never blocks on a full pipe
            for line in iter(out.readline, b""):
                if not found:
                    seen.append(line)
                    if match := _LISTENING.search(line):
                        found.append(f"http://127.0.0.1:{int(match.group(1))}")
                        ready.set()
            ready.set()

        threading.Thread(target=pump, name="openenv-package-log", daemon=True).start()
        if not ready.wait(timeout_s) or not found:
            log = b"".join(seen).decode(errors="replace")[-4000:]
            raise ServerFault(f"{self.directory} did not start its server:\n{log}", "STARTUP_FAILED")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(found[0] + "/health", timeout=2).status_code == 200:
                    return found[0]
            time.sleep(0.05)
        raise ServerFault(f"{found[0]}/health did not answer", "STARTUP_FAILED")

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop the server and everything it started (its process group); idempotent."""
        proc = self.proc
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace_s)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of its group is left
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


__all__ = ["MANIFEST", "PackageServer", "is_package", "package_python", "read_manifest", "reward_range_of"]
