"""What a probe module imports inside the grading sandbox (there it is the module ``envhub_probe``).

Standard library only; nothing here holds an expected value. A probe *observes* values; the
observations leave the process as frames over a pipe that the runner (``runner.py``) reads.
Probe API (docs/code-repair.md): ``observe(value, site)``, ``with raises(site,
message=False) as info`` (then, where ``message``, ``raised(site, message(info.value))``),
``as_builtin(value, approx=False)`` and ``viewer(classes)`` (an ``as_builtin`` that views gold classes'
``__eq__`` fields as ``ObjectView``; both called in the probe's frame, never by the sealed copy),
``@cases("a, b", rows)``, ``@fixture``, ``encode``.
Runner API (never used by probes): ``bind(fd)`` -- where frames go; ``begin(index)`` -- the test
frames belong to; ``send(frame)`` -- one frame, 4-byte big-endian length + compact ASCII JSON
(``batch.py`` runs the tests). In the grading sandbox the runner runs a sealed private copy of this
module (``seal.py``); probes reach its ``observe`` and ``raises`` only as constants of their code.

Encoding decisions beyond the contract's table:

* No method, property or ``__getattribute__`` of a submitted object is called: types are read
  through ``type``'s own descriptors, state through the ``__dict__`` getset and the slot member
  descriptors in the class dicts along the MRO (a ``__dict__`` property shows as no dict);
  containers are iterated with the builtin's C slots, nothing submitted is hashed.
* ``raises`` sends ``["raised", mro names, text | None]`` (made by ``excinfo.py``) or ``["not raised"]``.
* ``complex`` -> ``["complex", repr(real), repr(imag)]``; a class -> ``["class", qualname(cls)]``.
* Sets and dict items are sorted by the compact JSON of their encoded key (then value).
* A subclass of int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset or
  Decimal is an ``"object"`` whose attributes include the builtin value under ``"(<base name>)"``
  (a namedtuple or Counter is not vacuous). Attribute names are dict keys / slot member names.
  No dict, no set slot, no builtin value: ``["opaque", qualname]``.
* A ``datetime``/``time`` whose tzinfo is neither None nor exactly ``datetime.timezone``:
  ``[type, naive isoformat, encode(tzinfo)]`` (its ``utcoffset`` would be submitted code).
* A value nested deeper than 12 levels (the observed value is level 0) becomes ``["truncated"]``
  where it sits (a cycle: 12 levels, then ``["truncated"]``); over 20,000 nodes the whole
  observation is ``["truncated"]``; so is a ``range`` with a bound beyond 2**64. Ints of any
  size are exact (the int-to-str digit limit is lifted while converting).
"""

from __future__ import annotations

import collections as _collections
import collections.abc as _abc
import datetime as _dt
import decimal as _decimal
import enum as _enum
import fractions as _fractions
import functools as _functools
import json.encoder as _json_encoder
import os as _os
import struct as _struct
import sys as _sys
import types as _types
from typing import Any

__all__ = ["ObjectView", "ProbeError", "as_builtin", "cases", "encode", "fixture", "message", "observe", "qualname", "raised",
           "raises", "viewer"]

MAX_DEPTH = 12
MAX_NODES = 20_000
_HEADER = _struct.Struct(">I")

_channel: int | None = None
if "_current" not in globals():  # the sealed copy is handed the public copy's list: one test index
    _current: list[int | None] = [None]
#: site -> the names of what its block raised, until ``raised`` sends them with the text
_pending: dict[int, list[str]] = {}

_TYPE_MRO = type.__dict__["__mro__"]
_TYPE_DICT = type.__dict__["__dict__"]
_EXC_ARGS = BaseException.__dict__["args"]
_GETSET = _types.GetSetDescriptorType
_MEMBER = _types.MemberDescriptorType
_FR_NUM = _fractions.Fraction.__dict__["_numerator"]
_FR_DEN = _fractions.Fraction.__dict__["_denominator"]
_DT_TZ = _dt.datetime.__dict__["tzinfo"]
_TIME_TZ = _dt.time.__dict__["tzinfo"]
_RANGE_LIMIT = 1 << 64

#: builtin value bases whose value a subclass instance carries (read without the subclass's methods)
_BASES = {id(c): c for c in (int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset,
                             _decimal.Decimal)}
#: exact-type copies of such a value, through the base's own C slots (dict and sets: iterated in place)
_COPY = {id(c): f for c, f in {
    int: int.__index__, float: float.__float__, complex: complex.__complex__, str: str.__str__,
    bytes: lambda x: bytes.__getitem__(x, slice(None)), bytearray: lambda x: bytearray.__getitem__(x, slice(None)),
    list: list.copy, tuple: lambda x: tuple.__getitem__(x, slice(None)),
    _decimal.Decimal: lambda x: _decimal.Decimal(_decimal.Decimal.__str__(x)),
}.items()}
_OPAQUE = (_types.ModuleType, _types.FunctionType, _types.BuiltinFunctionType, _types.MethodType,
           _types.MethodWrapperType, _types.WrapperDescriptorType, _types.MethodDescriptorType,
           _types.ClassMethodDescriptorType, _GETSET, _MEMBER, _types.GeneratorType, _types.CoroutineType,
           _types.AsyncGeneratorType, _types.CodeType, _types.FrameType, _types.TracebackType,
           _types.CellType, _functools.partial, property, staticmethod, classmethod)


class ProbeError(Exception):
    """A test cannot be set up from the plan and its probe module (a compiler or plan bug)."""


class _TooBig(Exception):
    pass


if __package__:  # on the host, as envhub.verifiers.probes.runtime
    from . import excinfo as _excinfo
elif "_excinfo" not in globals():  # envhub_probe in the sandbox: its helper lies beside it, loaded first
    _excinfo = _sys.modules["envhub_probe_excinfo"]  # by the runner (the sealed copy is handed its own)

qualname = _excinfo.qualname


#: JSON's own string quoting (its C function where there is one), taken when the runtime is loaded
_quote = getattr(_json_encoder, "c_encode_basestring_ascii", None) or _json_encoder.py_encode_basestring_ascii


def dumps(obj: Any) -> str:
    """Compact ASCII JSON, as ``json.dumps(obj, ensure_ascii=True, separators=(",", ":"),
    allow_nan=False)`` writes it, for the types frames hold; no module attribute is looked up."""
    cls = type(obj)
    if cls is str:
        return _quote(obj)
    if obj is None or cls is bool:
        return "null" if obj is None else "true" if obj else "false"
    if cls is int:
        return _int_text(obj)
    if cls is float:
        if obj != obj or obj in (float("inf"), float("-inf")):
            raise ValueError("out of range float values are not JSON compliant")
        return float.__repr__(obj)
    if cls is list or cls is tuple:
        return "[" + ",".join([dumps(v) for v in obj]) + "]"
    if cls is dict:
        return "{" + ",".join([_quote(k) + ":" + dumps(v) for k, v in dict.items(obj)]) + "}"
    raise TypeError(f"cannot write a {cls.__name__} in a frame")


def _int_text(x: int) -> str:
    try:
        return int.__repr__(x)
    except ValueError:  # more digits than sys.get_int_max_str_digits() allows
        limit = _sys.get_int_max_str_digits()
        _sys.set_int_max_str_digits(0)
        try:
            return int.__repr__(x)
        finally:
            _sys.set_int_max_str_digits(limit)


class _Encoder:
    def __init__(self) -> None:
        self.nodes = 0

    def enc(self, x: Any, depth: int) -> list:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _TooBig
        if depth > MAX_DEPTH:
            return ["truncated"]
        cls = type(x)
        simple = _SIMPLE.get(id(cls))
        if simple is not None:
            return simple(x)
        nested = _NESTED.get(id(cls))
        if nested is not None:
            return nested(self, x, depth + 1)
        return self.other(x, cls, depth + 1)

    def seq(self, x: Any, depth: int) -> list:
        return [type(x).__name__, [self.enc(v, depth) for v in x]]

    def dict(self, x: dict, depth: int) -> list:
        items = [[self.enc(k, depth), self.enc(v, depth)] for k, v in dict.items(x)]
        items.sort(key=lambda kv: (dumps(kv[0]), dumps(kv[1])))
        return ["dict", items]

    def set(self, x: Any, depth: int, base: type | None = None) -> list:
        base = base or type(x)
        return [base.__name__, sorted((self.enc(v, depth) for v in base.__iter__(x)), key=dumps)]

    def dated(self, x: Any, depth: int) -> list:
        cls = type(x)
        tz = (_DT_TZ if cls is _dt.datetime else _TIME_TZ).__get__(x)
        if tz is None or type(tz) is _dt.timezone:
            return [cls.__name__, cls.isoformat(x)]
        return [cls.__name__, cls.isoformat(cls.replace(x, tzinfo=None)), self.enc(tz, depth)]

    def base_value(self, x: Any, base: type, depth: int) -> list:
        copy = _COPY.get(id(base))
        if copy is not None:
            return self.enc(copy(x), depth)
        self.nodes += 1
        if depth > MAX_DEPTH:
            return ["truncated"]
        return self.dict(x, depth + 1) if base is dict else self.set(x, depth + 1, base)

    def other(self, x: Any, cls: type, depth: int) -> list:
        if issubclass(cls, _enum.Enum):
            name = [v for k, v in _instance_items(x, cls) if type(k) is str and k == "_name_"]
            if name and type(name[0]) is str:
                return ["enum", qualname(cls), name[0]]
        if issubclass(cls, BaseException):
            return ["exception", qualname(cls), self.enc(_EXC_ARGS.__get__(x), depth)]
        if issubclass(cls, type):
            return ["class", qualname(x)]
        if issubclass(cls, _OPAQUE):
            return ["opaque", qualname(cls)]
        attrs = [[k if type(k) is str else "?" + dumps(self.enc(k, depth)), self.enc(v, depth)]
                 for k, v in _instance_items(x, cls)]
        base = None
        for klass in _mro(cls):
            base = base or _BASES.get(id(klass))
            for name, attr in _TYPE_DICT.__get__(klass).items():  # slots: member descriptors of the class
                if type(name) is str and type(attr) is _MEMBER and attr.__objclass__ is klass:
                    try:  # noqa: SIM105 - contextlib's classes are the submission's to patch
                        attrs.append([name, self.enc(attr.__get__(x, cls), depth)])
                    except AttributeError:  # a slot never set
                        pass
        if base is not None:
            attrs.append([f"({base.__name__})", self.base_value(x, base, depth)])
        if not attrs and _dict_descr(cls) is None:
            return ["opaque", qualname(cls)]
        attrs.sort(key=lambda kv: (kv[0], dumps(kv[1])))
        return ["object", qualname(cls), attrs]


def _mro(cls: type) -> tuple:
    return _TYPE_MRO.__get__(cls)


def _dict_descr(cls: type) -> Any:
    """The ``__dict__`` getset the class's instances have, or None (no dict, or a non-getset)."""
    for klass in _mro(cls):
        attr = _TYPE_DICT.__get__(klass).get("__dict__")
        if attr is not None:
            return attr if type(attr) is _GETSET else None
    return None


def _instance_items(x: Any, cls: type) -> list[tuple[Any, Any]]:
    """The instance dict's items, iterated in place (nothing hashed, no method called)."""
    descr = _dict_descr(cls)
    try:
        found = descr.__get__(x) if descr is not None else None
    except (TypeError, AttributeError):
        return []
    return list(dict.items(found)) if issubclass(type(found), dict) else []


def _fraction(x: Any) -> list:
    num, den = _FR_NUM.__get__(x), _FR_DEN.__get__(x)
    ints = type(num) is int and type(den) is int
    return ["Fraction", _int_text(num), _int_text(den)] if ints else ["opaque", qualname(type(x))]


def _range(x: range) -> list:
    bounds = [x.start, x.stop, x.step]
    return ["range", *bounds] if all(-_RANGE_LIMIT < b < _RANGE_LIMIT for b in bounds) else ["truncated"]


_SIMPLE = {id(cls): fn for cls, fn in {
    type(None): lambda x: ["None"],
    bool: lambda x: ["bool", x],
    int: lambda x: ["int", _int_text(x)],
    float: lambda x: ["float", float.__repr__(x)],
    complex: lambda x: ["complex", float.__repr__(x.real), float.__repr__(x.imag)],
    str: lambda x: ["str", x],
    bytes: lambda x: ["bytes", bytes.hex(x)],
    bytearray: lambda x: ["bytearray", bytearray.hex(x)],
    _decimal.Decimal: lambda x: ["Decimal", _decimal.Decimal.__str__(x)],
    _fractions.Fraction: _fraction,
    _dt.date: lambda x: ["date", _dt.date.isoformat(x)],
    _dt.timedelta: lambda x: ["timedelta", x.days, x.seconds, x.microseconds],
    range: _range,
}.items()}
_NESTED = {id(cls): fn for cls, fn in {
    list: _Encoder.seq, tuple: _Encoder.seq, dict: _Encoder.dict, set: _Encoder.set, frozenset: _Encoder.set,
    _dt.datetime: _Encoder.dated, _dt.time: _Encoder.dated,
}.items()}


def encode(value: Any) -> list:
    """The canonical, JSON-serializable encoding of ``value`` (see the module docstring)."""
    try:
        return _Encoder().enc(value, 0)
    except _TooBig:
        return ["truncated"]


# ---- the frame channel (runner side) -------------------------------------------------------------

def bind(fd: int | None) -> None:
    """Send frames to ``fd`` from now on (``None``: no channel; ``observe`` then raises)."""
    global _channel
    _channel = fd


def begin(index: int | None) -> None:
    """Frames sent from now on belong to the test with this plan index."""
    _current[0] = index


def send(frame: list) -> None:
    """Write one frame at once: 4-byte big-endian length, then compact ASCII JSON."""
    if _channel is None:
        raise RuntimeError("envhub_probe: no frame channel (probes run under the probe runner)")
    body = dumps(frame).encode("ascii")
    data = memoryview(_HEADER.pack(len(body)) + body)
    while data:
        data = data[_os.write(_channel, data):]


# ---- the probe API --------------------------------------------------------------------------------

def observe(value: Any, site: int) -> None:
    """Encode ``value`` and send it as the observation at ``site`` of the current test."""
    send([_current[0], site, encode(value)])


class raises:
    """``with raises(site, message=False) as info:`` -- observe which exception the block raised.

    An ``Exception`` is suppressed and kept in ``info.value`` (``info`` is a plain namespace: the test
    never holds the context). Without ``message`` its observation ``["raised", names, None]`` is sent
    at once (``excinfo.py``: its MRO's names); with it, the names wait for :func:`raised`, which the
    probe calls after the block with the text ``match=`` searches -- made by :func:`message` in the
    probe's own frame, since it runs the exception's ``__str__``: nothing submitted ever runs inside
    this class, so no submitted frame ever has it below. No exception: ``["not raised"]``, and the
    test goes on (its verdict is already lost). Other ``BaseException``\\ s propagate.
    """

    __slots__ = ("info", "message", "site")

    def __init__(self, site: int, message: bool = False) -> None:
        self.site, self.message = site, message
        self.info = _types.SimpleNamespace(value=None, type=None)

    def __enter__(self) -> _types.SimpleNamespace:
        return self.info

    def __exit__(self, exc_type: type | None, exc: Any, tb: Any) -> bool:
        _pending.pop(self.site, None)
        if exc_type is None:
            send([_current[0], self.site, ["not raised"]])
            return False
        if not issubclass(exc_type, Exception):
            return False
        names = _excinfo.names(exc_type)
        if self.message:
            _pending[self.site] = names
        else:
            send([_current[0], self.site, ["raised", names, None]])
        self.info.value, self.info.type = exc, exc_type
        return True


def raised(site: int, text: Any) -> None:
    """Send what the ``raises(site, message=True)`` block just raised, with ``text`` (the probe's
    :func:`message` of it); nothing if the block raised nothing (``raises`` already said so)."""
    names = _pending.pop(site, None)
    if names is not None:
        send([_current[0], site, ["raised", names, text if type(text) is str else None]])


def message(exc: BaseException | None) -> str | None:
    """The text ``match=`` searches in ``exc`` (``excinfo.message``; None for no exception). Runs the
    exception's own ``__str__``: the probe calls it in its own frame, never the sealed runtime."""
    return None if exc is None else _excinfo.message(exc)


#: a container whose class takes one of these ``__eq__`` as its own is equal to a builtin one as
#: ``as_builtin`` rebuilds it (the ABCs' rule and ``UserList``/``UserString``'s ``self.data == other``)
_ABC_EQ = {"mapping": _abc.Mapping.__eq__, "set": _abc.Set.__eq__, "data": (_collections.UserList.__eq__,
                                                                          _collections.UserString.__eq__)}
_VIEWS = (type({}.keys()), type({}.items()))
_BUILTIN_BASES = (dict, list, tuple, set, frozenset, str, bytes, bytearray)


class ObjectView:
    """An object of a gold class with an ``__eq__`` as that ``__eq__`` reads it: its qualified class
    name and the compared attributes (``fields``: name -> value; one the object lacks is left out)."""

    __slots__ = ("cls", "fields")

    def __init__(self, cls: str, fields: dict[str, Any]) -> None:
        self.cls, self.fields = cls, fields


def viewer(classes: dict[str, tuple[str, ...] | list[str]]) -> Any:
    """``as_builtin`` that views the objects of ``classes`` (qualified name -> compared attributes,
    ``equality.eq_fields`` of the gold, compiled into the probe) as :class:`ObjectView`\\ s."""
    table = {name: tuple(fields) for name, fields in classes.items()}

    def view(value: Any, approx: bool = False) -> Any:
        return as_builtin(value, approx, 0, table)
    return view


_PLAIN_TYPES = frozenset({type(None), bool, int, float, complex, str, bytes, _decimal.Decimal, _fractions.Fraction})


def _viewed(value: Any, views: dict[str, tuple[str, ...]], depth: int) -> Any:
    """``value`` as an :class:`ObjectView` where its class is one of ``views``, else None. Its
    attributes are read with ``getattr`` (a property of the submission's runs, as its ``__eq__``
    would read it), in the probe's frame."""
    cls = type(value)
    if not views or cls in _PLAIN_TYPES:
        return None
    fields = views.get(qualname(cls))
    if fields is None:
        return None
    found = {}
    for name in fields:
        try:
            found[name] = as_builtin(getattr(value, name), False, depth + 1, views)
        except AttributeError:
            continue
    return ObjectView(qualname(cls), found)


def as_builtin(value: Any, approx: bool = False, depth: int = 0,
               views: dict[str, tuple[str, ...]] | None = None) -> Any:
    """``value`` rebuilt from builtin containers where its own ``==`` against a builtin one is the
    container protocol's; anything else as it is. The probe calls it in its own frame before
    ``observe`` (it runs the submission's ``keys``, ``__iter__``, ``__getitem__``, ``__len__``, as
    pytest's ``==`` would), never the sealed runtime.

    ``==`` (``approx`` false): a class whose ``__eq__`` is ``Mapping``'s becomes ``dict(value.items())``,
    ``Set``'s (and a dict's keys or items view) ``set(value)`` where that keeps its length, ``UserList``'s or
    ``UserString``'s its ``data``, a ``mappingproxy`` the dict it shows; then the values of exact dicts,
    lists and tuples likewise. A ``Sequence`` that is no list has no list equality and stays as it is.
    ``pytest.approx`` (``approx`` true) asks the actual side only for ``keys()`` and items, or ``len()``
    and iteration: a mapping becomes a dict of its items, any other sized, indexable, iterable
    non-string a list; its members are rebuilt as for ``==``.
    ``views`` (:func:`viewer`): an object of one of those gold classes becomes an :class:`ObjectView`."""
    cls = type(value)
    if depth > MAX_DEPTH:
        return value
    view = _viewed(value, views, depth) if views else None
    if view is not None:
        return view
    if issubclass(cls, _BUILTIN_BASES) and cls not in (dict, list, tuple):
        return value
    if cls is dict or cls is list or cls is tuple:
        members = list(value.values()) if cls is dict else value
        rebuilt = [as_builtin(v, False, depth + 1, views) for v in members]
        if all(a is b for a, b in zip(rebuilt, members, strict=True)):
            return value  # nothing rehashed or copied where nothing changed
        return dict(zip(value.keys(), rebuilt, strict=True)) if cls is dict else cls(rebuilt)
    eq = getattr(cls, "__eq__", None)
    if (approx and isinstance(value, _abc.Mapping)) or eq is _ABC_EQ["mapping"]:
        return as_builtin(dict(value.items()), False, depth + 1, views)
    if cls is _types.MappingProxyType:
        return as_builtin(dict(value), False, depth + 1, views)
    if approx and isinstance(value, _abc.Sized) and hasattr(value, "__getitem__") and hasattr(value, "__iter__"):
        return as_builtin(list(value), False, depth + 1, views)
    if eq is _ABC_EQ["set"] or cls in _VIEWS:
        try:
            members = set(value)
        except TypeError:  # unhashable members: the comparison would raise too
            return value
        return members if len(members) == len(value) else value
    if any(eq is own for own in _ABC_EQ["data"]):
        return as_builtin(value.data, False, depth + 1, views)
    return value


def _argnames(argnames: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    names = argnames.split(",") if isinstance(argnames, str) else list(argnames)
    cleaned = tuple(n.strip() for n in names if n.strip())
    if not cleaned or not all(n.isidentifier() for n in cleaned):
        raise ValueError(f"cases: bad argnames {argnames!r}")
    return cleaned


def cases(argnames: str | list[str] | tuple[str, ...], rows: list) -> Any:
    """Like ``pytest.mark.parametrize``: appends ``(names, rows)`` to ``func.__probe_cases__``."""
    names = _argnames(argnames)
    table = (names, list(rows))

    def mark(func: Any) -> Any:
        func.__probe_cases__ = [*getattr(func, "__probe_cases__", []), table]
        return func

    return mark


def fixture(func: Any) -> Any:
    """Mark a module-level function (no arguments, or other fixtures by name) as a fixture.

    Function scope: one value per test, shared by everything that test requests. A generator
    fixture yields its value once; the rest of it runs after the test as teardown.
    """
    func.__probe_fixture__ = True
    return func
