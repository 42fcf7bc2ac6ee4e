"""Compile a pytest test module into a *probe module*: the same tests with every expected value removed.

Trusted, build time and grade time (it only parses; it never imports the tests or the project).
A probe runs next to the submission and can only *observe*; the values it observes are compared
in the trusted process with the observations of the gold sources (:mod:`.compare`). The rules:

* ``assert actual == expected`` becomes ``observe(actual, site)``: the expected side is dropped from
  the source. The actual side is the left one, unless the left side is plain data and the right
  side is not (``assert 3 == f(x)``). Where both sides are the project's (``assert a == B(2)``),
  the comparison itself is observed as well -- the project's ``__eq__`` may be what is broken --
  in a segment of its own, so that ``a`` is also observed where ``B(2)`` never runs.
* ``assert actual == pytest.approx(v, rel=r, abs=a)`` observes ``as_builtin(actual, True)`` (``actual``
  as approx reads it); the call itself is evaluated per case on the gold when it is recorded and
  kept on the trusted side, never in the probe. Where the expected side is plain data that is not a
  literal number or string, ``as_builtin(actual)`` is observed: a container equal to a builtin one
  under the container protocol, rebuilt in the probe's own frame.
* a comparison of hashes or ids (which differ between processes) observes its result;
* ``x in PLAIN`` and ``PLAIN in str(...)`` observe the live side and keep the plain one as a
  trusted site rule; any other ``in`` observes its result alone (a bool: all the test reads); any
  other comparison (``<``, ``!=``, ...) observes each operand that is not plain data, and its own
  result: its plain operands are inputs and bounds, and the project's ``__lt__`` may be what is broken;
* where a module calls ``as_builtin`` and the suite has the gold's ``__eq__`` fields (:func:`with_views`),
  it is bound to ``viewer`` of them: objects of those classes are observed as those fields;
  ``assert e`` (no comparison) observes ``e``; ``assert not e`` observes ``e``; ``and``, ``or``,
  ``all``/``any`` and chained comparisons are observed operand by operand (:mod:`.assertions`,
  which holds these rules). Messages are dropped. A constant the test used only as an expected
  value and still in a probe is a leak (``Probe.leaks``): recording the gold refuses it.
* ``with pytest.raises(E, match=M) as info:`` becomes ``with raises(site, message=True) as info:``,
  then ``raised(site, message(info.value))``: the names of the exception's classes (and, where the
  test had ``match=``, its text, made in the probe's frame) are observed.
  ``E`` and ``M`` stay on the trusted side (``Probe.raising``): evaluated on the gold when it is
  recorded, they decide as pytest does (a subclass of ``E``, ``re.search(M, text)``; ``compare.py``).
* ``@pytest.mark.parametrize`` becomes ``@cases`` with the parameters the probe still uses; the
  columns that only fed dropped expected sides are deleted from the rows, so a parametrized
  expectation never reaches the sandbox. ``@pytest.fixture`` becomes ``@fixture``.
* after that, locals, module constants and helpers that nothing uses any more are removed (they
  held expected data), and no reference to pytest may remain.

"Plain data" means an expression built only from literals, the standard library's value types
(``Decimal("1.5")``, ``date(2024, 1, 2)``) and pure builtins, or names bound only to such data.
"""

from __future__ import annotations

import ast
import copy
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from envhub import safe_ast

from .assertions import AS_BUILTIN, AssertionCompiler, constants_of, leaked_constants
from .segments import (
    assigned_names,
    group_sites,
    keep_sites,
    loaded_names,
    prune_module,
    unsplittable,
)

RUNTIME_NAMES = ("cases", "fixture", "observe", "raises")
#: what a ``match=`` site adds after its block, and what an ``==`` site calls in the probe's frame, under
#: names no test uses (``message`` is a common one)
TEXT_NAMES = {"raised": "_envhub_raised", "message": "_envhub_message", "as_builtin": AS_BUILTIN}
PURE_BUILTINS = frozenset({
    "abs", "bool", "bytes", "chr", "complex", "dict", "enumerate", "float", "frozenset", "int", "len", "list",
    "max", "min", "ord", "range", "reversed", "round", "set", "sorted", "str", "sum", "tuple", "zip",
})
SEGMENT_MARK = "__envhub_segment_"


class ProbeCompileError(ValueError):
    """A test construct the compiler cannot express as observations (fix the test, never guess)."""


@dataclass
class Probe:
    """One compiled test module: a probe module per probe function, each holding only what that
    function needs (so no child ever imports another test's rows, constants or helpers)."""

    path: str
    #: probe function -> the source of its own module
    modules: dict[str, str]
    #: site id -> trusted comparison rule for the observations made there ({} = exact)
    sites: dict[int, dict[str, Any]]
    #: test function -> the argument names its ``cases`` tables bind, in table order
    tables: dict[str, list[list[str]]] = field(default_factory=dict)
    #: test function -> number of probe functions it was split into (absent: one)
    segments: dict[str, int] = field(default_factory=dict)
    #: "function: name" where an expected value is also an input outside any assertion (reported)
    residual: list[str] = field(default_factory=list)
    #: site -> its ``pytest.raises``, never in a probe: ``{"function", "imports", "classes", "match"}`` (the test
    #: function and the imports it makes, the source of the class or tuple expression and of ``match=`` or
    #: None), evaluated on the gold (record.py)
    raising: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: the compiled module body every probe module is cut from
    body: list[ast.stmt] = field(default_factory=list, repr=False, compare=False)
    #: "function: value" for each constant a probe still holds that its test used only as an expected
    #: value (``assertions.leaked_constants``): recording the gold refuses a suite with any
    leaks: list[str] = field(default_factory=list)
    #: gold class -> the attributes its ``__eq__`` compares (``equality.eq_fields``): structure, compiled
    #: into the modules that call ``as_builtin`` (:func:`with_views`), which views such objects by them
    views: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def module_for(self, functions: list[str]) -> str:
        """One module holding ``functions`` and exactly what they need (for a batch of them)."""
        return _module_source(self.body, functions, self.views)

    def module_path(self, function: str) -> str:
        """Where the module of ``function`` goes, relative to the probe directory."""
        return f"{self.path.removesuffix('.py')}/{function}.py"

    def functions(self, test: str) -> list[str]:
        """The probe functions that together make up the pytest function ``test``."""
        return [test] + [f"{test}{SEGMENT_MARK}{n}" for n in range(1, self.segments.get(test, 1))]


def compile_tests(path: str, source: str, unsegmented: frozenset[str] = frozenset()) -> Probe:
    """The probe modules for the pytest module ``source`` (named ``path`` in messages).

    ``unsegmented`` names test functions that stay whole even where splitting would hide an
    expectation (their segments did not run cleanly on the gold: a stateful test whose model
    needs every call); what they keep is reported in ``Probe.residual``."""
    tree = safe_ast.parse(source)
    module = _Module(path, tree, unsegmented)
    body: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            kept = [a for a in node.names if a.name != "pytest" and not a.name.startswith("_pytest")]
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("pytest", "_pytest"):
                kept = []
            if kept:
                node.names = kept
                body.append(node)
        elif isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            body.extend(module.compile_test(node))
        elif isinstance(node, ast.FunctionDef) and _decorator(node, "fixture") is not None:
            node.decorator_list = [ast.Name("fixture", ast.Load())]
            body.append(node)
        else:
            body.append(node)
    tests = [n.name for n in body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    modules = {name: _module_source(body, [name]) for name in tests}
    for name, text in modules.items():
        if any(isinstance(n, ast.Name) and n.id == "pytest" for n in ast.walk(safe_ast.parse(text))):
            raise ProbeCompileError(f"{path}: {name} still uses pytest after compiling")
    return Probe(path=path, modules=modules, sites=module.sites, tables=module.tables, segments=module.segmented,
                 residual=module.residual, raising=module.raising, body=body, leaks=module.leaks)


def with_views(probe: Probe, classes: dict[str, tuple[str, ...]]) -> Probe:
    """``probe`` with its modules made again to view the objects of ``classes`` (the gold's
    ``equality.eq_fields``) by what their ``__eq__`` compares, wherever they call ``as_builtin``."""
    probe.views = {name: tuple(fields) for name, fields in sorted(classes.items())}
    probe.modules = {name: _module_source(probe.body, [name], probe.views) for name in probe.modules}
    return probe


def _module_source(body: list[ast.stmt], functions: list[str], views: dict[str, tuple[str, ...]] | None = None) -> str:
    """The module of ``functions``: the runtime import, then what they need of ``body`` (and, where
    it calls ``as_builtin`` and ``views`` are given, ``as_builtin`` bound to :func:`runtime.viewer` of them)."""
    fixtures = {n.name: n for n in body if isinstance(n, ast.FunctionDef) and not n.name.startswith("test_")
                and n.decorator_list}
    wanted = [n for n in body if isinstance(n, ast.FunctionDef) and n.name in functions]
    roots = [*wanted, *(fixtures[a.arg] for n in wanted for a in n.args.args if a.arg in fixtures)]
    imports = [*RUNTIME_NAMES, *(f"{name} as {alias}" for name, alias in TEXT_NAMES.items())]
    header = safe_ast.parse(f"from envhub_probe import {', '.join(imports)}").body
    kept = prune_module(body, roots)
    if views and AS_BUILTIN in loaded_names(kept):
        table = ast.Dict([ast.Constant(k) for k in views], [ast.Tuple([ast.Constant(f) for f in v], ast.Load())
                                                             for v in views.values()])
        header += [*safe_ast.parse("from envhub_probe import viewer as _envhub_viewer").body,
                   ast.Assign([ast.Name(AS_BUILTIN, ast.Store())],
                              ast.Call(ast.Name("_envhub_viewer", ast.Load()), [table], []))]
    tree = ast.Module(body=header + kept, type_ignores=[])
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n"


# ---- the module: names, plain data, sites ---------------------------------------------------------

class _Module(AssertionCompiler):
    def __init__(self, path: str, tree: ast.Module, unsegmented: frozenset[str] = frozenset()):
        self.path = path
        self.unsegmented = unsegmented
        self.sites: dict[int, dict[str, Any]] = {}
        self.tables: dict[str, list[list[str]]] = {}
        self.segmented: dict[str, int] = {}
        self.residual: list[str] = []
        self.leaks: list[str] = []
        self.raising: dict[int, dict[str, Any]] = {}
        self.function, self.local_imports = "", []
        self.constants: dict[str, ast.expr] = {}
        self.stdlib: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.constants[node.targets[0].id] = node.value
            elif isinstance(node, ast.Import):
                self.stdlib.update((a.asname or a.name).split(".")[0] for a in node.names
                                   if a.name.split(".")[0] in sys.stdlib_module_names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in sys.stdlib_module_names:
                self.stdlib.update(a.asname or a.name for a in node.names)

    def site(self, rule: dict[str, Any] | None = None) -> ast.Constant:
        number = len(self.sites)
        self.sites[number] = rule or {}
        return ast.Constant(number)

    def plain(self, node: ast.expr, plain_names: set[str], seen: frozenset[str] = frozenset()) -> bool:
        """Whether ``node`` is plain data: nothing of the project can be involved in computing it."""
        match node:
            case ast.Constant():
                return True
            case ast.List() | ast.Tuple() | ast.Set():
                return all(self.plain(e, plain_names, seen) for e in node.elts)
            case ast.Dict():
                return all(k is None or self.plain(k, plain_names, seen) for k in node.keys) and \
                    all(self.plain(v, plain_names, seen) for v in node.values)
            case ast.JoinedStr():
                return all(self.plain(v, plain_names, seen) for v in node.values)
            case ast.FormattedValue():
                return self.plain(node.value, plain_names, seen)
            case ast.UnaryOp():
                return self.plain(node.operand, plain_names, seen)
            case ast.BinOp():
                return self.plain(node.left, plain_names, seen) and self.plain(node.right, plain_names, seen)
            case ast.Subscript():
                return self.plain(node.value, plain_names, seen) and self.plain(node.slice, plain_names, seen)
            case ast.Slice():
                return all(p is None or self.plain(p, plain_names, seen) for p in (node.lower, node.upper, node.step))
            case ast.Name():
                if node.id in plain_names:
                    return True
                if node.id in self.constants and node.id not in seen:
                    return self.plain(self.constants[node.id], plain_names, seen | {node.id})
                return False
            case ast.Call():
                return self._pure_callee(node.func) and all(self.plain(a, plain_names, seen) for a in node.args) \
                    and all(self.plain(k.value, plain_names, seen) for k in node.keywords)
            case ast.ListComp() | ast.SetComp() | ast.GeneratorExp():
                names = plain_names | {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
                return all(self.plain(g.iter, names, seen) and all(self.plain(i, names, seen) for i in g.ifs)
                           for g in node.generators) and self.plain(node.elt, names, seen)
        return False

    def _pure_callee(self, func: ast.expr) -> bool:
        root = func
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name):
            return False
        if isinstance(func, ast.Name) and func.id in PURE_BUILTINS:
            return True
        if root.id in self.stdlib:
            return True
        alias = self.constants.get(root.id)  # ``D = Decimal``
        return isinstance(alias, ast.Name | ast.Attribute) and alias is not func and self._pure_callee(alias)

    # ---- one test function ------------------------------------------------------------------------

    def compile_test(self, fn: ast.FunctionDef) -> list[ast.FunctionDef]:
        """The probe functions of one test: usually one; more when a value one assertion expects is an
        input of another (``assert encode(t) == e; assert decode(e) == t``): then each *segment* keeps
        only observations that never see what their own assertion expected."""
        self.function = fn.name  # and the imports it makes itself (``import dataclasses`` in the test)
        self.local_imports = [ast.unparse(n) for n in ast.walk(fn) if isinstance(n, ast.Import | ast.ImportFrom)]
        tables = [self._table(d) for d in fn.decorator_list if _is_parametrize(d)]
        others = [d for d in fn.decorator_list if not _is_parametrize(d)]
        if others:
            raise ProbeCompileError(f"{self.path}:{fn.lineno}: unsupported decorator {ast.unparse(others[0])}")
        table_names = {n for names, _ in tables for n in names}
        escaping = _escaping(fn)
        plain_params = {name for names, rows in tables for i, name in enumerate(names)
                        if all(self.plain(row[i], set()) for row in rows)} - escaping
        plain = plain_params | (_plain_locals(fn, self, plain_params) - escaping)
        everywhere = Counter(constants_of(fn))  # before anything is dropped (the leak scan's baseline)
        self._dropped: dict[int, set[str]] = {}
        self._isolated: set[int] = set()
        self._expected = Counter()
        self._locals = assigned_names(fn)
        self._test_locals = (self._locals | {a.arg for a in fn.args.args}) - table_names
        fn.body = self._statements(fn.body, plain)
        data_names = table_names | self._locals | {a.arg for a in fn.args.args}
        if fn.name in self.unsegmented:  # one child: a whole comparison would sit next to its twin
            segments = [set(self._dropped) - self._isolated]
        else:
            segments = group_sites(fn, self._dropped, data_names, self._isolated)
        self.residual += [f"{fn.name}: {name}" for name in unsplittable(fn, self._dropped, data_names)]
        if len(segments) > 1:
            self.segmented[fn.name] = len(segments)
        out = []
        for number, sites in enumerate(segments):
            segment = copy.deepcopy(fn)
            if number:
                segment.name = f"{fn.name}{SEGMENT_MARK}{number}"
            keep_sites(segment, sites, set(self._dropped))
            out.append(self._finish(segment, tables, plain))
        used = {n for f in out for n in loaded_names(f.body)}
        for names, rows in tables:  # columns no segment kept held expected values only
            self._expected.update(c for row in rows for i, cell in enumerate(row) if names[i] not in used
                                  for c in constants_of(cell))
        self.leaks += [f"{fn.name}: {value!r}" for value in leaked_constants(everywhere, self._expected, out)]
        return out

    def _finish(self, fn: ast.FunctionDef, tables: list[tuple[list[str], list[list[ast.expr]]]],
                plain: set[str]) -> ast.FunctionDef:
        _drop_dead_stores(fn, self, plain)
        used = loaded_names(fn.body)
        decorators: list[ast.expr] = []
        bound: list[list[str]] = []
        for names, rows in tables:
            keep = [i for i, n in enumerate(names) if n in used]
            if not keep:
                continue
            kept = [names[i] for i in keep]
            values = [copy.deepcopy(row[keep[0]]) if len(keep) == 1 else
                      ast.Tuple([copy.deepcopy(row[i]) for i in keep], ast.Load()) for row in rows]
            decorators.append(ast.Call(ast.Name("cases", ast.Load()),
                                       [ast.Constant(", ".join(kept)), ast.List(values, ast.Load())], []))
            bound.append(kept)
        table_names = {n for names, _ in tables for n in names}
        fixtures = [a.arg for a in fn.args.args if a.arg not in table_names and a.arg in used]
        fn.args.args = [ast.arg(n) for n in [n for names in bound for n in names] + fixtures]
        fn.decorator_list = decorators
        self.tables[fn.name] = bound
        return fn

    def _table(self, deco: ast.expr) -> tuple[list[str], list[list[ast.expr]]]:
        assert isinstance(deco, ast.Call)
        spec, values = deco.args[0], deco.args[1]
        if isinstance(spec, ast.Constant) and isinstance(spec.value, str):
            names = [n.strip() for n in spec.value.split(",") if n.strip()]
        elif isinstance(spec, ast.Tuple | ast.List) and all(isinstance(e, ast.Constant) for e in spec.elts):
            names = [str(e.value) for e in spec.elts]  # type: ignore[attr-defined]
        else:
            raise ProbeCompileError(f"{self.path}:{deco.lineno}: parametrize names must be literal")
        if isinstance(values, ast.Name) and values.id in self.constants:
            values = self.constants[values.id]
        if not isinstance(values, ast.List | ast.Tuple):
            raise ProbeCompileError(f"{self.path}:{deco.lineno}: parametrize values must be a literal list")
        rows: list[list[ast.expr]] = []
        for element in values.elts:
            if isinstance(element, ast.Call) and ast.unparse(element.func) == "pytest.param":
                element = ast.Tuple(list(element.args), ast.Load()) if len(names) > 1 else element.args[0]
            if len(names) == 1:
                rows.append([element])
            elif isinstance(element, ast.Tuple | ast.List) and len(element.elts) == len(names):
                rows.append(list(element.elts))
            else:
                raise ProbeCompileError(f"{self.path}:{deco.lineno}: a parametrize row must be a literal tuple")
        return names, rows

    def _statements(self, body: list[ast.stmt], plain: set[str]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in body:
            if isinstance(stmt, ast.Assert):
                out.extend(self._assert(stmt.test, plain))
                continue
            after: list[ast.stmt] = []
            if isinstance(stmt, ast.With):
                stmt.items = [self._with_item(item, after) for item in stmt.items]
            for attr in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, attr, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    setattr(stmt, attr, self._statements(inner, plain) or [ast.Pass()])
            out.append(stmt)
            out.extend(after)
        return out

    def _with_item(self, item: ast.withitem, after: list[ast.stmt]) -> ast.withitem:
        """A ``pytest.raises`` item becomes ``raises(site, message=...)``; where the test had
        ``match=``, ``raised(site, message(info.value))`` (under :data:`TEXT_NAMES`) is added to ``after`` (the statements that
        follow the block): the exception's text is made in the probe's frame, not the runtime's."""
        call = item.context_expr
        if isinstance(call, ast.Call) and ast.unparse(call.func) == "pytest.raises":
            keywords = {k.arg: k.value for k in call.keywords}
            classes = call.args[0] if len(call.args) == 1 else keywords.pop("expected_exception", None)
            match = keywords.pop("match", None)
            if classes is None or len(call.args) > 1 or keywords:
                raise ProbeCompileError(f"{self.path}:{call.lineno}: pytest.raises takes one class or tuple, "
                                        "and match= only")
            site = self.site()
            self.raising[site.value] = {"function": self.function, "imports": self.local_imports,
                                        "classes": ast.unparse(classes),
                                        "match": None if match is None else ast.unparse(match)}
            item.context_expr = ast.Call(ast.Name("raises", ast.Load()), [site],
                                         [ast.keyword("message", ast.Constant(match is not None))])
            if match is not None:
                if item.optional_vars is None:
                    item.optional_vars = ast.Name(f"_envhub_info_{site.value}", ast.Store())
                if not isinstance(item.optional_vars, ast.Name):
                    raise ProbeCompileError(f"{self.path}:{call.lineno}: pytest.raises(...) as a plain name only")
                text = ast.Call(ast.Name(TEXT_NAMES["message"], ast.Load()),
                                [ast.Attribute(ast.Name(item.optional_vars.id, ast.Load()), "value", ast.Load())], [])
                after.append(ast.Expr(ast.Call(ast.Name(TEXT_NAMES["raised"], ast.Load()), [site, text], [])))
        return item


# ---- helpers ---------------------------------------------------------------------------------------

def _decorator(fn: ast.FunctionDef, name: str) -> ast.expr | None:
    for d in fn.decorator_list:
        if ast.unparse(d).split("(")[0] in (f"pytest.{name}", name):
            return d
    return None


def _is_parametrize(deco: ast.expr) -> bool:
    return isinstance(deco, ast.Call) and ast.unparse(deco.func) == "pytest.mark.parametrize"


def _plain_locals(fn: ast.FunctionDef, module: _Module, plain_params: set[str]) -> set[str]:
    """Locals every assignment of which is plain data (``expected = [...]``)."""
    assigned: dict[str, list[ast.expr | None]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        assigned.setdefault(n.id, []).append(node.value if isinstance(target, ast.Name) else None)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.For | ast.withitem | ast.NamedExpr):
            target = getattr(node, "target", None) or getattr(node, "optional_vars", None)
            for n in ast.walk(target) if target is not None else ():
                if isinstance(n, ast.Name):
                    assigned.setdefault(n.id, []).append(None)
    plain: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, values in assigned.items():
            if name not in plain and all(v is not None and module.plain(v, plain_params | plain) for v in values):
                plain.add(name)
                changed = True
    return plain


def _escaping(fn: ast.FunctionDef) -> set[str]:
    """Names the project may change or see: call arguments, method receivers, names in lambdas
    (``evicted = []`` filled by an ``on_evict`` callback is the project's output, not plain data)."""
    out: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            parts: list[ast.AST] = [*node.args, *(k.value for k in node.keywords)]
            if isinstance(node.func, ast.Attribute):
                parts.append(node.func.value)
            out |= {n.id for part in parts for n in ast.walk(part) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Lambda):
            out |= {n.id for n in ast.walk(node.body) if isinstance(n, ast.Name)}
    return out


def _drop_dead_stores(fn: ast.FunctionDef, module: _Module, plain: set[str]) -> None:
    """Remove ``name = <plain data>`` whose name nothing reads any more (it held an expectation)."""
    while True:
        used = loaded_names(fn.body)
        dead = [s for s in ast.walk(fn) if isinstance(s, ast.Assign) and len(s.targets) == 1
                and isinstance(s.targets[0], ast.Name) and s.targets[0].id not in used and module.plain(s.value, plain)]
        if not dead:
            return
        for parent in ast.walk(fn):
            for attr in ("body", "orelse", "finalbody"):
                stmts = getattr(parent, attr, None)
                if isinstance(stmts, list) and any(s in dead for s in stmts):
                    setattr(parent, attr, [s for s in stmts if s not in dead] or [ast.Pass()])


