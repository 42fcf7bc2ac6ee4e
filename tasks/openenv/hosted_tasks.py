"""The task list of a hosted OpenEnv server, which OpenEnv's protocol does not name.

Two sources, in this order:

1. the server documents its tasks: an envhub server lists them per split at ``GET /envhub/tasks``
   (with its task-set version at ``GET /envhub/info``); each is reset with ``{"task_id": id}``;
2. otherwise a deterministic numbered list ``seed-0 .. seed-(N-1)``, each reset with
   ``{"seed": i}``, split by a hash of the task id (80 / 10 / 10 train / validation / test): the
   same ids land in the same split on every machine and in every run.

A task's prompt is known only once the server answers its reset; :meth:`HostedTasks.get` returns
the task with an empty prompt, which the bridge fills in at reset.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from envhub.task_source import SPLITS
from envhub.types import Task

SEED_PREFIX = "seed-"
FAMILY = "openenv"


def split_of(task_id: str) -> str:
    """The split of a numbered task: a stable hash of its id, 80 / 10 / 10."""
    bucket = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:4], "big") % 10
    return "test" if bucket == 0 else "validation" if bucket == 1 else "train"


class HostedTasks:
    """A :class:`~envhub.task_source.TaskSource` for a hosted server (see the module docstring).

    Args:
        name: the env id, for messages.
        listed: the server's own ids per split (source 1), or None for numbered seeds.
        num_tasks: how many numbered seeds there are (source 2).
        version: the task-set version (the server's, else ``seeds-<num_tasks>``).
    """

    def __init__(self, name: str, *, listed: dict[str, list[str]] | None = None, num_tasks: int = 1000,
                 version: str | None = None) -> None:
        if num_tasks < 1:
            raise ValueError("num_tasks must be at least 1")
        self.name = name
        self.listed = listed
        self.num_tasks = num_tasks
        self.version = version or (f"seeds-{num_tasks}" if listed is None else "listed")
        self._split_of: dict[str, str] = {}
        if listed is not None:
            self._split_of = {tid: split for split, ids in listed.items() for tid in ids}
        else:
            self._split_of = {f"{SEED_PREFIX}{i}": split_of(f"{SEED_PREFIX}{i}") for i in range(num_tasks)}

    def task_ids(self, split: str) -> Sequence[str]:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
        return [tid for tid, s in self._split_of.items() if s == split]

    def get(self, task_id: str) -> Task:
        """The task ``task_id`` (prompt empty until its reset). Raises KeyError for an unknown id."""
        split = self._split_of.get(task_id)
        if split is None:
            raise KeyError(f"{self.name} has no task {task_id!r}")
        return Task(task_id=task_id, family=FAMILY, split=split, prompt="",  # type: ignore[arg-type]
                    metadata={"reset": self.reset_data(task_id)})

    def reset_data(self, task_id: str) -> dict[str, Any]:
        """The ``data`` of the ``reset`` message that starts ``task_id``."""
        if self.listed is None and task_id.startswith(SEED_PREFIX):
            return {"seed": int(task_id[len(SEED_PREFIX):])}
        return {"task_id": task_id}


__all__ = ["FAMILY", "SEED_PREFIX", "HostedTasks", "split_of"]
