"""Run a pytest suite in a sandbox and read back per-test outcomes: NOT the code-repair grader.

Submitted code runs in the same interpreter as pytest and this module's report plugin, so a
submission can rewrite what it reports: code repair grades with observation probes instead
(:mod:`envhub.verifiers.probes`). This runner stays for what it is fit for -- running tests
that hold no secret (the visible tests an agent can run itself, in their own tests) -- and as
the baseline of ``envhub bench verify``.

The suite and the report plugin are written into a fresh sandbox. The interpreter starts
isolated (``-I``), pytest ignores every config file (``-c /dev/null``) and third-party plugins,
and results come from the plugin's JSON report under an unguessable name, never from console
output. A test missing from the report counts as failed.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from envhub.sandboxes.base import Sandbox
from envhub.verifiers.placement import place_files

GRADE_DIR = ".envhub_grade"
PLUGIN_MODULE = "envhub_report"
PLUGIN_SOURCE = (Path(__file__).with_name("pytest_report_plugin.py")).read_text(encoding="utf-8")


@dataclass
class TestResults:
    outcomes: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    collection_errors: list[str] = field(default_factory=list)
    #: what the report plugin caught the submission changing at run time (then no outcome counts)
    tampered: list[str] = field(default_factory=list)
    timed_out: bool = False
    report_written: bool = True
    output_tail: str = ""

    @property
    def all_passed(self) -> bool:
        return not self.missing and not self.failed and not self.timed_out and not self.tampered

    def passed(self, tests: list[str]) -> list[str]:
        return [t for t in tests if self.outcomes.get(t) == "passed"]


def grading_bootstrap(test_paths: tuple[str, ...] = ("tests",), source_roots: tuple[str, ...] = ("src",)) -> str:
    """``python3 -I -c`` source that runs the hidden tests with the report plugin.

    pytest and the plugin are imported before the submission's roots join ``sys.path``, so a
    submitted ``pytest.py``, ``json.py`` or ``envhub_report.py`` cannot stand in for them.
    """
    args = [*test_paths, "-q", "--tb=line", "-p", "no:cacheprovider", "-p", PLUGIN_MODULE, "-c", "/dev/null",
            "--rootdir", "."]
    return (f"import sys; sys.path.insert(0, {GRADE_DIR!r}); import pytest, {PLUGIN_MODULE}; "
            f"sys.path[1:1] = {list(source_roots)!r}; sys.exit(pytest.main({args!r}))")


def run_hidden_tests(
    sandbox: Sandbox,
    *,
    files: dict[str, str],
    tests: dict[str, str],
    expected: list[str],
    test_paths: tuple[str, ...] = ("tests",),
    source_roots: tuple[str, ...] = ("src",),
    timeout: float = 60.0,
) -> TestResults:
    """Write ``files`` (the submission) and ``tests`` (the hidden suite) and run pytest on them."""
    nonce = secrets.token_hex(12)
    report = f"{GRADE_DIR}/report-{nonce}.json"
    place_files(sandbox, files, {**tests, f"{GRADE_DIR}/{PLUGIN_MODULE}.py": PLUGIN_SOURCE})
    bootstrap = grading_bootstrap(test_paths, source_roots)
    env = {"ENVHUB_REPORT": report, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    # a child of the resident executor: pytest already imported when the sandbox preloads it
    result = sandbox.exec_python(bootstrap, timeout=timeout, env=env)
    out = TestResults(timed_out=result.timed_out, output_tail=(result.stdout + result.stderr)[-2000:])
    try:
        data = json.loads(sandbox.read_file(report))
    except (FileNotFoundError, OSError, ValueError):
        data = None
    if not isinstance(data, dict):
        out.report_written = False
        out.missing = list(expected)
        return out
    out.outcomes = {str(k): str(v) for k, v in data.get("outcomes", {}).items()}
    out.collection_errors = list(data.get("collection_errors", []))
    out.tampered = [str(t) for t in data.get("tampered", [])]
    out.missing = [t for t in expected if t not in out.outcomes]
    out.failed = [t for t in expected if t in out.outcomes and out.outcomes[t] != "passed"]
    return out
