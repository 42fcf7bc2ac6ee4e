"""The floors of docs/architecture.md, checked on the source tree, and the module size limit.

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

At run time ``import envhub`` (and so the import of any base module, which imports the package
first) runs the package face and the ``envhub.envs`` entry points of the built-in families: what
that loads, transitively, holds no task family's env, no verifier and no sandbox.
"""

import ast
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
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
#: Modules allowed over MAX_LINES, each with its reason. Splitting one of these would break how it
#: is used, so it may grow past the limit (it need not be over it now).
SIZE_EXCEPTIONS: dict[str, str] = {
    "verifiers/probes/runner.py": "stdlib programs shipped whole into the grading sandbox; the executor loads each "
                                  "as one file",
    "verifiers/probes/runtime.py": "stdlib programs shipped whole into the grading sandbox; the executor loads each "
                                   "as one file",
}
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
        elif isinstance(node, ast.ImportFrom) and (node.level or node.module):
            yield node, _from_module(node, package)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
              and MODULE_STRING.fullmatch(node.value) and _is_module(node.value.partition(":")[0])):
            yield node, node.value.partition(":")[0]


def _from_module(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return str(node.module)
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package  # relative
    return f"{base}.{node.module}" if node.module else base


def _path_of(name: str) -> Path | None:
    """The source file of one of the package's modules; None for a label such as ``envhub.owned``."""
    parts = name.split(".")[1:]
    folder = ROOT.joinpath(*parts) if parts and parts[0] in PARTS else ROOT.joinpath("envhub", *parts)
    return next((p for p in (folder.with_suffix(".py"), folder / "__init__.py") if p.is_file()), None)


def _is_module(name: str) -> bool:
    return _path_of(name) is not None


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


def over_the_limit(lines: dict[str, int]) -> dict[str, int]:
    """The modules of ``lines`` (path -> line count) over MAX_LINES that no exception names."""
    return {rel: n for rel, n in lines.items() if n > MAX_LINES and rel not in SIZE_EXCEPTIONS}


def test_no_module_is_over_500_lines():
    """Every module of envhub/ and of the parts (sandboxes/, verifiers/, adapters/, trainer/, tasks/)
    fits in MAX_LINES, but the named exceptions; the code-repair projects are task data, not modules."""
    lines = {rel: len((ROOT / rel).read_text(encoding="utf-8").splitlines()) for rel in _source_files()}
    assert {rel.split("/")[0] for rel in lines} == {"envhub", *PARTS}
    assert over_the_limit(lines) == {}, f"split these (over {MAX_LINES} lines)"
    assert set(SIZE_EXCEPTIONS) <= set(lines), f"drop the exceptions of modules gone: {set(SIZE_EXCEPTIONS) - set(lines)}"
    assert all(reason.strip() for reason in SIZE_EXCEPTIONS.values()), "every exception says why"


def test_the_size_rule_on_made_up_modules():
    assert over_the_limit({"trainer/long.py": MAX_LINES + 1, "trainer/short.py": MAX_LINES,
                           "verifiers/probes/runner.py": 2 * MAX_LINES}) == {"trainer/long.py": MAX_LINES + 1}


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


def _run_at_import(nodes: list[ast.stmt]) -> Iterator[ast.AST]:
    """``nodes`` and all inside them but function bodies, which run only when called."""
    todo: list[ast.AST] = list(nodes)
    while todo:
        node = todo.pop()
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield node
            todo.extend(ast.iter_child_nodes(node))


def eager_imports(rel: str, source: str, call: str = "") -> set[str]:
    """The envhub modules that importing ``rel`` loads at once, and calling its function ``call``
    (an entry point) after that: imports that run (not in other functions, not type-only), with
    their parent packages and the submodules that a ``from PACKAGE import NAME`` names."""
    tree = ast.parse(source)
    own = module_of(rel)
    package = own if rel.endswith("__init__.py") else own.rpartition(".")[0]
    type_only = _type_checking_only(tree)
    called = [stmt for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == call for stmt in f.body]
    found: set[str] = set()
    for node in _run_at_import([*tree.body, *called]):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.level or node.module):
            base = _from_module(node, package)
            found |= {base, *(f"{base}.{a.name}" for a in node.names if _is_module(f"{base}.{a.name}"))}
    return {m for m in _with_parents(found) if floor_of(m) is not None and _is_module(m)}


def _with_parents(modules: set[str]) -> set[str]:
    """``modules`` and the packages above them, which importing them imports first."""
    return {m.rsplit(".", n)[0] for m in modules for n in range(m.count(".") + 1)}


def modules_loaded_by_import_envhub() -> set[str]:
    """What ``import envhub`` loads, read from the source: the package face, the built-in
    families' ``envhub.envs`` entry points (pyproject.toml) that it runs, and all they import."""
    entry_points = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    calls = dict(v.split(":") for v in entry_points["entry-points"]["envhub.envs"].values())
    loaded: set[str] = set()
    todo = ["envhub", *_with_parents(set(calls))]
    while todo:
        module = todo.pop()
        path = _path_of(module)
        if module in loaded or path is None:
            continue
        loaded.add(module)
        rel = path.relative_to(ROOT).as_posix()
        todo += eager_imports(rel, path.read_text(encoding="utf-8"), calls.get(module, ""))
    return loaded


def _not_at_import(module: str) -> bool:
    """A module ``import envhub`` must not load: a task family's own modules (its package, which
    registers it, is fine), a verifier, a sandbox, or anything above the kernel."""
    floor = floor_of(module)
    return floor not in ("base", "kernel", "tasks") or (floor == "tasks" and module.count(".") > 2)


def test_import_envhub_loads_no_env_verifier_or_sandbox_by_the_source():
    loaded = modules_loaded_by_import_envhub()
    assert {"envhub.types", "envhub.registry", "envhub.tasks.computation"} <= loaded
    assert sorted(m for m in loaded if _not_at_import(m)) == []


def test_import_envhub_loads_no_env_verifier_or_sandbox_when_run():
    """The same rule, on a fresh interpreter: ``import envhub``, and ``import envhub.types`` (a base
    module), both with every built-in family registered."""
    families = {f"envhub/{name}-v0" for name in ("CodeRepair", "Computation", "ReasoningGym", "Retrieval")}
    for statement in ("import envhub", "import envhub.types"):
        code = (f"{statement}\nimport sys\nloaded = sorted(m for m in sys.modules if m.startswith('envhub.'))\n"
                "from envhub.registry import list_envs\nprint(*loaded)\nprint(*(s.env_id for s in list_envs()))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
        loaded, registered = (line.split() for line in out.stdout.splitlines())
        assert [m for m in loaded if _not_at_import(m)] == [], statement
        assert families <= set(registered), statement


def test_what_runs_at_import_is_told_from_what_waits_for_a_call():
    """The run-time rule on a made-up entry-point module: what it and its entry point import count,
    an env registered by its import path, another function's import and a type-only one do not."""
    source = ("from typing import TYPE_CHECKING\nfrom envhub.registry import register\n"
              "if TYPE_CHECKING:\n    from envhub.verifiers import ExactMatch\n"
              "class Table:\n    from envhub.sandboxes import base\n"
              "def register_envs():\n    from .env import ComputationEnv\n"
              "    register('envhub/X-v0', 'envhub.tasks.retrieval.env:RetrievalEnv')\n"
              "def later():\n    import envhub.trainer.loop\n")
    loaded = eager_imports("tasks/computation/__init__.py", source, "register_envs")
    assert loaded == {"envhub", "envhub.registry", "envhub.sandboxes", "envhub.sandboxes.base", "envhub.tasks",
                      "envhub.tasks.computation", "envhub.tasks.computation.env"}
    assert eager_imports("tasks/computation/__init__.py", source) == {
        "envhub", "envhub.registry", "envhub.sandboxes", "envhub.sandboxes.base"}
    assert sorted(m for m in loaded if _not_at_import(m)) == [
        "envhub.sandboxes", "envhub.sandboxes.base", "envhub.tasks.computation.env"]
