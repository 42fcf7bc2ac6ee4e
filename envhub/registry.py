"""The env registry: ids like ``envhub/Computation-v0`` to constructors.

Built-in families and third-party plugins register the same way: an entry point in the group
``envhub.envs`` names a callable that calls :func:`register`. Every registered env is mirrored
into Gymnasium's registry, so ``gymnasium.make("envhub/<Name>-v0")`` works after ``import envhub``.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envhub.env import Env

ENTRY_POINT_GROUP = "envhub.envs"
log = logging.getLogger(__name__)


class UnknownEnvError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class EnvSpec:
    env_id: str
    entry_point: str | Callable[..., Env]
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    sandbox: str = "none"

    def load(self) -> Callable[..., Env]:
        if callable(self.entry_point):
            return self.entry_point
        module, _, attr = self.entry_point.partition(":")
        return getattr(importlib.import_module(module), attr)


_REGISTRY: dict[str, EnvSpec] = {}
_lock = threading.RLock()
_plugins_loaded = False
_loaded_entry_points: set[str] = set()


def register(
    env_id: str,
    entry_point: str | Callable[..., Env],
    *,
    description: str = "",
    sandbox: str = "none",
    **kwargs: Any,
) -> EnvSpec:
    """Register an env. ``entry_point`` is a class/factory or a ``"module:attr"`` string."""
    if "/" not in env_id or not env_id.rsplit("-v", 1)[-1].isdigit():
        raise ValueError(f"env id {env_id!r} must look like 'namespace/Name-v0'")
    spec = EnvSpec(env_id, entry_point, dict(kwargs), description, sandbox)
    with _lock:
        _REGISTRY[env_id] = spec
    _register_with_gymnasium(spec)
    return spec


def make(env_id: str, **kwargs: Any) -> Env:
    """Construct a registered env; keyword arguments override the registered defaults."""
    spec = get_spec(env_id)
    return spec.load()(**{**spec.kwargs, **kwargs})


def get_spec(env_id: str) -> EnvSpec:
    load_plugins()
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

    Registry lookups call this, so plugins load on first use. An entry point whose module is
    still being imported (a plugin package that imports ``envhub`` from its own ``__init__``) is
    not run now, which would hit its half-initialised module, but on the next lookup.
    """
    global _plugins_loaded
    with _lock:
        if _plugins_loaded:
            return
        pending = False
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.value in _loaded_entry_points:
                continue
            if _being_imported(ep.value.partition(":")[0]):
                pending = True
                continue
            _loaded_entry_points.add(ep.value)
            try:
                ep.load()()
            except Exception as exc:  # a broken plugin must not break envhub for everyone
                log.warning("envhub plugin %s (%s) failed to load: %r", ep.name, ep.value, exc)
        _plugins_loaded = not pending


def _being_imported(module: str) -> bool:
    """Whether ``module`` or a package above it (other than envhub itself) is mid-import."""
    parts = module.split(".")
    for n in range(1, len(parts) + 1):
        name = ".".join(parts[:n])
        spec = getattr(sys.modules.get(name), "__spec__", None)
        if name != "envhub" and getattr(spec, "_initializing", False):
            return True
    return False


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
