"""``envhub.make("harbor:DIR")``: Harbor tasks as an envhub env.

``DIR`` is one Harbor task directory or a directory of them (:mod:`.task_dir`: ``task.toml``
schema up to 1.4, ids and splits). :class:`HarborBridge` is an :class:`~envhub.env.Env` (parsing,
budgets, format errors, the episode record and metrics are envhub's own):

- **reset** builds the task's ``environment/Dockerfile`` offline (cached by a hash of the
  environment directory; :func:`.container.ensure_image`) and starts one container for the
  episode with the task's cpus, memory and network (:class:`.container.Container`). A build that
  fails, or a container that will not start, ends the episode at reset as ``env_error``.
- the prompt is ``instruction.md``; the tools are ``bash`` (a command in the container as
  ``[agent] user``, under a timeout, output clipped) and ``submit`` (no arguments; terminal).
- the agent's wall time is ``[agent] timeout_sec`` where the task sets it (else the budget's
  ``max_agent_seconds``), counted from when the container is up: past it the episode ends as
  ``budget_exhausted``, and no command runs past it.
- **submit** grades as Harbor does (:mod:`.grade`): ``tests/`` copied in only then, ``test.sh``
  as ``[verifier] user``, the reward from ``/logs/verifier``. ``success`` at reward >= 1.0, else
  ``wrong_answer``; nothing the agent does can make an infra outcome. Where: by default in a
  **fresh container** of the task's image that the agent never touched, holding only the agent's
  work directories copied in as data (``grading="separate"``; also every task with
  ``[verifier] environment_mode = "separate"``); in the agent's own container only for a task
  that sets ``environment_mode = "shared"`` explicitly (its tests need the container as the
  agent left it) or a bridge made with ``grading="in_place"``.
- **gold** (:meth:`HarborBridge.gold_actions`): ``solution/`` shipped in through the ``bash``
  tool (a base64 tarball in the command) and ``solve.sh`` run, then ``submit``; the noop submits
  at once.

The container is removed after grading, at the next reset and at ``close``; one left behind by
a dead process carries envhub's owner labels, which ``envhub``'s leftover cleanup removes.

The network of each phase is Harbor's (:meth:`.task_dir.TaskConfig.network_policy`): ``public``,
``no-network``, or ``allowlist`` -- HTTP(S) through an egress proxy to ``allowed_hosts`` only
(:mod:`.egress`).

Not supported yet: ``storage_mb`` (not enforced), ``gpus`` and
multi-container tasks (``docker-compose.yaml``) (both refused when the task is read), healthchecks, MCP servers, ``${VAR}`` templates
in ``env`` tables (passed literally), and pulling a ``docker_image`` (only local images are used).
"""

from __future__ import annotations

import base64
import io
import shlex
import tarfile
import time
from dataclasses import replace
from typing import Any, ClassVar

from envhub.budget import Budget
from envhub.env import Env
from envhub.episode import Episode
from envhub.errors import InfraError, ToolError
from envhub.parsing import ToolCallParser, format_tool_call
from envhub.tools import tool
from envhub.types import Action, Outcome, Task, Verdict

from .container import Container, ensure_image
from .grade import ACTED, GRADING_MODES, SEPARATE, HarborVerifier, grading_mode
from .task_dir import HarborTasks

PREFIX = "harbor:"
#: The longest ``bash`` command: it is one argument of ``docker exec``, and Linux takes at most
#: 128 KiB in one (MAX_ARG_STRLEN); a longer one is the agent's error, not an infra failure.
MAX_COMMAND_BYTES = 120 * 1024
SYSTEM_PROMPT = (
    "You are an agent working in a Linux container through the `bash` tool: each call runs one "
    "command with `bash -c` and answers with its exit status and output. Do the task below in "
    "the container. When you are done, call `submit` (no arguments): it ends the episode, and "
    "the task's tests grade the container's state."
)


class HarborBridge(Env):
    """Harbor task directories as an envhub env. See the module docstring.

    Args:
        directory: a Harbor task directory, or a directory of them.
        task_ids: keep only these tasks of the set.
        success_reward: the reward at or above which an episode is a ``success``.
        reward_range: the tasks' rewards, ``(low, high)``: envhub's own verdicts and the wrong answers
            the tasks did not score earn ``low`` (default: 0); a reward outside it is such a wrong answer.
        command_timeout_s: the longest one ``bash`` call may run, whatever it asks for.
        max_output_bytes: how much of one command's output is kept (then clipped to the
            budget's ``max_observation_chars``).
        grading: where tasks that do not say are graded: ``"separate"`` (a fresh container of the
            image with the agent's work dirs copied in as data; the default) or ``"in_place"``
            (the agent's container, Harbor's shared mode). A task's explicit
            ``[verifier] environment_mode`` wins (``"shared"``: in place; ``"separate"``: separate).
        work_dirs: directories copied as the agent's work besides the image's ``WORKDIR``,
            ``/app`` and ``/work`` (system directories are never copied).
        split, budget, parser: as :class:`~envhub.env.Env`'s; ``sandbox`` and ``sandbox_pool`` are
            taken (every env takes them) but unused: the task's own image runs the tools.

    Raises:
        ValueError: ``directory`` holds no valid Harbor task, a task names an unknown
            ``[verifier] environment_mode``, or ``grading`` is no mode.
    """

    family: ClassVar[str] = "harbor"
    version: ClassVar[str] = "0"
    default_budget: ClassVar[Budget] = Budget(max_turns=64, max_tool_calls=128, max_agent_seconds=900.0,
                                              max_action_chars=1024 * 1024, max_observation_chars=16_384)
    needs_isolation: ClassVar[bool] = False

    def __init__(self, directory: str, *, task_ids: list[str] | None = None, success_reward: float = 1.0,
                 reward_range: tuple[float, float] | list[float] | None = None,
                 command_timeout_s: float = 600.0, max_output_bytes: int = 64 * 1024, grading: str = SEPARATE,
                 work_dirs: list[str] | tuple[str, ...] = (), split: str = "train",
                 budget: Budget | dict[str, Any] | None = None, parser: str | ToolCallParser = "default",
                 sandbox: str = "auto", sandbox_pool: int = 8) -> None:
        super().__init__(split=split, budget=budget, parser=parser, sandbox=sandbox, sandbox_pool=sandbox_pool)
        self.source = HarborTasks(directory, task_ids=task_ids)
        if grading not in GRADING_MODES:
            raise ValueError(f"grading must be one of {GRADING_MODES}, not {grading!r}")
        self.grading = grading
        self.work_dirs = tuple(str(d) for d in work_dirs)
        self.grading_modes = {tid: grading_mode(t, grading) for tid, t in self.source.tasks.items()}
        self.env_id = PREFIX + str(self.source.root)  # type: ignore[misc]
        self.success_reward = success_reward
        self.reward_range: tuple[float, float] | None = (
            (float(reward_range[0]), float(reward_range[1])) if reward_range is not None else None)
        self.command_timeout_s = command_timeout_s
        self.max_output_bytes = max_output_bytes
        self.container: Container | None = None
        self._deadline = 0.0

    # ---- Env hooks ----------------------------------------------------------------------------

    def load_tasks(self) -> HarborTasks:
        return self.source

    def system_prompt(self, task: Task) -> str:
        return SYSTEM_PROMPT

    def episode_budget(self, task: Task) -> Budget:
        """The budget, with ``[agent] timeout_sec`` as the agent's wall time where the task sets it."""
        timeout = self.source.harbor_task(task.task_id).config.agent.timeout_sec
        return self.budget if timeout is None else replace(self.budget, max_agent_seconds=float(timeout))

    def make_verifier(self) -> Any:
        raise NotImplementedError("each episode is graded in its own container: see verifier_for")

    def verifier_for(self, episode: Episode) -> HarborVerifier:
        task_id = episode.task.task_id
        return HarborVerifier(self.container, self.source.harbor_task(task_id),
                              success_reward=self.success_reward, reward_range=self.reward_range,
                              grading=self.grading_modes[task_id], extra_work_dirs=self.work_dirs)

    def _finish(self, outcome: Outcome, detail: str, verdict: Verdict | None = None) -> None:
        """envhub's own verdicts (a format error, a spent budget) earn the declared floor, not 0."""
        if verdict is None and self.reward_range is not None and not outcome.is_infra:
            verdict = Verdict(reward=self.reward_range[0], outcome=outcome, detail=detail)
        super()._finish(outcome, detail, verdict)

    def setup_episode(self, episode: Episode) -> None:
        """Build (or reuse) the task's image and start its container. The agent's clock starts once
        it is up: the time spent here is added to the episode's ``max_agent_seconds``."""
        self._remove_container()
        task = self.source.harbor_task(episode.task.task_id)
        self.container = Container(ensure_image(task), task)
        spent = time.monotonic() - episode.started
        episode.budget = replace(episode.budget, max_agent_seconds=episode.budget.max_agent_seconds + spent)
        self._deadline = episode.started + episode.budget.max_agent_seconds
        episode.scratch[ACTED] = False

    def gold_actions(self, task: Task) -> list[Action]:
        """The oracle: ``solution/`` unpacked in the container (``/solution`` where the agent's user
        may write it, else a fresh temporary directory) and ``solve.sh`` run with ``[solution] env``
        through ``bash``; then ``submit``."""
        harbor = self.source.harbor_task(task.task_id)
        if not (harbor.solution_dir / "solve.sh").is_file():
            raise NotImplementedError(f"task {task.task_id} has no solution/solve.sh")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            tar.add(harbor.solution_dir, arcname=".")
        packed = base64.b64encode(buffer.getvalue()).decode()
        env = " ".join(shlex.quote(f"{k}={v}") for k, v in harbor.config.solution.env.items())
        command = ('d=/solution; { mkdir -p "$d" && [ -w "$d" ]; } 2>/dev/null || d=$(mktemp -d); '
                   f"printf %s {packed} | base64 -d | tar -xzf - -C \"$d\" && "
                   f'env {env} bash "$d/solve.sh"')
        seconds = max(1, int(min(self.episode_budget(task).max_agent_seconds, self.command_timeout_s)))
        return [Action(text=format_tool_call("bash", {"command": command, "timeout_s": seconds})),
                Action(text=format_tool_call("submit", {}))]

    def fidelity_plan(self, episodes: int) -> tuple[Any, Any]:
        """What ``envhub verify harbor:DIR`` adds to the generic fidelity checks: the oracle
        (:meth:`gold_actions`, ``solve.sh``) and the reward audit (:func:`.audit.audit_check`: one
        row per task and attack case, ``hackable: <case>`` where the task's grader rewarded it).
        ``episodes`` is unused: every case is one episode per task."""
        from envhub.verifiers.fidelity import default_oracle

        from .audit import audit_check

        return default_oracle, [audit_check()]

    def close(self) -> None:
        """End the episode and remove its container."""
        super().close()
        self._remove_container()

    # ---- tools --------------------------------------------------------------------------------

    @tool
    def bash(self, command: str, timeout_s: int = 120) -> str:
        """Run a command with `bash -c` in the task's container; answers its exit status and output.

        Args:
            command: the command line.
            timeout_s: seconds it may run (capped by the time the agent has left).
        """
        episode = self._require_episode()
        container = self.container
        if container is None:
            raise InfraError("the episode has no container")
        if timeout_s < 1:
            raise ToolError("timeout_s must be at least 1")
        size = len(command.encode("utf-8", "surrogatepass"))
        if size > MAX_COMMAND_BYTES:  # one exec argument: the kernel refuses more (E2BIG)
            raise ToolError(f"the command is {size} bytes; at most {MAX_COMMAND_BYTES} (write long "
                            "content in several commands)")
        left = self._deadline - time.monotonic()
        if left < 1:
            raise ToolError("the agent's time is used up")
        seconds = min(float(timeout_s), left, self.command_timeout_s)
        if not episode.scratch.get(ACTED):
            if not container.running():  # nothing of the agent's has run yet: not its doing
                raise InfraError("the task's container is gone before the agent's first command")
            episode.scratch[ACTED] = True
        user = self.source.harbor_task(episode.task.task_id).config.agent.user
        ran = container.exec(command, user=user, timeout_s=seconds, limit=self.max_output_bytes)
        text = ran.output.decode("utf-8", "replace")
        clipped = (f"; output clipped: the first {len(ran.output)} of {ran.total_bytes} bytes"
                   if ran.total_bytes > len(ran.output) else "")
        if ran.timed_out:
            return f"[timed out after {seconds:.0f}s{clipped}]\n{text}"
        if ran.rc != 0 and not container.running():
            raise ToolError(f"the container is gone (exit {ran.rc}): {text[-500:]}")
        return f"[exit {ran.rc}{clipped}]\n{text}"

    @tool(terminal=True)
    def submit(self) -> str:
        """Finish: the task's tests grade your work as it is now. Ends the episode."""
        return ""

    # ---- internals ----------------------------------------------------------------------------

    def _remove_container(self) -> None:
        if self.container is not None:
            self.container.remove()
            self.container = None


__all__ = ["PREFIX", "SYSTEM_PROMPT", "HarborBridge"]
