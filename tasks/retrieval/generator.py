"""Question generation: a pure, deterministic function of the corpus.

Five question types, each answerable from the corpus alone and checked for ambiguity:

``default``    the default value of one parameter of a named function/class/method, read from the
               signature in its document. Only plain literals (None, booleans, numbers, short
               identifier-like strings) qualify, so the answer has exactly one spelling.
``module``     which module defines a name. The bare name must be unique in the whole corpus
               (no other function, class, method or module shares it) and importable from one
               module only, so "which module" has one answer.
``exception``  the exception a function's documentation says it raises. The docstring must use
               a raise verb and mention exactly one exception class name, which exists in the
               corpus.
``multihop``   two documents: find the module that defines a uniquely named object X, then read
               the default of parameter p of the object Y *in that module*. Y's bare name exists
               in several modules with different (or missing) p defaults, so the first hop is
               required, not decorative.
``paramset``   every parameter of a named callable whose default is a given value (a set from one
               document, so this set type exists in every split). At least one parameter is left
               out, so listing them all is never the answer.
``set``        every module that defines a function or class named N (2 to 5 of them, no other
               module exposing that name). Graded as a set (F1 for partial credit).

Splits are by top-level package (``urllib.parse`` and ``urllib.request`` share one), salted
hash, 80/10/10: no module's documents serve questions in two splits. A question whose evidence
spans packages in different splits is dropped. Ids are derived from content
(``ret-default-json.dumps:indent``), never from position, and the output is sorted by id.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from envhub import safe_ast

SPLIT_SALT = "envhub-retrieval-split-v1"
QUESTION_TYPES = ("default", "exception", "module", "multihop", "paramset", "set")

_EXCEPTION_NAME = re.compile(r"\b([A-Z][A-Za-z0-9]*(?:Error|Exception|Warning|Exit|Interrupt|Iteration))\b")
_RAISE_VERB = re.compile(r"\brais(?:e|es|ed|ing)\b", re.IGNORECASE)
_PLAIN_STRING = re.compile(r"^[A-Za-z0-9_.\-+/:%#]{1,40}$")

# The format hints name no example values: any example would also be a possible answer.
LITERAL_FORMAT = ("Answer with only the value, written as a Python literal (a number, None, True or False, "
                  "or a quoted string).")
MODULE_FORMAT = "Answer with only the fully qualified module name (dotted for a submodule: package.module)."
EXCEPTION_FORMAT = "Answer with only the exception class name, as the documentation spells it."
SET_FORMAT = "Answer with the fully qualified module names, separated by commas."
PARAMS_FORMAT = "Answer with the parameter names, separated by commas."


def package_of(module: str) -> str:
    """The split unit: a module's top-level package (``os.path`` -> ``os``)."""
    return module.split(".", 1)[0]


def split_of(module: str) -> str:
    bucket = int(hashlib.sha256(f"{SPLIT_SALT}/{package_of(module)}".encode()).hexdigest()[:8], 16) % 10
    return "train" if bucket < 8 else "validation" if bucket < 9 else "test"


def plain_literal(shown: str | None) -> Any:
    """The default's value if it is a literal with one unambiguous spelling, else ``...``."""
    if shown is None:
        return ...
    try:
        value = safe_ast.literal_eval(shown)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return ...
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value if abs(value) < 10**12 and value == value else ...
    if isinstance(value, str) and _PLAIN_STRING.match(value) and plain_literal(value) is ...:
        return value  # "0" or "None" as *strings* would be too easy to confuse with the literal
    return ...


def _stable(*parts: str) -> int:
    return int(hashlib.sha256("/".join(parts).encode()).hexdigest()[:12], 16)


def _body(doc: dict[str, Any]) -> str:
    """A document's docstring part, without the generated header lines."""
    return doc["text"].split("\n\n", 2)[-1] if doc["kind"] in ("function", "method") else doc["text"]


def _noun(doc: dict[str, Any]) -> str:
    return {"function": "function", "method": "method", "class": "class", "exception": "exception class"}[doc["kind"]]


def _question(qid: str, qtype: str, prompt: str, answer: Any, answer_type: str, evidence: list[str],
              split: str, *, aliases: Iterable[str] = (), difficulty: int = 1,
              search_queries: Iterable[str] = ()) -> dict[str, Any]:
    return {
        "id": qid, "type": qtype, "split": split, "difficulty": difficulty, "prompt": prompt,
        "answer": answer, "answer_type": answer_type, "aliases": sorted(set(aliases)),
        "evidence": evidence, "search_queries": list(search_queries),
    }


def generate_questions(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every question of every type, sorted by id. Deterministic for a given corpus."""
    objects = [d for d in docs if d["kind"] in ("function", "class", "exception")]
    name_count: dict[str, int] = defaultdict(int)
    for d in docs:
        if d["kind"] != "topic":
            name_count[d["name"]] += 1
    exceptions: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for d in docs:
        if d["kind"] == "exception":
            exceptions[d["name"]].append(d)
    out: list[dict[str, Any]] = []
    out += _default_questions(docs)
    out += _module_questions(objects, name_count)
    out += _exception_questions(docs, exceptions)
    out += _multihop_questions(objects, name_count)
    out += _paramset_questions(docs)
    out += _set_questions(objects)
    ids = [q["id"] for q in out]
    assert len(ids) == len(set(ids)), "question ids must be unique"
    return sorted(out, key=lambda q: q["id"])


def _default_params(doc: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(p["name"], v) for p in doc["params"]
            if not p["name"].startswith("_") and (v := plain_literal(p["default"])) is not ...]


def _default_questions(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for doc in docs:
        if doc["kind"] not in ("function", "method", "class", "exception"):
            continue
        params = _default_params(doc)
        informative = [(n, v) for n, v in params if v is not None]
        if informative:  # at most two per document, so large signatures do not dominate
            chosen = sorted(informative, key=lambda nv: _stable(doc["id"], nv[0]))[:2]
        elif params and _stable(doc["id"], "none") % 2 == 0:
            chosen = params[:1]  # None is the commonest default: keep it from swamping the set
        else:
            continue
        for name, value in chosen:
            target = f"the {_noun(doc)} `{doc['title']}`" if doc["kind"] not in ("class", "exception") else \
                f"the constructor of the {_noun(doc)} `{doc['title']}`"
            out.append(_question(
                f"ret-default-{doc['title']}:{name}", "default",
                f"In the Python standard library documentation, what is the default value of the parameter "
                f"`{name}` of {target}? {LITERAL_FORMAT}",
                repr(value), "literal", [doc["id"]], split_of(doc["module"]),
                search_queries=[doc["title"]],
            ))
    return out


def _module_candidates(objects: list[dict[str, Any]], name_count: dict[str, int]) -> list[dict[str, Any]]:
    """Objects whose bare name appears once in the corpus and that only one module exposes."""
    return [d for d in objects
            if name_count[d["name"]] == 1 and "Also importable as" not in d["text"]
            and d["title"] == f"{d['module']}.{d['name']}" and len(d["name"]) >= 4]


def _module_questions(objects: list[dict[str, Any]], name_count: dict[str, int]) -> list[dict[str, Any]]:
    out = []
    for doc in _module_candidates(objects, name_count):
        aliases = {doc["module"]} | ({"posixpath"} if doc["module"] == "os.path" else set())
        out.append(_question(
            f"ret-module-{doc['name']}", "module",
            f"Which Python standard library module defines the {_noun(doc)} `{doc['name']}`? {MODULE_FORMAT}",
            doc["module"], "name", [doc["id"]], split_of(doc["module"]),
            aliases=aliases, search_queries=[doc["name"]],
        ))
    return out


def _exception_questions(docs: list[dict[str, Any]],
                         exceptions: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    out = []
    for doc in docs:
        if doc["kind"] not in ("function", "method"):
            continue
        body = _body(doc)
        names = set(_EXCEPTION_NAME.findall(body))
        if len(names) != 1 or not _RAISE_VERB.search(body):
            continue
        [name] = names
        if name not in exceptions:
            continue
        # the bare name, or the qualified name of an exception of that name that the reader could mean
        qualified = {e["title"] for e in exceptions[name]
                     if e["module"] in (doc["module"], "builtins") or len(exceptions[name]) == 1}
        out.append(_question(
            f"ret-exception-{doc['title']}", "exception",
            f"According to its documentation in the Python standard library, which exception does the "
            f"{_noun(doc)} `{doc['title']}` raise? {EXCEPTION_FORMAT}",
            name, "name", [doc["id"]], split_of(doc["module"]),
            aliases={name} | qualified, search_queries=[doc["title"]],
        ))
    return out


def _multihop_questions(objects: list[dict[str, Any]], name_count: dict[str, int]) -> list[dict[str, Any]]:
    anchors: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for doc in _module_candidates(objects, name_count):
        anchors[doc["module"]].append(doc)
    by_name: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for doc in objects:
        if doc["title"] == f"{doc['module']}.{doc['name']}":
            by_name[doc["name"]].append(doc)
    out = []
    for _name, docs in sorted(by_name.items()):
        if len(docs) < 2:
            continue
        for target in docs:
            if not anchors.get(target["module"]):
                continue
            others = [o for o in docs if o is not target]
            asked = 0
            params = sorted(_default_params(target), key=lambda nv: (nv[1] is None, nv[0]))
            for pname, value in params:
                other_values = [dict((p["name"], p["default"]) for p in o["params"]).get(pname, "<absent>")
                                for o in others]
                if all(v == repr(value) for v in other_values):
                    continue  # the first hop would not matter
                anchor = min(anchors[target["module"]], key=lambda a, t=target: _stable(t["id"], a["id"]))
                out.append(_question(
                    f"ret-multihop-{target['title']}:{pname}", "multihop",
                    f"The {_noun(anchor)} `{anchor['name']}` is defined in a Python standard library module. "
                    f"That same module also defines a {_noun(target)} named `{target['name']}`. What is the "
                    f"default value of its parameter `{pname}`? {LITERAL_FORMAT}",
                    repr(value), "literal", [anchor["id"], target["id"]], split_of(target["module"]),
                    difficulty=2, search_queries=[anchor["name"], target["title"]],
                ))
                asked += 1
                if asked == 2:  # at most two questions per target object
                    break
    return out


def _paramset_questions(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for doc in docs:
        if doc["kind"] not in ("function", "method", "class", "exception"):
            continue
        params = _default_params(doc)
        groups: dict[str, list[str]] = defaultdict(list)
        for p in doc["params"]:  # every parameter, private ones too: the answer is the whole set
            groups[p["default"]].append(p["name"])
        usable = [(shown, groups[shown]) for shown in {repr(v) for _, v in params} if 2 <= len(groups[shown]) <= min(6, len(doc["params"]) - 1)]
        if len(params) < 3 or not usable:
            continue
        shown, names = max(usable, key=lambda g: (len(g[1]), _stable(doc["id"], g[0])))
        target = f"the {_noun(doc)} `{doc['title']}`" if doc["kind"] not in ("class", "exception") else \
            f"the constructor of the {_noun(doc)} `{doc['title']}`"
        out.append(_question(
            f"ret-paramset-{doc['title']}", "paramset",
            f"In the Python standard library documentation, which parameters of {target} have the default "
            f"value {shown}? List every such parameter. {PARAMS_FORMAT}",
            sorted(names), "set", [doc["id"]], split_of(doc["module"]),
            difficulty=2, search_queries=[doc["title"]],
        ))
    return out


def _set_questions(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_name: dict[str, list[dict[str, Any]]] = defaultdict(list)
    exposed: dict[str, set[str]] = defaultdict(set)
    for doc in objects:
        if doc["title"] != f"{doc['module']}.{doc['name']}":
            continue
        by_name[doc["name"]].append(doc)
        exposed[doc["name"]].add(doc["module"])
        for line in doc["text"].split("\n\n")[:4]:
            if line.startswith("Also importable as: "):
                for alias in line.removeprefix("Also importable as: ").rstrip(".").split(", "):
                    module, _, bare = alias.rpartition(".")
                    exposed[bare].add(module)
    out = []
    for name, docs in sorted(by_name.items()):
        modules = sorted({d["module"] for d in docs})
        if not 2 <= len(modules) <= 5 or exposed[name] != set(modules) or len(name) < 3:
            continue
        splits = {split_of(m) for m in modules}
        if len(splits) != 1:
            continue  # evidence would straddle two splits
        out.append(_question(
            f"ret-set-{name}", "set",
            f"Which Python standard library modules define a function or class named `{name}`? List every "
            f"such module. {SET_FORMAT}",
            modules, "set", sorted(d["id"] for d in docs), splits.pop(),
            difficulty=2, search_queries=[name],
        ))
    return out
