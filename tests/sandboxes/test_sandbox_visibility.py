"""Nothing secret is visible from any sandbox: with envhub installed non-editable under /usr (as
``pip install`` into a system Python does), a search of the whole filesystem a docker or bwrap
sandbox sees finds neither a line of a hidden test nor a byte of the task data (manifest with
gold patches, expected observations). The search is shown to work -- it finds control copies
of every marker, and it finds the markers in the installed copy on the host and in a bwrap
sandbox that is not given the masks -- so the test cannot pass by finding nothing at all."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from sandbox_fixtures import backend_params, require_backend

from envhub.sandboxes import bwrap_backend, new_sandbox
from envhub.sandboxes.confine import SYSTEM_TREES
from envhub.sandboxes.hidden import hidden_paths

REPO = Path(__file__).resolve().parents[2]
CODE_REPAIR = REPO / "tasks" / "code_repair"
#: Files below this size are searched; every file a marker comes from is far smaller.
SEARCH_MAX_MB = 16
CONTROL = "ctl"  # under the sandbox's work dir: one pattern file per marker, each a control copy
SEARCH = (
    "find {roots} \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o -type f -size -{mb}M -print0"
    " 2>/dev/null | xargs -0 -r grep -l -a -F {patterns} -- 2>/dev/null; true"
)


def hidden_test_marker() -> str:
    """An assertion of a hidden test that neither a project's ``src/`` nor any visible test an
    agent is given contains."""
    from envhub.tasks.code_repair.manifest import DEFAULT_MANIFEST, load_manifest
    from envhub.tasks.code_repair.workspace import agent_files

    shown = "\n".join(p.read_text() for p in sorted(CODE_REPAIR.glob("projects/*/src/**/*.py")))
    shown += "\n".join(text for inst in load_manifest(DEFAULT_MANIFEST).instances
                       for path, text in agent_files(inst).items() if path.startswith("tests/"))
    lines: dict[str, int] = {}
    for test in sorted(CODE_REPAIR.glob("projects/*/tests/**/*.py")):
        for line in test.read_text().splitlines():
            lines[line.strip()] = lines.get(line.strip(), 0) + 1
    for line, count in lines.items():
        if count == 1 and line.startswith("assert ") and len(line) >= 40 and line not in shown:
            return line
    raise AssertionError("no hidden-test line fits as a marker")


def data_markers() -> list[bytes]:
    """From every task-data file, 40 bytes out of its middle (no newline or NUL in them)."""
    markers = []
    for path in sorted(p for p in (CODE_REPAIR / "data").iterdir() if p.is_file()):
        data = path.read_bytes()
        assert len(data) < SEARCH_MAX_MB << 20, path
        start = len(data) // 2
        while b"\n" in data[start:start + 40] or b"\0" in data[start:start + 40]:
            start += 1
        markers.append(data[start:start + 40])
    assert markers, "no task data found"
    return markers


@pytest.fixture(scope="module")
def markers() -> list[bytes]:
    line = hidden_test_marker()
    sources = b"".join(p.read_bytes() for p in CODE_REPAIR.glob("projects/*/src/**/*") if p.is_file())
    found = [line.encode(), *data_markers()]
    assert not any(m in sources for m in found)  # a marker the agent's own files could hold proves nothing
    return found


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """envhub, built from this checkout and installed non-editable into a new dir under /usr, plus
    a wheel file beside it (stored, not compressed: the markers are in it as they are)."""
    if os.geteuid() != 0:
        pytest.skip("installing under /usr needs root (CI and the sandbox hosts run as root)")
    copy = tmp_path_factory.mktemp("envhub-src") / "src"
    shutil.copytree(REPO, copy, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "runs", "out", ".benchmarks"))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    target = Path(f"/usr/local/lib/{version}/dist-packages-envhub-test-{secrets.token_hex(4)}")
    made = next(p for p in [target, *target.parents] if p.parent.exists())  # what to remove afterwards
    try:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--target", str(target), str(copy)], check=True, capture_output=True, timeout=600)
        assert (target / "envhub" / "tasks" / "code_repair" / "projects").is_dir()
        with zipfile.ZipFile(target / "envhub-0.1.0-py3-none-any.whl", "w", zipfile.ZIP_STORED) as wheel:
            for path in sorted((target / "envhub" / "tasks").rglob("*")):  # stored: readable as it is
                if path.is_file():
                    wheel.write(path, path.relative_to(target))
        hidden_paths.cache_clear()  # installed after this process may have looked
        yield target
    finally:
        shutil.rmtree(made, ignore_errors=True)
        hidden_paths.cache_clear()


def search(sb, markers: list[bytes], where: str = "/") -> set[str]:
    """Files under ``where`` (by default all of the sandbox's filesystem but /proc, /sys, /dev)
    holding any marker, plus the control copies (written under the work dir) that match."""
    sb.write_files({f"{CONTROL}/p{i}": m + b"\n" for i, m in enumerate(markers)})
    patterns = " ".join(f"-f {sb.workdir}/{CONTROL}/p{i}" for i in range(len(markers)))
    roots = "/" if where == "/" else f"{where} {sb.workdir}/{CONTROL}"
    result = sb.exec(["sh", "-c", SEARCH.format(roots=roots, mb=SEARCH_MAX_MB, patterns=patterns)], timeout=600)
    assert result.exit_code == 0 and not result.timed_out, result.summary()
    return set(result.stdout.split())


def controls(sb, markers: list[bytes]) -> set[str]:
    return {f"{sb.workdir}/{CONTROL}/p{i}" for i in range(len(markers))}


@pytest.mark.slow
def test_the_markers_are_in_the_installed_copy_on_the_host(installed, markers):
    """Without a mask the secret would be there to find: every marker is in the installed files."""
    files = [p for p in installed.rglob("*") if p.is_file()]
    for marker in markers:
        assert any(marker in p.read_bytes() for p in files), marker


@pytest.mark.slow
@pytest.mark.parametrize("backend", backend_params("docker", "bwrap", "landlock"))
def test_no_sandbox_sees_hidden_tests_or_task_data(backend, installed, markers):
    require_backend(backend)
    with new_sandbox(backend) as sb:
        # landlock shows no directory listing of / or /tmp: search every tree it allows, and the
        # installed copy, this checkout and the host's temporary files by name
        where = "/" if backend != "landlock" else " ".join([*SYSTEM_TREES, "/tmp", str(installed), str(REPO)])
        assert search(sb, markers, where) == controls(sb, markers)  # found: our control copies, nothing else
        if backend == "landlock":
            assert "Permission denied" in sb.exec(["ls", str(installed / "envhub")]).stderr
            assert sb.exec(["python3", "-c", "import json, pytest"]).ok  # /usr's own packages still work
        elif backend == "bwrap":  # the mask: the installed package is an empty directory in there
            assert sb.exec(["ls", "-A", str(installed / "envhub")]).stdout == ""
            assert sb.exec(["python3", "-c", "import json, pytest"]).ok  # /usr's own packages still work
        else:  # no host path is mounted into a container, only its tmpfs
            from envhub.sandboxes.dockerapi import docker_client

            info = docker_client().api.inspect_container(sb.container_id)
            assert info["Mounts"] == [] and not info["HostConfig"].get("Binds")


@pytest.mark.bwrap
def test_without_the_masks_a_bwrap_sandbox_would_find_them(installed, markers, monkeypatch):
    """The same search in a bwrap sandbox given no masks finds every marker in the installed copy."""
    require_backend("bwrap")
    monkeypatch.setattr(bwrap_backend, "hidden_paths", lambda roots: ())
    with new_sandbox("bwrap") as sb:
        for i, marker in enumerate(markers):
            found = search(sb, [marker], str(installed)) - controls(sb, [marker])
            assert found and all(p.startswith(str(installed)) for p in found), (i, marker)


def test_hidden_paths_finds_every_kind_of_installed_copy(tmp_path):
    """A wheel install (package + metadata), a source checkout, an editable install's finder
    pointing at a checkout elsewhere under the roots, and a wheel file; nothing else is hidden."""
    site = tmp_path / "usr" / "lib" / "python3" / "dist-packages"
    (site / "envhub" / "tasks").mkdir(parents=True)
    (site / "envhub" / "__init__.py").write_text("")
    (site / "envhub-0.1.0.dist-info").mkdir()
    (site / "pytest").mkdir()
    checkout = tmp_path / "usr" / "src" / "envhub-checkout"
    (checkout / "envhub").mkdir(parents=True)
    (checkout / "envhub" / "__init__.py").write_text("")
    (checkout / "pyproject.toml").write_text("")
    editable = tmp_path / "usr" / "opt" / "dev"
    (editable / "tasks").mkdir(parents=True)
    (editable / "setup.py").write_text("")
    (site / "__editable___envhub_0_1_0_finder.py").write_text(f"MAPPING = {{'envhub.tasks': '{editable}/tasks'}}\n")
    (site / "link").symlink_to(checkout)  # never followed
    wheel = tmp_path / "usr" / "share" / "wheels" / "envhub-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"PK")
    found = hidden_paths.__wrapped__((str(tmp_path / "usr"),))
    assert set(found) == {str(site / "envhub"), str(site / "envhub-0.1.0.dist-info"), str(checkout), str(editable),
                          str(wheel)}
