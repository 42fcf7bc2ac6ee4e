"""Grading a Harbor task as Harbor does, with envhub's outcome rules on top.

Where. :func:`grading_mode` picks, per task, one of two places (issue #42, item 3):

- ``separate`` (the default, and every task with ``[verifier] environment_mode = "separate"``):
  the agent's processes are killed, its work directories (:func:`.container.work_dirs`: the
  image's ``WORKDIR``, ``/app``, ``/work`` and any the bridge names) are copied out of its
  container **as data** by the engine (``docker cp``, a tar stream filtered on the host and never
  extracted there: directories, regular files, hard links among them, symlinks that stay inside
  the work dir; nothing under a directory of the image's or task's ``PATH`` / ``PYTHONPATH`` /
  ``LD_LIBRARY_PATH``, no user site-packages, no setuid bits; at most 1 GiB of files, more is a
  wrong answer), the agent's container is removed,
  and a **fresh container of the same image**, never touched by the agent, gets the work (the
  directories replaced, owners and modes kept) and is graded below. Whatever the agent planted
  elsewhere -- fakes on ``PATH``, edited interpreters or shared libraries, ``sitecustomize``,
  ``/etc/ld.so.preload``, processes, symlinked ``/tests`` or ``/logs`` -- is not there.
- ``in_place`` (a task that sets ``environment_mode = "shared"`` explicitly: its tests inspect the
  agent's container as it was -- processes, services, files outside the work dirs -- or a bridge
  made with ``grading="in_place"``): graded in the agent's container, Harbor's shared mode.

The verdict's layer records which (``details["graded"]``: ``separate`` or ``in_place``), and the
reward audit reports tasks graded in place.

Then, in the grading container:

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

A slow verifier is told from a slow submission by construction: when ``test.sh`` runs past its
timeout, the same tests run once more, under the same timeout, in a **pristine** container of the
image (nothing of the agent's copied in, so nothing the agent did can reach it). If they time out
there too, the verifier is too slow for its own budget -- ``verifier_error``, left out of the loss;
if they finish there, the agent's work made them slow -- ``wrong_answer``. The layer records the
pristine run (``pristine_timed_out``, ``pristine_seconds``).
"""

from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING, Any

from envhub.errors import InfraError
from envhub.types import LayerResult, Outcome, Task, Verdict

from .container import Container, Ran, is_system_dir, search_dirs, work_dirs

if TYPE_CHECKING:
    from envhub.episode import Episode

    from .task_dir import HarborTask

LOG_DIR = "/logs/verifier"
TESTS_DIR = "/tests"
REWARD_FILES = ("reward.json", "reward.txt")
#: What step 1 runs as root: ``kill -9 -1`` spares PID 1 (``sleep infinity``) and the shell itself.
PREPARE = (f"kill -9 -1 2>/dev/null; sleep 0.2; rm -rf {LOG_DIR} {TESTS_DIR}; "
           f"mkdir -p {LOG_DIR} && chmod 0777 {LOG_DIR}")
ACTED = "harbor_acted"  # episode.scratch key: the agent ran at least one command
SEPARATE = "separate"
IN_PLACE = "in_place"
GRADING_MODES = (SEPARATE, IN_PLACE)
#: The most file content copied from the agent's work dirs to the grading container.
WORK_LIMIT_BYTES = 1 << 30


def grading_mode(task: HarborTask, default: str = SEPARATE) -> str:
    """Where ``task`` is graded: ``environment_mode = "separate"`` -> separate, an explicit
    ``"shared"`` -> in place (the task says its tests need the agent's container), unset -> the
    bridge's ``default``. Raises ValueError for another mode."""
    mode = task.config.verifier.environment_mode
    if mode is None:
        return default
    if mode == "separate":
        return SEPARATE
    if mode == "shared":
        return IN_PLACE
    raise ValueError(f"harbor task {task.task_id!r}: unknown [verifier] environment_mode {mode!r}")


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
                 reward_range: tuple[float, float] | None = None, grading: str = SEPARATE,
                 extra_work_dirs: list[str] | tuple[str, ...] = ()) -> None:
        if grading not in GRADING_MODES:
            raise ValueError(f"grading must be one of {GRADING_MODES}, not {grading!r}")
        self.container = container
        self.task = task
        self.success_reward = success_reward
        self.reward_range = reward_range
        self.grading = grading
        self.extra_work_dirs = tuple(extra_work_dirs)
        self.copied: dict[str, Any] = {}

    def verify(self, task: Task, submission: dict[str, Any], episode: Episode) -> Verdict:
        """Run the task's tests on the submission; raises InfraError only for what the agent
        cannot have caused (see the module docstring). The containers are removed afterwards."""
        fresh: list[Container] = []
        try:
            verdict = self._verify(episode, fresh)
        finally:
            if self.container is not None:
                self.container.remove()
            for made in fresh:
                made.remove()
        for layer in verdict.layers:
            layer.details["graded"] = self.grading
            if self.copied:
                layer.details["work_copied"] = self.copied
        return verdict

    def _verify(self, episode: Episode, fresh: list[Container]) -> Verdict:
        acted = bool(episode.scratch.get(ACTED))
        container = self.container
        if container is None or not container.running():
            if not acted:
                raise InfraError("the task's container was gone before the agent ran any command")
            return self._wrong("the container was gone at grading, after the agent's commands", None)
        if self.grading == SEPARATE:
            moved = self._fresh_container(container, acted, fresh)
            if isinstance(moved, Verdict):
                return moved
            container = moved
        return self._grade(container, acted, fresh)

    def _fresh_container(self, agent: Container, acted: bool, fresh: list[Container]) -> Container | Verdict:
        """A new container of the agent's image holding the agent's work dirs as data (see the
        module docstring); the agent's container is removed. A fresh container that will not
        start is infra (InfraError); a copy that fails after the agent acted is its wrong answer."""
        agent.root("kill -9 -1 2>/dev/null; sleep 0.2; true")  # a still snapshot; best effort
        dirs = work_dirs(agent.image, self.task, [d for d in self.extra_work_dirs if not is_system_dir(d)])
        skip = search_dirs(agent.image, self.task)
        try:
            grader = Container(agent.image, self.task, phase="grader")
        except InfraError:
            if not acted:
                raise
            # it would not start beside the agent's container (whose disk use no limit bounds): with
            # that gone, one that starts says the agent's footprint was why; one that does not is infra
            agent.remove()
            fresh.append(Container(agent.image, self.task, phase="grader"))
            return self._wrong("no grading container would start beside the agent's (its footprint: a full disk, "
                               "say); one started once the agent's container was removed", None)
        fresh.append(grader)
        copied: dict[str, Any] = {}
        left = WORK_LIMIT_BYTES
        for base in dirs:
            try:
                existed, what = agent.copy_work_to(grader, base, skip=skip, limit_bytes=left)
            except InfraError as exc:
                if not acted:
                    raise
                return self._wrong(f"the agent's work could not be copied for grading: {exc}", None)
            if what.too_large:
                return self._wrong(f"the agent's work ({', '.join(dirs)}) is over {WORK_LIMIT_BYTES} bytes", None)
            left -= what.bytes
            copied[base] = ({"files": what.files, "bytes": what.bytes, "skipped": what.skipped}
                            if existed else "absent")
        self.copied = copied
        agent.remove()
        return grader

    def _grade(self, container: Container, acted: bool, fresh: list[Container]) -> Verdict:
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
        ran, seconds = self._run_tests(container)
        log = ran.text[-4000:]
        if ran.timed_out:
            container.remove()  # nothing of the agent's may occupy the host while the pristine run is timed
            return self._timed_out(container.image, log, fresh)
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

    def _run_tests(self, container: Container) -> tuple[Ran, float]:
        config = self.task.config.verifier
        container.root(f"chmod a+x {TESTS_DIR}/test.sh")
        t0 = time.monotonic()
        ran = container.exec(f"{TESTS_DIR}/test.sh", user=config.user, env=config.env,
                             timeout_s=config.timeout_sec, limit=16 * 1024)
        return ran, time.monotonic() - t0

    def _timed_out(self, image: str, log: str, fresh: list[Container]) -> Verdict:
        """``test.sh`` ran past its timeout on the submission: run it on a pristine container of
        ``image`` (see the module docstring). Raises InfraError when that container cannot be made
        ready: nothing of the agent's is in it."""
        timeout = self.task.config.verifier.timeout_sec
        pristine = Container(image, self.task, phase="pristine")
        fresh.append(pristine)
        prepared = pristine.root(PREPARE)
        if prepared.rc != 0:
            raise InfraError(f"preparing the pristine container failed: {prepared.text[-1000:]}")
        pristine.copy_in(self.task.tests_dir, TESTS_DIR)
        ran, seconds = self._run_tests(pristine)
        details = {"log_tail": log, "pristine_timed_out": ran.timed_out, "pristine_seconds": round(seconds, 3)}
        if ran.timed_out:
            why = (f"test.sh ran past [verifier] timeout_sec ({timeout}s) on the submission and on a pristine "
                   "container too: the verifier is too slow for its budget")
            layer = LayerResult(layer="correctness", name="harbor_tests", score=0.0, passed=False, reason=why,
                                details=details)
            return Verdict(reward=0.0, outcome=Outcome.VERIFIER_ERROR, layers=[layer], detail=why)
        why = (f"test.sh ran past [verifier] timeout_sec ({timeout}s) on the submission; on a pristine container it "
               f"finished in {seconds:.1f}s")
        verdict = self._wrong(why, log)
        verdict.layers[0].details.update(details)
        return verdict

    def _wrong(self, why: str, log: str | None) -> Verdict:
        layer = LayerResult(layer="correctness", name="harbor_tests", score=0.0, passed=False, reason=why,
                            details={} if log is None else {"log_tail": log})
        floor = self.reward_range[0] if self.reward_range is not None else 0.0
        return Verdict(reward=floor, outcome=Outcome.WRONG_ANSWER, layers=[layer], detail=why)


__all__ = ["ACTED", "GRADING_MODES", "IN_PLACE", "LOG_DIR", "SEPARATE", "TESTS_DIR", "HarborVerifier", "grading_mode",
           "parse_reward", "read_reward"]
