"""envhub/Retrieval-v0: frozen corpus, generated questions, BM25 tools, verifier and suite."""

import importlib.util
import json
import os
import re
import shutil
from collections import Counter, defaultdict

import gymnasium
import pytest
from typer.testing import CliRunner

if importlib.util.find_spec("bm25s") is None:
    if os.environ.get("CI"):  # CI installs the extra; a silent skip there would hide a broken setup
        raise RuntimeError("CI must install the retrieval extra: pip install '.[retrieval]'")
    pytest.skip("the retrieval extra is not installed: pip install 'envhub[retrieval]'", allow_module_level=True)

from envhub.parsing import format_tool_call
from envhub.policies import GoldPolicy, NoopPolicy
from envhub.tasks.retrieval import register_envs
from envhub.tasks.retrieval.corpus import (
    CORPUS_FILE,
    DATA_DIR,
    MANIFEST_FILE,
    PAGE_CHARS,
    CorpusIntegrityError,
    load_corpus,
    load_questions,
    read_jsonl_gz,
)
from envhub.tasks.retrieval.env import RetrievalEnv, RetrievalTasks, retrieval_attacks
from envhub.tasks.retrieval.generator import QUESTION_TYPES, generate_questions, package_of, plain_literal
from envhub.tasks.retrieval.search import SearchIndex, get_index, tokenize
from envhub.types import Outcome, Task
from envhub.verifiers.retrieval_checks import LiteralMatch, parse_literal

SPLITS = ("train", "validation", "test")


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


@pytest.fixture(scope="module")
def questions():
    return load_questions()


@pytest.fixture(scope="module")
def env():
    e = RetrievalEnv(split="test")
    yield e
    e.close()


def _sample(ids, per_type=8):
    by_type = defaultdict(list)
    for i in ids:
        by_type[i.split("-")[1]].append(i)
    return [i for group in by_type.values() for i in group[:: max(1, len(group) // per_type)][:per_type]]


# ---- corpus ---------------------------------------------------------------------------------


def test_corpus_is_large_real_and_well_formed(corpus):
    assert len(corpus) >= 2000
    kinds = Counter(d.kind for d in corpus)
    assert kinds["module"] > 100 and kinds["function"] > 500 and kinds["class"] > 300 and kinds["topic"] > 50
    ids = [d.doc_id for d in corpus]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"(py|topic):[\w.-]+", i) for i in ids)
    dumps = corpus.by_id["py:json.dumps"]
    assert dumps.module == "json" and "indent=None" in dumps.text and dumps.title == "json.dumps"
    assert corpus.by_id["py:os.path.join"].module == "os.path"  # users' names, not posixpath
    assert "py:io.StringIO" in corpus.by_id and "py:os.listdir" in corpus.by_id  # C objects: public homes
    assert all(d.text.strip() for d in corpus)


def test_snapshot_is_small_versioned_and_free_of_machine_details(corpus):
    manifest = json.loads((DATA_DIR / MANIFEST_FILE).read_text())
    assert manifest["documents"] == len(corpus) and manifest["corpus_version"] == corpus.version
    assert (DATA_DIR / CORPUS_FILE).stat().st_size < 3_000_000
    for doc in corpus:
        assert " at 0x" not in doc.text
        assert "/root/" not in doc.text and ".pyenv" not in doc.text, doc.doc_id


def test_checksum_is_verified_at_load(tmp_path):
    shutil.copytree(DATA_DIR, tmp_path / "data")
    rows = read_jsonl_gz(tmp_path / "data" / CORPUS_FILE)
    rows[0]["text"] += " tampered"
    from envhub.tasks.retrieval.corpus import write_jsonl_gz

    write_jsonl_gz(tmp_path / "data" / CORPUS_FILE, rows)
    with pytest.raises(CorpusIntegrityError, match="sha256"):
        load_corpus(tmp_path / "data")
    with pytest.raises(CorpusIntegrityError):
        RetrievalTasks(data_dir=tmp_path / "data")


# ---- questions ------------------------------------------------------------------------------


def test_questions_are_many_typed_and_regenerate_identically(questions):
    assert len(questions) >= 1000
    assert set(Counter(q["type"] for q in questions)) == set(QUESTION_TYPES)
    assert [q["id"] for q in questions] == sorted(q["id"] for q in questions)
    docs = read_jsonl_gz(DATA_DIR / CORPUS_FILE)
    assert generate_questions(docs) == questions  # the stored file is exactly the generator's output


def test_splits_do_not_overlap_by_package(questions, corpus):
    package_split: dict[str, set[str]] = defaultdict(set)
    for q in questions:
        for doc_id in q["evidence"]:
            package_split[package_of(corpus.by_id[doc_id].module)].add(q["split"])
    assert all(len(s) == 1 for s in package_split.values()), {p: s for p, s in package_split.items() if len(s) > 1}
    counts = Counter(q["split"] for q in questions)
    assert counts["train"] > counts["test"] > 100 and counts["validation"] > 100
    for split in SPLITS:
        assert {q["type"] for q in questions if q["split"] == split} >= {"default", "module", "exception",
                                                                         "multihop", "paramset"}


def test_answers_are_derivable_from_the_evidence(questions, corpus):
    names = Counter(d.name for d in corpus if d.kind != "topic")
    for q in questions:
        docs = [corpus.by_id[e] for e in q["evidence"]]
        if q["type"] in ("default", "multihop"):
            pname = q["id"].rsplit(":", 1)[1]
            shown = rf"\b{re.escape(pname)}(?:: [^=]*?)?(?:=| = ){re.escape(q['answer'])}[,)]"
            assert re.search(shown, docs[-1].text.split("\n", 1)[0]), q["id"]  # in the signature line
            assert plain_literal(q["answer"]) is not ...
        elif q["type"] == "module":
            [doc] = docs
            assert doc.module == q["answer"] and names[doc.name] == 1, q["id"]  # the name is unique
            rest = q["prompt"].replace(f"`{doc.name}`", "")
            assert not re.search(rf"(?<![\w.]){re.escape(q['answer'])}(?![\w])", rest), q["id"]  # no leak
        elif q["type"] == "exception":
            assert q["answer"] in docs[0].text and re.search(r"rais", docs[0].text, re.I)
        elif q["type"] == "set":
            assert sorted(d.module for d in docs) == q["answer"] and len(q["answer"]) >= 2
        elif q["type"] == "paramset":
            shown = re.search(r"default value (.+?)\? List", q["prompt"]).group(1)
            params = {p["name"]: p["default"] for p in docs[0].params}
            assert sorted(n for n, v in params.items() if v == shown) == q["answer"]
            assert len(q["answer"]) < len(params)  # listing every parameter is never right
        assert json.dumps(q["answer"]) not in json.dumps(q["search_queries"]) or q["type"] == "default"


def test_multihop_needs_both_documents(questions, corpus):
    multihop = [q for q in questions if q["type"] == "multihop"]
    assert len(multihop) >= 100
    for q in multihop:
        anchor, target = (corpus.by_id[e] for e in q["evidence"])
        assert anchor.module == target.module
        named = q["prompt"].replace(f"`{target.name}`", "").replace(f"`{anchor.name}`", "")
        assert f"`{target.name}`" in q["prompt"] and f"`{target.module}`" not in named
        assert sum(d.name == target.name for d in corpus if d.kind in ("function", "class", "exception")) >= 2


# ---- search ---------------------------------------------------------------------------------


def test_tokenizer_keeps_dotted_and_underscored_names():
    assert tokenize("os.path.join and move_to_end") == ["os.path.join", "os", "path", "join", "move", "end",
                                                        "move_to_end"]
    assert tokenize("The of and") == []


def test_search_finds_objects_by_name_and_is_cached(corpus):
    index = get_index(corpus)
    assert get_index(corpus) is index  # built once per process
    assert index.search("pickle.dumps", 3)[0].doc_id == "py:pickle.dumps"
    assert "py:json.dumps" in [h.doc_id for h in index.search("json.dumps", 3)]
    assert index.search("urlsplit", 3)[0].doc_id == "py:urllib.parse.urlsplit"
    assert "py:collections.OrderedDict.move_to_end" in [h.doc_id for h in index.search("move to end ordered", 5)]
    assert index.search("zzzqqqxx", 5) == [] and index.search("", 5) == []
    hits = index.search("file", 20)
    assert len(hits) == 20 and [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_gold_queries_surface_their_evidence(questions, corpus):
    index = get_index(corpus)
    pairs = [(query, ev) for q in questions[::10] for query, ev in zip(q["search_queries"], q["evidence"],
                                                                       strict=False)]
    found = sum(ev in [h.doc_id for h in index.search(query, 5)] for query, ev in pairs)
    assert found / len(pairs) > 0.85


def test_rank_bm25_baseline_agrees_on_the_top_hit(corpus):
    pytest.importorskip("rank_bm25")
    baseline = SearchIndex(corpus, "rank_bm25")
    index = get_index(corpus)
    for query in ("json.dumps", "urlsplit", "OrderedDict move_to_end", "tempfile.mkstemp"):
        assert baseline.search(query, 1)[0].doc_id == index.search(query, 1)[0].doc_id


# ---- tools ----------------------------------------------------------------------------------


def _tool(env, name, **arguments):
    obs = env.step(format_tool_call(name, arguments))
    return obs, obs.messages[-1].content if obs.messages else ""


def test_open_pages_through_long_documents(env, corpus):
    doc = max(corpus, key=lambda d: len(d.text))
    env.reset(task_id=env.tasks.task_ids("test")[0])
    _, first = _tool(env, "open", doc_id=doc.doc_id)
    assert f"page 1 of {doc.pages()}" in first and f"offset={PAGE_CHARS}" in first
    assert doc.text[:PAGE_CHARS] in first
    _, last = _tool(env, "open", doc_id=doc.doc_id, offset=(doc.pages() - 1) * PAGE_CHARS)
    assert f"page {doc.pages()} of {doc.pages()}" in last and "[end of document]" in last
    _, bad = _tool(env, "open", doc_id="py:json.dumpz")
    assert bad.startswith("Error:") and "py:json.dumps" in bad
    _, bad = _tool(env, "open", doc_id=doc.doc_id, offset=len(doc.text) + 5)
    assert bad.startswith("Error:")


def test_search_tool_output_and_argument_checks(env):
    env.reset(task_id=env.tasks.task_ids("test")[0])
    _, text = _tool(env, "search", query="json dumps indent", k=3)
    assert text.count("\n1. ") == 1 and "py:json.dumps" in text
    _, bad = _tool(env, "search", query="json", k=50)
    assert bad.startswith("Error:") and "between 1 and 20" in bad
    assert not env.episode.done


def test_evidence_recall_is_logged(env):
    tid = next(t for t in env.tasks.task_ids("test") if t.startswith("ret-multihop-"))
    task = env.tasks.get(tid)
    env.reset(task_id=tid)
    _tool(env, "open", doc_id=task.hidden["evidence"][1])
    obs, _ = _tool(env, "answer", answer=task.hidden["answer"])
    correctness = obs.verdict.layers[-1]
    assert obs.outcome == Outcome.SUCCESS
    assert correctness.details["evidence_recall"] == 0.5 and correctness.details["evidence"] == task.hidden["evidence"]
    assert env.episode.metrics.extra["evidence_recall"] == 0.5


# ---- verifier -------------------------------------------------------------------------------


@pytest.mark.parametrize(("gold", "answer", "ok"), [
    ("None", "None", True), ("None", "none", True), ("None", "`None`.", True), ("None", "0", False),
    ("True", "1", False), ("1", "True", False), ("1", "1.0", True), ("438", "0o666", True),
    ("'utf-8'", "utf-8", True), ("'utf-8'", '"utf-8"', True), ("'utf-8'", "UTF-8", False),
    ("-1", "-1", True), ("-1", "-1 or 0", False), ("'r'", "'r' or 'rb'", False), ("0.5", "1/2", False),
])
def test_literal_match(gold, answer, ok):
    task = Task(task_id="t", family="retrieval", split="test", prompt="?", hidden={"answer": gold})
    assert LiteralMatch()(task, {"answer": answer}, None).passed is ok, parse_literal(answer)


def test_partial_credit_is_an_option_for_sets():
    tid = next(t for t in RetrievalTasks().task_ids("train") if t.startswith("ret-set-"))
    for partial, expect in ((False, 0.0), (True, None)):
        e = RetrievalEnv(split="train", partial_credit=partial)
        task = e.tasks.get(tid)
        e.reset(task_id=tid)
        obs = e.step(format_tool_call("answer", {"answer": task.hidden["answer"][0]}))
        assert obs.outcome == Outcome.WRONG_ANSWER
        if expect is None:
            assert 0.0 < obs.reward < 1.0
        else:
            assert obs.reward == expect


def test_with_partial_credit_stuffing_scores_nothing_and_a_precise_subset_scores_its_recall():
    from envhub.verifiers.suite import run_suite

    train = RetrievalTasks().task_ids("train")
    ids = [t for t in train if t.startswith("ret-set-")][:6] + [t for t in train if t.startswith("ret-paramset-")][:6]
    stuffing = ["stuffed_set", "stuffed_set_many", "every_candidate"]
    report = run_suite(lambda: RetrievalEnv(split="train", partial_credit=True), ids, cases=stuffing)
    assert report.violations == 0, report.to_json()
    assert {r.case for r in report.results if r.applicable} == set(stuffing)
    assert all(r.reward == 0.0 for r in report.results), [(r.case, r.task_id, r.reward) for r in report.results]
    e = RetrievalEnv(split="train", partial_credit=True)
    for tid in ids:
        gold = e.tasks.get(tid).hidden["answer"]
        e.reset(task_id=tid)
        obs = e.step(format_tool_call("answer", {"answer": ", ".join(gold[:-1] or gold)}))
        assert obs.reward == pytest.approx(len(gold[:-1] or gold) / len(gold)) and obs.reward > 0


def test_attacks_all_fail_on_every_question_type():
    e = RetrievalEnv(split="test")
    from envhub.verifiers.suite import run_suite

    ids = _sample(e.tasks.task_ids("test"), per_type=6)
    assert {i.split("-")[1] for i in ids} >= {"default", "module", "exception", "multihop", "paramset"}
    report = run_suite(lambda: RetrievalEnv(split="test"), ids)
    assert report.violations == 0, report.to_json()
    cases = report.by_case()
    assert {c.name for c in retrieval_attacks()} <= set(cases)
    assert cases["gold"]["rate"] == 1.0 and cases["noop"]["rate"] == 1.0
    # set questions exist only in train (their modules span packages); cover them there too
    train_sets = [t for t in RetrievalTasks().task_ids("train") if t.startswith("ret-set-")][:8]
    assert run_suite(lambda: RetrievalEnv(split="train"), train_sets).violations == 0


# ---- whole-env behaviour --------------------------------------------------------------------


def test_gold_policy_searches_opens_and_succeeds_noop_fails(env):
    for tid in _sample(env.tasks.task_ids("test"), per_type=3):
        obs = env.reset(task_id=tid)
        agent = GoldPolicy().start(env, obs, seed=0)
        tools_used = []
        while not obs.done:
            action = agent.act(obs)
            tools_used.append(json.loads(action.text.removeprefix("<tool_call>").removesuffix("</tool_call>"))["name"])
            obs = env.step(action.text)
        assert obs.outcome == Outcome.SUCCESS and obs.reward == 1.0
        assert tools_used[0] == "search" and "open" in tools_used and tools_used[-1] == "answer"
        assert env.episode.metrics.extra["evidence_recall"] == 1.0
        obs = env.reset(task_id=tid)
        obs = env.step(NoopPolicy().start(env, obs, seed=0).act(obs).text)
        assert obs.done and obs.reward == 0.0 and obs.outcome != Outcome.SUCCESS


@pytest.mark.slow
def test_registered_cli_verify_and_gymnasium(tmp_path):
    register_envs()
    from envhub.cli.commands import app

    out = tmp_path / "suite.json"
    result = CliRunner().invoke(app, ["verify", "envhub/Retrieval-v0", "--split", "all", "--limit", "0",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    questions = len(load_questions())
    assert report["violations"] == 0 and report["cases"]["every_candidate"]["tasks"] == questions

    import envhub  # noqa: F401  (registers with Gymnasium)

    genv = gymnasium.make("envhub/Retrieval-v0", split="test")
    text, info = genv.reset(seed=3)
    assert "search" in text and info["split"] == "test"
    task = genv.unwrapped.env.episode.task
    reward = 0.0
    for action in genv.unwrapped.env.gold_actions(task):
        _, reward, terminated, truncated, _ = genv.step(action.text)
    assert terminated and not truncated and reward == 1.0
    genv.close()


def test_env_args_filter_types_and_reject_unknown():
    e = RetrievalEnv(split="validation", types=["multihop"])
    assert e.tasks.task_ids("validation") and all(t.startswith("ret-multihop-") for t in e.tasks.task_ids("validation"))
    with pytest.raises(ValueError, match="unknown question types"):
        RetrievalEnv(types=["trivia"]).tasks  # noqa: B018


# ---- provenance and benchmark ---------------------------------------------------------------


def test_build_script_reproduces_the_snapshot(tmp_path):
    """The snapshot is what the build tool extracts; on the interpreter it was built with, byte for byte."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "envhub.tasks.retrieval.offline.build_corpus", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    built = json.loads((tmp_path / MANIFEST_FILE).read_text())
    stored = json.loads((DATA_DIR / MANIFEST_FILE).read_text())
    assert built["documents"] >= 2000 and built["questions"] >= 1000
    if built["python"] == stored["python"]:
        assert built["sha256"] == stored["sha256"]


def test_bench_reports_latency_and_baseline():
    from envhub.tasks.retrieval.bench import run_bench

    lines: list[str] = []
    result = run_bench(out=lines.append, queries=80, baseline_queries=5)
    assert result["documents"] == len(load_corpus())
    assert 0 < result["p50_ms"] <= result["p99_ms"]
    assert result["bm25s"]["queries"] == 80
    if "rank_bm25" in result:
        assert result["speedup_vs_rank_bm25"] > 0 and any("faster than rank-bm25" in line for line in lines)
    assert any("p50" in line for line in lines)
