"""Copying and pickling an env: the copy is a new env made with the same constructor arguments.

An env holds live things -- sandboxes (executor pipes, containers), locks, thread pools, tool
argument models built at run time -- that no copy can share or reproduce, and none of them is
part of what the env *is*: its id and its constructor's arguments are. So ``pickle.dumps(env)``
stores the class and those arguments, and loading it (``pickle.loads``, ``copy.deepcopy``,
``copy.copy``, a Ray or multiprocessing hand-over, cloudpickle'd env factories that close over an
env) constructs a new env with them: same id, split, budget, parser and sandbox choice, no
episode, its own sandboxes.

An env that holds an episode (after ``reset``, until ``close``) refuses with a TypeError: its
episode's state lives in a sandbox, and a copy without it would silently be another env. Vector
envs never need more: Gymnasium's ``AsyncVectorEnv`` pickles env *factories* (``lambda:
gymnasium.make(...)``), each worker then makes its own env.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

_ARGS = "_envhub_init_args"
_RECORDS = "__envhub_records_args__"


class RebuiltOnCopy:
    """Base of :class:`envhub.env.Env`: every subclass's ``__init__`` records the arguments the
    env was constructed with (the outermost call's), which :meth:`__reduce__` hands to pickle."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, _RECORDS, False):
            cls.__init__ = _recording(init)  # type: ignore[misc]

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        if getattr(self, "episode", None) is not None:
            name = getattr(self, "env_id", "") or type(self).__name__
            raise TypeError(
                f"cannot pickle or copy {name} while it holds an episode: the episode lives in a sandbox "
                "that no copy can share. Pickle the env id and kwargs instead (envhub.make(env_id, **kwargs) "
                "makes the env again), or close() the env first: a closed or never-reset env pickles as "
                "a new env made with the same arguments")
        args, kwargs = self.__dict__.get(_ARGS, ((), {}))
        return _rebuild, (type(self), args, kwargs)


def _recording(init: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(init)  # keeps the signature (``inspect.signature`` follows ``__wrapped__``)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if _ARGS not in self.__dict__:  # the outermost __init__: what the caller passed
            self.__dict__[_ARGS] = (args, dict(kwargs))
        init(self, *args, **kwargs)

    setattr(__init__, _RECORDS, True)
    return __init__


def _rebuild(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return cls(*args, **kwargs)


__all__ = ["RebuiltOnCopy"]
