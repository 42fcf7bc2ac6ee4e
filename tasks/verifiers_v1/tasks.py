"""The tasks of a Verifiers taskset, as the worker listed them (in ``load()`` order)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envhub.task_source import SPLITS
from envhub.tasks.openenv.hosted_tasks import split_of
from envhub.types import Task

FAMILY = "verifiers"


class TasksetTasks:
    """A :class:`~envhub.task_source.TaskSource`: each task named by its ``id`` (``idx-N`` where
    it has none or shares it), split 80 / 10 / 10 by a hash of the name."""

    def __init__(self, name: str, listed: list[dict[str, Any]]) -> None:
        self.name = name
        self.version = f"verifiers-{len(listed)}"
        ids = [str(t["id"]) if t.get("id") else "" for t in listed]
        self._tasks: dict[str, tuple[int, str]] = {}
        for task, tid in zip(listed, ids, strict=True):
            name_ = tid if tid and ids.count(tid) == 1 else f"idx-{task['index']}"
            self._tasks[name_] = (int(task["index"]), str(task.get("prompt") or ""))

    def task_ids(self, split: str) -> Sequence[str]:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
        return [tid for tid in self._tasks if split_of(tid) == split]

    def get(self, task_id: str) -> Task:
        """The task ``task_id``. Raises KeyError for an unknown id."""
        if task_id not in self._tasks:
            raise KeyError(f"{self.name} has no task {task_id!r}")
        index, prompt = self._tasks[task_id]
        return Task(task_id=task_id, family=FAMILY, split=split_of(task_id), prompt=prompt,  # type: ignore[arg-type]
                    metadata={"index": index})

    def index_of(self, task_id: str) -> int:
        """The task's position in the taskset's ``load()`` order (what the worker plays)."""
        return self.get(task_id).metadata["index"]


__all__ = ["FAMILY", "TasksetTasks"]
