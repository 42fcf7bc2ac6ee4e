"""What a bwrap sandbox must not see of the host paths it binds: every installed copy of envhub.

The bwrap backend binds the host's ``/usr`` (and ``/bin``, ``/lib*`` where they are directories)
read-only. An envhub installed there -- ``pip install`` into a system Python puts it under
``/usr/lib/python3/dist-packages`` or ``/usr/local/lib/python3.X/dist-packages``, ``--target``
anywhere -- carries its task data: hidden tests and gold sources under ``tasks/``, the manifest
with gold patches, expected observations. :func:`hidden_paths` finds each such directory (and
archive) and the bwrap backend mounts an empty read-only tmpfs over it (an empty file over an
archive), so inside the sandbox there is nothing to read.

Found, under the bound roots:

- the running envhub's own package directories (``envhub`` and every subpackage, wherever the
  import system maps them: an editable install maps ``envhub.tasks`` into its checkout);
- every directory named ``envhub`` that holds an ``__init__.py``, every ``envhub-*.dist-info`` /
  ``*.egg-info``, every directory an editable install's finder maps an ``envhub`` module to, and
  every ``envhub-*`` wheel, sdist or egg file;

and where such a package directory lies in a source checkout (its parent has ``pyproject.toml``
or ``setup.py``), the whole checkout: its ``tasks/``, ``docs/`` and ``.git`` hold the same data.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import stat
from collections.abc import Iterable

PACKAGE = "envhub"
SUBPACKAGES = ("sandboxes", "verifiers", "adapters", "trainer", "tasks")
#: A scan does not descend deeper than this below a root (no system tree comes near it).
MAX_SCAN_DEPTH = 64
_METADATA = re.compile(rf"^{PACKAGE}([-_][^/]*)?\.(dist-info|egg-info)$")
_EDITABLE = re.compile(rf"^__editable__[._]+{PACKAGE}[-_].*(\.pth|_finder\.py)$")
_ARCHIVE = re.compile(rf"^{PACKAGE}-[^/]*\.(whl|tar\.gz|zip|egg)$")
_QUOTED_PATH = re.compile(r"""['"](/[^'"\n]+)['"]""")
_CHECKOUT_MARKERS = ("pyproject.toml", "setup.py")


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _checkout_or_self(package_dir: str) -> str:
    """A package directory, or the source checkout it sits in."""
    parent = os.path.dirname(package_dir)
    if os.path.basename(parent) in ("site-packages", "dist-packages"):
        return package_dir
    if any(os.path.isfile(os.path.join(parent, marker)) for marker in _CHECKOUT_MARKERS):
        return parent
    return package_dir


def running_package_dirs() -> list[str]:
    """Real paths of the directories the running envhub and its subpackages are imported from."""
    found = []
    for name in (PACKAGE, *(f"{PACKAGE}.{sub}" for sub in SUBPACKAGES)):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            found.append(os.path.realpath(location))
    return found


def _editable_targets(path: str) -> list[str]:
    """Directories an editable install's ``.pth`` or finder file points at."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20)
    except OSError:
        return []
    lines = [line.strip() for line in text.splitlines()]
    candidates = _QUOTED_PATH.findall(text) + [line for line in lines if line.startswith("/")]
    return [os.path.realpath(c) for c in candidates if os.path.isdir(c)]


def scan_roots(roots: Iterable[str]) -> list[str]:
    """Every envhub installation under ``roots`` (see the module docstring), without following
    symlinks and without recursion."""
    found: list[str] = []
    todo = [(root, 0) for root in roots if os.path.isdir(root) and not os.path.islink(root)]
    while todo:
        path, depth = todo.pop()
        try:
            with os.scandir(path) as it:
                entries = list(it)
        except OSError:
            continue
        for entry in entries:
            full = entry.path
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir and entry.name == PACKAGE and os.path.isfile(os.path.join(full, "__init__.py")):
                found.append(_checkout_or_self(full))
            elif is_dir and _METADATA.match(entry.name):
                found.append(full)
            elif not is_dir and _EDITABLE.match(entry.name):
                found.extend(_checkout_or_self(t) for t in _editable_targets(full))
            elif not is_dir and _ARCHIVE.match(entry.name) and entry.is_file(follow_symlinks=False):
                found.append(full)
            elif is_dir and depth < MAX_SCAN_DEPTH:
                todo.append((full, depth + 1))
    return found


def _minimal(paths: Iterable[str]) -> list[str]:
    """Sorted, without any path that lies inside another one."""
    kept: list[str] = []
    for path in sorted(set(paths)):
        if not any(_under(path, [k]) for k in kept):
            kept.append(path)
    return kept


@functools.cache
def hidden_paths(roots: tuple[str, ...]) -> tuple[str, ...]:
    """The directories (and archive files) under ``roots`` a sandbox must see empty: real paths,
    outermost only, none of them a symlink.

    Cached per process: a scan of ``/usr`` takes ~0.1-0.5 s. Something installed under a root
    while a process runs is hidden from its sandboxes after ``hidden_paths.cache_clear()``.
    """
    real_roots = [os.path.realpath(r) for r in roots]
    found = [_checkout_or_self(p) for p in running_package_dirs()]
    found += scan_roots(real_roots)
    return tuple(_minimal(p for p in found if _under(p, real_roots) and _is_real(p)))


def _is_real(path: str) -> bool:
    """A directory or regular file, not a symlink (a mount over a link would land elsewhere)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return stat.S_ISDIR(mode) or stat.S_ISREG(mode)
