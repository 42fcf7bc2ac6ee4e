"""A tiny single-turn envhub env that a randomly initialised model can learn: the learning test's task.

The whole reply is the answer (no tool-call syntax, which a model trained from scratch cannot know),
and it is correct when it starts with ``c`` or ``p``. A near-uniform random model over SmolLM2's
49,152 tokens hits that about 16 % of the time, so GRPO groups of 8 carry signal from the start.
``register()`` makes it ``test/FirstLetter-v0``; subprocess tests import this module through
``train_script.py``.
"""

from __future__ import annotations

from typing import Any

from envhub.budget import Budget
from envhub.env import Env
from envhub.episode import Episode
from envhub.parsing import ParseResult
from envhub.registry import register
from envhub.tools import tool
from envhub.types import Action, Outcome, Task, ToolCall, Verdict

LETTERS = ("c", "p")
PROMPT = "Reply with one word that starts with the letter c or the letter p."


class _Tasks:
    name = "first-letter"
    version = "1"

    def __init__(self) -> None:
        self._tasks = {f"{split}-{i}": Task(task_id=f"{split}-{i}", family="first_letter", split=split,
                                            prompt=PROMPT, hidden={"letters": LETTERS})
                       for split in ("train", "validation", "test") for i in range(4)}

    def task_ids(self, split: str) -> list[str]:
        return [t for t, task in self._tasks.items() if task.split == split]

    def get(self, task_id: str) -> Task:
        return self._tasks[task_id]


class _WholeReply:
    """The whole reply is the answer."""

    def parse(self, text: str) -> ParseResult:
        return ParseResult(calls=[ToolCall(name="answer", arguments={"answer": text})])


class _FirstLetter:
    def verify(self, task: Task, submission: dict[str, Any], episode: Episode) -> Verdict:
        word = str(submission.get("answer", "")).strip().lower()
        if word[:1] in task.hidden["letters"]:
            return Verdict(reward=1.0, outcome=Outcome.SUCCESS, detail=f"{word[:20]!r} starts with c or p")
        return Verdict(reward=0.0, outcome=Outcome.WRONG_ANSWER, detail=f"{word[:20]!r} does not")


class FirstLetterEnv(Env):
    env_id = "test/FirstLetter-v0"
    family = "first_letter"
    default_budget = Budget(max_turns=1, max_format_errors=0)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(parser=_WholeReply(), **kwargs)

    def load_tasks(self) -> _Tasks:
        return _Tasks()

    def task_cache_key(self) -> str:
        return "first-letter"

    def make_verifier(self) -> _FirstLetter:
        return _FirstLetter()

    def system_prompt(self, task: Task) -> str:
        return "Answer with a single word. Your whole reply is your answer."

    @tool(terminal=True)
    def answer(self, answer: str) -> str:
        """The reply (the whole message)."""
        return answer

    def gold_actions(self, task: Task) -> list[Action]:
        return [Action(text="cat")]


def register_test_env() -> None:
    register(FirstLetterEnv.env_id, FirstLetterEnv, description="learning-test env: a word starting with c or p")
