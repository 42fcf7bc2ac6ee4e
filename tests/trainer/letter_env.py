"""A tiny single-turn envhub env that a randomly initialised model can learn: the learning test's task.

The whole reply is the answer (no tool-call syntax, which a model trained from scratch cannot know),
and it is correct when it starts with ``c`` or ``p``. A near-uniform random model over SmolLM2's
49,152 tokens hits that about 16 % of the time, so GRPO groups of 8 carry signal from the start.
``register_test_env()`` makes it ``test/FirstLetter-v0`` (and the async tests' ``test/HeldLetter-v0``);
subprocess tests import this module through ``train_script.py``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from envhub.budget import Budget
from envhub.env import Env
from envhub.episode import Episode
from envhub.parsing import ParseResult
from envhub.registry import register
from envhub.tools import tool
from envhub.trainer.bench_async_env import FirstLetter, LetterTasks
from envhub.types import Action, Task, ToolCall, Verdict


class _WholeReply:
    """The whole reply is the answer."""

    def parse(self, text: str) -> ParseResult:
        return ParseResult(calls=[ToolCall(name="answer", arguments={"answer": text})])


class FirstLetterEnv(Env):
    env_id = "test/FirstLetter-v0"
    family = "first_letter"
    default_budget = Budget(max_turns=1, max_format_errors=0)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(parser=_WholeReply(), **kwargs)

    def load_tasks(self) -> LetterTasks:
        return LetterTasks("first-letter", "first_letter")

    def task_cache_key(self) -> str:
        return "first-letter"

    def make_verifier(self) -> FirstLetter:
        return FirstLetter()

    def system_prompt(self, task: Task) -> str:
        return "Answer with a single word. Your whole reply is your answer."

    @tool(terminal=True)
    def answer(self, answer: str) -> str:
        """The reply (the whole message)."""
        return answer

    def gold_actions(self, task: Task) -> list[Action]:
        return [Action(text="cat")]


class _HeldVerdicts(FirstLetter):
    """The verdict of an episode its env holds waits until the run's ``steps.jsonl`` reports
    ``until_version`` (at most ``max_hold_s``)."""

    def __init__(self, env: HeldLetterEnv, steps_file: str | None, until_version: int, max_hold_s: float) -> None:
        self.env, self.steps_file = env, Path(steps_file) if steps_file else None
        self.until_version, self.max_hold_s = until_version, max_hold_s

    def verify(self, task: Task, submission: dict[str, Any], episode: Episode) -> Verdict:
        deadline = time.monotonic() + self.max_hold_s
        while self.env.holding and self.steps_file is not None and time.monotonic() < deadline:
            lines = self.steps_file.read_text().splitlines() if self.steps_file.exists() else []
            if lines and int(json.loads(lines[-1])["weight_version"]) >= self.until_version:
                break
            time.sleep(0.05)
        return super().verify(task, submission, episode)


class HeldLetterEnv(FirstLetterEnv):
    """``test/HeldLetter-v0``, the async tests' env: FirstLetter where every episode of ``crash_task``
    crashes (its env raises at reset), and the episodes of ``held_task`` that start before the training
    run writing ``steps_file`` has finished a step are held at their verdict until the run reached
    weight version ``until_version`` (at most ``max_hold_s``): a group that later groups overtake,
    trained only once it is stale."""

    env_id = "test/HeldLetter-v0"

    def __init__(self, *, crash_task: str | None = None, held_task: str | None = None,
                 steps_file: str | None = None, until_version: int = 0, max_hold_s: float = 30.0,
                 **kwargs: Any) -> None:
        self.crash_task, self.held_task, self.holding = crash_task, held_task, False
        self.verdicts = _HeldVerdicts(self, steps_file, until_version, max_hold_s)
        super().__init__(**kwargs)

    def system_prompt(self, task: Task) -> str:
        if task.task_id == self.crash_task:
            raise RuntimeError(f"{self.env_id} crashes on {task.task_id} (crash_task)")
        steps = self.verdicts.steps_file
        self.holding = task.task_id == self.held_task and not (steps is not None and steps.exists()
                                                               and steps.read_text().strip())
        return super().system_prompt(task)

    def make_verifier(self) -> FirstLetter:
        return self.verdicts


def register_test_env() -> None:
    register(FirstLetterEnv.env_id, FirstLetterEnv, description="learning-test env: a word starting with c or p")
    register(HeldLetterEnv.env_id, HeldLetterEnv, description="async tests: FirstLetter with a crashing and a held task")
