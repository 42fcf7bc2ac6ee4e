"""Verdicts that do not depend on machine load (#37 item 4), played through the env's tools on
docker and bwrap: with CPU hogs at twice the core count running, every gold of a sample still
succeeds, and a submission that spins or sleeps still fails, within the wall ceiling.

Grading budgets are spent as the runner's ``BatchClock`` counts: the time a batch ran or could
have run (wall time less the time it waited for a CPU others held) or the CPU it used, whichever
is more. On a busy machine a batch waits; that wait is not spent."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Iterator

import pytest
from sandbox_fixtures import backend_params, require_backend

import envhub
from envhub.parsing import format_tool_call
from envhub.tasks.code_repair.attacks.cases import inject
from envhub.tasks.code_repair.env import CodeRepairEnv
from envhub.types import Outcome

ENV = "envhub/CodeRepair-v0"
SPIN = "while True:\n    pass\n"
SLEEP = "import time as _t\n_t.sleep(3600)\n"

pytestmark = pytest.mark.slow


def _hog() -> None:
    while True:
        pass


@pytest.fixture
def saturated() -> Iterator[int]:
    """CPU hogs at twice the core count, for as long as the test runs."""
    hogs = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(2 * (os.cpu_count() or 1))]
    for hog in hogs:
        hog.start()
    try:
        yield len(hogs)
    finally:
        for hog in hogs:
            hog.kill()
            hog.join()


def _sample(env: CodeRepairEnv) -> list[str]:
    """One instance per project of the training split: every project's budget, the largest too."""
    firsts: dict[str, str] = {}
    for inst in sorted(env.tasks.manifest.by_split("train"), key=lambda i: i.instance_id):
        firsts.setdefault(inst.project, inst.instance_id)
    return sorted(firsts.values())


@pytest.mark.parametrize("backend", backend_params("docker", "bwrap"))
def test_gold_succeeds_and_spinning_or_sleeping_fails_on_a_saturated_machine(backend: str, saturated: int) -> None:
    require_backend(backend)
    env = envhub.make(ENV, split="train", sandbox=backend)
    try:
        sample = _sample(env)
        failed = {}
        for task_id in sample:
            verdict = env.play(task_id, env.gold_actions)
            if verdict.outcome is not Outcome.SUCCESS:
                failed[task_id] = verdict.detail
        assert not failed, f"{len(failed)} of {len(sample)} golds failed with {saturated} hogs running: {failed}"
        inst = env.tasks.instance(sample[0])
        for code in (SPIN, SLEEP):
            env.reset(task_id=inst.instance_id)
            path = sorted(inst.buggy_files)[0]
            env.step(format_tool_call("write_file", {"path": path, "content": inject(code, inst.buggy_files[path])}))
            t0 = time.monotonic()
            obs = env.step(format_tool_call("submit", {}))
            seconds = time.monotonic() - t0
            details = next(layer.details for layer in obs.verdict.layers if layer.name == "hidden_tests")
            assert obs.outcome is Outcome.WRONG_ANSWER, obs.verdict.detail
            assert details["complete"] and not details["timed_out"], details  # ended by the runner's clock
            # a hang guard: the grading takes about the budget (a few seconds); the wall ceiling is
            # already ten times the budget plus start-up (DEADLINES.wall_factor), +30 s for the sandbox
            assert seconds < details["wall_limit_s"] + 30, (seconds, details)
    finally:
        env.close()
