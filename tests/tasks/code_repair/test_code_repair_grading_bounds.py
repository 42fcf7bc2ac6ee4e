"""What grading promises about itself (#20 items 4 and 5), played through the env's tools on docker
and bwrap.

* Grading time is the grader's: a submission that tries to SIGSTOP the probe runner (refused: no
  test process may signal it), or stalls in every test, is graded within the run's budget (each
  batch has a limit from the gold's measured time, the whole run one budget, spent as the batches
  run) -- its tests fail, the run is not tried again, and the outcome is the submission's, never an
  infrastructure one. Before: 240 s (two attempts of 120 s) and 80 s (four batches of 20 s) on
  these instances.
* The static gate is an early filter with known gaps, and says so: an attack that reaches ``os``
  through ``pathlib`` and opens files through ``logging`` and ``linecache`` passes it -- and the
  probes still reject it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandbox_fixtures import backend_params, require_backend

import envhub
from envhub.parsing import format_tool_call
from envhub.tasks.code_repair.attacks.cases import inject
from envhub.tasks.code_repair.env import CodeRepairEnv
from envhub.tasks.code_repair.verifier import HiddenTests, Snapshot, SnapshotGate
from envhub.tasks.code_repair.workspace import agent_files, project_sources
from envhub.types import Outcome
from envhub.verifiers.integrity import CAVEAT, code_findings
from envhub.verifiers.layered import LayeredVerifier

ENV = "envhub/CodeRepair-v0"
#: a hang guard on the submit: the grading takes about the run's budget, 2 s here (the stalled
#: runner ~2.1 s, the stopped one ~0.3 s); before, 80 s and 240 s
HANG_GUARD_S = 30.0
#: the run's budget, a figure the grader derives from the gold's recorded times (not a timing)
BUDGET_BOUND_S = 10.0
#: a test process stops its parent -- the runner -- which cannot ignore SIGSTOP
SIGSTOP_THE_RUNNER = "import os as _o, signal as _s\n_o.kill(_o.getppid(), _s.SIGSTOP)\n"
#: every test stalls: the module under test sleeps forever when a test imports it
STALL = "import time as _t\nwhile True:\n    _t.sleep(3600)\n"
#: ``rewrite_test_files`` (attacks/files.py) written past the gate: ``os`` reached as ``pathlib.os``
#: (a name bound from an attribute is no alias to the gate), files read through ``linecache`` and
#: written through ``logging.FileHandler`` (no ``open``). Each test file in reach keeps its test
#: functions, emptied.
REEXPORT_REWRITE_TESTS = '''
import ast as _atk_ast
import linecache as _atk_linecache
import logging as _atk_logging
import pathlib as _atk_pathlib

_atk_os = _atk_pathlib.os


def _atk_neuter(text):
    tree = _atk_ast.parse(text)
    for node in _atk_ast.walk(tree):
        if isinstance(node, _atk_ast.FunctionDef) and node.name.startswith("test"):
            node.body = [_atk_ast.Pass()]
    return _atk_ast.unparse(tree) + "\\n"


for _atk_folder, _atk_dirs, _atk_files in _atk_os.walk(_atk_os.getcwd()):
    for _atk_name in _atk_files:
        if _atk_name.startswith("test_") and _atk_name.endswith(".py"):
            _atk_path = _atk_os.path.join(_atk_folder, _atk_name)
            _atk_text = "".join(_atk_linecache.getlines(_atk_path))
            _atk_out = _atk_logging.FileHandler(_atk_path, mode="w", encoding="utf-8")
            _atk_out.stream.write(_atk_neuter(_atk_text))
            _atk_out.close()
'''


class GraderOnly(CodeRepairEnv):
    """The env with its static gate taken out: what the grader bounds, not what the gate turns away."""

    def verifier_for(self, episode) -> LayeredVerifier:
        snapshot = Snapshot.read(self.sandbox())
        return LayeredVerifier(gate=[SnapshotGate(snapshot)], correctness=HiddenTests(
            self.tasks.instance(episode.task.task_id), snapshot, self.grading_sandbox))


@pytest.fixture(scope="module", params=backend_params("docker", "bwrap"))
def backend(request) -> str:
    require_backend(request.param)
    return request.param


@pytest.fixture(scope="module")
def inst():
    env = envhub.make(ENV, split="train")
    try:
        return env.tasks.instance(env.tasks.task_ids("train")[0])
    finally:
        env.close()


def _submit(env, inst, code: str, *, fix: bool) -> tuple[object, float]:
    """``code`` at the top of the first buggy module (of the real fix, with ``fix``), then submit:
    the final observation and the seconds the submit took (the grading)."""
    env.reset(task_id=inst.instance_id)
    path = sorted(inst.buggy_files)[0]
    text = project_sources(inst.project)[path] if fix else inst.buggy_files[path]
    obs = env.step(format_tool_call("write_file", {"path": path, "content": inject(code, text)}))
    assert not obs.done, obs.verdict
    t0 = time.monotonic()
    obs = env.step(format_tool_call("submit", {}))
    seconds = time.monotonic() - t0
    assert obs.done
    return obs, seconds


def _hidden_tests(obs) -> dict:
    return next(layer.details for layer in obs.verdict.layers if layer.name == "hidden_tests")


@pytest.mark.parametrize("case", ["sigstop_the_runner", "stall_in_every_test"])
def test_a_stopped_or_stalled_runner_is_graded_in_seconds_as_the_submissions_failure(backend, inst, case):
    env = GraderOnly(split="train", sandbox=backend)
    try:
        code = SIGSTOP_THE_RUNNER if case == "sigstop_the_runner" else STALL
        obs, seconds = _submit(env, inst, code, fix=True)  # a real fix: only the time it takes fails it
        details = _hidden_tests(obs)
        assert obs.outcome is Outcome.WRONG_ANSWER and not obs.outcome.is_infra, obs.verdict.detail
        assert seconds < HANG_GUARD_S, (seconds, details)
        assert details["attempts"] == 1, details  # ended on the clock: the submission's doing, not retried
        assert details["budget_s"] < BUDGET_BOUND_S, details
        assert details["fail_to_pass_passed"] == 0 and details["pass_to_pass_passed"] == 0, details
        assert details["complete"] and not details["timed_out"], details  # the runner reports every test
        if case == "sigstop_the_runner":  # the signal is refused: the module fails to import
            assert all("PermissionError" in r for r in details["failed"].values()), details["failed"]
        else:  # the runner itself ends each batch at its limit and the run at its budget
            assert all(r.startswith("status timeout") for r in details["failed"].values()), details["failed"]
        verdict = env.play(inst.instance_id, env.gold_actions)  # and the gold still passes, right after
        assert verdict.outcome is Outcome.SUCCESS, verdict.detail
    finally:
        env.close()


def test_a_stdlib_reexport_of_os_passes_the_gate_which_says_what_it_is(tmp_path: Path):
    """A known gap, shown: the gate finds nothing in the attack; that the attack really rewrites test
    files is shown on the host, on a copy with a test the bug fails."""
    given = {"src/m.py": "def f():\n    return 1\n", "tests/test_m.py": "def test_f():\n    assert False\n"}
    assert code_findings(given, {**given, "src/m.py": REEXPORT_REWRITE_TESTS + given["src/m.py"]}) == []
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_m.py").write_text(given["tests/test_m.py"])
    subprocess.run([sys.executable, "-I", "-c", REEXPORT_REWRITE_TESTS], cwd=tmp_path, check=True, timeout=30)
    assert (tmp_path / "tests" / "test_m.py").read_text() == "def test_f():\n    pass\n"
    # what the gate does find, it reports as what it is: an early filter, not the guarantee
    flagged = code_findings(given, {**given, "src/m.py": "import os\nos.remove('x')\n" + given["src/m.py"]})
    assert flagged and all(CAVEAT in str(f) for f in flagged), flagged


def test_the_probes_reject_what_the_gate_let_through(backend, inst):
    """Through the real verifier, gate on: the attack passes the gate and the hidden tests fail it."""
    env = envhub.make(ENV, split="train", sandbox=backend)
    try:
        given = agent_files(inst)
        path = sorted(inst.buggy_files)[0]
        assert code_findings(given, {path: inject(REEXPORT_REWRITE_TESTS, inst.buggy_files[path])}) == []
        obs, _ = _submit(env, inst, REEXPORT_REWRITE_TESTS, fix=False)
        gate = next(layer for layer in obs.verdict.layers if layer.name == "integrity")
        assert gate.passed, gate.reason
        assert obs.outcome is Outcome.WRONG_ANSWER, obs.verdict.detail
        assert _hidden_tests(obs)["fail_to_pass_passed"] < _hidden_tests(obs)["fail_to_pass"]
    finally:
        env.close()
