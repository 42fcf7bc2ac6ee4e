"""Bug synthesis for code repair: mutation operators, validation rules, issue texts, manifest."""

from __future__ import annotations

import ast
import difflib
import gzip
import json
import random
import shutil
import subprocess
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from envhub.tasks.code_repair import manifest as mf
from envhub.tasks.code_repair.offline import synthesize as synthesize_module
from envhub.tasks.code_repair.offline.candidates import ordered_sites
from envhub.tasks.code_repair.offline.issue_text import (
    choose_visible_tests,
    describe,
    render_issue,
    stable_rng,
)
from envhub.tasks.code_repair.offline.mutate import apply_mutations, apply_site, enumerate_sites
from envhub.tasks.code_repair.offline.operators import OPERATORS
from envhub.tasks.code_repair.offline.runs import Project, Runner, RunResult, classify, run_tests
from envhub.tasks.code_repair.offline.sites import MutationError, SiteRef
from envhub.tasks.code_repair.offline.synthesize import Settings, synthesize_project

SNIPPET = textwrap.dedent('''\
    """A module with comments that must survive mutation."""


    def clamp(x, lo=0, hi=10, strict=False):
        """Clamp x into [lo, hi]."""
        if x < lo:  # too small
            raise ValueError("low")
        elif x > hi:
            return hi
        else:
            y = x * 2
        total = add(x, y)
        return total if strict and x != lo else x


    def window(xs, n):
        return [xs[i] for i in range(n)] + xs[1:n]
''')


def mutants(source: str, operator: str) -> dict[str, str]:
    """Every applicable mutant of one operator: description -> new source."""
    out = {}
    for ref in enumerate_sites(source, "src/m.py", [operator]):
        try:
            new, description = apply_site(source, ref)
        except MutationError:
            continue
        out[description] = new
    return out


def changed_lines(old: str, new: str) -> list[str]:
    return [line for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


@pytest.mark.parametrize(
    ("operator", "before", "after"),
    [
        ("off_by_one", "    if x < lo:  # too small", "    if x <= lo:  # too small"),
        ("off_by_one", "for i in range(n)] + xs[1:n]", "for i in range(n - 1)] + xs[1:n]"),
        ("off_by_one", "for i in range(n)] + xs[1:n]", "for i in range(n)] + xs[1:n + 1]"),
        ("comparison_flip", "strict and x != lo else x", "strict and x == lo else x"),
        ("comparison_flip", "    elif x > hi:", "    elif x < hi:"),
        ("arithmetic_swap", "        y = x * 2", "        y = x // 2"),
        ("boolean_inversion", "strict and x != lo", "strict or x != lo"),
        ("boolean_inversion", "    if x < lo:  # too small", "    if not x < lo:  # too small"),
        ("wrong_constant", "        y = x * 2", "        y = x * 3"),
        ("remove_statement", "        y = x * 2", "        pass"),
        ("swap_arguments", "    total = add(x, y)", "    total = add(y, x)"),
        ("wrong_default", "def clamp(x, lo=0, hi=10, strict=False):", "def clamp(x, lo=1, hi=10, strict=False):"),
        ("wrong_default", "def clamp(x, lo=0, hi=10, strict=False):", "def clamp(x, lo=0, hi=10, strict=True):"),
        ("exception_type", '        raise ValueError("low")', '        raise TypeError("low")'),
    ],
)
def test_operator_rewrites_only_the_mutated_line(operator: str, before: str, after: str) -> None:
    assert before in SNIPPET
    expected = SNIPPET.replace(before, after, 1)
    found = mutants(SNIPPET, operator)
    assert expected in found.values(), f"{operator}: {sorted(found)}"
    assert len(changed_lines(SNIPPET, expected)) == 2  # one line out, one line in; comments kept


def test_remove_branch_and_early_return() -> None:
    branches = set(mutants(SNIPPET, "remove_branch").values())
    assert SNIPPET.replace("    else:\n        y = x * 2\n", "") in branches
    assert SNIPPET.replace("    elif x > hi:\n        return hi\n", "") in branches
    guarded = "def g(x):\n    if x < 0:\n        raise ValueError(x)\n    return x\n"
    assert set(mutants(guarded, "remove_branch").values()) == {"def g(x):\n    return x\n"}
    early = set(mutants(SNIPPET, "early_return").values())
    assert SNIPPET.replace("    total = add", "    return None\n    total = add") in early
    assert SNIPPET.replace("    return total", "    return None\n    return total") in early
    typed = "def h(x) -> int:\n    y = x + 1\n    return y\n"
    assert set(mutants(typed, "early_return").values()) == {"def h(x) -> int:\n    y = x + 1\n    return 0\n    return y\n"}


def test_every_operator_has_sites_and_mutants_parse() -> None:
    for name in OPERATORS:
        found = mutants(SNIPPET, name)
        assert found, name
        for new in found.values():
            assert ast.dump(ast.parse(new)) != ast.dump(ast.parse(SNIPPET))
            assert '"""A module with comments that must survive mutation."""' in new


def test_non_ascii_source_positions_are_bytes() -> None:
    source = 'def f(x):\n    s = "é€" + str(x)  # ünïcode\n    return len(s) > 2\n'
    found = mutants(source, "off_by_one")
    assert 'def f(x):\n    s = "é€" + str(x)  # ünïcode\n    return len(s) >= 2\n' in found.values()


def test_site_enumeration_and_application_are_deterministic() -> None:
    first = enumerate_sites(SNIPPET, "src/m.py")
    assert first == enumerate_sites(SNIPPET, "src/m.py")
    assert len({r.operator for r in first}) == len(OPERATORS)
    ref = first[len(first) // 2]
    assert apply_site(SNIPPET, ref) == apply_site(SNIPPET, ref)
    with pytest.raises(MutationError):
        apply_site(SNIPPET, SiteRef("src/m.py", "clamp", "comparison_flip", 999))


def test_mutations_in_two_functions_combine() -> None:
    a = SiteRef("src/m.py", "clamp", "exception_type", 0)
    b = SiteRef("src/m.py", "window", "off_by_one", 0)
    result = apply_mutations(lambda _: SNIPPET, [a, b])
    text = result.files["src/m.py"]
    assert "raise TypeError" in text and "range(n - 1)" in text
    assert len(result.descriptions) == 2


# ---------------------------------------------------------------------------------------------
# A tiny fixture project
# ---------------------------------------------------------------------------------------------

MINI_SRC = textwrap.dedent('''\
    def add(a, b):
        return a + b


    def is_even(n):
        return n % 2 == 0


    def clamp(x, lo, hi):
        if x < lo:
            return lo
        if x > hi:
            return hi
        return x
''')

MINI_TESTS = textwrap.dedent('''\
    from mini import add, clamp, is_even


    def test_add_small():
        assert add(2, 3) == 5


    def test_add_negative():
        assert add(-1, 1) == 0


    def test_is_even():
        assert is_even(4)
        assert not is_even(7)


    def test_clamp_low():
        assert clamp(-5, 0, 10) == 0


    def test_clamp_high():
        assert clamp(50, 0, 10) == 10


    def test_clamp_inside():
        assert clamp(5, 0, 10) == 5
''')


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> Project:
    root = tmp_path_factory.mktemp("projects") / "mini"
    (root / "src").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "src" / "mini.py").write_text(MINI_SRC)
    (root / "tests" / "test_mini.py").write_text(MINI_TESTS)
    (root / "project.json").write_text(json.dumps(
        {"name": "mini", "description": "tiny", "entry_modules": ["mini.py"], "tags": ["test"]}))
    return Project.load(root)


@pytest.fixture(scope="module")
def baseline(mini: Project) -> set[str]:
    run = run_tests(mini)
    assert set(run.outcomes.values()) == {"passed"}
    return run.passed()


@pytest.mark.slow
def test_validation_rules(mini: Project, baseline: set[str]) -> None:
    wrong_sum = run_tests(mini, {"src/mini.py": MINI_SRC.replace("return a + b", "return a - b")})
    verdict = classify(baseline, wrong_sum)
    assert verdict.status == "ok"
    assert verdict.fail_to_pass == ("tests/test_mini.py::test_add_negative", "tests/test_mini.py::test_add_small")
    assert "tests/test_mini.py::test_clamp_low" in verdict.pass_to_pass
    assert set(verdict.fail_to_pass) | set(verdict.pass_to_pass) == baseline

    # The probe saw the failing call and both values, without the test's text.
    record = wrong_sum.failures["tests/test_mini.py::test_add_small"]
    assert record["kind"] == "compare"
    assert (record["call"], record["actual"], record["expected"]) == ("add(2, 3)", "-1", "5")
    text = describe(record, stable_rng("x"))
    assert "`add(2, 3)`" in text and "`-1`" in text and "`5`" in text

    # A forked run of a warm pytest sees exactly what a fresh interpreter sees.
    with Runner(fork=True, size=1) as runner:
        forked = run_tests(mini, {"src/mini.py": MINI_SRC.replace("return a + b", "return a - b")}, runner=runner)
        assert (forked.outcomes, forked.failures) == (wrong_sum.outcomes, wrong_sum.failures)
        equivalent = {"src/mini.py": MINI_SRC.replace("if x < lo:", "if x <= lo:")}
        assert classify(baseline, run_tests(mini, equivalent, runner=runner)).status == "equivalent"
        looping = {"src/mini.py": MINI_SRC.replace("    return a + b", "    while True:\n        pass")}
        assert classify(baseline, run_tests(mini, looping, timeout=2, runner=runner)).status == "timeout"


def test_classify_drops_broken_mutants(baseline: set[str]) -> None:
    every = dict.fromkeys(baseline, "passed")
    assert classify(baseline, RunResult(every, {}, ["tests/test_mini.py"])).status == "collection_error"
    assert classify(baseline, RunResult({}, {}, [], timed_out=True)).status == "timeout"
    assert classify(baseline, RunResult(dict.fromkeys(baseline, "failed"), {}, [])).status == "all_fail"
    one_missing = {t: "passed" for t in sorted(baseline)[1:]}
    verdict = classify(baseline, RunResult(one_missing, {}, []))
    assert verdict.status == "ok" and verdict.fail_to_pass == (sorted(baseline)[0],)  # missing counts as failed


SMALL = Settings(singles=2, pairs=1, triples=0, max_single_runs=8, max_combo_runs=3, per_function=1)


@pytest.fixture(scope="module")
def synthesized(mini: Project, baseline: set[str]) -> list[mf.Instance]:
    with ThreadPoolExecutor(2) as pool, Runner(size=2) as runner:
        result = synthesize_project(mini, 0, SMALL, pool, jobs=2, runner=runner)
    assert result.info is not None
    return result.instances


def test_synthesized_instances_are_valid(mini: Project, synthesized: list[mf.Instance], tmp_path: Path) -> None:
    assert [i.difficulty for i in synthesized] == [1, 1, 2]
    singles = [set(i.mutations) for i in synthesized[:2]]
    assert set(synthesized[2].mutations) == singles[0] | singles[1]
    for inst in synthesized:
        assert inst.fail_to_pass and inst.pass_to_pass
        assert inst.instance_id.startswith("mini-") and len(inst.instance_id) == len("mini-") + 8
        assert set(inst.visible_tests) <= set(inst.expected_tests)
        assert len(set(inst.visible_tests) & set(inst.fail_to_pass)) <= 1
        # The gold patch turns the buggy files back into the originals.
        work = tmp_path / inst.instance_id
        for rel, text in inst.buggy_files.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_text(text)
        (work / "fix.patch").write_text(inst.patch)
        subprocess.run(["git", "apply", "fix.patch"], cwd=work, check=True, capture_output=True)
        for rel in inst.buggy_files:
            assert (work / rel).read_text() == mini.read(rel)


def test_issue_text_never_quotes_hidden_tests(synthesized: list[mf.Instance]) -> None:
    tree = ast.parse(MINI_TESTS)
    names = [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    statements = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Assert)]
    for inst in synthesized:
        text = inst.issue_text
        assert text.strip()
        assert not any(name in text for name in names), text
        assert not any(stmt in text for stmt in statements), text
        assert "assert" not in text and "def " not in text


def _in_process_run(project: Project, files: dict[str, str] | None = None, timeout: float = 60.0,
                    runner: object = None) -> RunResult:
    """A fast stand-in for the pytest subprocess, finishing in random order."""
    time.sleep(random.random() / 50)
    namespace: dict[str, object] = {}
    try:
        exec((files or {}).get("src/mini.py", MINI_SRC), namespace)
        exec(MINI_TESTS.split("\n", 1)[1], namespace)
    except Exception:
        return RunResult({}, {}, ["tests/test_mini.py"])
    outcomes, failures = {}, {}
    for name, func in sorted(namespace.items()):
        if name.startswith("test_"):
            node = f"tests/test_mini.py::{name}"
            try:
                func()  # type: ignore[operator]
                outcomes[node] = "passed"
            except Exception as exc:
                outcomes[node], failures[node] = "failed", {"kind": "exception", "call": name[5:] + "()",
                                                           "exc_type": type(exc).__name__}
    return RunResult(outcomes, failures, [])


def test_synthesis_is_independent_of_parallelism(mini: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(synthesize_module, "run_tests", _in_process_run)
    settings = Settings(singles=4, pairs=2, triples=1, max_single_runs=20, max_combo_runs=6)
    results = []
    for jobs, seed in ((1, 0), (2, 0), (2, 1)):
        with ThreadPoolExecutor(jobs) as pool:
            results.append([i.model_dump() for i in synthesize_project(mini, seed, settings, pool, jobs).instances])
    assert results[0] == results[1]
    assert results[0] != results[2]
    levels = [i["difficulty"] for i in results[0]]
    assert levels.count(1) == 4 and {2, 3} <= set(levels)


def test_ordered_sites_depend_on_seed(mini: Project) -> None:
    assert ordered_sites(mini, 0) == ordered_sites(mini, 0)
    assert ordered_sites(mini, 0) != ordered_sites(mini, 1)
    assert sorted(ordered_sites(mini, 0)) == sorted(ordered_sites(mini, 1))


# ---------------------------------------------------------------------------------------------
# Manifest and splits
# ---------------------------------------------------------------------------------------------


def _instance(project: str, split: str, n: int = 0) -> mf.Instance:
    return mf.Instance(
        instance_id=f"{project}-{n:08x}", project=project, split=split, difficulty=1,
        mutations=[mf.Mutation(file="src/a.py", function="f", operator="wrong_constant", site=0, description="d")],
        patch="--- a/src/a.py\n+++ b/src/a.py\n", buggy_files={"src/a.py": "x = 2\n"},
        fail_to_pass=["tests/test_a.py::test_x"], pass_to_pass=["tests/test_a.py::test_y"],
        issue_text="`f` returns a wrong result\n",
    )


def _manifest(projects: dict[str, str]) -> mf.Manifest:
    return mf.Manifest(
        seed=0,
        projects=[mf.ProjectInfo(name=p, split=s, description="", source_sha256="0" * 64, tests=[])
                  for p, s in projects.items()],
        instances=[_instance(p, s, i) for i, (p, s) in enumerate(projects.items())],
    )


def test_manifest_round_trip_is_byte_identical(tmp_path: Path) -> None:
    manifest = _manifest({"alpha": "train", "beta": "test"})
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    assert mf.save_manifest(manifest, a) == mf.save_manifest(manifest, b)
    assert a.read_bytes() == b.read_bytes()
    assert mf.load_manifest(a) == manifest
    assert not list(tmp_path.glob(".*.tmp"))


def test_manifest_rejects_tampering(tmp_path: Path) -> None:
    path = tmp_path / "m.json.gz"
    mf.save_manifest(_manifest({"alpha": "train"}), path)
    raw = json.loads(gzip.decompress(path.read_bytes()))
    raw["manifest"]["instances"][0]["fail_to_pass"] = ["tests/test_a.py::test_y"]
    path.write_bytes(gzip.compress(json.dumps(raw).encode()))
    with pytest.raises(ValueError, match="checksum"):
        mf.load_manifest(path)


def test_instance_rules() -> None:
    good = _instance("alpha", "train").model_dump()
    with pytest.raises(ValueError, match="fail-to-pass"):
        mf.Instance.model_validate({**good, "fail_to_pass": []})
    with pytest.raises(ValueError, match="overlap"):
        mf.Instance.model_validate({**good, "fail_to_pass": good["pass_to_pass"]})
    with pytest.raises(ValueError, match="split"):
        mf.Manifest(seed=0, projects=[mf.ProjectInfo(name="alpha", split="train", description="",
                                                     source_sha256="", tests=[])],
                    instances=[_instance("alpha", "test")])


def test_splits_are_by_project_and_stable(monkeypatch: pytest.MonkeyPatch) -> None:
    names = [f"project_{i}" for i in range(400)]
    splits = {n: mf.assign_split(n) for n in names}
    assert splits == {n: mf.assign_split(n) for n in names}
    share = {s: sum(v == s for v in splits.values()) / len(names) for s in mf.SPLITS}
    assert 0.6 < share["train"] < 0.8 and 0.08 < share["validation"] < 0.22 and 0.08 < share["test"] < 0.22
    monkeypatch.setitem(mf.PINNED_SPLITS, "project_0", "test")
    assert mf.assign_split("project_0") == "test"


def test_shipped_manifest_splits_are_disjoint_by_project() -> None:
    # The manifest ships as package data: missing, it is a packaging mistake, which must fail here.
    assert mf.DEFAULT_MANIFEST.is_file(), f"the packaged manifest is missing: {mf.DEFAULT_MANIFEST}"
    manifest = mf.load_manifest(mf.DEFAULT_MANIFEST)
    by_split: dict[str, set[str]] = {s: {i.project for i in manifest.by_split(s)} for s in mf.SPLITS}
    assert not by_split["train"] & by_split["test"]
    assert not by_split["train"] & by_split["validation"]
    assert not by_split["validation"] & by_split["test"]
    assert len(manifest.instances) >= 300
    assert all(i.split == mf.assign_split(i.project) for i in manifest.instances)
    # The instances were made from the projects as they are now (else regenerate, see offline/synthesize.py).
    for info in manifest.projects:
        assert info.source_sha256 == mf.project_fingerprint(mf.PROJECTS_DIR / info.name), info.name


def test_visible_tests_for_about_a_third() -> None:
    f2p, p2p = ["t::f1", "t::f2"], [f"t::p{i}" for i in range(10)]
    chosen = [choose_visible_tests(f"id-{i}", f2p, p2p, ["t::f2"]) for i in range(300)]
    share = sum(bool(c) for c in chosen) / len(chosen)
    assert 0.25 < share < 0.42
    for c in chosen:
        assert len(set(c) & set(f2p)) <= 1 and set(c) <= set(f2p) | set(p2p)
        assert set(c) & set(f2p) <= {"t::f2"}


def test_render_issue_multiple_bugs() -> None:
    records = [
        {"kind": "compare", "call": "to_roman(4)", "op": "==", "actual": "'IIII'", "expected": "'IV'"},
        {"kind": "no_raise", "call": "to_roman(0)", "expected_exc": "ValueError", "actual": "''"},
    ]
    text = render_issue(records, project="roman", rng=stable_rng(1))
    assert "1. " in text and "2. " in text
    assert "`to_roman(4)`" in text and "`'IIII'`" in text and "`'IV'`" in text
    assert "should raise `ValueError`" in text


def test_projects_dir_layout_is_discoverable() -> None:
    # The projects ship as package data: none there is a packaging mistake, which must fail here.
    projects = sorted(mf.PROJECTS_DIR.glob("*/project.json"))
    assert projects, f"no packaged projects under {mf.PROJECTS_DIR}"
    for path in projects[:3]:
        project = Project.load(path.parent)
        assert project.modules and all((project.root / m).is_file() for m in project.modules)
        assert shutil.which("git")


def test_hardcode_resistance_needs_a_failing_test_the_agent_cannot_see(synthesized: list[mf.Instance]) -> None:
    from envhub.tasks.code_repair.offline.candidates import hardcode_resistant

    inst = synthesized[0]
    hidden = [f"tests/test_mini.py::test_hidden_{k}" for k in range(3)]
    many = inst.model_copy(update={"fail_to_pass": hidden, "visible_tests": []})
    assert hardcode_resistant(many)  # one described in the issue, two more hidden
    only_described = inst.model_copy(update={"fail_to_pass": hidden[:1], "visible_tests": []})
    assert not hardcode_resistant(only_described)
    shown = inst.model_copy(update={"fail_to_pass": hidden[:2], "visible_tests": hidden[1:2]})
    assert not hardcode_resistant(shown)  # the second one is visible: nothing hidden is left


# ---------------------------------------------------------------------------------------------
# Build tools stay offline
# ---------------------------------------------------------------------------------------------


def _imported_modules(tree: ast.Module) -> list[str]:
    """Dotted names of everything a module imports (``from . import x`` gives ``.x``)."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return names


def test_runtime_never_imports_the_offline_build_tools() -> None:
    """A family's ``offline/`` folder (its build tools) is imported by nothing else in ``tasks/``."""
    tasks = Path(__file__).resolve().parents[3] / "tasks"
    families = sorted(p.parent.parent.name for p in tasks.glob("*/offline/__init__.py"))
    assert {"code_repair", "retrieval"} <= set(families)
    offenders = [
        f"{path.relative_to(tasks)} imports {name}"
        for path in sorted(tasks.rglob("*.py")) if "offline" not in path.relative_to(tasks).parts
        and "projects" not in path.relative_to(tasks).parts
        for name in _imported_modules(ast.parse(path.read_text(encoding="utf-8")))
        if "offline" in name.split(".")
    ]
    assert offenders == []
