"""``envhub serve --docker``: an offline-built image of the server, run like OpenEnv's images.

The image is ``FROM envhub/base:<version>`` (Debian's python3 3.11, no pip, no network at build
time) plus one ``COPY`` of a ready-made ``site-packages`` directory, so ``docker build`` needs
no registry and no index. That directory is assembled on the host from what is installed here:

- envhub itself as a wheel built from its source (``pip wheel --no-deps --no-build-isolation``,
  offline), unpacked -- its ``entry_points.txt`` keeps plugin envs discoverable;
- every other distribution the server needs at run time, found by walking the installed
  requirement graph, copied file by file from its ``RECORD``. The host must be CPython 3.11 on
  glibc (as the base image is), so compiled wheels (pydantic-core, uvloop, numpy) load as-is.

The contract with OpenEnv's ``LocalDockerProvider``: the server listens on port 8000 in the
container, ``/health`` answers without a token, and ``docker run IMAGE`` with no arguments
serves the env. Inside the container the server binds 0.0.0.0 -- the port mapping decides who
can reach it: ``envhub serve --docker`` publishes on 127.0.0.1 unless ``--host`` says otherwise
(then with ``--token``, passed in as ``ENVHUB_TOKEN``). A build is reused while its inputs (base
image, envhub's files, the versions of its dependencies) are unchanged.

The served container is one of this process's resources, as a docker sandbox is: it carries the
same owner labels (``envhub.owned``, ``envhub.pid``, ``envhub.host``; ``envhub.backend=serve``) and
is registered with :mod:`envhub.sandboxes.cleanup` from before it is created, so Ctrl-C, SIGTERM,
SIGHUP and a normal exit remove it. A ``kill -9`` cannot be caught, and the server in it runs on:
the next envhub process that starts a container (``serve --docker``, a docker sandbox) removes it,
its owner being gone (:func:`envhub.sandboxes.leftovers.sweep_dead_owners`).

The engine is driven through docker-py with the sandboxes' own client
(:func:`envhub.sandboxes.dockerapi.docker_client`), so ``serve --docker`` needs
what the docker sandbox needs -- the ``envhub[docker]`` extra and an engine -- and no docker CLI.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import envhub
from envhub.sandboxes import cleanup
from envhub.sandboxes.dockerapi import LABEL_BACKEND, SERVE_BACKEND, docker_client, local_image, owner_labels
from envhub.sandboxes.images import base_image_tag

CONTAINER_PORT = 8000
LABEL_INPUTS = "envhub.serve.inputs"
#: What the server imports at run time, beyond envhub's own requirements. The optional ones
#: (uvicorn's fast loop and parser) are taken when installed here.
RUNTIME = ("fastapi", "uvicorn", "websockets", "prometheus_client")
OPTIONAL_RUNTIME = ("uvloop", "httptools", "pyseccomp")

Echo = Callable[[str], None]

DOCKERFILE = """\
FROM {base}
COPY site /opt/envhub/site
ENV PYTHONPATH=/opt/envhub/site PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE {port}
HEALTHCHECK --interval=5s --timeout=3s --start-period=60s --retries=3 \\
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/health', timeout=2)"]
ENTRYPOINT ["python3", "-m", "envhub.server"]
CMD {cmd}
LABEL {label}="{inputs}" envhub.image="serve" envhub.env="{env_id}"
"""


class DockerServeError(RuntimeError):
    pass


def image_tag(env_id: str) -> str:
    """``envhub/serve-<env>:<envhub version>``, e.g. ``envhub/serve-computation-v0:0.1.0``."""
    name = env_id.rsplit("/", 1)[-1].lower()
    return f"envhub/serve-{re.sub(r'[^a-z0-9_.-]+', '-', name)}:{envhub.__version__}"


def _client(timeout: int = 120) -> Any:
    """The sandboxes' docker-py client; DockerServeError when docker-py or the engine is missing."""
    try:
        return docker_client(timeout)
    except Exception as exc:  # SandboxError, saying what to install or start
        raise DockerServeError(str(exc)) from None


def _docker_call(what: str, call: Callable[[], Any]) -> Any:
    """``call()``; a docker-py failure becomes a DockerServeError saying that ``what`` failed."""
    try:
        return call()
    except DockerServeError:
        raise
    except Exception as exc:
        raise DockerServeError(f"{what} failed: {exc}") from None


def _local_image(ref: str) -> Any | None:
    """The local image ``ref`` (a docker-py ``Image``), or None when there is none."""
    client = _client()
    return _docker_call(f"inspecting image {ref}", lambda: local_image(client, ref))


def _image_label(tag: str, label: str) -> str | None:
    image = _local_image(tag)
    return None if image is None else (image.labels or {}).get(label)


def _base_image(base: str | None) -> str:
    if base is None:
        base = str(base_image_tag())
    if _local_image(base) is None:
        raise DockerServeError(f"the base image {base} does not exist: build it with `envhub sandbox build`")
    return base


# ---- the site-packages directory -------------------------------------------------------------


def runtime_distributions() -> list[metadata.Distribution]:
    """Every installed distribution the server needs, envhub excluded (it is built from source)."""
    from packaging.requirements import Requirement

    roots = [Requirement(r) for r in metadata.requires("envhub") or []]
    roots += [Requirement(name) for name in RUNTIME]
    roots += [Requirement(name) for name in OPTIONAL_RUNTIME if _installed(name)]
    found: dict[str, metadata.Distribution] = {}
    todo = [(req, frozenset[str]()) for req in roots]
    while todo:
        req, extras = todo.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in (extras or {""})):
            continue  # another platform's, or an extra nobody asked for
        key = _canonical(req.name)
        if key == "envhub" or key in found:
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise DockerServeError(f"{req.name} is needed in the image but not installed here") from None
        found[key] = dist
        for sub in dist.requires or []:
            todo.append((Requirement(sub), frozenset(req.extras)))
    return sorted(found.values(), key=lambda d: _canonical(d.metadata["Name"]))


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _copy_distribution(dist: metadata.Distribution, site: Path) -> None:
    root = Path(str(dist.locate_file(""))).resolve()
    for entry in dist.files or []:
        src = Path(str(dist.locate_file(entry))).resolve()
        try:
            rel = src.relative_to(root)
        except ValueError:
            continue  # scripts and data outside site-packages
        if "__pycache__" in rel.parts or not src.is_file():
            continue
        dst = site / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


def _envhub_wheel(scratch: Path) -> Path:
    """envhub as a wheel, built offline from its source tree."""
    source = _source_root()
    out = scratch / "wheels"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "--no-index", "-q", "-w", str(out), str(source)],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise DockerServeError(f"building the envhub wheel failed: {(proc.stderr or proc.stdout)[-2000:]}")
    wheels = sorted(out.glob("envhub-*.whl"))
    if not wheels:
        raise DockerServeError("pip wheel produced no envhub wheel")
    return wheels[-1]


_SKIP_DIRS = frozenset({".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", "build", "dist",
                        ".venv", "venv", "node_modules", "tests", "docs"})


def _source_root() -> Path:
    source = Path(envhub.__file__).resolve().parent.parent
    if not (source / "pyproject.toml").is_file():
        raise DockerServeError(f"envhub's source tree is not at {source}; install envhub from a checkout")
    return source


def _source_fingerprint(source: Path) -> str:
    """Names, sizes and mtimes of the files a wheel could contain: cheap, and any edit changes it."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(source):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(files):
            st = os.stat(os.path.join(root, name))
            digest.update(f"{os.path.relpath(os.path.join(root, name), source)}|{st.st_size}|{st.st_mtime_ns}\n"
                          .encode())
    return digest.hexdigest()


def write_site(site: Path, dists: list[metadata.Distribution] | None = None) -> int:
    """Fill the new directory ``site`` with envhub (a wheel built offline from its source,
    unpacked) and every run-time dependency (``dists``, default :func:`runtime_distributions`),
    copied from this machine's installed distributions: put it on ``PYTHONPATH`` and the server
    runs. Returns how many distributions it holds."""
    dists = runtime_distributions() if dists is None else dists
    site.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="envhub-wheel-") as tmp, \
            zipfile.ZipFile(_envhub_wheel(Path(tmp))) as zf:
        zf.extractall(site)
    for dist in dists:
        _copy_distribution(dist, site)
    return len(dists) + 1


def _image_id(tag: str) -> str:
    image = _local_image(tag)
    if image is None:
        raise DockerServeError(f"there is no image {tag}")
    return str(image.id)


# ---- build -----------------------------------------------------------------------------------


def default_command(env_id: str, args: Iterable[str] = ()) -> list[str]:
    return [env_id, "--host", "0.0.0.0", "--port", str(CONTAINER_PORT), "--insecure-no-token", *args]


def build_server_image(env_id: str, *, base: str | None = None, tag: str | None = None,
                       rebuild: bool = False, echo: Echo = print) -> str:
    """Build (or reuse) the server image for ``env_id``; returns its tag.

    Its default command serves ``env_id`` with default options; other options are given at
    ``docker run`` time (:func:`start_server_container`), so changing them never rebuilds.
    """
    from envhub.registry import get_spec

    get_spec(env_id)  # an unknown env fails here, not inside the container
    base = _base_image(base)
    tag = tag or image_tag(env_id)
    command = default_command(env_id)
    dists = runtime_distributions()
    inputs = hashlib.sha256(json.dumps({
        "base": _image_id(base), "envhub": _source_fingerprint(_source_root()), "command": command,
        "dists": [(d.metadata["Name"], d.version) for d in dists], "python": sys.version_info[:2],
        "dockerfile": DOCKERFILE,
    }, sort_keys=True).encode()).hexdigest()[:24]
    if not rebuild and _image_label(tag, LABEL_INPUTS) == inputs:
        echo(f"{tag} is up to date (inputs {inputs})")
        return tag
    with tempfile.TemporaryDirectory(prefix="envhub-serve-image-") as tmp:
        context = Path(tmp) / "context"
        write_site(context / "site", dists)
        (context / "Dockerfile").write_text(DOCKERFILE.format(
            base=base, port=CONTAINER_PORT, cmd=json.dumps(command), label=LABEL_INPUTS, inputs=inputs,
            env_id=env_id))
        echo(f"building {tag} from {base} ({len(dists) + 1} distributions, offline)")
        _build(context, tag)
    echo(f"built {tag}")
    return tag


def _build(context: Path, tag: str) -> None:
    """``docker build --network none -t TAG CONTEXT`` through the engine's API."""
    client = _client(timeout=1200)

    def build() -> None:
        tail: list[str] = []
        for chunk in client.api.build(path=str(context), tag=tag, rm=True, forcerm=True, pull=False,
                                      decode=True, network_mode="none"):
            if "error" in chunk:
                raise DockerServeError(f"docker build failed: {chunk['error'].strip()}\n{''.join(tail)[-2000:]}")
            tail = [*tail[-40:], chunk.get("stream", "")]

    _docker_call("docker build", build)


# ---- run -------------------------------------------------------------------------------------


@dataclass
class ServerContainer:
    container_id: str
    url: str
    #: the container's name: what removes it before its id is known
    name: str = ""
    #: what :mod:`envhub.sandboxes.cleanup` runs the start sweep of when it is registered
    backend = "docker"

    def stop(self) -> None:
        """Remove the container, stopping it first; nothing happens when it is already gone."""
        cleanup.untrack(self)
        with contextlib.suppress(Exception):
            _client().api.remove_container(self.container_id or self.name, force=True)

    close = stop  # for cleanup: a signal or the exit removes it

    def logs(self) -> str:
        """What the server printed (stdout and stderr), or why it cannot be read."""
        try:
            return _client().api.logs(self.container_id).decode("utf-8", errors="replace")
        except Exception as exc:
            return f"[no logs: {exc}]"

    def running(self) -> bool:
        try:
            return bool(_client().api.inspect_container(self.container_id)["State"]["Running"])
        except Exception:  # gone: it runs with auto-remove
            return False


def start_server_container(tag: str, *, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                           command: list[str] | None = None, name: str | None = None,
                           ready_timeout_s: float = 120.0) -> ServerContainer:
    """``docker run`` the image with its port published on ``host``; waits until /health answers.

    ``command`` replaces the image's default ``envhub serve`` arguments (see :func:`default_command`).
    """
    import httpx

    name = name or f"envhub-serve-{secrets.token_hex(4)}"
    client = _client()
    container = ServerContainer("", "", name)
    # Registered before it exists (a signal meanwhile removes it by name); the first registration
    # of a process also removes the containers of envhub processes that died (kill -9) first.
    cleanup.track(container)
    try:
        started = _docker_call("docker run", lambda: client.containers.run(
            tag, command or None, detach=True, auto_remove=True, name=name,
            labels={**owner_labels(), LABEL_BACKEND: SERVE_BACKEND},
            ports={f"{CONTAINER_PORT}/tcp": (host, port or None)},
            environment={"ENVHUB_TOKEN": token} if token else None))
        container.container_id = str(started.id)
        mapped = _docker_call("docker port", lambda: client.api.port(container.container_id, CONTAINER_PORT))
        if not mapped:
            raise DockerServeError(f"port {CONTAINER_PORT} of the server container is not published:\n"
                                   f"{container.logs()[-3000:]}")
        url_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
        container.url = f"http://{url_host}:{mapped[0]['HostPort']}"
        deadline = time.monotonic() + ready_timeout_s
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(container.url + "/health", timeout=2).status_code == 200:
                    return container
            if not container.running() or time.monotonic() > deadline:
                raise DockerServeError(f"the server container did not become healthy:\n{container.logs()[-3000:]}")
            time.sleep(0.5)
    except BaseException:
        container.stop()
        raise


@contextlib.contextmanager
def server_container(tag: str, **options: object) -> Iterator[ServerContainer]:
    container = start_server_container(tag, **options)  # type: ignore[arg-type]
    try:
        yield container
    finally:
        container.stop()


def serve_in_docker(env_id: str, *, host: str, port: int, token: str | None, args: list[str], rebuild: bool,
                    echo: Echo = print) -> None:
    """The ``envhub serve --docker`` command: build, run, follow the logs until Ctrl-C, remove."""
    try:
        tag = build_server_image(env_id, rebuild=rebuild, echo=echo)
        container = start_server_container(tag, host=host, port=port, token=token,
                                           command=default_command(env_id, args))
    except DockerServeError as exc:
        echo(f"error: {exc}")
        raise SystemExit(2) from None
    echo(f"serving {env_id} at {container.url} (container {container.container_id[:12]}); Ctrl-C stops it")
    try:
        for chunk in _client().api.logs(container.container_id, stream=True, follow=True):
            sys.stdout.write(chunk.decode("utf-8", errors="replace"))
            sys.stdout.flush()
    except KeyboardInterrupt:
        pass
    finally:
        container.stop()


__all__ = [
    "CONTAINER_PORT", "DockerServeError", "ServerContainer", "build_server_image", "image_tag",
    "runtime_distributions", "serve_in_docker", "server_container", "start_server_container", "write_site",
]
