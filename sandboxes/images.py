"""Sandbox images built without a registry: ``envhub/base:<version>`` and task-family images.

The base image is a Debian ``minbase`` root file system made by ``debootstrap`` from the mirror
the machine's own apt sources name (:mod:`envhub.sandboxes.apt_sources`), given a non-root
``agent`` user (uid 1000) and a ``/work`` dir, then turned into an image by ``docker import``.
It has python3 and pytest, which is what task families run.

Builds take about a minute, so they are cached by a content hash of their inputs (the recipe
below, the mirror, the suite), stored as the image label ``envhub.inputs``: an image whose
label matches is reused, and any change of an input rebuilds it.

Where a registry *is* reachable, ``build_base_image(from_image="python:3.11-slim")`` builds the
same contract (uid 1000, /work, pytest) on a public base instead. Task families layer their own
tools with a Dockerfile ``FROM envhub/base:<version>`` via :func:`build_family_image`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from envhub.sandboxes.apt_sources import Mirror, find_mirror
from envhub.sandboxes.base import SandboxError
from envhub.sandboxes.dockerapi import (
    LABEL_IMAGE,
    LABEL_INPUTS,
    LABEL_VERSION,
    docker_client,
    envhub_version,
    image_labels,
)

log = logging.getLogger(__name__)

BASE_REPOSITORY = "envhub/base"
AGENT_UID = 1000
#: Everything that decides the base image's content. Change anything here and it is rebuilt.
RECIPE: dict[str, Any] = {
    "recipe": 1,
    "variant": "minbase",
    "packages": ["python3", "python3-pytest"],
    "user": {"name": "agent", "uid": AGENT_UID, "home": "/home/agent", "shell": "/bin/bash"},
    "dirs": {"/work": AGENT_UID, "/home/agent": AGENT_UID},
    "strip": ["var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
              "usr/share/info", "usr/share/locale"],
    "changes": [
        "USER 1000:1000",
        "WORKDIR /work",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        'CMD ["python3"]',
    ],
}
#: The ``--from`` path: the same contract (uid 1000, /work, pytest) on a public base image.
FROM_DOCKERFILE = """\
FROM {base}
USER root
RUN set -e; \\
    if ! getent passwd {uid} >/dev/null 2>&1; then \\
        useradd -u {uid} -U -m -s /bin/sh agent 2>/dev/null || adduser -D -u {uid} agent; \\
    fi; \\
    mkdir -p /work && chown {uid}:{uid} /work; \\
    python3 -c "import pytest" 2>/dev/null || python3 -m pip install --no-cache-dir pytest
USER {uid}:{uid}
WORKDIR /work
"""

Logger = Callable[[str], None]


def base_image_tag() -> str:
    """``envhub/base:<envhub version>``: what a sandbox runs when its spec names no image."""
    return f"{BASE_REPOSITORY}:{envhub_version()}"


def inputs_hash(inputs: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:24]


def base_inputs(mirror: Mirror) -> dict[str, Any]:
    return {**RECIPE, "mirror": mirror.uri, "suite": mirror.suite, "components": list(mirror.components),
            "arch": os.uname().machine}


def image_is_current(tag: str, digest: str) -> bool:
    labels = image_labels(docker_client(), tag)
    return labels is not None and labels.get(LABEL_INPUTS) == digest


def base_image_status() -> tuple[bool, str]:
    """(ok, why-not): whether the base image exists locally (any inputs hash)."""
    try:
        labels = image_labels(docker_client(), base_image_tag())
    except SandboxError as exc:
        return False, str(exc)
    if labels is None:
        return False, f"the base image {base_image_tag()} has not been built"
    return True, ""


def build_base_image(force: bool = False, *, from_image: str | None = None, tag: str | None = None,
                     log_fn: Logger | None = None) -> str:
    """Build (or reuse) the base image; returns its tag.

    Without ``from_image``: debootstrap from the machine's apt mirror (needs root and the
    ``debootstrap`` package) and ``docker import``. With it: a Dockerfile on that public image
    (needs a reachable registry). Either way the result is reused while its inputs are unchanged.
    """
    say = log_fn or log.info
    tag = tag or base_image_tag()
    if from_image:
        return _build_from_image(from_image, tag, force, say)
    mirror = find_mirror()
    if mirror is None:
        raise SandboxError(
            "no Debian mirror found in /etc/apt/sources.list{,.d}; build from a public image "
            "instead: envhub sandbox build --from python:3.11-slim")
    inputs = base_inputs(mirror)
    digest = inputs_hash(inputs)
    with _build_lock(tag):  # a second builder (thread or process) waits, then finds the image built
        if not force and image_is_current(tag, digest):
            say(f"{tag} is up to date (inputs {digest})")
            return tag
        _debootstrap_and_import(mirror, inputs, digest, tag, say)
    if not image_is_current(tag, digest):
        raise SandboxError(f"docker import did not produce {tag} with inputs {digest}")
    say(f"built {tag} (inputs {digest})")
    return tag


@contextlib.contextmanager
def _build_lock(tag: str) -> Iterator[None]:
    path = Path(tempfile.gettempdir()) / f"envhub-build-{re.sub(r'[^A-Za-z0-9_.-]', '_', tag)}.lock"
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _debootstrap_and_import(mirror: Mirror, inputs: dict[str, Any], digest: str, tag: str, say: Logger) -> None:
    if os.geteuid() != 0:
        raise SandboxError("debootstrap needs root: run `sudo envhub sandbox build`, or use --from IMAGE")
    if shutil.which("debootstrap") is None:
        raise SandboxError("debootstrap is not installed: apt-get install debootstrap")
    scratch = Path(tempfile.mkdtemp(prefix="envhub-build-", dir=os.environ.get("ENVHUB_BUILD_DIR")))
    try:
        rootfs = scratch / "rootfs"
        say(f"debootstrap {mirror.suite} from {mirror.uri} (about a minute)")
        _debootstrap(mirror, rootfs)
        _customize(rootfs, inputs, digest)
        tarball = scratch / "rootfs.tar"
        _tar(rootfs, tarball)
        say(f"docker import -> {tag}")
        repository, _, version = tag.rpartition(":")
        changes = [*RECIPE["changes"], f"LABEL {LABEL_IMAGE}=base {LABEL_INPUTS}={digest} "
                                       f"{LABEL_VERSION}={envhub_version()}"]
        docker_client(timeout=900).api.import_image_from_file(
            str(tarball), repository=repository, tag=version, changes=changes)
    finally:
        _remove_tree(scratch)


def ensure_base_image() -> str:
    """The base image's tag, building it first if it does not exist at all."""
    ok, _ = base_image_status()
    return base_image_tag() if ok else build_base_image()


def _debootstrap(mirror: Mirror, rootfs: Path) -> None:
    cmd = ["debootstrap", f"--variant={RECIPE['variant']}", f"--include={','.join(RECIPE['packages'])}",
           f"--components={','.join(mirror.components)}"]
    if mirror.keyring:
        cmd.append(f"--keyring={mirror.keyring}")
    cmd += [mirror.suite, str(rootfs), mirror.uri]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        log_file = rootfs / "debootstrap" / "debootstrap.log"
        if log_file.is_file():
            tail += "\n" + log_file.read_text(errors="replace")[-3000:]
        raise SandboxError(f"debootstrap failed ({proc.returncode}):\n{tail}")


def _customize(rootfs: Path, inputs: dict[str, Any], digest: str) -> None:
    """The non-root user, the work dir, and no apt caches or docs (a third of the size)."""
    user = RECIPE["user"]
    uid = user["uid"]
    with open(rootfs / "etc/passwd", "a") as fh:
        fh.write(f"{user['name']}:x:{uid}:{uid}:envhub agent:{user['home']}:{user['shell']}\n")
    with open(rootfs / "etc/group", "a") as fh:
        fh.write(f"{user['name']}:x:{uid}:\n")
    with open(rootfs / "etc/shadow", "a") as fh:
        fh.write(f"{user['name']}:!:19000:0:99999:7:::\n")
    for path, owner in RECIPE["dirs"].items():
        target = rootfs / path.lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        os.chown(target, owner, owner)
    for rel in RECIPE["strip"]:
        target = rootfs / rel
        if target.is_dir():
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
    (rootfs / "etc/envhub-image.json").write_text(json.dumps({"inputs": inputs, "hash": digest}, indent=1))


def _tar(rootfs: Path, tarball: Path) -> None:
    cmd = ["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(tarball),
           "--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*", "--exclude=./debootstrap", "."]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SandboxError(f"tar of the root file system failed: {proc.stderr[-2000:]}")


def _remove_tree(path: Path) -> None:
    """rmtree, after unmounting anything an interrupted debootstrap left mounted inside."""
    try:
        with open("/proc/mounts") as fh:
            mounts = [line.split()[1] for line in fh]
    except OSError:
        mounts = []
    for mount in sorted((m for m in mounts if m.startswith(str(path) + "/")), reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True)
    shutil.rmtree(path, ignore_errors=True)


def _stream_build(stream: Any, say: Logger) -> None:
    for chunk in stream:
        if "error" in chunk:
            raise SandboxError(f"image build failed: {chunk['error'].strip()}")
        text = chunk.get("stream", "").strip()
        if text:
            log.debug("%s", text)
            if text.startswith("Step "):
                say(text)


def _build_from_image(from_image: str, tag: str, force: bool, say: Logger) -> str:
    dockerfile = FROM_DOCKERFILE.format(base=from_image, uid=AGENT_UID)
    digest = inputs_hash({"from": from_image, "dockerfile": dockerfile})
    if not force and image_is_current(tag, digest):
        say(f"{tag} is up to date (inputs {digest})")
        return tag
    client = docker_client(timeout=900)
    pull = image_labels(client, from_image) is None
    say(f"building {tag} from {from_image}{' (pulling it)' if pull else ''}")
    stream = client.api.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, forcerm=True, pull=pull, decode=True,
        labels={LABEL_IMAGE: "base", LABEL_INPUTS: digest, LABEL_VERSION: envhub_version()})
    _stream_build(stream, say)
    say(f"built {tag} (inputs {digest})")
    return tag


def family_image_tag(name: str) -> str:
    slug = re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-.") or "family"
    return f"envhub/{slug}:{envhub_version()}"


def build_family_image(name: str, dockerfile_dir: str | os.PathLike[str], force: bool = False,
                       log_fn: Logger | None = None) -> str:
    """Build a task family's image from ``dockerfile_dir`` (its Dockerfile says
    ``FROM envhub/base:<version>``, or ``ARG ENVHUB_BASE`` + ``FROM ${ENVHUB_BASE}``).

    The base image is built first if missing. Cached by a hash of every file in the directory
    and the base image's id. Returns the tag, ``envhub/<name>:<version>``.
    """
    say = log_fn or log.info
    folder = Path(dockerfile_dir)
    if not (folder / "Dockerfile").is_file():
        raise FileNotFoundError(f"no Dockerfile in {folder}")
    base = ensure_base_image()
    client = docker_client(timeout=900)
    hasher = hashlib.sha256(client.images.get(base).id.encode())
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        hasher.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest = hasher.hexdigest()[:24]
    tag = family_image_tag(name)
    if not force and image_is_current(tag, digest):
        say(f"{tag} is up to date (inputs {digest})")
        return tag
    say(f"building {tag} from {folder}")
    stream = client.api.build(
        path=str(folder), tag=tag, rm=True, forcerm=True, pull=False, decode=True,
        buildargs={"ENVHUB_BASE": base},
        labels={LABEL_IMAGE: name, LABEL_INPUTS: digest, LABEL_VERSION: envhub_version()})
    _stream_build(stream, say)
    return tag
