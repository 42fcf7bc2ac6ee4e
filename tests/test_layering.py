"""DESIGN.md's dependency arrows, checked on every import in the source tree, lazy ones included.

tasks -> verifiers, sandboxes, core; verifiers -> sandboxes, core; sandboxes -> core;
adapters -> core; trainer -> adapters, core. Core imports none of the others: it reaches them
through registries (entry points, string tables of module names) that they fill.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("sandboxes", "verifiers", "adapters", "trainer", "tasks")
ALLOWED = {
    "core": set(),
    "sandboxes": set(),
    "verifiers": {"sandboxes"},
    "adapters": set(),
    "trainer": {"adapters"},
    "tasks": {"verifiers", "sandboxes"},
}
# Core still imports these lazily (inside functions, or for type checking only) until its sandbox
# door and episode collector move (issue 15, items 4 and 5); at module level it may not.
CORE_LAZY_PENDING = {"sandboxes", "verifiers"}


def _part_of_module(name: str) -> str | None:
    pieces = name.split(".")
    if pieces[0] != "envhub":
        return None
    return pieces[1] if len(pieces) > 1 and pieces[1] in PARTS else "core"


def _imports(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node, node.module


def test_dependency_arrows_hold():
    violations = []
    for folder in ("envhub", *PARTS):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if "/projects/" in rel or "/templates/" in rel:
                continue
            part = "core" if folder == "envhub" else folder
            tree = ast.parse(path.read_text())
            top_level = {id(n) for n in tree.body}
            for node, module in _imports(tree):
                target = _part_of_module(module)
                if target is None or target in (part, "core") or target in ALLOWED[part]:
                    continue
                if part == "core" and target in CORE_LAZY_PENDING and id(node) not in top_level:
                    continue
                violations.append(f"{rel}:{node.lineno}: {part} imports {module}")
    assert violations == []


# Copied next to a project's tests and loaded by pytest as a plugin, one process per instance.
STANDALONE = {"tasks/code_repair/issue_text.py"}


def test_source_is_parsed_only_through_safe_ast():
    """Concurrent ``ast.parse`` corrupts CPython 3.11's AST state ("AST constructor recursion
    depth mismatch", seen once in 47,000 graded answers); verifiers run on worker threads, so
    every parse goes through :mod:`envhub.safe_ast`'s lock."""
    direct = []
    for path in sorted(ROOT.glob("*/**/*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.split("/")[0] not in {"envhub", *PARTS} or "/projects/" in rel or rel in STANDALONE \
                or rel == "envhub/safe_ast.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ast"
                    and node.attr in {"parse", "literal_eval"}):
                direct.append(f"{rel}:{node.lineno} ast.{node.attr}")
    assert not direct, f"parse through envhub.safe_ast instead: {direct}"
