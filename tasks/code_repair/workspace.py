"""What the agent's repository looks like, and what the grader starts from.

The agent gets the project's ``src/`` with the planted bugs and, for some instances, a pruned copy
of a few visible tests. The hidden tests never enter its sandbox: the grader copies the project's
original ``tests/`` into a fresh sandbox at verification time.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from envhub import safe_ast
from envhub.verifiers.integrity import is_cache_file

from .manifest import PROJECTS_DIR, Instance


def _read_tree(root: Path) -> dict[str, str]:
    files = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not is_cache_file(rel):
            files[rel] = path.read_text(encoding="utf-8")
    return files


@lru_cache(maxsize=64)
def project_sources(project: str) -> dict[str, str]:
    """The original ``src/`` files of a project, by path relative to the project root."""
    return {f"src/{rel}": text for rel, text in _read_tree(PROJECTS_DIR / project / "src").items()}


@lru_cache(maxsize=64)
def project_tests(project: str) -> dict[str, str]:
    """The original (hidden) ``tests/`` files of a project."""
    return {f"tests/{rel}": text for rel, text in _read_tree(PROJECTS_DIR / project / "tests").items()}


def visible_test_ids(instance: Instance) -> list[str]:
    """Visible tests, minus parametrized cases: a parametrized function would show hidden cases too."""
    return [t for t in instance.visible_tests if "[" not in t]


def agent_files(instance: Instance) -> dict[str, str]:
    """The repository as the agent first sees it."""
    files = {**project_sources(instance.project), **instance.buggy_files}
    visible = visible_test_ids(instance)
    if visible:
        by_file: dict[str, set[str]] = {}
        for node in visible:
            path, _, rest = node.partition("::")
            by_file.setdefault(path, set()).add(rest)
        tests = project_tests(instance.project)
        for path, names in sorted(by_file.items()):
            files[path] = prune_tests(tests[path], names)
    return files


def prune_tests(source: str, keep: set[str]) -> str:
    """Keep the test functions / methods named in ``keep``, and of the rest of the module only
    imports and what the kept tests need (helpers, fixtures, constants, transitively): a constant
    that only hidden tests use would show the agent their data.

    ``keep`` holds node-id tails: ``test_name`` or ``TestClass::test_name``.
    """
    tree = safe_ast.parse(source)
    kept: list[ast.stmt] = []
    optional: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            if node.name in keep:
                kept.append(node)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            methods = [
                m for m in node.body
                if not (isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and m.name.startswith("test"))
                or f"{node.name}::{m.name}" in keep
            ]
            if any(isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and m.name.startswith("test")
                   for m in methods):
                node.body = methods
                kept.append(node)
        elif _defines(node) and not _always_kept(node):
            optional.append(node)
        else:
            kept.append(node)
    needed = set().union(*(_uses(n) for n in kept))
    chosen = {id(n) for n in kept}
    grew = True
    while grew:  # what the kept code uses, and what that uses in turn
        grew = False
        for node in optional:
            if id(node) not in chosen and _defines(node) & needed:
                chosen.add(id(node))
                needed |= _uses(node)
                grew = True
    tree.body = [n for n in tree.body if id(n) in chosen]
    header = '"""Visible tests for this task. The grader runs a larger hidden suite."""\n\n'
    return header + ast.unparse(tree) + "\n"


def _defines(node: ast.stmt) -> set[str]:
    """Module-level names a helper, fixture or constant binds (imports are always kept)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def _always_kept(node: ast.stmt) -> bool:
    """``pytestmark`` and autouse fixtures apply without being named."""
    if "pytestmark" in _defines(node):
        return True
    decorators = getattr(node, "decorator_list", [])
    return any(isinstance(k, ast.keyword) and k.arg == "autouse" for d in decorators if isinstance(d, ast.Call)
               for k in d.keywords)


def _uses(node: ast.AST) -> set[str]:
    """Names ``node`` reads, including the fixtures its functions ask for by parameter name."""
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    for fn in ast.walk(node):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            names |= {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    return names
