"""``envhub.make("verifiers:MODULE[@VERSION]")``: a Verifiers v1 taskset as an envhub env.

The taskset runs as Verifiers runs it -- its own loader, env, harness and scoring -- in a worker
process under an interpreter made for ``verifiers`` (:mod:`.worker`, :mod:`.venv`). The harness's
model is the bridge's relay (:mod:`.relay`): each chat request it sends is one envhub turn. So the
envhub policy samples every assistant message itself, and the trajectory is its own sampled
tokens and logprobs, token-exact by construction; what the harness adds between two requests (its
tools' results, user turns) are the step's observation messages, masked like any env reply.

- ``reset`` starts the episode in the worker and waits for the harness's first request: its
  messages and tools are the opening observation;
- ``step`` answers the waiting request with the policy's turn (its text, and the tool calls the
  env's parser reads in it, as OpenAI ``tool_calls``) and waits for the next request -- whose
  messages past what was already said are the observation -- or for the episode's end, whose
  trace becomes the verdict (:mod:`.outcomes`);
- a next request that does not extend the conversation (the harness compacted, truncated or
  edited it) ends the episode as ``context_overflow``: an envhub episode is one token stream;
- envhub's budget (turns, tool calls, wall time) and ``abort`` stop the Verifiers episode too.

Tasks are the taskset's, in ``load()`` order (at most ``num_tasks``), named by their ``id`` (else
``idx-N``), split 80 / 10 / 10 by a hash of the name. There is no terminal tool (an answer without
tool calls ends a Verifiers chat) and no reference solution.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from envhub.budget import Budget
from envhub.chat_wire import content_text, to_message, to_tool_spec
from envhub.env import Env
from envhub.episode import Episode
from envhub.errors import InfraError
from envhub.parsing import ToolCallParser, action_calls, strip_end_tokens, visible_text
from envhub.sandboxes.spawner import die_with_parent, popen
from envhub.types import Action, Message, Outcome, Task, ToolCall, Turn, Verdict

from .outcomes import verdict_of
from .relay import ModelCall, Relay
from .tasks import TasksetTasks
from .venv import bridge_python

PREFIX = "verifiers:"
WORKER = Path(__file__).with_name("worker.py")


class VerifiersBridge(Env):
    """A Verifiers v1 taskset played episode by episode (see the module docstring).

    Args:
        target: an installed taskset (``MODULE`` or ``MODULE@VERSION``: the distribution of that
            name must have that version), or a taskset package directory (its parent joins the
            worker's import path).
        harness: a Verifiers harness id; default: the taskset's own, else ``null`` (a chat loop
            over the taskset's tools that runs no code here; Verifiers' own fallback, ``bash``,
            would run the model's shell commands on this machine).
        taskset_args: the taskset's config fields (``--env.taskset.*`` in ``vf-eval``).
        num_tasks: how many of the taskset's tasks to list, at most.
        success_reward: the weighted reward at or above which an episode is a ``success``.
        reward_range: the taskset's weighted rewards, ``(low, high)``: what ``envhub verify`` checks
            against, and ``low`` is what envhub's own policy verdicts earn (default: 0).
        turn_timeout_s: how long the harness may take between two model requests.
        startup_timeout_s: how long loading the taskset may take.
        split, budget, parser: as :class:`~envhub.env.Env`'s; ``sandbox`` / ``sandbox_pool`` unused.

    Raises:
        InfraError: the worker could not start or load the taskset (its error in the message).
    """

    family: ClassVar[str] = "verifiers"
    version: ClassVar[str] = "0"
    default_budget: ClassVar[Budget] = Budget()
    needs_isolation: ClassVar[bool] = False

    def __init__(self, target: str, *, harness: str | None = None, taskset_args: dict[str, Any] | None = None,
                 num_tasks: int = 10000, success_reward: float = 1.0,
                 reward_range: tuple[float, float] | list[float] | None = None, turn_timeout_s: float = 600.0,
                 startup_timeout_s: float = 600.0, split: str = "train",
                 budget: Budget | dict[str, Any] | None = None, parser: str | ToolCallParser = "default",
                 sandbox: str = "auto", sandbox_pool: int = 8) -> None:
        super().__init__(split=split, budget=budget, parser=parser, sandbox=sandbox, sandbox_pool=sandbox_pool)
        self.env_id = PREFIX + target  # type: ignore[misc]
        self.success_reward = success_reward
        self.reward_range: tuple[float, float] | None = (
            (float(reward_range[0]), float(reward_range[1])) if reward_range is not None else None)
        self.turn_timeout_s = turn_timeout_s
        self._events: queue.Queue[ModelCall | dict[str, Any]] = queue.Queue()
        self.relay = Relay(calls=self._events)
        self._workdir = Path(tempfile.mkdtemp(prefix="envhub-verifiers-"))
        self._log_path = self._workdir / "worker.log"
        self._running: int | None = None          # the worker's episode number now playing
        self._episodes = 0
        self._pending: ModelCall | None = None     # the request the policy's next turn answers
        self._history: list[dict[str, Any]] = []   # the conversation as the harness last sent it
        self._session: str | None = None
        self._dead_sessions: set[str] = set()
        #: what the bridge answered the harness in the episode, in order (``{"content", "tool_calls"}``)
        self.answers: list[dict[str, Any]] = []
        #: how the worker runs the taskset: ``taskset``, ``harness``, ``taskset_args``, ``pythonpath``
        self.source: dict[str, Any] = {}
        self._worker_args = (target, harness, taskset_args or {}, num_tasks)
        self._startup_timeout_s = startup_timeout_s
        try:
            self._proc = self._start_worker(*self._worker_args)
            ready = self._await_ready(startup_timeout_s)
        except BaseException:
            self.close()
            raise
        self.verifiers_version = str(ready["verifiers"])
        self.harness = str(ready["harness"])
        self.source["harness"] = self.harness
        self.executes_code = bool(ready["executes_code"])
        self._task_list: list[dict[str, Any]] = list(ready["tasks"])

    # ---- the worker ---------------------------------------------------------------------------

    def _start_worker(self, target: str, harness: str | None, taskset_args: dict[str, Any],
                      num_tasks: int) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        directory = Path(target)
        if directory.is_dir():  # a taskset package directory
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(directory.resolve().parent),
                                                            env.get("PYTHONPATH")) if p)
            taskset, version = directory.resolve().name, ""
        else:
            taskset, _, version = target.partition("@")
        if not taskset:
            raise ValueError(f"{self.env_id!r} names no taskset (verifiers:MODULE[@VERSION])")
        self.source = {"taskset": taskset, "taskset_args": taskset_args, "pythonpath": env.get("PYTHONPATH")}
        cmd = [bridge_python(), "-P", str(WORKER), "--taskset", taskset, "--version", version,
               "--harness", harness or "", "--taskset-args", json.dumps(taskset_args),
               "--base-url", self.relay.base_url, "--max-tasks", str(num_tasks)]
        log = open(self._log_path, "ab")  # noqa: SIM115 - the worker holds it
        try:
            # a directory of its own each start: a replay's worker finds nothing the last one left there
            cwd = tempfile.mkdtemp(prefix="worker-", dir=self._workdir)
            proc = popen(cmd, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                         start_new_session=True, preexec_fn=die_with_parent, env=env)
        finally:
            log.close()
        threading.Thread(target=self._pump, args=(proc,), name="verifiers-worker", daemon=True).start()
        return proc

    def _pump(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, b""):
            with contextlib.suppress(ValueError):
                self._events.put(json.loads(line))
        self._events.put({"event": "exit", "code": proc.wait()})

    def _await_ready(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                event = self._events.get(timeout=left)
            except queue.Empty:
                break
            if isinstance(event, ModelCall):
                event.fail(503, "no episode is running")
            elif event.get("event") == "ready":
                return event
            elif event.get("event") in ("fatal", "exit"):
                raise InfraError(f"{self.env_id}: the Verifiers worker failed: "
                                 f"{event.get('error') or self._log_tail()}")
        raise InfraError(f"{self.env_id}: the taskset did not load within {timeout_s:.0f} s\n{self._log_tail()}")

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self._log_path.read_text(errors="replace")[-3000:]
        return ""

    def _send(self, command: dict[str, Any]) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write((json.dumps(command) + "\n").encode())
        self._proc.stdin.flush()

    def _next(self, episode_no: int, timeout_s: float) -> ModelCall | dict[str, Any] | None:
        """The running episode's next request, its ``done`` event or the worker's ``exit``;
        None when nothing came within ``timeout_s``. Requests of ended episodes are refused."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                event = self._events.get(timeout=left)
            except queue.Empty:
                return None
            if isinstance(event, ModelCall):
                if event.session is not None and event.session in self._dead_sessions:
                    event.fail(503, "this episode has ended")
                    continue
                if self._session is None:
                    self._session = event.session
                elif event.session != self._session:  # one episode runs at a time per env
                    event.fail(409, "another episode is running")
                    continue
                return event
            if event.get("event") == "exit" or event.get("episode") == episode_no:
                return event
        return None

    # ---- the Env hooks ------------------------------------------------------------------------

    def load_tasks(self) -> TasksetTasks:
        return TasksetTasks(self.env_id, self._task_list)

    def make_verifier(self) -> Any:
        raise NotImplementedError("a Verifiers taskset scores its own episodes; the bridge has no verifier")

    def gold_actions(self, task: Task) -> list[Action]:
        raise NotImplementedError(f"{self.env_id} is a Verifiers taskset: it has no reference solution")

    @property
    def terminal_tool(self) -> str:
        return ""  # an answer without tool calls ends the episode

    def fidelity_plan(self, episodes: int) -> tuple[Any, Any]:
        """No oracle (a taskset has no reference actions), and the agreement of the bridge's verdicts
        with Verifiers' own runner on the same answers: :func:`.fidelity.agreement_check`."""
        from .fidelity import agreement_check

        return None, [agreement_check(episodes)]

    def setup_episode(self, episode: Episode) -> None:
        """Start the Verifiers episode; the harness's first request is the opening observation."""
        self._stop_running()
        self._episodes += 1
        self._running, self._session, self._history = self._episodes, None, []
        self.answers = []
        index = self.tasks.index_of(episode.task.task_id)
        self._send({"op": "run", "episode": self._running, "index": index})
        event = self._next(self._running, self.turn_timeout_s)
        if not isinstance(event, ModelCall):
            self._ended_without_request(episode, event)
            return
        self._pending = event
        self._history = list(event.body["messages"])
        episode.messages = [to_message(m) for m in self._history]
        episode.tools = [to_tool_spec(t) for t in event.body.get("tools") or []]
        prompt = "\n\n".join(m.content for m in episode.messages if m.role == "user")
        episode.task = episode.task.model_copy(update={"prompt": prompt})

    def _ended_without_request(self, episode: Episode, event: dict[str, Any] | None) -> None:
        if event is not None and event.get("event") == "done":
            self._running = None
            self._finish_with(verdict_of(event["trace"], acted=False, success_reward=self.success_reward,
                                         floor=self.floor))
            return
        why = "the Verifiers worker exited" if event else f"no model request within {self.turn_timeout_s:.0f} s"
        raise InfraError(f"{why}\n{self._log_tail()}")

    def _apply(self, episode: Episode, turn: Turn, action: Action, error: str | None) -> list[Message]:
        call, self._pending = self._pending, None
        if call is None or self._running is None:
            raise InfraError("no model request is waiting for this turn")
        calls, parse_error = ([], error) if error else action_calls(action, self.parser, episode.budget.max_action_chars)
        if parse_error:
            calls = []  # plain text: the harness takes it as the answer
        turn.tool_calls = calls
        episode.tool_calls += len(calls)
        content = _reply_content(action.text, parsed_calls=bool(calls) and action.tool_calls is None)
        call.answer(content, calls, finish_reason="length" if turn.finish_reason == "length" else None)
        self._history.append(_assistant(content, calls))
        self.answers.append({"content": content, "tool_calls": [c.model_dump() for c in calls]})
        event = self._next(self._running, self.turn_timeout_s)
        if event is None:  # the harness went quiet after the agent's turn: the agent's wall time
            self._finish(Outcome.BUDGET_EXHAUSTED, f"the harness sent nothing for {self.turn_timeout_s:.0f} s")
            return []
        if not isinstance(event, ModelCall):
            if event.get("event") == "exit":
                why = f"the Verifiers worker exited ({event.get('code')}) after the agent's turn"
                if self._replay_exits(self.tasks.index_of(episode.task.task_id)):
                    self._finish(Outcome.FORMAT_ERROR, f"{why}, and again when envhub replayed the episode's "
                                 "answers on a fresh worker: the answers bring it down")
                    return []
                raise InfraError(f"{why}; a replay on a fresh worker did not exit\n{self._log_tail()}")
            self._running = None
            self._finish_with(verdict_of(event["trace"], acted=True, success_reward=self.success_reward,
                                         floor=self.floor))
            return []
        incoming = list(event.body["messages"])
        diverged = _divergence(self._history, incoming)
        if diverged is not None:
            event.fail(503, "the envhub episode ended")
            self._finish(Outcome.CONTEXT_OVERFLOW,
                         f"the harness rewrote the conversation ({diverged}); an envhub episode is one token stream")
            return []
        new = [to_message(m) for m in incoming[len(self._history):]]
        self._pending, self._history = event, incoming
        return new

    def _finish_with(self, verdict: Verdict) -> None:
        self._finish(verdict.outcome, verdict.detail, verdict)

    @property
    def floor(self) -> float:
        """What an episode the taskset did not score earns: the bottom of the declared range, else 0."""
        return self.reward_range[0] if self.reward_range is not None else 0.0

    def _finish(self, outcome: Outcome, detail: str, verdict: Verdict | None = None) -> None:
        self._stop_running()
        if verdict is None and not outcome.is_infra:  # envhub's own verdict: a budget, a rewritten history
            verdict = Verdict(reward=self.floor, outcome=outcome, detail=detail)
        super()._finish(outcome, detail, verdict)

    def _stop_running(self) -> None:
        """Cancel the Verifiers episode still playing, if any, and refuse its later requests."""
        if self._pending is not None:
            self._pending.fail(503, "the envhub episode ended")
            self._pending = None
        if self._session is not None:
            self._dead_sessions.add(self._session)
        if self._running is not None:
            with contextlib.suppress(OSError, ValueError):
                self._send({"op": "cancel", "episode": self._running})
            self._running = None

    def _replay_exits(self, index: int) -> bool:
        """The worker exited after the agent's turn: a fresh worker runs the same task (``index``) and
        its harness is answered the episode's answers again, in order. True when it exits again --
        the answers bring it down, so the episode is the agent's, never infra -- else False (an exit
        the replay does not reproduce stays infra). Either way a fresh worker is left running."""
        answers = list(self.answers)
        self._running, self._pending = None, None
        if self._session is not None:
            self._dead_sessions.add(self._session)
        self._fresh_worker()
        self._episodes += 1
        number, self._session = self._episodes, None
        self._send({"op": "run", "episode": number, "index": index})
        try:
            for answer in [*answers, None]:
                event = self._next(number, self.turn_timeout_s)
                if not isinstance(event, ModelCall):
                    exited = event is not None and event.get("event") == "exit"
                    if exited:
                        self._fresh_worker()
                    return exited
                if answer is None:  # the replay went further than the episode did
                    event.fail(503, "the replay is over")
                    return False
                event.answer(answer["content"], [ToolCall.model_validate(c) for c in answer["tool_calls"]])
            return False
        finally:
            if self._session is not None:
                self._dead_sessions.add(self._session)
            self._session = None
            with contextlib.suppress(OSError, ValueError, AttributeError):
                self._send({"op": "cancel", "episode": number})

    def _fresh_worker(self) -> None:
        """Stop the worker (its process group) and start a new one for the same taskset."""
        self._stop_worker()
        self._proc = self._start_worker(*self._worker_args)
        self._await_ready(self._startup_timeout_s)

    def close(self) -> None:
        """End the episode, stop the worker (its process group) and the relay; idempotent."""
        with contextlib.suppress(Exception):
            self._stop_running()
        super().close()
        self._stop_worker()
        self.relay.close()
        shutil.rmtree(self._workdir, ignore_errors=True)

    def _stop_worker(self) -> None:
        proc = getattr(self, "_proc", None)
        if proc is not None:
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.close()  # type: ignore[union-attr]
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
            self._proc = None  # type: ignore[assignment]


def _reply_content(text: str, *, parsed_calls: bool) -> str:
    """What the harness is answered as the message's content: the sampled text without its
    reasoning and end-of-turn token, and without the tool-call markup the calls were read from
    (those go as ``tool_calls``). The record keeps the text as sampled."""
    text = strip_end_tokens(visible_text(text))
    return text.split("<tool_call>")[0].rstrip() if parsed_calls else text


def _assistant(content: str, calls: list[ToolCall]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in calls]
    return message


def _key(message: dict[str, Any]) -> tuple[str, str, str]:
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        args = fn.get("arguments") or {}
        if isinstance(args, str):
            with contextlib.suppress(ValueError):
                args = json.loads(args) if args.strip() else {}
        calls.append([fn.get("name"), args])
    try:
        text = content_text(message.get("content")).strip()
    except ValueError:
        text = repr(message.get("content"))
    return str(message.get("role")), text, json.dumps(calls, sort_keys=True, default=str)


def _divergence(history: list[dict[str, Any]], incoming: list[dict[str, Any]]) -> str | None:
    """None when ``incoming`` extends ``history``; else what changed, at which message."""
    if len(incoming) < len(history):
        return f"{len(history) - len(incoming)} message(s) dropped"
    for i, (said, sent) in enumerate(zip(history, incoming, strict=False)):
        if _key(said) != _key(sent):
            return f"message {i} ({said.get('role')}) changed"
    return None


__all__ = ["PREFIX", "VerifiersBridge"]
