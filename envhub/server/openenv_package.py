"""``envhub tasks export ENV --format openenv DIR``: an OpenEnv package that serves the env.

The directory is what OpenEnv's tools take (``openenv validate DIR``, ``openenv build DIR``):

- ``openenv.yaml``: OpenEnv's manifest (``spec_version``, ``name``, ``type``, ``runtime``,
  ``app``, ``port``) with the ``validation:`` block its validator parses -- reward range, the
  resources one episode needs, network ``no-network`` (the env needs none; the agent's code must
  get none), the reward channel as verifier, the env's tools, the task set's version, and the
  ``execution`` binding to the runtime plan and Dockerfile;
- ``Dockerfile``: ``FROM envhub/base:<version>`` (built locally by ``envhub sandbox build``; the
  ``BASE_IMAGE`` build argument overrides it) plus one ``COPY`` of ``site/``, so ``docker build``
  needs no network, no registry and no package index. The image follows OpenEnv's container
  contract (port 8000, ``/health``, ``docker run IMAGE`` serves the env) and runs unprivileged
  (uid 1000, ``USER``) with a read-only root file system, as OpenEnv's validator starts it;
- ``site/``: envhub and its run-time dependencies, assembled from this machine's installation
  exactly as for ``envhub serve --docker`` (:func:`envhub.server.docker.write_site`);
- ``server/app.py``: the ASGI app (``app: server.app:app``) for runners that start uvicorn
  themselves;
- ``validation/runtime.json``: the runtime plan OpenEnv's validator replays over ``/ws`` (a reset
  by seed and a few actions without a tool call). It names no task and no answer.

The served split is the export's split. Inside the container the env's tools run on the
landlock sandbox backend (docs/serving.md, "What a served container isolates"); where it cannot
work, an env that runs agent code refuses to start. Pushing the image (``openenv push``) needs a
registry; nothing here talks to one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import envhub
from envhub.sandboxes.images import AGENT_UID, base_image_tag
from envhub.server.docker import CONTAINER_PORT, default_command, write_site

#: What OpenEnv's runtime plan replays: actions without a tool call (a format error each), so
#: the plan works for every env and gives nothing away.
PROBE_ACTION = {"text": "openenv validation probe: this turn calls no tool."}
PROBE_STEPS = 3
#: What the package declares about the network (``validation.network.mode``): it needs none, and
#: the agent's code must get none.
NETWORK_MODE = "no-network"

DOCKERFILE = """\
# Written by `envhub tasks export {env_id} --format openenv` (envhub {envhub_version}).
# Builds offline: the base image is local (`envhub sandbox build`) and site/ holds every
# Python dependency.
ARG BASE_IMAGE={base}
FROM ${{BASE_IMAGE}}
COPY site /opt/envhub/site
COPY server /opt/envhub/package/server
ENV PYTHONPATH=/opt/envhub/site:/opt/envhub/package PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \\
    ENVHUB_ENV={env_id} ENVHUB_SPLIT={split}
WORKDIR /opt/envhub/package
USER {uid}:{uid}
EXPOSE {port}
HEALTHCHECK --interval=5s --timeout=3s --start-period=60s --retries=3 \\
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/health', timeout=2)"]
ENTRYPOINT ["python3", "-m", "envhub.server"]
CMD {cmd}
LABEL org.opencontainers.image.title="{name}" org.opencontainers.image.version="{version}" \\
      org.opencontainers.image.description={description} envhub.env="{env_id}"
"""

APP_PY = '''\
"""The env's server as an ASGI app, for runners that start uvicorn themselves
(``uvicorn server.app:app``). ``docker run`` uses ``python3 -m envhub.server`` instead."""

import os

from envhub.server import ServerConfig, create_app

app = create_app(os.environ.get("ENVHUB_ENV", {env_id!r}),
                 ServerConfig(split=os.environ.get("ENVHUB_SPLIT", {split!r})))
'''

README = """\
# {name}

{description}

An OpenEnv package written by `envhub tasks export {env_id} --format openenv` (envhub
{envhub_version}); it serves the `{split}` split of `{env_id}` over OpenEnv's protocol.

```bash
openenv validate .                    # OpenEnv's validator (runtime checks build and run the image)
docker build -t {name} .              # offline: FROM {base}, which `envhub sandbox build` makes
docker run --rm -p 127.0.0.1:8000:8000 {name}
```

The server needs no network (`validation.network.mode: {network}`) and runs as uid {uid}.
`openenv push` needs a registry and network access; the package itself never names one.
"""


class OpenEnvExportError(RuntimeError):
    """The package cannot be written (bad destination, unknown env)."""


def export_openenv_package(env_id: str, dest: Path, *, split: str = "test", base_image: str | None = None,
                           echo: Any = print) -> Path:
    """Write the OpenEnv package for ``env_id`` to ``dest`` (see the module docstring); returns it.

    ``dest`` must not exist, be empty, or hold an earlier export (an ``openenv.yaml``), which is
    replaced. The package is written next to ``dest`` and moved into place at the end, so an
    interrupted export never leaves a half-written package behind.
    """
    from envhub.registry import make

    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or (any(dest.iterdir()) and not (dest / "openenv.yaml").is_file())):
        raise OpenEnvExportError(f"{dest} exists and is not an empty directory or an earlier OpenEnv export")
    base = base_image or str(base_image_tag())
    first = base.split("/", 1)[0]
    if "/" in base and ("." in first or ":" in first or first == "localhost"):
        raise OpenEnvExportError(f"the base image {base!r} names a registry host ({first}); the package "
                                 "builds offline FROM a local image")
    env = make(env_id, split=split)
    try:
        facts = _facts(env, split)
    finally:
        env.close()
    dest.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        count = write_site(scratch / "site")
        _write_text(scratch / "openenv.yaml", manifest_yaml(facts))
        _write_text(scratch / "validation" / "runtime.json", json.dumps(runtime_plan(), indent=2) + "\n")
        _write_text(scratch / "server" / "__init__.py", "")
        _write_text(scratch / "server" / "app.py", APP_PY.format(env_id=env_id, split=split))
        command = [*default_command(env_id), "--split", split]
        fill = {**facts, "base": base, "port": CONTAINER_PORT, "cmd": json.dumps(command),
                "envhub_version": envhub.__version__, "uid": AGENT_UID, "network": NETWORK_MODE}
        _write_text(scratch / "Dockerfile",
                    DOCKERFILE.format(**{**fill, "description": json.dumps(facts["description"])}))
        _write_text(scratch / "README.md", README.format(**fill))
        _replace(scratch, dest)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    echo(f"wrote the OpenEnv package of {env_id} ({split} split, {count} distributions, FROM {base}) to {dest}")
    return dest


def _facts(env: Any, split: str) -> dict[str, Any]:
    spec = type(env).sandbox_spec
    limits = spec.limits if spec is not None else None
    budget = env.budget
    doc = (type(env).__doc__ or env.env_id).strip().splitlines()[0]
    return {
        "env_id": env.env_id,
        "name": "envhub-" + env.env_id.rsplit("/", 1)[-1].lower(),
        "version": str(env.version),
        "description": doc,
        "family": env.family,
        "split": split,
        "task_set": str(env.tasks.version),
        "tasks": len(env.tasks.task_ids(split)),
        "tools": [t.name for t in env.tool_specs],
        # the server (~300 MB) plus one sandbox's limits; an episode ends by its own budget
        "memory_mb": 512 + (limits.memory_mb if limits else 0),
        "disk_mb": 256 + 2 * (limits.disk_mb if limits else 0),
        "cpu": max(1.0, limits.cpus if limits else 1.0),
        "episode_timeout_s": float(min(max(budget.max_agent_seconds, 60.0), 3600.0)),
    }


def manifest_yaml(facts: dict[str, Any]) -> str:
    """``openenv.yaml``. Strings are JSON-quoted: JSON's string syntax is YAML's double-quoted one."""
    q = json.dumps
    tags = ", ".join(q(t) for t in ("envhub", facts["family"]))
    tools = ", ".join(q(t) for t in facts["tools"])
    return f"""\
# Written by `envhub tasks export {facts["env_id"]} --format openenv` (envhub {envhub.__version__}).
spec_version: 1
name: {q(facts["name"])}
version: {q(facts["version"])}
description: {q(facts["description"])}
type: space
runtime: fastapi
app: server.app:app
port: {CONTAINER_PORT}
envhub:
  env_id: {q(facts["env_id"])}
  split: {q(facts["split"])}
  task_set: {q(facts["task_set"])}
  tasks: {facts["tasks"]}
  envhub_version: {q(envhub.__version__)}
validation:
  reward:
    range: [0.0, 1.0]
    oracle_tolerance: 0.0
    floor_margin: 0.1
  resources:
    cpu: {facts["cpu"]}
    memory_mb: {facts["memory_mb"]}
    disk_mb: {facts["disk_mb"]}
    episode_timeout_s: {facts["episode_timeout_s"]}
  network:
    mode: {NETWORK_MODE}
  task_distribution:
    dataset_version: {q(facts["task_set"])}
  capabilities:
    verifier:
      kind: reward_channel
    declared_tools: [{tools}]
  types:
    tags: [{tags}]
  execution:
    kind: openenv_ws
    probe_path: validation/runtime.json
    dockerfile: Dockerfile
    context: "."
    agent_boundary: api
"""


def runtime_plan() -> dict[str, Any]:
    """OpenEnv's runtime plan (``plan_schema_version`` 1): reset by seed, then probe actions."""
    return {"plan_schema_version": "1",
            "reset": {"episode_id": "openenv-validation", "seed": 0, "options": {}},
            "actions": [PROBE_ACTION] * PROBE_STEPS}


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _replace(scratch: Path, dest: Path) -> None:
    """Move the finished package to ``dest``, swapping out an earlier export."""
    os.chmod(scratch, 0o755)  # mkdtemp made it 0700; docker and other users read the package
    if not dest.exists():
        scratch.rename(dest)
        return
    old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
    dest.rename(old)
    scratch.rename(dest)
    shutil.rmtree(old, ignore_errors=True)
