"""An OpenEnv package directory run from its own Dockerfile (``envhub.make("openenv:DIR",
docker=True)``), as OpenEnv's ``openenv build`` and ``docker run -p 8000:8000`` run it.

The image is built offline (``docker build --network none``: the Dockerfile must start from an
image the engine already has, as every ``envhub tasks export --format openenv`` package does),
tagged by a hash of the directory's files so a rebuild happens only when they change. The
container publishes the manifest's ``port`` on 127.0.0.1 (an ephemeral host port) and carries
envhub's owner labels as a served container (``envhub.backend=serve``), so a later envhub process
removes it if this one was killed before it could. It is removed at :meth:`PackageContainer.stop`,
and by a watchdog process when this process dies in any other way, ``kill -9`` included: the
watchdog holds a pipe from this process and runs ``docker rm -f`` when the pipe closes.
"""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
import sys
import time
from pathlib import Path

import httpx

from envhub.sandboxes.dockerapi import LABEL_BACKEND, SERVE_BACKEND, owner_labels

from .package import read_manifest, reward_range_of
from .session import ServerFault

_WATCHDOG = ("import subprocess, sys\n"
             "sys.stdin.buffer.read()\n"
             "subprocess.run(['docker', 'rm', '-f', sys.argv[1]], capture_output=True)\n")


def image_tag(directory: Path) -> str:
    """``envhub-openenv-<name>:<hash of the directory's files>``."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(directory)).encode() + b"\0" + path.read_bytes() + b"\0")
    name = "".join(c if c.isalnum() else "-" for c in directory.name.lower()).strip("-") or "package"
    return f"envhub-openenv-{name}:{digest.hexdigest()[:16]}"


class PackageContainer:
    """One running container of an OpenEnv package directory (see the module docstring)."""

    def __init__(self, directory: str | Path, *, startup_timeout_s: float = 180.0,
                 build_timeout_s: float = 1800.0) -> None:
        self.directory = Path(directory).resolve()
        self.manifest = read_manifest(self.directory)
        self.reward_range = reward_range_of(self.manifest)
        if not (self.directory / "Dockerfile").is_file():
            raise ValueError(f"{self.directory} has no Dockerfile (docker=True runs the package from it)")
        self.image = image_tag(self.directory)
        self.container: str | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._build(build_timeout_s)
        try:
            self.url = self._run(startup_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _docker(self, *args: str, timeout_s: float = 120.0) -> str:
        try:
            done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServerFault(f"docker {args[0]}: {exc}", "DOCKER") from None
        if done.returncode != 0:
            raise ServerFault(f"docker {args[0]} failed: {(done.stderr or done.stdout).strip()[-2000:]}", "DOCKER")
        return done.stdout.strip()

    def _build(self, timeout_s: float) -> None:
        with contextlib.suppress(ServerFault):
            self._docker("image", "inspect", self.image)
            return
        self._docker("build", "--network", "none", "-t", self.image, str(self.directory), timeout_s=timeout_s)

    def _run(self, timeout_s: float) -> str:
        port = int(self.manifest.get("port") or 8000)
        labels = {**owner_labels(), LABEL_BACKEND: SERVE_BACKEND, "envhub.openenv-package": str(self.directory)}
        args = ["run", "-d", "--rm", "-p", f"127.0.0.1::{port}"]
        for key, value in labels.items():
            args += ["--label", f"{key}={value}"]
        self.container = self._docker(*args, self.image)
        self._watchdog = subprocess.Popen([sys.executable, "-c", _WATCHDOG, self.container], stdin=subprocess.PIPE,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True)
        published = self._docker("port", self.container, f"{port}/tcp").splitlines()[0]
        url = f"http://127.0.0.1:{published.rsplit(':', 1)[1]}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    return url
            time.sleep(0.2)
        logs = subprocess.run(["docker", "logs", "--tail", "40", self.container], capture_output=True, text=True)
        raise ServerFault(f"{self.image} did not answer {url}/health within {timeout_s:.0f} s:\n"
                          f"{(logs.stdout + logs.stderr)[-3000:]}", "STARTUP_FAILED")

    def stop(self) -> None:
        """Remove the container (and let its watchdog go); idempotent."""
        if self.container is not None:
            subprocess.run(["docker", "rm", "-f", self.container], capture_output=True, text=True)
            self.container = None
        if self._watchdog is not None:
            with contextlib.suppress(OSError):
                self._watchdog.stdin.close()  # type: ignore[union-attr]
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout=30)
            self._watchdog = None


__all__ = ["PackageContainer", "image_tag"]
