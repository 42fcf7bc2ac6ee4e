"""How one ``assert`` becomes observations, with its expected side deleted (:mod:`.compiler`'s rules).

* ``actual == expected``: ``actual`` is observed, ``expected`` dropped (the gold decides); both the
  project's: the comparison is observed too, in a segment of its own. Against plain data that is
  not a literal scalar, and wherever the comparison's own result is observed beside it, ``actual``
  goes through ``as_builtin`` in the probe's frame first (a ``Mapping``, ``Set``, ``UserList`` or
  ``mappingproxy`` rebuilt from builtins, as ``==`` sees it).
  ``pytest.approx(...)``: ``as_builtin(actual, True)`` is observed and the call is evaluated per case
  on the gold (``raising[site]["approx"]``); one that needs a local of the test keeps its literal
  tolerances as the site rule. Hashes and ids: the result.
* ``x in PLAIN`` / ``not in``: ``x`` is observed and the container is a site rule (``member_of``),
  decided on the trusted side on the decoded observation -- an always-equal object never matches.
  ``PLAIN in builtin(...)`` (``"hunk 2" in str(err)``): the builtin's result is observed and the
  searched-for value is a site rule (``contains``). Any other ``in`` / ``not in`` (``"k" in
  project_object``) observes only its result, a bool: all the test reads. Elsewhere a plain operand
  of ``<`` or ``!=`` is an input handed to the project, which sees it anyway: the live operands
  (through ``as_builtin``) and the comparison's result are observed.
* compound assertions are observed operand by operand: ``a and b`` / ``a or b`` as their operands
  (every one is evaluated, in order), ``not a`` as ``a``, ``all(p for t in it)`` / ``any(...)`` as
  a loop observing ``p`` (the columns of a literal ``it`` only ``p``'s dropped sides used are deleted
  from its rows), ``all([p, q])`` as ``p`` and ``q``, ``a < b < c`` as ``a < b`` and ``b < c`` (a
  middle operand that is not a name is evaluated once, into a local).

Every constant that the original test used only in expected sides is recorded (``expected_only``);
:func:`leaked_constants` finds any left in a compiled probe, which fails the build.
"""

from __future__ import annotations

import ast
import copy
from collections import Counter
from typing import Any

from envhub import safe_ast

from .runtime import encode
from .segments import is_observe, loaded_names, site_of

#: the runtime's ``as_builtin`` as the probe names it (``compiler.TEXT_NAMES``)
AS_BUILTIN = "_envhub_as_builtin"
CHAIN_LOCAL = "__envhub_chain_"
#: Too common to mean anything when left in a probe (loop bounds, flags, empty values).
UNREMARKABLE = frozenset({None, True, False, -1, ""})
MEMBERSHIP_CONTAINERS = frozenset({"str", "repr", "list", "tuple", "sorted", "set", "frozenset", "dict", "bytes",
                                   "format"})


class AssertionCompiler:
    """The assert half of the compiler's per-module state (mixed into ``compiler._Module``)."""

    sites: dict[int, dict[str, Any]]
    _dropped: dict[int, set[str]]
    _isolated: set[int]
    _locals: set[str]
    #: names of the test that its case's parameters and its module do not bind (locals, fixtures)
    _test_locals: set[str]
    #: constants of the current test's dropped expected sides, with how often each was dropped
    _expected: Counter
    #: site -> what is evaluated on the gold for it (``compiler.Probe.raising``)
    raising: dict[int, dict[str, Any]]
    function: str
    local_imports: list[str]

    def plain(self, node: ast.expr, plain_names: set[str], seen: frozenset[str] = frozenset()) -> bool:
        raise NotImplementedError

    def site(self, rule: dict[str, Any] | None = None) -> ast.Constant:
        raise NotImplementedError

    def _observe(self, node: ast.expr, rule: dict[str, Any] | None = None) -> ast.stmt:
        return ast.Expr(ast.Call(ast.Name("observe", ast.Load()), [node, self.site(rule)], []))

    def _drop(self, node: ast.expr) -> None:
        self._expected.update(constants_of(node))

    def _assert(self, test: ast.expr, plain: set[str]) -> list[ast.stmt]:
        statements = self._observations(test, plain)
        # what the statements around the observations load (a chain's local, a loop's iterable) is
        # no expected side either
        names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)} - _scaffold_loads(statements)
        for stmt in statements:
            for node in ast.walk(stmt):
                if is_observe(node):  # type: ignore[arg-type]
                    site = site_of(node)  # type: ignore[arg-type]
                    self._dropped[site] = set() if site in self._isolated else names - loaded_names([node])
        return statements

    def _observations(self, test: ast.expr, plain: set[str]) -> list[ast.stmt]:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self._observations(test.operand, plain)
        if isinstance(test, ast.BoolOp):
            return [s for value in test.values for s in self._observations(value, plain)]
        quantified = self._quantified(test, plain)
        if quantified is not None:
            return quantified
        if not isinstance(test, ast.Compare):
            return [] if self.plain(test, plain) else [self._observe(test)]
        if len(test.ops) > 1:
            return self._chain(test, plain)
        operands = [test.left, *test.comparators]
        if any(_per_process(o) for o in operands):  # hashes and ids differ between processes by design
            return [self._observe(test)]
        op = test.ops[0]
        if isinstance(op, ast.Eq | ast.Is):
            return self._equality(test, plain)
        if isinstance(op, ast.In | ast.NotIn):
            membership = self._membership(test, plain)
            if membership is not None:
                return membership
        live = [o for o in operands if not self.plain(o, plain) and not _is_approx(o)]
        if not live:
            return []
        if isinstance(op, ast.In | ast.NotIn):  # ``x in project_object``: the test reads the bool alone
            return [self._observe(test)]
        # plain operands here are inputs and bounds (``x in s``, ``0 < n``) the project is handed: its
        # own ``__contains__`` / ``__lt__`` decide, so the comparison is observed too
        return [*(self._observe(_as_builtin(o)) for o in live), self._observe(test)]

    def _equality(self, test: ast.Compare, plain: set[str]) -> list[ast.stmt]:
        left, right = test.left, test.comparators[0]
        if _is_approx(left) or (self.plain(left, plain) and not self.plain(right, plain)):
            left, right = right, left
        if self.plain(left, plain):
            return []
        if _mutates(right, self._locals):  # the test's own model (``reference.pop(k)``) must advance
            return [self._observe(_as_builtin(left, approx=_is_approx(right)), _approx(right)), ast.Expr(right)]
        if isinstance(right, ast.Call) and _is_approx(right):
            return [self._approximate(left, right)]
        if self.plain(right, plain) or isinstance(test.ops[0], ast.Is):
            if not self.plain(right, plain):
                return [self._observe(left)]
            self._drop(right)
            builtin = isinstance(test.ops[0], ast.Eq) and not _scalar(right)
            return [self._observe(_as_builtin(left) if builtin else left)]
        # both sides are the project's: its own ``__eq__`` is under test too, but that comparison
        # runs in a segment of its own, so ``left`` is also observed where ``right`` never is
        compared = self._observe(test)
        self._isolated.add(site_of(compared))
        return [self._observe(_as_builtin(left)), compared]

    def _approximate(self, actual: ast.expr, approx: ast.Call) -> ast.stmt:
        """``actual == pytest.approx(...)``: ``actual`` is observed as pytest's approx reads it
        (``as_builtin(actual, True)``); the call is evaluated per case on the gold when it is recorded
        (its expected value, tolerances and ``nan_ok`` become the site's expectation). One that needs a
        local of the test keeps its literal tolerances as the site's rule and the gold's observation
        as the expected value."""
        self._drop(approx)
        if {n.id for n in ast.walk(approx) if isinstance(n, ast.Name)} & self._test_locals:
            return self._observe(_as_builtin(actual, approx=True), _approx(approx))
        stmt = self._observe(_as_builtin(actual, approx=True))
        self.raising[site_of(stmt)] = {"function": self.function, "imports": self.local_imports,
                                       "approx": ast.unparse(approx)}
        return stmt

    def _membership(self, test: ast.Compare, plain: set[str]) -> list[ast.stmt] | None:
        """``x in PLAIN`` and ``PLAIN in builtin(...)``, decided on the trusted side (None: neither).
        A literal ``PLAIN`` is the site's rule; one computed from the case's parameters
        (``f"position {p}"``) is evaluated per case on the gold, like ``pytest.raises``' ``match=``."""
        item, container = test.left, test.comparators[0]
        negate = isinstance(test.ops[0], ast.NotIn)
        if self.plain(container, plain) and not self.plain(item, plain):
            kind, expected, observed = "member_of", container, item
        elif self.plain(item, plain) and not self.plain(container, plain) and _builtin_result(container):
            kind, expected, observed = "contains", item, container
        else:
            return None
        self._drop(expected)
        value = _literal(expected)
        if value is not None:
            return [self._observe(observed, {kind: encode(value), "negate": negate})]
        stmt = self._observe(observed)
        self.raising[site_of(stmt)] = {"function": self.function, "imports": self.local_imports,
                                       "membership": kind, "value": ast.unparse(expected), "negate": negate}
        return [stmt]

    def _quantified(self, test: ast.expr, plain: set[str]) -> list[ast.stmt] | None:
        """``all(...)`` / ``any(...)`` of a comprehension or a literal list, else None."""
        if not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id in ("all", "any")
                and len(test.args) == 1 and not test.keywords):
            return None
        arg = test.args[0]
        if isinstance(arg, ast.List | ast.Tuple):
            return [s for element in arg.elts for s in self._observations(element, plain)]
        if not (isinstance(arg, ast.GeneratorExp | ast.ListComp) and len(arg.generators) == 1
                and not arg.generators[0].is_async):
            return None
        gen = arg.generators[0]
        bound = {n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
        inner_plain = plain | bound if self.plain(gen.iter, plain) else plain - bound
        body = self._observations(arg.elt, inner_plain)
        if not body:
            return []
        for condition in reversed(gen.ifs):
            body = [ast.If(condition, body, [])]
        target, rows, removed = _prune_columns(gen.target, gen.iter, loaded_names(body) | loaded_names(gen.ifs))
        for column in removed:
            self._drop(column)
        return [ast.For(target, rows, body, [])]

    def _chain(self, test: ast.Compare, plain: set[str]) -> list[ast.stmt]:
        operands, out = [test.left, *test.comparators], []
        for i in range(1, len(operands) - 1):
            if not isinstance(operands[i], ast.Name | ast.Constant):
                name = f"{CHAIN_LOCAL}{test.lineno}_{test.col_offset}_{i}"
                out.append(ast.Assign([ast.Name(name, ast.Store())], operands[i]))
                operands[i] = ast.Name(name, ast.Load())
        seen: set[str] = set()
        for i, op in enumerate(test.ops):
            for stmt in self._observations(ast.Compare(copy.deepcopy(operands[i]), [op], [operands[i + 1]]), plain):
                observed = observed_expression(stmt) if is_observe(stmt) else None
                if isinstance(observed, ast.Name) and observed.id.startswith(CHAIN_LOCAL):
                    if observed.id in seen:
                        continue  # a middle operand, observed with the pair before
                    seen.add(observed.id)
                out.append(stmt)
        return out


def _as_builtin(node: ast.expr, approx: bool = False) -> ast.expr:
    """``node`` rebuilt from builtin containers in the probe's frame (``runtime.as_builtin``)."""
    return ast.Call(ast.Name(AS_BUILTIN, ast.Load()), [node, *([ast.Constant(True)] if approx else [])], [])


def observed_expression(stmt: ast.stmt) -> ast.expr:
    """What an ``observe`` statement observes, through an ``as_builtin`` call."""
    observed = stmt.value.args[0]  # type: ignore[attr-defined]
    if isinstance(observed, ast.Call) and isinstance(observed.func, ast.Name) and observed.func.id == AS_BUILTIN:
        return observed.args[0]
    return observed


def _scalar(node: ast.expr) -> bool:
    """A literal number, string or bytes: no container can be equal to it."""
    return isinstance(node, ast.Constant | ast.JoinedStr) or isinstance(
        _literal(node), int | float | complex | str | bytes)


def _scaffold_loads(statements: list[ast.stmt]) -> set[str]:
    """Names the generated statements load outside their ``observe`` calls."""
    out: set[str] = set()
    todo: list[ast.AST] = list(statements)
    while todo:
        node = todo.pop()
        if is_observe(node):  # type: ignore[arg-type]
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            out.add(node.id)
        todo.extend(ast.iter_child_nodes(node))
    return out


def leaked_constants(everywhere: Counter, expected: Counter, probes: list[ast.FunctionDef]) -> list[Any]:
    """Constants that the original test used only in expected sides (``everywhere``: its constants,
    ``constants_of``; ``expected``: how often each was dropped) and a compiled probe still holds."""
    only_expected = {c for c, n in expected.items() if everywhere[c] <= n}
    sites = {id(call.args[-1] if call.func.id == "observe" else call.args[0])  # type: ignore[attr-defined]
             for probe in probes for call in ast.walk(probe)
             if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in ("observe", "raises")}
    left = {c for probe in probes for c in constants_of(probe, sites)}
    return sorted((c[1] for c in only_expected & left), key=repr)


def constants_of(node: ast.AST, skip: set[int] = frozenset()) -> list[tuple[str, Any]]:  # type: ignore[assignment]
    """The remarkable constants under ``node`` as (type name, value), but the nodes in ``skip``."""
    out = []
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and id(n) not in skip and not isinstance(n.value, type(...)):
            try:
                remarkable = n.value not in UNREMARKABLE
            except TypeError:
                remarkable = True
            if remarkable and not (isinstance(n.value, str) and n.value.isidentifier() and len(n.value) < 2):
                out.append((type(n.value).__name__, n.value))
    return out


def _literal(node: ast.expr) -> Any | None:
    try:
        return safe_ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _builtin_result(node: ast.expr) -> bool:
    """A call of a builtin whose result is a builtin container or string (what ``in`` then searches
    is the builtin's, not the project's)."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in MEMBERSHIP_CONTAINERS) \
        or isinstance(node, ast.JoinedStr)


def _prune_columns(target: ast.expr, rows: ast.expr, used: set[str]) -> tuple[ast.expr, ast.expr, list[ast.expr]]:
    """Drop the target names ``used`` does not load, and their columns of a literal list of tuples:
    (target, rows, the removed cells)."""
    if not (isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts)
            and isinstance(rows, ast.List | ast.Tuple)
            and all(isinstance(r, ast.Tuple) and len(r.elts) == len(target.elts) for r in rows.elts)):
        return target, rows, []
    keep = [i for i, e in enumerate(target.elts) if e.id in used]  # type: ignore[attr-defined]
    if len(keep) == len(target.elts) or not keep:
        return target, rows, []
    cells: list[list[ast.expr]] = [r.elts for r in rows.elts]  # type: ignore[attr-defined]
    removed = [row[i] for row in cells for i in range(len(row)) if i not in keep]
    if len(keep) == 1:  # one column left: bare values
        return target.elts[keep[0]], type(rows)([row[keep[0]] for row in cells], ast.Load()), removed
    new_target = ast.Tuple([target.elts[i] for i in keep], ast.Store())
    new_rows = type(rows)([ast.Tuple([row[i] for i in keep], ast.Load()) for row in cells], ast.Load())
    return new_target, new_rows, removed


def _per_process(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hash", "id")


def _is_approx(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.approx"


def _approx(node: ast.expr) -> dict[str, Any] | None:
    """A ``pytest.approx`` call's literal tolerances as a site rule (``{"approx": [rel, abs, nan_ok]}``,
    encoded; None where not given), else None."""
    if not _is_approx(node):
        return None
    given: dict[str, Any] = {"rel": None, "abs": None, "nan_ok": False}
    for name, value in zip(("rel", "abs", "nan_ok"), node.args[1:], strict=False):
        given[name] = safe_ast.literal_eval(value)
    for k in node.keywords:
        given[str(k.arg)] = safe_ast.literal_eval(k.value)
    return {"approx": [encode(given["rel"]), encode(given["abs"]), bool(given["nan_ok"])]}


def _mutates(node: ast.expr, local_names: set[str]) -> bool:
    """Whether ``node`` calls a method of one of the test's own locals."""
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
            root = call.func.value
            while isinstance(root, ast.Attribute | ast.Subscript):
                root = root.value
            if isinstance(root, ast.Name) and root.id in local_names:
                return True
    return False
