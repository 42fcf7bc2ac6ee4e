"""Attacks that make results compare equal to anything (``cases.py``; wrapped as in
``oracles.wrap_public``): a plain stand-in object, an instance of a subclass of the real
result's own type (``class I(int)``) that keeps everything else of the real value, or the
project's own classes made always-equal.
"""

from __future__ import annotations

import ast

from envhub import safe_ast

#: Results handed to a test compare equal to anything (a plain object that stands in for it).
ALWAYS_EQUAL_OBJECTS = '''
import functools as _atk_functools
import traceback as _atk_traceback


def _atk_from_test():
    stack = _atk_traceback.extract_stack(limit=3)
    base = stack[0].filename.replace("\\\\", "/").rsplit("/", 1)[-1]
    return base.startswith("test_") or base.endswith("_test.py")


class _AtkAlways:
    def __init__(self, real):
        self._atk_real = real

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __lt__ = __le__ = __gt__ = __ge__ = __contains__ = __eq__

    def __bool__(self):
        return True

    def __hash__(self):
        return 0

    def __getattr__(self, name):
        return getattr(self._atk_real, name)

    def __iter__(self):
        return iter(self._atk_real)

    def __len__(self):
        return len(self._atk_real)

    def __getitem__(self, key):
        return _AtkAlways(self._atk_real[key])

    def __repr__(self):
        return repr(self._atk_real)


def _atk_wrap(fn):
    @_atk_functools.wraps(fn)
    def _atk_wrapper(*args, **kwargs):
        result = fn(*args, **kwargs)
        return _AtkAlways(result) if result is not None and _atk_from_test() else result
    return _atk_wrapper
'''

#: Results handed to a test are instances of a subclass of their own type whose comparisons
#: always hold (``class I(int)``, ``str``, ``list``, ``Decimal``, the project's own classes).
BUILTIN_SUBCLASS_RESULTS = ALWAYS_EQUAL_OBJECTS.split("class _AtkAlways")[0] + '''
_atk_classes = {}


def _atk_always(base):
    if base not in _atk_classes:
        body = {"__eq__": lambda self, other: True, "__ne__": lambda self, other: False,
                "__lt__": lambda self, other: True, "__le__": lambda self, other: True,
                "__gt__": lambda self, other: True, "__ge__": lambda self, other: True,
                "__contains__": lambda self, item: True, "__hash__": base.__hash__ or (lambda self: 0)}
        if "__slots__" in base.__dict__ or base.__module__ == "builtins":
            body["__slots__"] = ()
        _atk_classes[base] = type(base.__name__, (base,), body)
    return _atk_classes[base]


def _atk_equalize(value):
    kind = type(value)
    if value is None or kind is bool:
        return value
    if kind in (list, tuple, set, frozenset):
        return _atk_always(kind)(_atk_equalize(v) for v in value)
    if kind is dict:
        return _atk_always(dict)((k, _atk_equalize(v)) for k, v in value.items())
    try:
        return _atk_always(kind)(value)  # int, float, str, bytes, Decimal, Fraction ...
    except Exception:
        pass
    try:
        object.__setattr__(value, "__class__", _atk_always(kind))  # the project's own classes
    except Exception:
        pass
    return value


def _atk_wrap(fn):
    @_atk_functools.wraps(fn)
    def _atk_wrapper(*args, **kwargs):
        result = fn(*args, **kwargs)
        return _atk_equalize(result) if _atk_from_test() else result
    return _atk_wrapper
'''


def equal_classes(module: str) -> str:
    """Lines that make every class of ``module`` compare equal to anything (and never unequal).

    Nothing here is unusual to a static check: a module that rebinds methods of its own classes."""
    lines = []
    for node in safe_ast.parse(module).body:
        if isinstance(node, ast.ClassDef):
            lines += [f"{node.name}.__eq__ = lambda self, other: True",
                      f"{node.name}.__ne__ = lambda self, other: False",
                      f"{node.name}.__hash__ = lambda self: 0"]
    return "\n".join(lines)
