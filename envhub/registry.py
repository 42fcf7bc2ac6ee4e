"""The env registry: ids like ``envhub/Computation-v0`` to constructors.

Built-in families and third-party plugins register the same way: an entry point in the group
``envhub.envs`` names a callable that calls :func:`register`. Every registered env is mirrored
into Gymnasium's registry, so ``gymnasium.make("envhub/<Name>-v0")`` works after ``import envhub``.
A family registers its env by import path (``"module:Class"``), so registering loads none of it.

Bridges run envs of other hubs: an id ``PREFIX:TARGET`` (``openenv:http://host:8000``) is made by
the bridge registered for ``PREFIX`` -- with :func:`register_bridge`, or an entry point in the group
``envhub.bridges`` (``PREFIX = "module:factory"``) -- as ``factory(TARGET, **kwargs)``.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envhub.env import Env

ENTRY_POINT_GROUP = "envhub.envs"
BRIDGE_ENTRY_POINT_GROUP = "envhub.bridges"
log = logging.getLogger(__name__)


class UnknownEnvError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class EnvArgumentError(TypeError):
    """A keyword argument the env's constructor does not take; the message names those it does."""


@dataclass(frozen=True)
class EnvSpec:
    env_id: str
    entry_point: str | Callable[..., Env]
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    def load(self) -> Callable[..., Env]:
        if callable(self.entry_point):
            return self.entry_point
        module, _, attr = self.entry_point.partition(":")
        return getattr(importlib.import_module(module), attr)


_REGISTRY: dict[str, EnvSpec] = {}
#: bridge prefix -> its factory (or its ``"module:attr"`` path, loaded on first use)
_BRIDGES: dict[str, str | Callable[..., Env]] = {}
_lock = threading.RLock()
_plugins_loaded = False


def register(
    env_id: str,
    entry_point: str | Callable[..., Env],
    *,
    description: str = "",
    **kwargs: Any,
) -> EnvSpec:
    """Register an env. ``entry_point`` is a class/factory or a ``"module:attr"`` string."""
    if "/" not in env_id or not env_id.rsplit("-v", 1)[-1].isdigit():
        raise ValueError(f"env id {env_id!r} must look like 'namespace/Name-v0'")
    spec = EnvSpec(env_id, entry_point, dict(kwargs), description)
    with _lock:
        _REGISTRY[env_id] = spec
    _register_with_gymnasium(spec)
    return spec


def register_bridge(prefix: str, factory: str | Callable[..., Env]) -> None:
    """Make ids ``PREFIX:TARGET`` mean ``factory(TARGET, **kwargs)``; ``factory`` is a callable or
    its ``"module:attr"`` path. A later registration of the same prefix replaces the earlier."""
    if not prefix.isidentifier():
        raise ValueError(f"bridge prefix {prefix!r} must be an identifier (say 'openenv')")
    with _lock:
        _BRIDGES[prefix] = factory


def is_bridged(env_id: str) -> bool:
    """Whether ``env_id`` is ``PREFIX:TARGET`` of a known bridge (an env hosted from another hub)."""
    load_plugins()
    return _bridge_spec(env_id) is not None


def _bridge_spec(env_id: str) -> EnvSpec | None:
    """The spec of a bridged id ``PREFIX:TARGET``, or None when ``env_id`` names no known bridge."""
    prefix, sep, target = env_id.partition(":")
    with _lock:
        factory = _BRIDGES.get(prefix) if sep else None
    if factory is None:
        return None
    if not target:
        raise UnknownEnvError(f"{env_id!r} names the {prefix} bridge but no target ({prefix}:TARGET)")
    loaded = EnvSpec(env_id, factory).load()
    return EnvSpec(env_id, functools.partial(loaded, target), description=f"{prefix} bridge to {target}")


def make(env_id: str, **kwargs: Any) -> Env:
    """Construct a registered env; keyword arguments override the registered defaults.

    An argument the env does not take is an :class:`EnvArgumentError` naming those it does."""
    spec = get_spec(env_id)
    merged = {**spec.kwargs, **kwargs}
    check_env_kwargs(env_id, merged)
    return spec.load()(**merged)


def env_arguments(env_id: str) -> list[str] | None:
    """The keyword arguments ``env_id``'s constructor takes, sorted; None when it cannot be told
    (a factory or an ``__init__`` that takes ``**kwargs`` without handing them to the base class)."""
    target = get_spec(env_id).load()
    if not inspect.isclass(target):
        return _parameters(target, [])
    names: list[str] = []
    for cls in inspect.getmro(target):  # each __init__ that takes **kwargs hands them on to the next
        init = cls.__dict__.get("__init__")
        if init is None or cls is object:
            continue
        found = _parameters(init, names)
        if found is not None:
            return found
    return sorted(set(names))


def _parameters(fn: Callable[..., Any], names: list[str]) -> list[str] | None:
    """Adds ``fn``'s keyword parameters to ``names``; the sorted set once ``fn`` takes no
    ``**kwargs`` (complete), else None (the rest is up to whatever it hands them to)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    names += [p.name for p in params if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return sorted(set(names))


def check_env_kwargs(env_id: str, kwargs: dict[str, Any]) -> None:
    """:class:`EnvArgumentError` when ``kwargs`` names an argument ``env_id``'s constructor does not
    take (nothing is checked where that cannot be told: see :func:`env_arguments`)."""
    accepted = env_arguments(env_id)
    unknown = sorted(set(kwargs) - set(accepted)) if accepted is not None else []
    if not unknown:
        return
    hints = [m for name in unknown for m in difflib.get_close_matches(name, accepted or [], n=1)]
    hint = f"; did you mean {', '.join(repr(h) for h in hints)}?" if hints else ""
    raise EnvArgumentError(
        f"{env_id} takes no argument {', '.join(repr(n) for n in unknown)}{hint} "
        f"(it takes: {', '.join(accepted or [])})")


def get_spec(env_id: str) -> EnvSpec:
    """The spec of a registered id, or of a bridged one (``PREFIX:TARGET``)."""
    load_plugins()
    bridged = _bridge_spec(env_id)
    if bridged is not None:
        return bridged
    with _lock:
        spec = _REGISTRY.get(env_id)
        known = sorted(_REGISTRY)
    if spec is None:
        close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.4)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise UnknownEnvError(f"unknown env {env_id!r}.{hint} Known envs: {', '.join(known) or 'none'}")
    return spec


def list_envs() -> list[EnvSpec]:
    load_plugins()
    with _lock:
        return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def load_plugins() -> None:
    """Run every ``envhub.envs`` entry point once (built-in families use the same group).

    ``import envhub`` calls this, and so do registry lookups. An entry point's module should
    import neither ``envhub`` nor its env at module level: it registers the env by import path,
    so that importing the plugin package first (its env imports ``envhub``, which runs this)
    never meets a half-initialised module.
    """
    global _plugins_loaded
    with _lock:
        if _plugins_loaded:
            return
        _plugins_loaded = True
        for ep in entry_points(group=BRIDGE_ENTRY_POINT_GROUP):  # by path: nothing is imported yet
            _BRIDGES.setdefault(ep.name, ep.value)
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                ep.load()()
            except Exception as exc:  # a broken plugin must not break envhub for everyone
                log.warning("envhub plugin %s (%s) failed to load: %r", ep.name, ep.value, exc)


def _register_with_gymnasium(spec: EnvSpec) -> None:
    try:
        import gymnasium
    except ImportError:  # pragma: no cover - gymnasium is a core dependency
        return
    if spec.env_id in gymnasium.registry:
        return
    gymnasium.register(
        id=spec.env_id,
        entry_point="envhub.gym:make_gym_env",
        kwargs={"env_id": spec.env_id},
        disable_env_checker=True,
    )
