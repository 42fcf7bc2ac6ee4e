"""DESIGN.md's floors, checked on the source tree, and the module size limit.

    base       envhub/{types,errors,budget,progress,safe_ast,_version}.py  -> nothing of envhub
    sandboxes                                                              -> base
    kernel     the rest of envhub/ but its applications                    -> base, sandboxes
    verifiers  -> kernel, sandboxes          tasks   -> verifiers, sandboxes, kernel
    adapters   -> kernel                     trainer -> adapters, kernel
    apps       envhub/cli/, envhub/server/, envhub/reports/, every cli.py  -> anything below

Every import counts: lazy ones inside functions, and strings that name an envhub module (what
``importlib.import_module`` or a ``"module:attr"`` table would load). Nothing imports an
application, except the one lazy facade ``envhub.connect``. One kind of import is not a dependency
and is allowed: a type-only import under ``if TYPE_CHECKING:``. It never runs -- no import-time
cost, no cycle, nothing missing at run time when a part is not installed -- and it lets a floor's
public API name the types it passes through in string annotations.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("sandboxes", "verifiers", "adapters", "trainer", "tasks")
BASE = {"types", "errors", "budget", "progress", "safe_ast", "_version"}
APP_PACKAGES = {"cli", "server", "reports"}
BELOW = {
    "base": {"base"},
    "sandboxes": {"base", "sandboxes"},
    "kernel": {"base", "sandboxes", "kernel"},
    "verifiers": {"base", "sandboxes", "kernel", "verifiers"},
    "tasks": {"base", "sandboxes", "kernel", "verifiers", "tasks"},
    "adapters": {"base", "kernel", "adapters"},
    "trainer": {"base", "kernel", "adapters", "trainer"},
    "apps": {"base", "sandboxes", "kernel", "verifiers", "tasks", "adapters", "trainer", "apps"},
}
#: (importing file, imported module) pairs allowed across the floors: ``envhub.connect``.
FACADES = {("envhub/__init__.py", "envhub.server.client")}
MAX_LINES = 500
#: Modules allowed over MAX_LINES: none (the executor's request loop fits since procs.py took its
#: command running).
SIZE_EXCEPTIONS: set[str] = set()
MODULE_STRING = re.compile(r"envhub(\.\w+)+(:\w+)?")


def floor_of(module: str) -> str | None:
    """The floor of an envhub module (``envhub.rollout.collect`` -> kernel); None outside envhub."""
    pieces = module.split(".")
    if pieces[0] != "envhub":
        return None
    if len(pieces) == 1:
        return "kernel"  # the package face registers every env
    if pieces[-1] in ("cli", "__main__") or pieces[1] in APP_PACKAGES:
        return "apps"
    if pieces[1] in PARTS:
        return pieces[1]
    return "base" if pieces[1] in BASE else "kernel"


def module_of(rel: str) -> str:
    """``trainer/loop.py`` -> ``envhub.trainer.loop``; ``envhub/rollout/__init__.py`` -> ``envhub.rollout``."""
    parts = list(Path(rel).with_suffix("").parts)
    if parts[0] != "envhub":
        parts.insert(0, "envhub")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _source_files():
    """Every module of the package, relative to the root; the code-repair projects (task data)
    and the scaffold templates are not modules of it."""
    for folder in ("envhub", *PARTS):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if "/projects/" not in rel and "/templates/" not in rel:
                yield rel


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks (not their ``else``)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            inside |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return inside


def _docstrings(tree: ast.Module) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def _imports(tree: ast.Module, package: str):
    """(node, module) for every import statement and every string that is an envhub module name."""
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                yield node, f"{base}.{node.module}" if node.module else base
            elif node.module:
                yield node, node.module
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
              and MODULE_STRING.fullmatch(node.value) and _is_module(node.value.partition(":")[0])):
            yield node, node.value.partition(":")[0]


def _is_module(name: str) -> bool:
    """Whether ``name`` is one of the package's modules (not a label such as ``envhub.owned``)."""
    parts = name.split(".")[1:]
    folder = ROOT.joinpath(*parts) if parts and parts[0] in PARTS else ROOT.joinpath("envhub", *parts)
    return folder.with_suffix(".py").is_file() or (folder / "__init__.py").is_file()


def violations_of(rel: str, source: str) -> list[str]:
    tree = ast.parse(source)
    type_only = _type_checking_only(tree)
    own = module_of(rel)
    package = own if rel.endswith("__init__.py") else own.rpartition(".")[0]
    floor = floor_of(own)
    found = []
    for node, module in _imports(tree, package):
        target = floor_of(module)
        if target is None or target in BELOW[floor] or id(node) in type_only or (rel, module) in FACADES:
            continue
        found.append(f"{rel}:{node.lineno}: {floor} imports {module} ({target})")
    return found


def test_every_import_goes_down_the_floors():
    found = [v for rel in _source_files() for v in violations_of(rel, (ROOT / rel).read_text(encoding="utf-8"))]
    assert found == []


def test_the_floors_of_modules():
    assert [floor_of(m) for m in ("envhub.types", "envhub._version", "envhub.env", "envhub.rollout.collect",
                                  "envhub", "envhub.sandboxes.door", "envhub.verifiers.cli", "envhub.server.client",
                                  "envhub.reports.html", "envhub.trainer.__main__", "envhub.tasks.computation.env",
                                  "numpy")] == [
        "base", "base", "kernel", "kernel", "kernel", "sandboxes", "apps", "apps", "apps", "apps", "tasks", None]
    assert module_of("trainer/loop.py") == "envhub.trainer.loop"
    assert module_of("envhub/rollout/__init__.py") == "envhub.rollout"


def test_a_lazy_import_and_a_module_string_count_and_a_type_only_import_does_not():
    """The rule itself, on made-up modules: each kind of reach upward is found once, with its line."""
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import envhub.trainer\n"
              "else:\n    import envhub.verifiers\ndef f():\n    from envhub.adapters import x\n"
              "TABLE = {'a': 'envhub.cli.commands:main'}\n"
              "def g():\n    '''see envhub.trainer.loop'''\n    return importlib.import_module('envhub.tasks')\n"
              "from . import wire\nLABEL = 'envhub.owned'\n")
    found = violations_of("sandboxes/made_up.py", source)
    assert [v.split(": ", 1)[1] for v in found] == [
        "sandboxes imports envhub.verifiers (verifiers)", "sandboxes imports envhub.adapters (adapters)",
        "sandboxes imports envhub.cli.commands (apps)", "sandboxes imports envhub.tasks (tasks)"]
    assert violations_of("envhub/made_up.py", "from .server import wire\n") == [
        "envhub/made_up.py:1: kernel imports envhub.server (apps)"]
    assert violations_of("envhub/types.py", "import envhub.env\n") == [
        "envhub/types.py:1: base imports envhub.env (kernel)"]
    assert violations_of("envhub/cli/made_up.py", "import envhub.trainer.loop\nimport envhub.server\n") == []


def test_no_module_is_over_500_lines():
    long = {rel: n for rel in _source_files()
            if (n := len((ROOT / rel).read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert set(long) - SIZE_EXCEPTIONS == set(), f"split these (over {MAX_LINES} lines): {long}"
    assert set(long) >= SIZE_EXCEPTIONS, f"no longer over {MAX_LINES} lines, drop its exception: {SIZE_EXCEPTIONS}"


# Copied next to a project's tests and loaded by pytest as a plugin, one process per instance.
STANDALONE = {"tasks/code_repair/offline/failure_probe.py"}


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
