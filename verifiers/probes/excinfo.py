"""What ``raises`` observes of an exception it caught: the names of its classes, and its text.

Standard library only, and nothing here holds an expected value. In the grading sandbox this is
``envhub_probe_excinfo.py`` beside the runtime (``envhub_probe``), loaded by path with it, in the
runner, before anything submitted runs. The trusted side decides with what comes out of here the
way pytest decides (``compare.raised_as_expected``): no expected class or pattern ever comes in.

* :func:`names` -- the qualified names of ``type(exc).__mro__`` as the interpreter holds it. The
  MRO, ``__module__`` and ``__qualname__`` are read through ``type``'s own descriptors: a
  metaclass's ``__mro__``/``__qualname__`` properties or ``__getattribute__`` are never asked, a
  ``__qualname__`` that is a ``str`` subclass is copied without running its methods, and an
  instance's ``__class__`` does not count (``isinstance`` would believe it). A class that is not
  found at its own name -- ``sys.modules[module]``, then each part of ``__qualname__`` through
  module and class dicts -- is named with a leading ``?``: a class that only *claims*
  ``builtins.ValueError`` is never taken for it.
* :func:`message` -- the text ``match=`` searches, built as pytest builds it: ``str(exc)`` (for an
  exception group its ``message``), then each of its ``__notes__`` on a line of its own. That runs
  the exception's own ``__str__``, as pytest does; the text is only ever searched, and only on the
  trusted side.
"""

from __future__ import annotations

import sys as _sys
import types as _types
from typing import Any

__all__ = ["message", "names", "qualname"]

_TYPE_MRO = type.__dict__["__mro__"]
_TYPE_DICT = type.__dict__["__dict__"]
_TYPE_MODULE = type.__dict__["__module__"]
_TYPE_QUALNAME = type.__dict__["__qualname__"]
_MODULE_DICT = _types.ModuleType.__dict__["__dict__"]
_DICT_OF_PROXY = _types.MappingProxyType.copy  # a class's mappingproxy -> a plain dict of it
#: the interpreter's module table (binding another object to ``sys.modules`` does not replace it)
_MODULES = _sys.modules


def _module(cls: type) -> str | None:
    try:
        module = _TYPE_MODULE.__get__(cls)
    except AttributeError:  # deleted from the class dict
        return None
    return module if type(module) is str else None


def _own_qualname(cls: type) -> str:
    return str.__str__(_TYPE_QUALNAME.__get__(cls))  # an exact str: no method of a str subclass runs


def qualname(cls: type) -> str:
    """``module.qualname`` of a class, read through ``type``'s own descriptors (never a metaclass's)."""
    module = _module(cls)
    return f"{'?' if module is None else module}.{_own_qualname(cls)}"


def _lookup(namespace: Any, name: str) -> Any:
    """``namespace[name]`` for a dict, found by walking its items: only exact-``str`` keys are
    compared, so no key's own ``__eq__`` runs (a dict lookup would call a ``str`` subclass's)."""
    if not issubclass(type(namespace), dict):
        return None
    for key, value in dict.items(namespace):
        if type(key) is str and key == name:
            return value
    return None


def _found(cls: type, module: str | None) -> bool:
    """Whether ``cls`` is what its own name leads to now: the module, then each part of its
    ``__qualname__`` in module and class dicts. Nothing submitted runs: no attribute is looked up
    and no key is hashed or compared but as an exact ``str``."""
    if module is None:
        return False
    found: Any = _lookup(_MODULES, module)
    for part in str.split(_own_qualname(cls), "."):
        if issubclass(type(found), _types.ModuleType):
            found = _lookup(_MODULE_DICT.__get__(found), part)
        elif issubclass(type(found), type):
            found = _lookup(_DICT_OF_PROXY(_TYPE_DICT.__get__(found)), part)
        else:
            return False
    return found is cls


def names(cls: type) -> list[str]:
    """The qualified names of ``cls.__mro__`` (the interpreter's), most derived first; ``?`` leads
    the name of a class that is not found at it."""
    out = []
    for klass in _TYPE_MRO.__get__(cls):
        name = qualname(klass)
        out.append(name if _found(klass, _module(klass)) else "?" + name)
    return out


def message(exc: BaseException) -> str:
    """The text pytest's ``match=`` searches (``_pytest._code.code.stringify_exception``)."""
    text = exc.message if issubclass(type(exc), BaseExceptionGroup) else str(exc)
    return "\n".join([text, *getattr(exc, "__notes__", [])])
