"""Task counts per split of registered envs, as ``envhub list`` shows them, cached on disk.

Counting loads an env's whole task set (generating thousands of problems, reading a corpus), so
the counts are kept in ``$XDG_CACHE_HOME/envhub/task_counts.json`` (``~/.cache/envhub/...`` by
default) under a fingerprint of everything the task set is made from: the env's id, class and
``version``, its task-source key (:meth:`Env.task_cache_key`), its registered arguments, the size
and modification time of every file of its family's package and of the modules its class comes
from, and the versions of the distributions named in ``task_set_dependencies``. An entry whose
fingerprint differs, or a cache file that does not parse, is recomputed, never trusted. Setting
``ENVHUB_NO_CACHE=1`` neither reads nor writes the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from envhub.registry import EnvSpec

SPLITS = ("train", "validation", "test")
_FORMAT = 1


def cache_path() -> Path:
    """Where the counts are cached (honours ``XDG_CACHE_HOME``)."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "envhub" / "task_counts.json"


def cache_enabled() -> bool:
    return os.environ.get("ENVHUB_NO_CACHE", "") in ("", "0")


def task_counts(specs: list[EnvSpec]) -> dict[str, list[int] | str]:
    """Per env id, its task counts for ``SPLITS``, or the error (a short repr) that counting raised.

    Counts come from the cache where the env's fingerprint matches; the others are computed and
    the cache is rewritten atomically. Errors are never cached.
    """
    use_cache = cache_enabled()
    cached = _read_cache() if use_cache else {}
    fresh: dict[str, Any] = {}
    out: dict[str, list[int] | str] = {}
    from envhub.registry import is_bridged

    for spec in specs:
        if is_bridged(spec.env_id):  # a hosted source may change under the same id: never cached
            out[spec.env_id] = _count_bridged(spec)
            continue
        try:
            env = spec.load()(**spec.kwargs)
            try:
                key = fingerprint(env, spec)
                entry = cached.get(spec.env_id)
                if isinstance(entry, dict) and entry.get("fingerprint") == key and _valid(entry.get("counts")):
                    counts = entry["counts"]
                else:
                    counts = [len(env.tasks.task_ids(s)) for s in SPLITS]
            finally:
                env.close()
        except Exception as exc:  # one broken env must not hide the others
            out[spec.env_id] = repr(exc)
            continue
        out[spec.env_id] = counts
        fresh[spec.env_id] = {"fingerprint": key, "counts": counts}
    if use_cache and fresh != {k: cached.get(k) for k in fresh}:
        _write_cache({**cached, **fresh})
    return out


def _count_bridged(spec: EnvSpec) -> list[int] | str:
    try:
        env = spec.load()(**spec.kwargs)
        try:
            return [len(env.tasks.task_ids(s)) for s in SPLITS]
        finally:
            env.close()
    except Exception as exc:
        return repr(exc)


def fingerprint(env: Any, spec: EnvSpec) -> str:
    """A digest of what the env's task set is made from (see the module docstring)."""
    cls = type(env)
    files: set[Path] = set()
    for klass in cls.__mro__:
        module = sys.modules.get(klass.__module__)
        if getattr(module, "__file__", None):
            files.add(Path(module.__file__))  # type: ignore[arg-type, union-attr]
    package = sys.modules.get(getattr(sys.modules[cls.__module__].__spec__, "parent", "") or "")
    for root in getattr(package, "__path__", []):
        files.update(p for p in Path(root).rglob("*") if "__pycache__" not in p.parts)
    stats = []
    for path in sorted(files):
        try:
            st = path.stat()
        except OSError:
            continue
        if not path.is_dir():
            stats.append((str(path), st.st_size, st.st_mtime_ns))
    deps = {}
    for dist in getattr(env, "task_set_dependencies", ()):
        try:
            deps[dist] = version(dist)
        except PackageNotFoundError:
            deps[dist] = None
    payload = {
        "env_id": spec.env_id, "class": f"{cls.__module__}.{cls.__qualname__}", "version": env.version,
        "task_key": repr(env.task_cache_key()), "kwargs": repr(sorted(spec.kwargs.items())),
        "dependencies": deps, "files": stats,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _valid(counts: Any) -> bool:
    return (isinstance(counts, list) and len(counts) == len(SPLITS)
            and all(type(c) is int and c >= 0 for c in counts))


def _read_cache() -> dict[str, Any]:
    try:
        data = json.loads(cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != _FORMAT or not isinstance(data.get("envs"), dict):
        return {}
    return data["envs"]


def _write_cache(envs: dict[str, Any]) -> None:
    """Best effort: a cache that cannot be written (read-only home, full disk) only costs time."""
    from envhub.store import write_json_atomic

    try:
        cache_path().parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(cache_path(), {"format": _FORMAT, "envs": envs})
    except OSError:
        pass
