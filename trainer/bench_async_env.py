"""``bench/SlowLetter-v0``: the env of ``envhub bench async``, one a random tiny model can learn, whose tool
takes ``latency_s`` seconds a call (a sandbox, a search, a remote API: the waiting of an agent episode).

Each episode is one turn (no tool-call syntax, which a randomly initialised model cannot know): the whole
reply goes first to the ``look`` tool, which sleeps ``latency_s`` (releasing the GIL, as waiting on a
sandbox does) and then answers, then to the terminal ``answer`` tool, the episode's answer (a terminal
tool is graded, never run: the latency has to be a tool of its own). The reply is correct when it starts with ``c`` or ``p``: a near-uniform
random model over SmolLM2's vocabulary hits that about 16 % of the time, so GRPO groups carry signal from
the first step. Four tasks per split, the same prompt; :func:`register_bench_env` registers it (idempotent).
"""

from __future__ import annotations

import time
from typing import Any

from envhub.budget import Budget
from envhub.env import Env
from envhub.episode import Episode
from envhub.parsing import ParseResult
from envhub.registry import register
from envhub.tools import tool
from envhub.types import Action, Outcome, Task, ToolCall, Verdict

ENV_ID = "bench/SlowLetter-v0"
LETTERS = ("c", "p")
PROMPT = "Reply with one word that starts with the letter c or the letter p."


class LetterTasks:
    """Four tasks per split, all with :data:`PROMPT` (also the trainer tests' letter envs)."""

    version = "1"

    def __init__(self, name: str = "slow-letter", family: str = "slow_letter") -> None:
        self.name = name
        self._tasks = {f"{split}-{i}": Task(task_id=f"{split}-{i}", family=family, split=split,
                                            prompt=PROMPT, hidden={"letters": LETTERS})
                       for split in ("train", "validation", "test") for i in range(4)}

    def task_ids(self, split: str) -> list[str]:
        return [t for t, task in self._tasks.items() if task.split == split]

    def get(self, task_id: str) -> Task:
        return self._tasks[task_id]


class _WholeReply:
    """The whole reply is looked up (the slow tool), then answered."""

    def parse(self, text: str) -> ParseResult:
        return ParseResult(calls=[ToolCall(name="look", arguments={"word": text}, id="look"),
                                  ToolCall(name="answer", arguments={"answer": text}, id="answer")])


class FirstLetter:
    def verify(self, task: Task, submission: dict[str, Any], episode: Episode) -> Verdict:
        word = str(submission.get("answer", "")).strip().lower()
        if word[:1] in task.hidden["letters"]:
            return Verdict(reward=1.0, outcome=Outcome.SUCCESS, detail=f"{word[:20]!r} starts with c or p")
        return Verdict(reward=0.0, outcome=Outcome.WRONG_ANSWER, detail=f"{word[:20]!r} does not")


class SlowLetterEnv(Env):
    """One turn whose ``look`` tool takes ``latency_s`` seconds (>= 0) before it answers."""

    env_id = ENV_ID
    family = "slow_letter"
    default_budget = Budget(max_turns=1, max_format_errors=0)

    def __init__(self, *, latency_s: float = 0.0, **kwargs: Any) -> None:
        if latency_s < 0:
            raise ValueError(f"{ENV_ID}: latency_s must be >= 0, got {latency_s}")
        self.latency_s = float(latency_s)
        super().__init__(parser=_WholeReply(), **kwargs)

    def load_tasks(self) -> LetterTasks:
        return LetterTasks()

    def task_cache_key(self) -> str:
        return "slow-letter"

    def make_verifier(self) -> FirstLetter:
        return FirstLetter()

    def system_prompt(self, task: Task) -> str:
        return "Answer with a single word. Your whole reply is your answer."

    @tool
    def look(self, word: str) -> str:
        """Look the word up: takes ``latency_s`` seconds, then says its first letter."""
        if self.latency_s:
            time.sleep(self.latency_s)
        return f"{word.strip()[:1]!r}"

    @tool(terminal=True)
    def answer(self, answer: str) -> str:
        """The reply (the whole message)."""
        return answer

    def gold_actions(self, task: Task) -> list[Action]:
        return [Action(text="cat")]


def register_bench_env() -> None:
    register(ENV_ID, SlowLetterEnv, description="envhub bench async: a word starting with c or p, "
                                                "its tool taking latency_s seconds a call")
