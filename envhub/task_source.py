"""Where an env's tasks come from: :class:`TaskSource`, and the process's shared sources.

A family's ``Env.load_tasks`` returns a :class:`TaskSource`. Loading one can take a while
(generating or reading thousands of tasks), so envs whose ``task_cache_key`` names their source
share it through :func:`shared_source`, one per key and process.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol

from envhub.types import Task

SPLITS = ("train", "validation", "test")


class TaskIndex(Protocol):
    """A task set's ids per split and its version, without the tasks: what a served env offers."""

    name: str
    version: str

    def task_ids(self, split: str) -> Sequence[str]: ...


class TaskSource(TaskIndex, Protocol):
    """Where a family's tasks come from. Ids are stable; splits never share a task."""

    def get(self, task_id: str) -> Task: ...


_SHARED: dict[Hashable, TaskSource] = {}
_SHARED_LOCK = threading.Lock()


def _renew_after_fork() -> None:
    """A forked child (AsyncVectorEnv) would never see a lock another thread held at the fork released."""
    global _SHARED_LOCK
    _SHARED_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_renew_after_fork)


def shared_source(key: Hashable, load: Callable[[], TaskSource]) -> TaskSource:
    """The process's source under ``key``: ``load()`` the first time it is asked for, the same
    source ever after (a load that raises stores nothing)."""
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = load()
        return _SHARED[key]


__all__ = ["SPLITS", "TaskIndex", "TaskSource", "shared_source"]
