"""``envhub tasks export ENV --format openenv DIR``: a package OpenEnv's own CLI accepts, whose
Dockerfile builds offline FROM the local base image.

Real tools only: the ``openenv`` command (its validator, static and runtime levels) and ``docker
build --network none``. The runtime level builds the image again and runs it the way OpenEnv's
validator runs every subject (read-only root, an unknown uid, no capabilities) and replays the
package's runtime plan over /ws. Its ``no-network`` subjects are reached through a helper image
that must be pulled, which cannot happen offline, so that run uses a copy of the package that
declares ``public`` instead; everything else is the package as exported. ``openenv push`` needs a
registry and is not tried.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from sandbox_fixtures import require_backend
from typer.testing import CliRunner

from envhub.cli.commands import app
from envhub.sandboxes import base_image_tag

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ENV_ID = "envhub/Computation-v0"


def _export(dest: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["tasks", "export", ENV_ID, "--format", "openenv", str(dest), *args])
    return result.exit_code, result.output


def _validate(package: Path, *args: str) -> dict:
    openenv = shutil.which("openenv")
    assert openenv, "the openenv CLI is not installed (pip install 'envhub[serve]')"
    proc = subprocess.run([openenv, "validate", str(package), "--json", *args], capture_output=True, text=True,
                          timeout=600)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, (proc.returncode, report.get("verdict"), proc.stderr[-2000:])
    return report


def _status(report: dict) -> dict[str, str]:
    return {r["check_id"]: r["status"] for r in report["results"]}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The package, FROM the local base image (named with --base-image), and what the export printed."""
    require_backend("docker")  # the package is FROM the local base image: build it if it is missing
    dest = tmp_path_factory.mktemp("openenv") / "computation"
    code, output = _export(dest, "--base-image", base_image_tag())
    assert code == 0, output
    return dest, output


@pytest.fixture(scope="module")
def package(exported: tuple[Path, str]) -> Path:
    return exported[0]


def test_the_export_says_what_the_package_needs(exported: tuple[Path, str]) -> None:
    package, output = exported
    assert f"the package needs: network none (no-network); base image {base_image_tag()}; uid 1000" in output
    assert "  network:\n    mode: no-network\n" in (package / "openenv.yaml").read_text()
    dockerfile = (package / "Dockerfile").read_text().splitlines()
    assert "USER 1000:1000" in dockerfile and f"ARG BASE_IMAGE={base_image_tag()}" in dockerfile


def test_the_package_has_openenvs_layout_and_names_no_registry(package: Path) -> None:
    assert {p.name for p in package.iterdir()} == {"openenv.yaml", "Dockerfile", "README.md", "site", "server",
                                                   "validation"}
    dockerfile = (package / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=envhub/base:\d+\.\d+\.\d+$", dockerfile, re.M)
    assert [line for line in dockerfile.splitlines() if line.startswith("FROM")] == ["FROM ${BASE_IMAGE}"]
    assert not [line for line in dockerfile.splitlines() if line.startswith("RUN")]  # COPY only: offline
    for name in ("Dockerfile", "openenv.yaml", "README.md"):  # no registry host anywhere
        assert not re.search(r"docker\.io|ghcr\.io|quay\.io|gcr\.io|https://", (package / name).read_text()), name
    plan = json.loads((package / "validation" / "runtime.json").read_text())
    assert plan["plan_schema_version"] == "1" and "task_id" not in json.dumps(plan)  # names no task


def test_openenv_validate_accepts_the_package(package: Path) -> None:
    report = _validate(package, "--level", "static")
    assert report["verdict"] == "pass" and _status(report) == {"static.manifest": "pass"}
    manifest = report["manifest"]
    assert manifest["name"] == "envhub-computation-v0" and manifest["network"]["mode"] == "no-network"
    assert manifest["capabilities"]["declared_tools"] == ["python", "answer"]
    assert manifest["execution"]["probe_path"] == "validation/runtime.json"


def test_the_dockerfile_builds_offline_and_passes_openenvs_runtime_checks(package: Path,
                                                                         tmp_path: Path) -> None:
    tag = f"envhub-test-openenv:{uuid.uuid4().hex[:8]}"
    images = [tag]
    try:
        build = subprocess.run(["docker", "build", "--network", "none", "-q", "-t", tag, str(package)],
                               capture_output=True, text=True, timeout=600)
        assert build.returncode == 0, build.stderr[-3000:]
        public = tmp_path / "public"
        shutil.copytree(package, public)
        manifest = public / "openenv.yaml"
        manifest.write_text(manifest.read_text().replace("mode: no-network", "mode: public"))
        report = _validate(public)  # the default level: build, start, replay the plan, grade
        startup = next(r for r in report["results"] if r["check_id"] == "runtime.startup")
        images.append(startup["measured"].get("image_ref", ""))
        status = _status(report)
        assert report["verdict"] in ("pass", "warn"), status
        for check in ("runtime.startup", "runtime.reward_well_formed", "runtime.observation_schema",
                      "runtime.state_contract"):
            assert status[check] == "pass", (check, report["results"])
    finally:
        for image in filter(None, images):
            subprocess.run(["docker", "rmi", "-f", image], capture_output=True, timeout=120)


def test_bad_destinations_and_registry_base_images_are_refused(tmp_path: Path) -> None:
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("mine")
    code, output = _export(occupied)
    assert code != 0 and "not an empty directory" in output
    assert (occupied / "notes.txt").read_text() == "mine"
    code, output = _export(tmp_path / "p", "--base-image", "registry.example.com/envhub/base:0.1.0")
    assert code != 0 and "registry host" in output and not (tmp_path / "p").exists()
    code, output = _export(tmp_path / "p", "--limit", "3")
    assert code != 0 and "--limit" in output
