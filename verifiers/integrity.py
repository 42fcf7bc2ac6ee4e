"""Integrity checks for code submissions: did the agent fix the code, or attack the grader?

This is the cheap, early layer of defence in depth: the grader itself must hold against whatever
passes here (expected values never enter a process that runs submitted code). Two kinds of
evidence, both compared against what the agent was *given*, so that pre-existing code never
counts against it:

* **files**: anything outside the source tree changed or deleted (tests, configuration), a file
  that Python or pytest executes implicitly (``conftest.py``, ``sitecustomize.py``, ``*.pth``,
  ``pytest.ini`` ...) or a compiled extension module added anywhere, or a new module in the
  source tree that would shadow one the test run imports (``json.py``, ``pytest.py``);
* **code**: every changed Python file is decoded and parsed exactly as Python's import does it
  (PEP 263 encoding cookies and BOMs honoured, ``tokenize.detect_encoding``); a file that cannot
  be decoded or parsed, or that switches to another source encoding, is a finding -- never
  skipped. Its syntax tree is then searched for the capabilities in ``CAPABILITIES``: things a
  bug fix never needs and an attack does (leaving the process, starting processes, running code
  later, frames and interpreter internals, dynamic code, files and descriptors, the test
  runner and the grader's own modules), attributes reached by a computed name, and assignments
  into modules the file imported (monkeypatching what other code reads later).

A construct counts only when the submission has more of it than the given file had. Standard
library only: Harbor task exports copy this file (with ``safe_ast.py``) next to their grader.

**What the code check does not promise.** It reads names, not values: a capability reached under a
name the table does not list passes. Known gaps: a standard-library module that re-exports ``os``
(``pathlib.os.walk``, ``logging.os.remove``: a name bound from an attribute is no alias), or that
opens files and processes under other names (``logging.FileHandler``, ``linecache.getlines``,
``pathlib.Path.unlink``, ``zipfile``, ``tarfile``, ``configparser.read``), and any chain of
attributes through objects. It is a cheap early filter that turns obvious attacks away with a
reason; the hidden-test probes alone carry the guarantee (docs/code-repair.md). Each code finding
says so (``CAVEAT``); the file checks above compare whole trees and have no such gap.
"""

from __future__ import annotations

import ast
import importlib.machinery
import io
import sys
import tokenize
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

try:
    from envhub import safe_ast
except ImportError:  # copied with safe_ast.py into a Harbor task's tests/, where envhub is absent
    import safe_ast  # type: ignore[no-redef]

IMPLICIT_FILES = {
    "conftest.py", "sitecustomize.py", "usercustomize.py", "pytest.ini", "tox.ini", "setup.cfg",
    "pyproject.toml", "setup.py", ".pytest.ini", "__main__.py",
}
IMPLICIT_SUFFIXES = (".pth",)
#: Importable code that is not Python source: nothing here could read it.
COMPILED_SUFFIXES = tuple(sorted({*importlib.machinery.EXTENSION_SUFFIXES, ".so", ".pyd"}))
#: Folders Python and pytest write their caches into as they run.
CACHE_DIRS = frozenset({"__pycache__", ".pytest_cache"})
SOURCE_ENCODINGS = ("utf-8", "utf-8-sig")
GRADER_MODULES = ("envhub", "pytest", "_pytest", "pluggy", "iniconfig", "py", "unittest", "doctest")
#: Part of every code finding's text: what the code check is, and what it is not.
CAVEAT = "static gate: a cheap early filter with known gaps; only the hidden-test probes decide"


@dataclass(frozen=True)
class Capability:
    """Something a bug fix never needs, and the modules, attributes and names that give it."""

    what: str
    modules: frozenset[str] = frozenset()
    attributes: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()


def _cap(what: str, modules: str = "", attributes: str = "", names: str = "") -> Capability:
    return Capability(what, frozenset(modules.split()), frozenset(attributes.split()), frozenset(names.split()))


COMPUTED = "reaches attributes by computed names"
FILES = "touches files, descriptors, the environment or the network"
INTERPRETER = "inspects or rewrites the interpreter, frames and code"
CAPABILITIES = (
    _cap("leaves the process or signals others",
         attributes="exit _exit abort kill killpg pidfd_send_signal",
         names="exit quit SystemExit KeyboardInterrupt BaseException GeneratorExit"),
    _cap("starts processes",
         modules="subprocess _posixsubprocess multiprocessing concurrent pty posix nt _winapi asyncio",
         attributes="system popen fork forkpty posix_spawn posix_spawnp spawnl spawnle spawnlp spawnlpe spawnv "
                    "spawnve spawnvp spawnvpe execl execle execlp execlpe execv execve execvp execvpe fexecve "
                    "setsid setpgid setpgrp startfile register_at_fork"),
    _cap("runs code later, elsewhere or on events",
         modules="threading _thread signal _signal atexit sched faulthandler",
         attributes="settrace setprofile monitoring setitimer alarm finalize excepthook unraisablehook "
                    "displayhook breakpointhook addaudithook setswitchinterval"),
    _cap(INTERPRETER,
         modules="builtins __builtin__ inspect gc ctypes _ctypes cffi traceback tracemalloc trace pdb bdb code "
                 "codeop dis marshal pickle _pickle copyreg shelve dill _testcapi _xxsubinterpreters _interpreters",
         attributes="modules meta_path path_hooks path_importer_cache _getframe _current_frames _current_exceptions "
                    "f_back f_globals f_locals f_builtins f_code f_trace f_trace_opcodes tb_frame tb_next gi_frame "
                    "gi_code cr_frame cr_code ag_frame ag_code __code__ co_code co_consts __globals__ __closure__ "
                    "__builtins__ __self__ __traceback__ __subclasses__ __bases__ __base__ __mro__ mro __dict__ "
                    "__loader__ __spec__ __defaults__ __kwdefaults__ __reduce__ __reduce_ex__ CodeType FunctionType "
                    "FrameType get_data set_data exec_module load_module",
         names="__builtins__ __loader__ __spec__ globals vars breakpoint"),
    _cap("imports or runs code dynamically",
         modules="importlib imp runpy zipimport pkgutil site sysconfig",
         attributes="exec eval __import__ import_module reload run_path run_module",
         names="exec eval compile __import__"),
    _cap(COMPUTED, modules="operator", attributes="attrgetter methodcaller get_field Formatter"),
    _cap(FILES,
         modules="shutil tempfile glob fileinput mmap fcntl termios dbm sqlite3 socket _socket ssl http ftplib "
                 "smtplib urllib.request _io",
         attributes="open FileIO open_code fdopen write_text write_bytes read_text read_bytes removedirs renames "
                    "mkfifo mknod listdir scandir iterdir glob rglob chdir fchdir chroot dup2 pipe2 sendfile "
                    "pwrite pwritev writev putenv unsetenv environ",
         names="open"),
    _cap("touches the test runner or the grader", modules=" ".join(GRADER_MODULES)),
)
#: Common method names that are an attack on these modules (``os.remove``, not ``list.remove``).
_OS_FILES = "write read replace close remove rename unlink rmdir mkdir makedirs chmod chown link symlink walk dup pipe"
QUALIFIED = {"os": (frozenset(_OS_FILES.split()), FILES), "sys": (frozenset({"path"}), INTERPRETER)}
#: Calls that reach an attribute by name: allowed only with a literal name that is not forbidden.
ATTRIBUTE_CALLS = {"getattr", "setattr", "delattr"}
#: The same as methods, bound (``obj.__getattribute__(name)``) or not (``object.__setattr__(obj, name, v)``).
ATTRIBUTE_METHODS = {"__getattribute__", "__getattr__", "__setattr__", "__delattr__"}
#: Methods that run code when an object dies (at exit too): a fix never adds one.
FORBIDDEN_DEFS = {"__del__"}

_REASONS = {}
for _c in CAPABILITIES:
    for _kind, _values in (("module", _c.modules), ("attribute", _c.attributes), ("name", _c.names)):
        for _value in _values:
            _REASONS.setdefault((_kind, _value), _c.what)
FORBIDDEN_MODULES = frozenset(m for c in CAPABILITIES for m in c.modules)
FORBIDDEN_ATTRS = frozenset(a for c in CAPABILITIES for a in c.attributes)
FORBIDDEN_NAMES = frozenset(n for c in CAPABILITIES for n in c.names)
#: Modules the test run imports; a submitted module of the same name would replace them.
SHADOWED_MODULES = frozenset(sys.stdlib_module_names) | {"pytest", "_pytest", "pluggy", "iniconfig", "envhub_report",
                                                         "envhub_probe", "envhub_probe_runner", "envhub_probe_excinfo",
                                                         "envhub_probe_batch", "envhub_probe_seal", "envhub_probe_reaper",
                                                         "envhub_probe_sigfilter"}


@dataclass(frozen=True)
class Finding:
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class SourceError(Exception):
    """A file that cannot be read the way Python would import it."""


def is_cache_file(path: str) -> bool:
    """Whether ``path`` (relative, ``/``-separated) is a cache that Python or pytest wrote: bytecode,
    or anything in a cache folder. Such files are not the agent's work: never graded, shown or hashed."""
    return path.endswith(".pyc") or not CACHE_DIRS.isdisjoint(path.split("/"))


def _as_bytes(content: str | bytes) -> bytes:
    """A file's bytes: text is what the grader writes (UTF-8), bytes are taken as they are."""
    return content.encode("utf-8", "surrogateescape") if isinstance(content, str) else bytes(content)


def decode_source(data: str | bytes) -> tuple[str, str]:
    """``(text, encoding)`` of a Python source file, decoded as ``importlib`` decodes it: BOM and
    PEP 263 cookie honoured. Raises :class:`SourceError` where Python could not decode it either."""
    raw = _as_bytes(data)
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        return raw.decode(encoding), encoding
    except (SyntaxError, LookupError, UnicodeDecodeError, ValueError) as exc:
        raise SourceError(f"cannot be decoded as Python source ({exc})") from None


def file_findings(given: Mapping[str, str | bytes], final: Mapping[str, str | bytes],
                  editable_roots: Iterable[str]) -> list[Finding]:
    """Tampering visible in the file tree (paths relative to the repository root)."""
    roots = tuple(r.rstrip("/") + "/" for r in editable_roots)
    findings = []
    for path in sorted(set(given) | set(final)):
        if is_cache_file(path):
            continue
        name = PurePosixPath(path).name
        if path not in given and (name in IMPLICIT_FILES or name.endswith(IMPLICIT_SUFFIXES)):
            findings.append(Finding(path, f"added {name}, which Python or pytest runs implicitly"))
        elif path not in given and name.endswith(COMPILED_SUFFIXES):
            findings.append(Finding(path, "added a compiled extension module, code that no check can read"))
        elif path not in given and path.startswith(roots) and (module := _module_name(path, roots)) in SHADOWED_MODULES:
            findings.append(Finding(path, f"added module {module!r}, which shadows one the test run imports"))
        elif not path.startswith(roots):
            if path not in final:
                findings.append(Finding(path, "deleted a file outside the source tree (tests or config)"))
            elif path not in given or _as_bytes(given[path]) != _as_bytes(final[path]):
                verb = "added" if path not in given else "modified"
                findings.append(Finding(path, f"{verb} a file outside the source tree (tests or config)"))
    return findings


def _module_name(path: str, roots: tuple[str, ...]) -> str:
    """The top-level import name a file under one of ``roots`` provides (``src/json/x.py`` -> json)."""
    rel = next(path[len(r):] for r in roots if path.startswith(r))
    return rel.split("/", 1)[0].removesuffix(".py")


def code_findings(given: Mapping[str, str | bytes], final: Mapping[str, str | bytes]) -> list[Finding]:
    """Grader-attacking constructs that the submission added to Python files.

    Values are file contents: ``bytes`` as on disk, or ``str`` for the text that will be written
    as UTF-8. Each changed ``.py`` file is read as Python would import it; one that cannot be is a
    finding, and so is a switch to a source encoding other than UTF-8.
    """
    findings = []
    for path in sorted(final):
        if not path.endswith(".py") or is_cache_file(path):
            continue
        after_bytes = _as_bytes(final[path])
        if path in given and _as_bytes(given[path]) == after_bytes:
            continue
        try:
            after, encoding = _scan(after_bytes)
        except SourceError as exc:
            findings.append(Finding(path, f"{exc}: a module Python may import must be one this check can read"))
            continue
        try:
            before, given_encoding = _scan(_as_bytes(given[path])) if path in given else (Counter(), "utf-8")
        except SourceError:
            before, given_encoding = Counter(), "utf-8"
        if encoding != given_encoding and encoding not in SOURCE_ENCODINGS:
            findings.append(Finding(path, f"declares the source encoding {encoding!r} (PEP 263); "
                                          "a fix keeps the file UTF-8"))
        for construct, count in sorted((after - before).items()):
            findings.append(Finding(path, f"added {construct}" + (f" ({count}x)" if count > 1 else "")))
    return [Finding(f.path, f"{f.reason} [{CAVEAT}]") for f in findings]


def _scan(data: bytes) -> tuple[Counter[str], str]:
    text, encoding = decode_source(data)
    try:
        tree = safe_ast.parse(text)
    except (SyntaxError, ValueError) as exc:
        where = f" at line {exc.lineno}" if isinstance(exc, SyntaxError) and exc.lineno else ""
        raise SourceError(f"does not parse as Python{where} ({getattr(exc, 'msg', exc)})") from None
    return _Scanner().run(tree), encoding


class _Scanner:
    """Counts the constructs of ``CAPABILITIES`` in one module's syntax tree."""

    def __init__(self) -> None:
        self.found: Counter[str] = Counter()
        self.aliases: dict[str, str] = {}  # local name -> module it is bound to (``import os as o``)

    def run(self, tree: ast.AST) -> Counter[str]:
        nodes = list(ast.walk(tree))
        for node in nodes:  # aliases first (imports, then assignments of them): uses may come earlier
            if isinstance(node, ast.Import):
                self._alias(node)
        for node in nodes:
            if isinstance(node, ast.Assign):
                self._alias(node)
        called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
        for node in nodes:
            self._visit(node, called)
        return self.found

    def _add(self, construct: str, kind: str, value: str) -> None:
        self.found[f"{construct} ({_REASONS.get((kind, value), COMPUTED)})"] += 1

    def _alias(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.aliases[alias.asname] = alias.name
                else:
                    self.aliases.setdefault(alias.name.split(".")[0], alias.name.split(".")[0])
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in self.aliases:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.aliases[target.id] = self.aliases[node.value.id]

    def _module(self, name: str) -> None:
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in FORBIDDEN_MODULES or (i == 1 and prefix.startswith(("envhub", "_envhub"))):
                self._add(f"import {name}", "module", prefix if prefix in FORBIDDEN_MODULES else "envhub")
                return

    def _attribute(self, name: str, owner: str | None = None) -> None:
        if name in FORBIDDEN_ATTRS:
            self._add(f"use of .{name}", "attribute", name)
        elif owner in QUALIFIED and name in QUALIFIED[owner][0]:
            self.found[f"use of {owner}.{name} ({QUALIFIED[owner][1]})"] += 1

    def _name_arg(self, func: str, arg: ast.expr | None, owner: str | None = None) -> None:
        """The name argument of ``getattr``-like calls: a literal one is checked like an attribute."""
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            for part in arg.value.split("."):
                self._attribute(part, owner)
        else:
            self.found[f"{func}() with a computed attribute name ({COMPUTED})"] += 1

    def _visit(self, node: ast.AST, called: set[int]) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                self._module(alias.name)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0:
                self._module(module)
            for alias in node.names:
                if alias.name == "*" and module in {*QUALIFIED, "signal", "builtins"}:
                    self.found[f"from {module} import * (brings in names the check cannot follow)"] += 1
                elif alias.name in FORBIDDEN_ATTRS or alias.name in FORBIDDEN_NAMES:
                    kind = "attribute" if alias.name in FORBIDDEN_ATTRS else "name"
                    self._add(f"import of {alias.name}", kind, alias.name)
                elif node.level == 0:
                    self._attribute(alias.name, module)
        elif isinstance(node, ast.Attribute):
            owner = self.aliases.get(node.value.id) if isinstance(node.value, ast.Name) else None
            self._attribute(node.attr, owner)
            if not isinstance(node.ctx, ast.Load) and (root := _root_name(node)) in self.aliases:
                self.found[f"assignment to {self.aliases[root]}.{_dotted(node)} "
                           "(rewrites a module it imported: what other code reads later)"] += 1
            if node.attr in ATTRIBUTE_CALLS | ATTRIBUTE_METHODS and id(node) not in called:
                self.found[f".{node.attr} used as a value ({COMPUTED})"] += 1
        elif isinstance(node, ast.Name):
            if node.id in FORBIDDEN_NAMES:
                self._add(f"use of {node.id}", "name", node.id)
            elif node.id in ATTRIBUTE_CALLS and id(node) not in called:
                self.found[f"{node.id} used as a value ({COMPUTED})"] += 1
        elif isinstance(node, ast.Call):
            self._call(node)
        elif isinstance(node, ast.MatchClass):
            for attr in node.kwd_attrs:
                self._attribute(attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in FORBIDDEN_DEFS:
            self.found[f"a {node.name} method (runs code when an object is collected, at exit too)"] += 1
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _unmistakable(node.value):
            self.found[f"the string {node.value!r} (names an attack's target)"] += 1

    def _call(self, node: ast.Call) -> None:
        func = node.func
        args = node.args
        if isinstance(func, ast.Name) and func.id in ATTRIBUTE_CALLS:
            owner = self.aliases.get(args[0].id) if args and isinstance(args[0], ast.Name) else None
            self._name_arg(func.id, args[1] if len(args) > 1 else None, owner)
        elif isinstance(func, ast.Attribute) and func.attr in ATTRIBUTE_METHODS:
            literal = next((a for a in args[:2] if isinstance(a, ast.Constant) and isinstance(a.value, str)), None)
            self._name_arg(func.attr, literal if literal is not None else (args[0] if args else None))


def _root_name(node: ast.Attribute) -> str | None:
    value: ast.expr = node
    while isinstance(value, ast.Attribute):
        value = value.value
    return value.id if isinstance(value, ast.Name) else None


def _dotted(node: ast.Attribute) -> str:
    parts = []
    value: ast.expr = node
    while isinstance(value, ast.Attribute):
        parts.append(value.attr)
        value = value.value
    return ".".join(reversed(parts))


def _unmistakable(text: str) -> bool:
    """A string that is exactly a forbidden attribute with an underscore in it (``"_getframe"``,
    ``"__builtins__"``) or a grader module (``"envhub_probe"``): no message or key a fix needs."""
    return (text in FORBIDDEN_ATTRS and "_" in text) or text.startswith(("envhub_", "_pytest"))
