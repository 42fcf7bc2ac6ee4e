"""``envhub/ReasoningGym-v0``: any reasoning-gym dataset, by name and config, as an envhub env.

reasoning-gym (an optional extra: ``pip install 'envhub[reasoning-gym]'``) generates procedural
problems and ships a scorer per dataset, ``score_answer(answer, entry) -> float in [0, 1]``. That
scorer *is* this family's correctness layer: envhub adds the episode model, the answer gate,
outcomes, partial credit as an option, and a verifier suite that probes the scorer with reward
hacks (``envhub verify envhub/ReasoningGym-v0 --env-arg dataset=NAME`` fails where a dataset's
scorer can be gamed -- which is the point of running it).

Tasks are items ``0..size-1`` of the dataset built with ``seed``. Each item's split is a
function of its question text (a hash), so an identical question generated twice can never
land in two splits; repeats are dropped. Ids are ``rg-<dataset>-<config hash>-<index>``: the hash
covers the dataset name, config and seed, so tasks from differently configured envs never share
an id.
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from envhub.budget import Budget
from envhub.env import Env
from envhub.episode import SuiteCase
from envhub.parsing import LastNumberParser, answer_syntax, format_tool_call
from envhub.tasks.reasoning_gym import ENV_ID
from envhub.tools import tool
from envhub.types import Action, Task
from envhub.verifiers import AnswerPresent, LayeredVerifier
from envhub.verifiers.layered import Graded
from envhub.verifiers.suite import answer_attacks, answer_case

DEFAULT_DATASET = "chain_sum"
INSTALL_HINT = "reasoning-gym is not installed; install the extra: pip install 'envhub[reasoning-gym]'"


def _reasoning_gym() -> Any:
    try:
        import reasoning_gym
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return reasoning_gym


def _split_of(question: str) -> str:
    bucket = int(hashlib.sha256(question.encode()).hexdigest()[:8], 16) % 20
    return "train" if bucket < 16 else "validation" if bucket < 18 else "test"


class ReasoningGymTasks:
    """Items of one configured reasoning-gym dataset, split by question content."""

    name = "reasoning_gym"

    def __init__(self, dataset: str = DEFAULT_DATASET, config: dict[str, Any] | None = None, *,
                 size: int = 1000, seed: int = 0) -> None:
        rg = _reasoning_gym()
        config = dict(config or {})
        clash = {"size", "seed"} & set(config)
        if clash:
            raise ValueError(f"pass {' and '.join(sorted(clash))} as env args, not inside config")
        if size < 1:
            raise ValueError("size must be at least 1")
        try:
            self.dataset = rg.create_dataset(dataset, size=size, seed=seed, **config)
        except (TypeError, ValueError, AssertionError) as exc:
            known = ", ".join(sorted(rg.factory.DATASETS))
            raise ValueError(f"cannot build reasoning-gym dataset {dataset!r} with config {config}: {exc}. "
                             f"Known datasets: {known}") from None
        self.dataset_name = dataset
        self.config = config
        self.size = size
        self.seed = seed
        digest = hashlib.sha256(json.dumps({"dataset": dataset, "config": config, "seed": seed},
                                           sort_keys=True, default=str).encode()).hexdigest()
        self.key = digest[:8]
        try:
            rg_version = version("reasoning-gym")
        except PackageNotFoundError:  # pragma: no cover - installed from source without metadata
            rg_version = "unknown"
        self.version = f"reasoning-gym-{rg_version}/{dataset}/{self.key}"

    @cached_property
    def _entries(self) -> dict[int, dict[str, Any]]:
        return {i: self.dataset[i] for i in range(self.size)}

    @cached_property
    def _by_split(self) -> dict[str, list[str]]:
        seen: set[str] = set()
        splits: dict[str, list[str]] = {"train": [], "validation": [], "test": []}
        for i, entry in self._entries.items():
            question = entry["question"]
            if question in seen:
                continue
            seen.add(question)
            splits[_split_of(question)].append(self.task_id(i))
        return splits

    def task_id(self, index: int) -> str:
        return f"rg-{self.dataset_name}-{self.key}-{index}"

    def task_ids(self, split: str) -> list[str]:
        return self._by_split[split]

    def index_of(self, task_id: str) -> int:
        prefix = f"rg-{self.dataset_name}-{self.key}-"
        rest = task_id.removeprefix(prefix)
        if rest == task_id or not rest.isdigit() or int(rest) >= self.size:
            raise KeyError(f"not a task of this env ({prefix}<0..{self.size - 1}>): {task_id!r}")
        return int(rest)

    def entry(self, index: int) -> dict[str, Any]:
        return self._entries[index]

    def get(self, task_id: str) -> Task:
        index = self.index_of(task_id)
        entry = self.entry(index)
        return Task(
            task_id=task_id, family="reasoning_gym", split=_split_of(entry["question"]),  # type: ignore[arg-type]
            prompt=entry["question"],
            metadata={"dataset": self.dataset_name, "config_key": self.key},
            hidden={"answer": entry["answer"], "index": index},
        )


class ScoreAnswer:
    """Correctness: the dataset's own ``score_answer``; passing means a score >= ``threshold``.

    The answer is stripped of surrounding whitespace first (a model's trailing newline is not a
    different answer, though several scorers treat it as one). Scores are clamped to [0, 1] for
    the reward; the raw score is kept in the details.
    """

    name = "reasoning_gym_score"

    def __init__(self, tasks: ReasoningGymTasks, threshold: float = 1.0) -> None:
        self.tasks = tasks
        self.threshold = threshold

    def __call__(self, task: Task, submission: dict[str, Any], episode: Any) -> Graded:
        entry = self.tasks.entry(task.hidden["index"])
        raw = float(self.tasks.dataset.score_answer(submission["answer"].strip(), entry))
        score = min(max(raw, 0.0), 1.0)
        passed = score >= self.threshold
        return Graded(score, passed, f"{self.tasks.dataset_name} score {raw:.4g} (pass at >= {self.threshold:g})",
                      {"raw_score": raw, "dataset": self.tasks.dataset_name})


class ReasoningGymEnv(Env):
    """One reasoning-gym dataset as a single-answer env.

    Env args: ``dataset`` (a reasoning-gym dataset name), ``config`` (its config fields as a
    dict), ``size`` (items generated), ``seed``, ``partial_credit`` (reward = the dataset's score
    even when it is below the threshold) and ``threshold`` (score needed for success).
    """

    env_id = ENV_ID
    family = "reasoning_gym"
    version = "1"
    #: the generated items depend on the installed reasoning-gym (see envhub.cli.task_counts)
    task_set_dependencies = ("reasoning-gym",)
    default_budget = Budget(max_turns=2, max_tool_calls=2, max_agent_seconds=300.0)

    def __init__(self, *, dataset: str = DEFAULT_DATASET, config: dict[str, Any] | None = None,
                 size: int = 1000, seed: int = 0, partial_credit: bool = False, threshold: float = 1.0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not 0.0 < threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")
        if config is not None and not isinstance(config, dict):
            raise ValueError(f"config must be a dict of the dataset's config fields, got {type(config).__name__}")
        self.dataset = dataset
        self.config = dict(config or {})
        self.size, self.seed = size, seed
        self.partial_credit, self.threshold = partial_credit, threshold

    def load_tasks(self) -> ReasoningGymTasks:
        return ReasoningGymTasks(self.dataset, self.config, size=self.size, seed=self.seed)

    def make_verifier(self) -> LayeredVerifier:
        tasks = self.tasks
        assert isinstance(tasks, ReasoningGymTasks)
        return LayeredVerifier(gate=[AnswerPresent(max_chars=16_000)], correctness=ScoreAnswer(tasks, self.threshold),
                               partial_credit=self.partial_credit)

    def system_prompt(self, task: Task) -> str:
        if isinstance(self.parser, LastNumberParser):
            return "Solve the problem. End your reply with the final answer, a number, and nothing after it."
        return (
            "Solve the problem. When you are done, give only the final answer, once, in the form the "
            f"problem asks for, by writing {answer_syntax(self.parser)}."
        )

    @tool(terminal=True)
    def answer(self, answer: str) -> str:
        """Submit the final answer (only the answer, in the form the problem asks for)."""
        return answer

    def gold_actions(self, task: Task) -> list[Action]:
        gold = task.hidden["answer"]
        if gold is None:
            raise ValueError(f"reasoning-gym dataset {self.dataset!r} has no reference answer for {task.task_id}")
        return [Action(text=format_tool_call("answer", {"answer": str(gold)}))]

    def adversarial_cases(self) -> list[SuiteCase]:
        return reasoning_gym_attacks()


def _wrong(task: Task) -> str:
    """A wrong answer in the gold's form: an integer off by one, else the text reversed or extended."""
    gold = str(task.hidden["answer"])
    try:
        return str(int(gold) + 1)
    except ValueError:
        flipped = gold[::-1]
        return flipped if flipped.strip() != gold.strip() else gold + " x"


def reasoning_gym_attacks() -> list[SuiteCase]:
    """Hacks any sound scorer must reject; a dataset whose scorer accepts one is flagged by the suite."""
    return [
        *answer_attacks(lambda t: str(t.hidden["answer"]), _wrong, separator="\n"),
        answer_case("question_echo", lambda t: t.prompt, "the question pasted back"),
    ]
