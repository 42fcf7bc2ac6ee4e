"""Bookkeeping of the probe compiler (:mod:`.compiler`) over a test function's AST: its
observation sites, how they are grouped into segments (so that no segment loads a value one of
its own sites expected), and which module-level definitions a probe function still needs."""

from __future__ import annotations

import ast


def loaded_names(nodes: list[ast.stmt] | list[ast.expr]) -> set[str]:
    return {n.id for root in nodes for n in ast.walk(root) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def is_observe(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
        getattr(stmt.value.func, "id", "") == "observe"


def site_of(stmt: ast.stmt) -> int:
    assert isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
    site = stmt.value.args[-1]
    assert isinstance(site, ast.Constant)
    return int(site.value)


def assigned_names(fn: ast.FunctionDef) -> set[str]:
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def observe_sites(fn: ast.FunctionDef, sites: set[int]) -> list[ast.Expr]:
    return [n for n in ast.walk(fn) if is_observe(n) and site_of(n) in sites]


def group_sites(fn: ast.FunctionDef, dropped: dict[int, set[str]], data_names: set[str],
              isolated: set[int]) -> list[set[int]]:
    """Group the assertion sites so that no group loads a data name that one of its own sites expected,
    and ``isolated`` sites (whole comparisons) never share a group with the others.

    Statements that are not observations run in every segment, so what they load counts for all.
    """
    observations = observe_sites(fn, set(dropped))
    shared_loads = loaded_names([s for s in fn.body if s not in observations]) & data_names
    groups: list[tuple[set[int], set[str], set[str]]] = []
    for stmt in observations:
        site = site_of(stmt)
        loads = loaded_names([stmt]) & data_names
        expects = dropped[site] & data_names
        for sites, group_loads, group_expects in groups:
            if (site in isolated) != (min(sites) in isolated):
                continue
            if not loads & group_expects and not expects & group_loads:
                sites.add(site)
                group_loads |= loads
                group_expects |= expects
                break
        else:
            groups.append(({site}, loads | shared_loads, set(expects)))
    return [sites for sites, _, _ in groups] or [set()]


def unsplittable(fn: ast.FunctionDef, dropped: dict[int, set[str]], data_names: set[str]) -> set[str]:
    """Expected data names that a non-observation statement loads: no segmentation can hide them."""
    observations = observe_sites(fn, set(dropped))
    shared_loads = loaded_names([s for s in fn.body if s not in observations]) & data_names
    return shared_loads & set().union(*dropped.values()) if dropped else set()


def keep_sites(fn: ast.FunctionDef, keep: set[int], all_sites: set[int]) -> None:
    """Remove the observations of other segments (and blocks left empty)."""
    drop = {id(s) for s in observe_sites(fn, all_sites - keep)}
    for parent in ast.walk(fn):
        for attr in ("body", "orelse", "finalbody"):
            stmts = getattr(parent, attr, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                setattr(parent, attr, [s for s in stmts if id(s) not in drop] or [ast.Pass()])


def defined(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def prune_module(body: list[ast.stmt], roots: list[ast.FunctionDef]) -> list[ast.stmt]:
    """The module ``roots`` need: imports, and the constants and helpers they use, transitively
    (other tests, their rows and what only they use stay out)."""
    needed = loaded_names(roots)  # type: ignore[arg-type]
    definitions = {name: node for node in body for name in defined(node)}
    frontier = set(needed)
    while frontier:
        name = frontier.pop()
        node = definitions.get(name)
        if node is None:
            continue
        for ref in loaded_names([node]) - needed:
            needed.add(ref)
            frontier.add(ref)
    return [n for n in body if n in roots or (not defined(n) and not isinstance(n, ast.FunctionDef))
            or (defined(n) & needed and not (isinstance(n, ast.FunctionDef) and n.name.startswith("test_")))]
