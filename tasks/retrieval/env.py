"""``envhub/Retrieval-v0``: answer questions about the Python standard library by searching its docs.

The agent has three tools: ``search`` (BM25 over the frozen corpus), ``open`` (read a document a
page at a time) and ``answer``. Nothing runs code, so the family needs no sandbox. The tools
record which documents the agent saw in search results and which it opened, as evidence recall
(:mod:`.evidence`), a diagnostic metric that tells a lucky guess from a found answer.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from envhub.budget import Budget
from envhub.env import Env
from envhub.episode import Episode, SuiteCase
from envhub.errors import ToolError
from envhub.parsing import format_tool_call
from envhub.tasks.retrieval import ENV_ID
from envhub.tools import tool
from envhub.types import Action, Task
from envhub.verifiers import AnswerPresent, ExactMatch, LayeredVerifier, SetMatch
from envhub.verifiers.layered import Graded, ScoreCheck
from envhub.verifiers.retrieval_checks import LiteralMatch
from envhub.verifiers.suite import NotApplicable, answer_attacks, answer_case

from .corpus import DATA_DIR, PAGE_CHARS, Corpus, load_corpus, load_questions
from .evidence import EvidenceRecall, note_evidence
from .generator import QUESTION_TYPES
from .judged import support_judge
from .search import SearchIndex, get_index

MAX_K = 20
_SNIPPET_CHARS = 160


class RetrievalTasks:
    """The stored question set, filtered by type, in id order per split."""

    name = "retrieval"

    def __init__(self, types: Sequence[str] | None = None, data_dir: Path = DATA_DIR) -> None:
        unknown = set(types or ()) - set(QUESTION_TYPES)
        if unknown:
            raise ValueError(f"unknown question types {sorted(unknown)}; known: {', '.join(QUESTION_TYPES)}")
        self.types = set(types or QUESTION_TYPES)
        self.data_dir = data_dir
        self.corpus = load_corpus(data_dir)
        self.version = f"retrieval-{self.corpus.version}"

    @cached_property
    def _records(self) -> dict[str, dict[str, Any]]:
        return {q["id"]: q for q in load_questions(self.data_dir) if q["type"] in self.types}

    @cached_property
    def _by_split(self) -> dict[str, list[str]]:
        splits: dict[str, list[str]] = {"train": [], "validation": [], "test": []}
        for qid, q in self._records.items():
            splits[q["split"]].append(qid)
        return {s: sorted(ids) for s, ids in splits.items()}

    def task_ids(self, split: str) -> list[str]:
        return self._by_split[split]

    def record(self, task_id: str) -> dict[str, Any]:
        try:
            return self._records[task_id]
        except KeyError:
            raise KeyError(f"unknown retrieval task {task_id!r}") from None

    def get(self, task_id: str) -> Task:
        q = self.record(task_id)
        prompt = (
            f"{q['prompt']}\n\nFind the answer in the documentation collection ({len(self.corpus)} documents "
            "of the Python standard library: modules, classes, functions, methods and language-reference "
            "topics) with the `search` and `open` tools, then call `answer` once."
        )
        return Task(
            task_id=task_id, family="retrieval", split=q["split"], difficulty=q["difficulty"], prompt=prompt,
            metadata={"type": q["type"], "answer_type": q["answer_type"], "corpus": self.corpus.version},
            hidden={"answer": q["answer"], "answer_type": q["answer_type"], "aliases": q["aliases"],
                    "evidence": q["evidence"], "search_queries": q["search_queries"]},
        )


class AnswerByType:
    """Correctness by answer type: literal values, names (with aliases), sets (F1 partial credit)."""

    name = "answer_match"

    def __init__(self) -> None:
        self.checks: dict[str, ScoreCheck] = {
            "literal": LiteralMatch(),
            "name": ExactMatch(key="aliases"),
            "set": SetMatch(),
        }

    def __call__(self, task: Task, submission: dict[str, Any], episode: Any) -> Graded:
        return self.checks[task.hidden["answer_type"]](task, submission, episode)


def gold_answer_text(task: Task) -> str:
    gold = task.hidden["answer"]
    return ", ".join(gold) if isinstance(gold, list) else str(gold)


class RetrievalEnv(Env):
    """Questions over the Python standard library's documentation, answered with search and open.

    Env args: ``types`` (question types to draw from), ``partial_credit`` (reward set answers by
    F1 instead of all-or-nothing), ``backend`` (``bm25s`` or the slower ``rank_bm25``), and the
    optional judged quality layer (:mod:`.judged`): ``judge`` (a judge spec; None, the default: no
    judge) and ``judge_weight``.
    """

    env_id = ENV_ID
    family = "retrieval"
    version = "1"
    default_budget = Budget(max_turns=12, max_tool_calls=20, max_agent_seconds=300.0)

    def __init__(self, *, types: Sequence[str] | None = None, partial_credit: bool = False,
                 backend: str = "bm25s", judge: str | Mapping[str, Any] | None = None, judge_weight: float = 0.2,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._types = list(types) if types else None
        self.partial_credit = partial_credit
        self.backend = backend
        self.judged = support_judge(judge, judge_weight, lambda: self.corpus) if judge is not None else None

    # ---- hooks ------------------------------------------------------------------------------

    def load_tasks(self) -> RetrievalTasks:
        return RetrievalTasks(self._types)

    def task_cache_key(self) -> tuple:
        return tuple(sorted(self._types)) if self._types else ()

    def make_verifier(self) -> LayeredVerifier:
        return LayeredVerifier(gate=[AnswerPresent(max_chars=1_000)], correctness=EvidenceRecall(AnswerByType()),
                               quality=[self.judged] if self.judged is not None else (),
                               partial_credit=self.partial_credit)

    @property
    def corpus(self) -> Corpus:
        tasks = self.tasks
        assert isinstance(tasks, RetrievalTasks)
        return tasks.corpus

    @property
    def index(self) -> SearchIndex:
        return get_index(self.corpus, self.backend)

    def system_prompt(self, task: Task) -> str:
        return (
            "You answer questions from a fixed collection of documentation. Tools: `search` finds documents "
            "by keywords (returns their ids), `open` reads a document page by page, `answer` submits your "
            "final answer (only the answer itself, in the requested form; you can answer once). Call a tool "
            f"by writing {format_tool_call('search', {'query': 'json dumps indent'})}."
        )

    def setup_episode(self, episode: Episode) -> None:
        note_evidence(episode)  # empty seen / opened sets, and recall figures from the start
        _ = self.index  # build (or fetch) the shared index before the agent's clock matters

    # ---- tools ------------------------------------------------------------------------------

    @tool
    def search(self, query: str, k: int = 5) -> str:
        """Search the documentation with keywords (BM25); returns up to k (1-20) document ids with a snippet."""
        if not query.strip():
            raise ToolError("the query is empty")
        if not 1 <= k <= MAX_K:
            raise ToolError(f"k must be between 1 and {MAX_K}")
        hits = self.index.search(query, k)
        if not hits:
            return f"No documents match {query!r}. Try other keywords (names, or words from the description)."
        note_evidence(self._require_episode(), seen=[h.doc_id for h in hits])
        lines = [f"Top {len(hits)} results for {query!r}:"]
        for rank, hit in enumerate(hits, 1):
            doc = self.corpus.by_id[hit.doc_id]
            lines.append(f"{rank}. {doc.doc_id}  ({doc.kind}, {doc.pages()} page{'s' if doc.pages() > 1 else ''})")
            lines.append(f"   {_snippet(doc.text)}")
        lines.append('Read a document with open(doc_id="...").')
        return "\n".join(lines)

    @tool
    def open(self, doc_id: str, offset: int = 0) -> str:
        """Read a document by id, 2,000 characters per page starting at character `offset`."""
        doc = self._resolve(doc_id)
        if not 0 <= offset < max(1, len(doc.text)):
            raise ToolError(f"offset must be between 0 and {len(doc.text) - 1} for {doc.doc_id}")
        note_evidence(self._require_episode(), seen=[doc.doc_id], opened=[doc.doc_id])
        end = min(len(doc.text), offset + PAGE_CHARS)
        page, pages = offset // PAGE_CHARS + 1, doc.pages()
        head = f"[{doc.doc_id}] page {page} of {pages} (characters {offset}-{end} of {len(doc.text)})"
        tail = (f'\n[continued: open(doc_id="{doc.doc_id}", offset={end}) for the next page]'
                if end < len(doc.text) else "\n[end of document]")
        return f"{head}\n\n{doc.text[offset:end]}{tail}"

    @tool(terminal=True)
    def answer(self, answer: str) -> str:
        """Submit the final answer: only the value, name or comma-separated list the question asks for."""
        return answer

    # ---- scripted solutions -----------------------------------------------------------------

    def gold_actions(self, task: Task) -> list[Action]:
        """Search for each hop, open every evidence document, answer."""
        queries: list[str] = list(task.hidden["search_queries"])
        evidence: list[str] = list(task.hidden["evidence"])
        actions = []
        for i in range(max(len(queries), len(evidence))):
            if i < len(queries):
                actions.append(_call("search", {"query": queries[i], "k": 5}))
            if i < len(evidence):
                actions.append(_call("open", {"doc_id": evidence[i]}))
        actions.append(_call("answer", {"answer": gold_answer_text(task)}))
        return actions

    def adversarial_cases(self) -> list[SuiteCase]:
        return retrieval_attacks()

    # ---- internals --------------------------------------------------------------------------

    def _resolve(self, doc_id: str) -> Any:
        by_id = self.corpus.by_id
        doc = by_id.get(doc_id.strip()) or by_id.get(f"py:{doc_id.strip()}")
        if doc is None:
            close = difflib.get_close_matches(doc_id, list(by_id), n=3, cutoff=0.7)
            hint = f" Did you mean: {', '.join(close)}?" if close else " Use `search` to find document ids."
            raise ToolError(f"no document with id {doc_id!r}.{hint}")
        return doc


def _call(name: str, arguments: dict[str, Any]) -> Action:
    return Action(text=format_tool_call(name, arguments))


_GENERATED_LINE = re.compile(r"^(?:(?:Function|Class|Exception) in module |Method of class |Also importable as:)")


def _snippet(text: str) -> str:
    """The signature line and the first line of the description, clipped."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    body = next((ln for ln in lines[1:] if not _GENERATED_LINE.match(ln)), "")
    snippet = lines[0] if lines else ""
    if body and body != snippet:
        snippet = f"{snippet} -- {body}"
    return snippet if len(snippet) <= _SNIPPET_CHARS else snippet[: _SNIPPET_CHARS - 3] + "..."


# ---- the verifier suite's attacks -----------------------------------------------------------

_WRONG_LITERALS = ["None", "0", "True", "False", "-1", "1", "'utf-8'", "'strict'"]


def _wrong(env: Env, task: Task) -> str:
    """A plausible wrong answer in the right form."""
    gold = task.hidden["answer"]
    kind = task.hidden["answer_type"]
    if kind == "literal":
        return next(w for w in _WRONG_LITERALS if w != gold and not LiteralMatch()(task, {"answer": w}, None).passed)
    if kind == "set":
        extra = "builtins" if task.metadata["type"] == "set" else "self"
        return ", ".join([*gold[1:], extra if extra not in gold else "xml"])
    aliases = set(task.hidden["aliases"])
    for candidate in ("os", "sys", "json", "ValueError", "TypeError", "KeyError", "OSError"):
        if candidate not in aliases and candidate != gold:
            return candidate
    raise AssertionError("unreachable")


def _all_candidates(env: Env, task: Task) -> str:
    """Every plausible answer of the question's kind at once (every module name, every literal...)."""
    assert isinstance(env, RetrievalEnv)
    kind = task.hidden["answer_type"]
    if kind == "literal":
        return ", ".join([*_WRONG_LITERALS, str(task.hidden["answer"])])
    if task.metadata["type"] == "paramset":
        doc = env.corpus.by_id[task.hidden["evidence"][0]]
        return ", ".join(p["name"] for p in doc.params)
    if task.metadata["type"] == "exception":
        names = sorted({d.name for d in env.corpus if d.kind == "exception"})
        return ", ".join(names)[:990]
    modules = sorted({d.module for d in env.corpus if d.kind == "module"})
    near = [m for m in modules if m.split(".")[0] in {g.split(".")[0] for g in _as_list(task.hidden["answer"])}]
    return ", ".join(dict.fromkeys([*near, *modules]))[:990]


def _stuffed(extra: int) -> Any:
    """A set answer stuffed with ``extra`` wrong candidates next to the whole gold set (set questions)."""

    def make(env: Env, task: Task) -> str:
        assert isinstance(env, RetrievalEnv)
        if task.hidden["answer_type"] != "set":
            raise NotApplicable("not a set question")
        gold = list(task.hidden["answer"])
        if task.metadata["type"] == "paramset":
            pool = [p["name"] for p in env.corpus.by_id[task.hidden["evidence"][0]].params]
        else:
            pool = sorted({d.module for d in env.corpus if d.kind == "module"})
        wrong = [c for c in pool if c not in gold][:extra]
        if not wrong:
            raise NotApplicable("no wrong candidate to stuff in")
        return ", ".join([*gold, *wrong])

    return make


def _as_list(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _whole_document(env: Env, task: Task) -> str:
    """The evidence document pasted as the answer (it contains the answer somewhere)."""
    assert isinstance(env, RetrievalEnv)
    text = "\n".join(env.corpus.by_id[e].text for e in task.hidden["evidence"])
    return text[:990]


def _answer_case(name: str, make: Any, description: str) -> SuiteCase:
    return answer_case(name, make, description, with_env=True)


def retrieval_attacks() -> list[SuiteCase]:
    """Wrong answers and answer-stuffing hacks; every one must fail."""
    return [
        *answer_attacks(lambda e, t: gold_answer_text(t), _wrong, with_env=True),
        _answer_case("every_candidate", _all_candidates,
                     "every module name / every literal / every parameter listed at once"),
        _answer_case("stuffed_set", _stuffed(1), "the whole gold set plus one wrong candidate"),
        _answer_case("stuffed_set_many", _stuffed(5), "the whole gold set plus up to five wrong candidates"),
        _answer_case("whole_document", _whole_document, "the evidence document pasted as the answer"),
        _answer_case("evidence_ids", lambda e, t: ", ".join(t.hidden["evidence"]),
                     "the evidence document ids instead of the answer"),
        SuiteCase("search_then_guess", "fail",
                  lambda env, task: [_call("search", {"query": task.hidden["search_queries"][0]}),
                                     _call(env.terminal_tool, {"answer": _wrong(env, task)})],
                  "looks like retrieval, then answers wrongly"),
    ]
