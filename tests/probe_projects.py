"""One-module projects for probe tests: recorded on their gold, and judged by real pytest."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from envhub.verifiers.probes.record import record_project


def recorded(root: Path, module: str, gold: str, tests: str) -> tuple[Path, Any]:
    """``src/<module>.py`` with ``gold`` and ``tests/test_<module>.py`` under ``root``, and its suite."""
    (root / "src").mkdir()
    (root / "tests").mkdir()
    (root / "src" / f"{module}.py").write_text(gold)
    (root / "tests" / f"test_{module}.py").write_text(tests)
    return root, record_project(root, {f"src/{module}.py": gold}, {f"tests/test_{module}.py": tests})


def pytest_verdicts(root: Path, module: str, source: str) -> dict[str, bool]:
    """Real pytest's verdict on every test of the project with ``source`` as ``src/<module>.py``."""
    (root / "src" / f"{module}.py").write_text(source)
    report = root / "report.json"
    code = textwrap.dedent(f'''
        import json, pytest
        class Outcomes:
            def __init__(self): self.seen = {{}}
            def pytest_runtest_logreport(self, report):
                if report.when == "call" or report.outcome != "passed":
                    self.seen[report.nodeid] = self.seen.get(report.nodeid, True) and report.passed
        plugin = Outcomes()
        pytest.main(["-q", "-p", "no:cacheprovider", "tests"], plugins=[plugin])
        open({str(report)!r}, "w").write(json.dumps(plugin.seen))
    ''')
    subprocess.run([sys.executable, "-c", code], cwd=root, env={"PYTHONPATH": str(root / "src"),
                   "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
                   capture_output=True, timeout=120, check=False)
    return json.loads(report.read_text())
