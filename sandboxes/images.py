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
from collections import Counter, deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from envhub.progress import Progress, Stages
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
                     log_fn: Logger | None = None, stages: Stages | None = None) -> str:
    """Build (or reuse) the base image; returns its tag.

    Without ``from_image``: debootstrap from the machine's apt mirror (needs root and the
    ``debootstrap`` package) and ``docker import``. With it: a Dockerfile on that public image
    (needs a reachable registry). Either way the result is reused while its inputs are unchanged.
    ``stages`` shows each step with its elapsed time (debootstrap's output summarized).
    """
    say = log_fn or log.info
    st = stages or Stages("build", show=False)
    tag = tag or base_image_tag()
    if from_image:
        return _build_from_image(from_image, tag, force, say, st)
    with st.stage("find mirror"):
        mirror = find_mirror()
    if mirror is None:
        raise SandboxError(
            "no Debian mirror found in /etc/apt/sources.list{,.d}; build from a public image "
            "instead: envhub sandbox build --from python:3.11-slim")
    inputs = base_inputs(mirror)
    digest = inputs_hash(inputs)
    with contextlib.ExitStack() as held:
        with st.stage("wait for other builders"):  # a second builder (thread or process) waits, then finds it built
            held.enter_context(build_lock(tag))
        with st.stage("check the cached image") as check:
            current = not force and image_is_current(tag, digest)
            check.update(note="up to date" if current else ("--force" if force else "inputs changed or no image"))
        if current:
            say(f"{tag} is up to date (inputs {digest})")
            return tag
        _debootstrap_and_import(mirror, inputs, digest, tag, say, st)
    with st.stage("verify the image"):
        if not image_is_current(tag, digest):
            raise SandboxError(f"docker import did not produce {tag} with inputs {digest}")
    say(f"built {tag} (inputs {digest})")
    return tag


@contextlib.contextmanager
def build_lock(tag: str) -> Iterator[None]:
    """Held while ``tag`` is built: one build of an image at a time on this machine (a file lock)."""
    path = Path(tempfile.gettempdir()) / f"envhub-build-{re.sub(r'[^A-Za-z0-9_.-]', '_', tag)}.lock"
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _debootstrap_and_import(mirror: Mirror, inputs: dict[str, Any], digest: str, tag: str, say: Logger,
                            st: Stages) -> None:
    if os.geteuid() != 0:
        raise SandboxError("debootstrap needs root: run `sudo envhub sandbox build`, or use --from IMAGE")
    if shutil.which("debootstrap") is None:
        raise SandboxError("debootstrap is not installed: apt-get install debootstrap")
    scratch = Path(tempfile.mkdtemp(prefix="envhub-build-", dir=os.environ.get("ENVHUB_BUILD_DIR")))
    try:
        rootfs = scratch / "rootfs"
        say(f"debootstrap {mirror.suite} from {mirror.uri} (about a minute)")
        with st.stage("debootstrap") as progress:
            _debootstrap(mirror, rootfs, progress)
        with st.stage("customize"):
            _customize(rootfs, inputs, digest)
        tarball = scratch / "rootfs.tar"
        with st.stage("tar the root file system") as progress:
            _tar(rootfs, tarball)
            progress.update(note=f"{tarball.stat().st_size / 2**20:.0f} MiB")
        say(f"docker import -> {tag}")
        repository, _, version = tag.rpartition(":")
        changes = [*RECIPE["changes"], f"LABEL {LABEL_IMAGE}=base {LABEL_INPUTS}={digest} "
                                       f"{LABEL_VERSION}={envhub_version()}"]
        with st.stage("docker import"):
            docker_client(timeout=900).api.import_image_from_file(
                str(tarball), repository=repository, tag=version, changes=changes)
    finally:
        _remove_tree(scratch)


def ensure_base_image() -> str:
    """The base image's tag, building it first if it does not exist at all."""
    ok, _ = base_image_status()
    return base_image_tag() if ok else build_base_image()


def _debootstrap(mirror: Mirror, rootfs: Path, progress: Progress | None = None) -> None:
    cmd = ["debootstrap", f"--variant={RECIPE['variant']}", f"--include={','.join(RECIPE['packages'])}",
           f"--components={','.join(mirror.components)}"]
    if mirror.keyring:
        cmd.append(f"--keyring={mirror.keyring}")
    cmd += [mirror.suite, str(rootfs), mirror.uri]
    returncode, tail = run_summarized(cmd, DebootstrapSummary(progress))
    if returncode != 0:
        log_file = rootfs / "debootstrap" / "debootstrap.log"
        if log_file.is_file():
            tail += "\n" + log_file.read_text(errors="replace")[-3000:]
        raise SandboxError(f"debootstrap failed ({returncode}):\n{tail}")


def run_summarized(cmd: list[str], on_line: Callable[[str], None], tail_chars: int = 3000) -> tuple[int, str]:
    """Run ``cmd`` with its stdout and stderr merged, each line handed to ``on_line`` as it comes;
    returns the exit status and the last ``tail_chars`` of the output (for the error message)."""
    kept: deque[str] = deque()
    size = 0
    with subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace") as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                kept.append(line)
                size += len(line)
                while size > tail_chars and len(kept) > 1:
                    size -= len(kept.popleft())
                on_line(line.rstrip("\n"))
        except BaseException:  # Ctrl-C, or on_line failed: the command must not run on alone
            proc.kill()
            raise
    return proc.returncode, "".join(kept)[-tail_chars:]


class DebootstrapSummary:
    """debootstrap's output as a :class:`Progress` note: the current line and how many packages
    each step has done so far (``I: Retrieving libc6 2.36-9`` or ``I: Unpacking libc6:amd64...``
    counts one package; ``I: Unpacking the base system...`` none). Its warnings and errors
    (``W:``, ``E:``) are shown as they come."""

    STEPS = {"Retrieving": "retrieved", "Validating": "validated", "Extracting": "extracted",
             "Unpacking": "unpacked", "Configuring": "configured"}

    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress
        self.counts: Counter[str] = Counter()

    def __call__(self, line: str) -> None:
        if self.progress is None:
            return
        kind, _, text = line.partition(": ")
        if kind in ("W", "E"):
            self.progress.say(f"debootstrap: {line}")
            return
        verb, _, rest = text.partition(" ")
        if kind != "I" or not rest:
            return
        words = rest.split()
        one_package = (len(words) == 1 and rest.endswith("...")) or (len(words) == 2 and words[1][:1].isdigit())
        if verb in self.STEPS and one_package:
            self.counts[self.STEPS[verb]] += 1
        counts = ", ".join(f"{n} {word}" for word, n in self.counts.items())
        self.progress.update(note=text[:60] + (f"; {counts}" if counts else ""))


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


def _stream_build(stream: Any, say: Logger, progress: Progress | None = None) -> None:
    for chunk in stream:
        if "error" in chunk:
            raise SandboxError(f"image build failed: {chunk['error'].strip()}")
        text = chunk.get("stream", "").strip()
        if text:
            log.debug("%s", text)
            if text.startswith("Step "):
                say(text)
                if progress is not None:
                    progress.update(note=text[:80])


def _build_from_image(from_image: str, tag: str, force: bool, say: Logger, st: Stages) -> str:
    dockerfile = FROM_DOCKERFILE.format(base=from_image, uid=AGENT_UID)
    digest = inputs_hash({"from": from_image, "dockerfile": dockerfile})
    with st.stage("check the cached image"):
        current = not force and image_is_current(tag, digest)
    if current:
        say(f"{tag} is up to date (inputs {digest})")
        return tag
    client = docker_client(timeout=900)
    pull = image_labels(client, from_image) is None
    say(f"building {tag} from {from_image}{' (pulling it)' if pull else ''}")
    with st.stage("docker build") as progress:
        stream = client.api.build(
            fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, forcerm=True, pull=pull, decode=True,
            labels={LABEL_IMAGE: "base", LABEL_INPUTS: digest, LABEL_VERSION: envhub_version()})
        _stream_build(stream, say, progress)
    say(f"built {tag} (inputs {digest})")
    return tag


def family_image_tag(name: str) -> str:
    slug = re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-.") or "family"
    return f"envhub/{slug}:{envhub_version()}"


def build_family_image(name: str, dockerfile_dir: str | os.PathLike[str], force: bool = False,
                       log_fn: Logger | None = None, stages: Stages | None = None) -> str:
    """Build a task family's image from ``dockerfile_dir`` (its Dockerfile says
    ``FROM envhub/base:<version>``, or ``ARG ENVHUB_BASE`` + ``FROM ${ENVHUB_BASE}``).

    The base image is built first if missing. Cached by a hash of every file in the directory
    and the base image's id. Returns the tag, ``envhub/<name>:<version>``.
    """
    say = log_fn or log.info
    st = stages or Stages("build", show=False)
    folder = Path(dockerfile_dir)
    if not (folder / "Dockerfile").is_file():
        raise FileNotFoundError(f"no Dockerfile in {folder}")
    with st.stage("base image"):
        base = ensure_base_image()
    client = docker_client(timeout=900)
    with st.stage(f"check the cached {name} image"):
        hasher = hashlib.sha256(client.images.get(base).id.encode())
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            hasher.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
        digest = hasher.hexdigest()[:24]
        tag = family_image_tag(name)
        current = not force and image_is_current(tag, digest)
    if current:
        say(f"{tag} is up to date (inputs {digest})")
        return tag
    say(f"building {tag} from {folder}")
    with st.stage(f"docker build {tag}") as progress:
        stream = client.api.build(
            path=str(folder), tag=tag, rm=True, forcerm=True, pull=False, decode=True,
            buildargs={"ENVHUB_BASE": base},
            labels={LABEL_IMAGE: name, LABEL_INPUTS: digest, LABEL_VERSION: envhub_version()})
        _stream_build(stream, say, progress)
    return tag
