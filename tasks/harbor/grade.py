"""Grading a Harbor task as Harbor does, with envhub's outcome rules on top.

After the agent submits, in the agent's container (``[verifier] environment_mode = "shared"``):

1. every process but the container's PID 1 is killed (as root), so nothing the agent left running
   can write a reward file afterwards; ``/logs/verifier`` is wiped and made afresh (writable by
   the verifier's user), and ``tests/`` is copied to ``/tests`` -- only now: the agent never saw it;
2. ``/tests/test.sh`` runs as ``[verifier] user`` with ``[verifier] env`` under
   ``[verifier] timeout_sec``; its exit status is ignored, as Harbor ignores it;
3. the reward is ``/logs/verifier/reward.json`` where it exists (a number, or an object whose
   ``"reward"`` is one), else ``/logs/verifier/reward.txt`` (a number); files are read by the
   engine (``docker cp``), not by a program of the container; only finite numbers count.

Outcomes. The agent must never be able to cause an infra outcome, so everything that follows its
actions is a policy outcome: a missing, empty or unparseable reward file, a reward that is no
finite number, ``test.sh`` running past its timeout, or a container that is gone after the agent
acted are ``wrong_answer`` (reward 0). Only what the agent cannot have caused is infra: a
container gone before the agent ran any command, or the engine refusing a copy, is ``env_error``
(:class:`~envhub.errors.InfraError`). ``success`` at ``reward >= success_reward`` (1.0), else
``wrong_answer`` with the reward as it is.

Not done yet: re-running a timed-out ``test.sh`` on a pristine container to tell a slow verifier
(``verifier_error``) from a submission that makes it slow; a timeout is ``wrong_answer``.
"""

from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING, Any

from envhub.errors import InfraError
from envhub.types import LayerResult, Outcome, Task, Verdict

if TYPE_CHECKING:
    from envhub.episode import Episode

    from .container import Container
    from .task_dir import HarborTask

LOG_DIR = "/logs/verifier"
TESTS_DIR = "/tests"
REWARD_FILES = ("reward.json", "reward.txt")
#: What step 1 runs as root: ``kill -9 -1`` spares PID 1 (``sleep infinity``) and the shell itself.
PREPARE = (f"kill -9 -1 2>/dev/null; sleep 0.2; rm -rf {LOG_DIR} {TESTS_DIR}; "
           f"mkdir -p {LOG_DIR} && chmod 0777 {LOG_DIR}")
ACTED = "harbor_acted"  # episode.scratch key: the agent ran at least one command


def parse_reward(name: str, raw: bytes) -> tuple[float | None, str]:
    """The reward in a reward file's bytes, or (None, why not)."""
    text = raw.decode("utf-8", "replace").strip()
    if not text:
        return None, f"{name} is empty"
    value: Any
    if name.endswith(".json"):
        try:
            value = json.loads(text)
        except ValueError:
            return None, f"{name} is no JSON: {text[:200]!r}"
        if isinstance(value, dict):
            if "reward" not in value:
                return None, f"{name} has no \"reward\" key: {text[:200]!r}"
            value = value["reward"]
    else:
        try:
            value = float(text)
        except ValueError:
            return None, f"{name} is no number: {text[:200]!r}"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None, f"{name} holds {value!r}, no finite number"
    return float(value), f"{name}: {value}"


def read_reward(container: Container) -> tuple[float | None, str]:
    """The reward ``test.sh`` left (reward.json over reward.txt), or (None, why none)."""
    for name in REWARD_FILES:
        try:
            raw = container.read_file(f"{LOG_DIR}/{name}")
        except ValueError as exc:
            return None, str(exc)
        if raw is not None:
            return parse_reward(name, raw)
    return None, f"test.sh wrote neither {LOG_DIR}/reward.json nor reward.txt"


class HarborVerifier:
    """Grades one episode's container (see the module docstring).

    Args:
        container: the episode's container, or None when it is already gone.
        task: the parsed task directory.
        success_reward: the reward at or above which the episode is a ``success``.
        reward_range: the task's rewards, ``(low, high)``: what a wrong answer the task did not score
            earns (``low``; 0 where none is declared), and a reward outside it is such a wrong answer.
    """

    def __init__(self, container: Container | None, task: HarborTask, *, success_reward: float = 1.0,
                 reward_range: tuple[float, float] | None = None) -> None:
        self.container = container
        self.task = task
        self.success_reward = success_reward
        self.reward_range = reward_range

    def verify(self, task: Task, submission: dict[str, Any], episode: Episode) -> Verdict:
        """Run the task's tests on the submission; raises InfraError only for what the agent
        cannot have caused (see the module docstring). The container is removed afterwards."""
        try:
            return self._verify(episode)
        finally:
            if self.container is not None:
                self.container.remove()

    def _verify(self, episode: Episode) -> Verdict:
        acted = bool(episode.scratch.get(ACTED))
        container = self.container
        if container is None or not container.running():
            if not acted:
                raise InfraError("the task's container was gone before the agent ran any command")
            return self._wrong("the container was gone at grading, after the agent's commands", None)
        prepared = container.root(PREPARE)
        if prepared.rc != 0:
            if not acted:
                raise InfraError(f"preparing the grading failed: {prepared.text[-1000:]}")
            return self._wrong(f"the container could not be prepared for grading: {prepared.text[-500:]}", None)
        try:
            container.copy_in(self.task.tests_dir, TESTS_DIR)
        except InfraError as exc:  # the agent may have filled the disk or broken the file system
            if not acted:
                raise
            return self._wrong(f"the tests could not be copied in after the agent's commands: {exc}", None)
        container.root(f"chmod a+x {TESTS_DIR}/test.sh")
        config = self.task.config.verifier
        t0 = time.monotonic()
        ran = container.exec(f"{TESTS_DIR}/test.sh", user=config.user, env=config.env,
                             timeout_s=config.timeout_sec, limit=16 * 1024)
        seconds = time.monotonic() - t0
        log = ran.text[-4000:]
        if ran.timed_out:
            return self._wrong(f"test.sh ran past [verifier] timeout_sec ({config.timeout_sec}s)", log)
        reward, why = read_reward(container)
        if reward is None:
            return self._wrong(why, log)
        low, high = self.reward_range or (reward, reward)
        if not low <= reward <= high:  # test.sh broke the declared range, maybe provoked by the agent
            return self._wrong(f"test.sh's reward {reward} is outside the declared range [{low}, {high}]", log)
        passed = reward >= self.success_reward
        layer = LayerResult(layer="correctness", name="harbor_tests", score=min(max(reward, 0.0), 1.0),
                            passed=passed, reason=why,
                            details={"test_exit": ran.rc, "test_seconds": round(seconds, 3), "log_tail": log})
        return Verdict(reward=reward, outcome=Outcome.SUCCESS if passed else Outcome.WRONG_ANSWER,
                       layers=[layer], detail=why)

    def _wrong(self, why: str, log: str | None) -> Verdict:
        layer = LayerResult(layer="correctness", name="harbor_tests", score=0.0, passed=False, reason=why,
                            details={} if log is None else {"log_tail": log})
        floor = self.reward_range[0] if self.reward_range is not None else 0.0
        return Verdict(reward=floor, outcome=Outcome.WRONG_ANSWER, layers=[layer], detail=why)


__all__ = ["ACTED", "LOG_DIR", "TESTS_DIR", "HarborVerifier", "parse_reward", "read_reward"]
