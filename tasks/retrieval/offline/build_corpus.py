"""Extract the frozen retrieval corpus from this interpreter's standard library, once.

Why a build tool and a checked-in snapshot instead of reading docstrings at run time: docstrings
change between Python releases (and distributions patch them), so questions generated from a live
interpreter would silently change their answers. The retrieval family therefore ships the
snapshot this module writes -- ``tasks/retrieval/data/corpus.jsonl.gz`` plus
``questions.jsonl.gz`` and a ``manifest.json`` with their sha256 -- and verifies the checksums at
load. Rerunning it is a deliberate, versioned change (bump ``CORPUS_VERSION``).

What becomes a document:

* every public module (``py:json``), with its docstring and the names it defines;
* every public function and class it *defines* (``py:json.dumps``), with its signature;
* every public method a class defines itself (``py:collections.OrderedDict.move_to_end``);
* every pydoc language-reference topic (``topic:assignment``) from ``pydoc_data.topics``.

An object belongs to the module named by its ``__module__``; objects of private implementation
modules (``_io``, ``_functools``, ``posix``) belong to the public module that exports them, so ids
are what a user would type. The output is byte-for-byte deterministic for a given interpreter:
sorted, memory addresses scrubbed, gzip written with a zero mtime.

Usage::

    python -m envhub.tasks.retrieval.offline.build_corpus                    # rebuild corpus and questions
    python -m envhub.tasks.retrieval.offline.build_corpus --questions-only   # regenerate questions only
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import io
import json
import os
import pkgutil
import re
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

from envhub.tasks.retrieval import corpus as corpus_mod
from envhub.tasks.retrieval.generator import generate_questions

#: Bump when the extraction rules or the interpreter change; part of every task's provenance.
CORPUS_VERSION = "pystdlib-3.11-v1"

#: Modules that are not documentation (easter eggs, GUI, platform-specific, vendored tooling,
#: deprecated internals) or that have import-time side effects.
EXCLUDED = {
    "antigravity", "this", "idlelib", "lib2to3", "tkinter", "turtle", "turtledemo", "ensurepip",
    "distutils", "encodings", "msilib", "msvcrt", "nt", "ntpath", "nturl2path", "winreg", "winsound",
    "genericpath", "posix", "pydoc_data", "sre_compile", "sre_constants", "sre_parse", "test",
}
#: Public names for implementation modules: users write ``os.path.join``, not ``posixpath.join``.
RENAMED = {"posixpath": "os.path"}
#: Implementation modules whose objects belong to one public module.
HOMES = {"posix": "os", "genericpath": "os.path", "posixpath": "os.path"}

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_MAX_DOC_CHARS = 60_000


def _scrub(text: str) -> str:
    """Remove what differs between runs or machines (object addresses)."""
    return _ADDRESS.sub("", text)


def _public(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split("."))


def _module_names() -> list[str]:
    """Every public stdlib module and submodule that imports on this machine, sorted."""
    found: set[str] = set()
    for top in sorted(sys.stdlib_module_names):
        if not _public(top) or top in EXCLUDED:
            continue
        module = _import(top)
        if module is None:
            continue
        found.add(top)
        path = getattr(module, "__path__", None)
        if path is None:
            continue
        for info in pkgutil.walk_packages(path, prefix=top + ".", onerror=lambda _name: None):
            parts = info.name.split(".")
            if not _public(info.name) or {"test", "tests", "idle_test", "__main__"} & set(parts):
                continue
            if _import(info.name) is not None:
                found.add(info.name)
    return sorted(found)


def _import(name: str) -> ModuleType | None:
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            return importlib.import_module(name)
        except BaseException:  # platform-specific or broken modules simply are not in the corpus
            return None


def _exported_names(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if not isinstance(names, list | tuple):
        names = [n for n in dir(module) if not n.startswith("_")]
    return sorted({n for n in names if isinstance(n, str) and not n.startswith("_")})


def _doc(obj: Any) -> str:
    """The object's *own* docstring (``inspect.getdoc`` would inherit a base class's)."""
    raw = getattr(obj, "__doc__", None)
    return inspect.cleandoc(raw) if isinstance(raw, str) else ""


class _Shown:
    """A default value as the signature shows it (``repr`` is what ``str(signature)`` uses)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _machine_values() -> dict[str, str]:
    """Strings that differ between machines, and the expression a reader would recognise."""
    values = {sys.executable: "sys.executable", sys.prefix: "sys.prefix", sys.exec_prefix: "sys.exec_prefix",
              sys.base_prefix: "sys.base_prefix", os.getcwd(): "os.getcwd()",
              os.path.expanduser("~"): "os.path.expanduser('~')"}
    return {k: v for k, v in values.items() if k and k != "/"}


def _show_default(value: Any) -> str:
    """``repr`` of a default, minus what would make the snapshot machine-dependent."""
    for obj, name in ((os.environ, "os.environ"), (sys.stdin, "sys.stdin"), (sys.stdout, "sys.stdout"),
                      (sys.stderr, "sys.stderr")):
        if value is obj:
            return name
    if isinstance(value, str) and value in _machine_values():
        return _machine_values()[value]
    text = _scrub(repr(value))
    if len(text) > 120 or any(k in text for k in _machine_values()):
        return "..."
    return text


def _signature(obj: Any) -> tuple[str, list[dict[str, Any]]]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sig = inspect.signature(obj)
    except (TypeError, ValueError, RuntimeError):
        return "", []
    params = []
    shown = []
    for p in sig.parameters.values():
        default = None if p.default is inspect.Parameter.empty else _show_default(p.default)
        params.append({"name": p.name, "kind": p.kind.name, "default": default})
        shown.append(p if default is None else p.replace(default=_Shown(default)))
    if inspect.isclass(obj) and [p["kind"] for p in params] == ["VAR_POSITIONAL", "VAR_KEYWORD"]:
        return "", []  # object's generic (*args, **kwargs) says nothing about this class
    rendered = str(sig.replace(parameters=shown, return_annotation=inspect.Signature.empty))
    return _scrub(rendered), params


def _is_exception(obj: Any) -> bool:
    return inspect.isclass(obj) and issubclass(obj, BaseException)


def _kind(obj: Any) -> str | None:
    if inspect.isclass(obj):
        return "exception" if _is_exception(obj) else "class"
    if inspect.isroutine(obj):
        return "function"
    return None


def build_documents() -> list[dict[str, Any]]:
    """The corpus, sorted by id. See the module docstring for what is included."""
    modules = {name: mod for name in _module_names() if (mod := _import(name)) is not None}
    public = {RENAMED.get(n, n): m for n, m in modules.items()}
    # every (module, name) under which each object is importable
    exports: dict[int, list[tuple[str, str]]] = {}
    objects: dict[int, Any] = {}
    for mname, module in sorted(public.items()):
        for name in _exported_names(module):
            try:
                obj = getattr(module, name)
            except AttributeError:
                continue
            if _kind(obj) is None:
                continue
            exports.setdefault(id(obj), []).append((mname, name))
            objects[id(obj)] = obj

    docs: dict[str, dict[str, Any]] = {}
    defined: dict[str, list[tuple[str, str]]] = {}
    for oid, obj in objects.items():
        home = _home(obj, exports[oid], set(public))
        if home is None:
            continue
        mname, name = home
        title = f"{mname}.{name}"
        also = sorted(f"{m}.{n}" for m, n in exports[oid] if (m, n) != home)
        doc = _object_doc(obj, mname, name, title, also)
        if doc is None or doc["id"] in docs:
            continue
        docs[doc["id"]] = doc
        defined.setdefault(mname, []).append((doc["kind"], name))
        if inspect.isclass(obj):
            for method in _method_docs(obj, mname, title):
                docs.setdefault(method["id"], method)

    for mname, module in sorted(public.items()):
        doc = _module_doc(mname, module, sorted(defined.get(mname, [])))
        docs.setdefault(doc["id"], doc)
    for doc in _topic_docs():
        docs.setdefault(doc["id"], doc)
    return [docs[k] for k in sorted(docs)]


def _home(obj: Any, exported: list[tuple[str, str]], public: set[str]) -> tuple[str, str] | None:
    """Where an object is documented: its defining module if public, else the best exporter."""
    raw = getattr(obj, "__module__", None)
    if not isinstance(raw, str):
        return None
    owner = HOMES.get(raw, RENAMED.get(raw, raw))
    preferred = [e for e in exported if e[0] == owner]
    if not preferred and owner not in public:
        stripped = owner.lstrip("_")
        preferred = [e for e in exported if e[0] == stripped] or sorted(
            exported, key=lambda e: (e[0].split(".")[0] != stripped.split(".")[0], len(e[0]), e)
        )
    if not preferred:
        return None  # defined in a public module that does not export it: not documented here
    by_name = [e for e in preferred if e[1] == getattr(obj, "__name__", None)]
    return sorted(by_name or preferred)[0]


def _object_doc(obj: Any, module: str, name: str, title: str, also: list[str]) -> dict[str, Any] | None:
    kind = _kind(obj)
    assert kind is not None
    doc = _doc(obj)
    signature, params = _signature(obj)
    if not doc and not params:
        return None
    head = f"{'class ' if kind != 'function' else ''}{title}{signature}"
    parts = [head, f"{kind.capitalize()} in module {module}."]
    if kind == "exception":
        bases = ", ".join(f"{b.__module__}.{b.__qualname__}".removeprefix("builtins.") for b in obj.__bases__)
        parts[-1] += f" Subclass of {bases}."
    if also:
        parts.append("Also importable as: " + ", ".join(also) + ".")
    if doc:
        parts.append(doc)
    if inspect.isclass(obj):
        methods = sorted(n for n, v in vars(obj).items() if _public(n) and _method_obj(v) is not None)
        if methods:
            parts.append("Methods: " + ", ".join(methods) + ".")
    return _record(f"py:{title}", title, module, kind, name, signature, params, "\n\n".join(parts))


def _method_obj(value: Any) -> Any:
    if isinstance(value, staticmethod | classmethod):
        value = value.__func__
    return value if inspect.isroutine(value) else None


def _method_docs(cls: type, module: str, class_title: str) -> list[dict[str, Any]]:
    out = []
    for name, value in sorted(vars(cls).items()):
        fn = _method_obj(value)
        if fn is None or not _public(name):
            continue
        doc = _doc(fn)
        if not doc:
            continue
        signature, params = _signature(fn)
        title = f"{class_title}.{name}"
        text = f"{title}{signature}\n\nMethod of class {class_title} in module {module}.\n\n{doc}"
        out.append(_record(f"py:{title}", title, module, "method", name, signature, params, text))
    return out


def _module_doc(name: str, module: ModuleType, defined: list[tuple[str, str]]) -> dict[str, Any]:
    parts = [f"Module {name}", _doc(module) or "(no module docstring)"]
    for kind, label in (("class", "Classes"), ("exception", "Exceptions"), ("function", "Functions")):
        names = [n for k, n in defined if k == kind]
        if names:
            parts.append(f"{label}: " + ", ".join(names) + ".")
    return _record(f"py:{name}", name, name, "module", name.rsplit(".", 1)[-1], "", [], "\n\n".join(parts))


def _topic_docs() -> list[dict[str, Any]]:
    from pydoc_data.topics import topics

    return [
        _record(f"topic:{key}", key, "topics", "topic", key, "", [],
                f"Python language reference topic: {key}\n\n{inspect.cleandoc(text)}")
        for key, text in sorted(topics.items())
    ]


def _record(doc_id: str, title: str, module: str, kind: str, name: str, signature: str,
            params: list[dict[str, Any]], text: str) -> dict[str, Any]:
    text = _scrub(text)
    if len(text) > _MAX_DOC_CHARS:
        text = text[:_MAX_DOC_CHARS] + "\n[... truncated ...]"
    return {"id": doc_id, "title": title, "module": module, "kind": kind, "name": name,
            "signature": signature, "params": params, "text": text}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=corpus_mod.DATA_DIR)
    parser.add_argument("--questions-only", action="store_true",
                        help="keep the stored corpus; regenerate questions.jsonl.gz and the manifest")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.questions_only:
        docs = corpus_mod.read_jsonl_gz(args.out / corpus_mod.CORPUS_FILE)
        version = json.loads((args.out / corpus_mod.MANIFEST_FILE).read_text())["corpus_version"]
        python = json.loads((args.out / corpus_mod.MANIFEST_FILE).read_text())["python"]
    else:
        docs = build_documents()
        version, python = CORPUS_VERSION, sys.version.split()[0]
        corpus_mod.write_jsonl_gz(args.out / corpus_mod.CORPUS_FILE, docs)
    questions = generate_questions(docs)
    corpus_mod.write_jsonl_gz(args.out / corpus_mod.QUESTIONS_FILE, questions)
    manifest = corpus_mod.make_manifest(args.out, corpus_version=version, python=python,
                                        n_docs=len(docs), n_questions=len(questions))
    corpus_mod.write_data_file(args.out / corpus_mod.MANIFEST_FILE,
                               (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    print(json.dumps(manifest, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
