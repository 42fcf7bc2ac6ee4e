"""The probe runner's start (``verifiers/probes/boot.py``): the host's compiled code where the
sandbox's Python reads it, the shipped sources anywhere else, the same verdicts either way."""

from __future__ import annotations

import base64
import importlib.util
import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest
from probe_projects import recorded

from envhub.verifiers.probes.boot import BUNDLE_FILE
from envhub.verifiers.probes.grader import (
    BOOT_FILE,
    PROBE_DIR,
    RUNNER_ENV,
    plan,
    probe_files,
    runner_command,
    shipped_code,
    shipped_sources,
)

GOLD = "def area(w, h):\n    return w * h\n"
TESTS = ("import pytest\nfrom shapes import area\n\n\n@pytest.mark.parametrize('w', [2, 3])\n"
         "def test_area(w):\n    assert area(w, 5) == w * 5\n\n\ndef test_zero():\n    assert area(0, 9) == 0\n")


def _decode(text: str) -> tuple[str, dict]:
    magic, _, body = text.partition("\n")
    return magic, marshal.loads(base64.b64decode(body))


def test_the_bundle_is_the_shipped_sources_compiled_under_their_sandbox_names() -> None:
    magic, codes = _decode(shipped_code())
    assert magic == importlib.util.MAGIC_NUMBER.hex()
    sources = {name: text for name, text in shipped_sources().items() if name != BOOT_FILE}
    assert set(codes) == {name.removesuffix(".py") for name in sources}
    for name, text in sources.items():
        assert codes[name.removesuffix(".py")] == compile(text, f"{PROBE_DIR}/{name}", "exec", dont_inherit=True,
                                                          optimize=0)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    return recorded(tmp_path_factory.mktemp("shapes"), "shapes", GOLD, TESTS)


def _run(root: Path, suite: object, bundle: str | None) -> subprocess.CompletedProcess[str]:
    run_plan, _ = plan(suite, sorted(suite.tests), timeout_s=30.0)
    files = {"src/shapes.py": GOLD, **probe_files(suite, run_plan)}
    if bundle is not None:
        files[f"{PROBE_DIR}/{BUNDLE_FILE}"] = bundle
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return subprocess.run(runner_command(sys.executable), cwd=root, capture_output=True, text=True, timeout=120,
                          env={"PATH": os.environ.get("PATH", ""), **RUNNER_ENV})


@pytest.mark.parametrize("bundle", ["another interpreter", "corrupt", "not code"])
def test_a_bundle_this_python_cannot_use_falls_back_to_the_sources(tmp_path: Path, project: tuple[Path, object],
                                                                   bundle: str) -> None:
    _, suite = project
    magic, codes = _decode(shipped_code())
    unusable = {"another interpreter": "00000d0a\n" + shipped_code().partition("\n")[2],
                "corrupt": magic + "\n" + base64.b64encode(marshal.dumps(codes)[:-40]).decode(),
                "not code": magic + "\n" + base64.b64encode(marshal.dumps({"envhub_probe_runner": 1})).decode()}
    good = _run(tmp_path / "good", suite, None)
    fallback = _run(tmp_path / "fallback", suite, unusable[bundle])
    assert good.returncode == fallback.returncode == 0, fallback.stderr
    assert good.stdout == fallback.stdout
    lines = good.stdout.splitlines()
    assert lines[-1] == '{"done":true}' and len(lines) > 3 and all('"status":"ok"' in line for line in lines[:-1])


def test_a_usable_bundle_is_what_runs(tmp_path: Path, project: tuple[Path, object]) -> None:
    _, suite = project
    magic, codes = _decode(shipped_code())
    codes["envhub_probe_runner"] = compile("def main(plan, shipped):\n    print('bundled', sorted(shipped))\n"
                                           "    return 0\n", f"{PROBE_DIR}/envhub_probe_runner.py", "exec")
    proc = _run(tmp_path, suite, magic + "\n" + base64.b64encode(marshal.dumps(codes)).decode())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("bundled [") and "'envhub_probe'" in proc.stdout
