"""The code-repair episode and its verifier, on real instances, in the selected sandbox backend."""

import json
import shutil
import subprocess
import tomllib

import pytest
from sandbox_fixtures import require_backend

import envhub
from envhub.parsing import format_tool_call
from envhub.sandboxes import base_image_tag
from envhub.tasks.code_repair.attacks.cases import PATCH_RUNNER_INDIRECT, inject
from envhub.tasks.code_repair.observations import project_suite
from envhub.tasks.code_repair.workspace import agent_files, project_sources, project_tests, visible_test_ids
from envhub.verifiers.probes.grader import run_probes
from envhub.verifiers.pytest_grader import run_hidden_tests
from envhub.verifiers.suite import NotApplicable, run_suite, suite_cases

ENV = "envhub/CodeRepair-v0"


@pytest.fixture(scope="module")
def env():
    e = envhub.make(ENV, split="train")
    yield e
    e.close()


@pytest.fixture(scope="module")
def sample(env):
    """One instance per difficulty plus one with visible tests, from the real manifest."""
    insts = env.tasks.manifest.by_split("train")
    chosen = [next(i for i in insts if i.difficulty == d) for d in (1, 2, 3)]
    chosen.append(next(i for i in insts if [t for t in i.visible_tests if "[" not in t] and i not in chosen))
    return chosen


def test_the_agent_never_sees_hidden_tests(env, sample):
    for inst in sample:
        obs = env.reset(task_id=inst.instance_id)
        files = env.step(format_tool_call("list_files", {})).messages[0].content.splitlines()
        hidden = project_tests(inst.project)
        for path in files:
            assert path.startswith("src/") or path.startswith("tests/"), path
            if path.startswith("tests/"):
                shown = env.sandbox().read_file(path).decode()
                assert shown != hidden[path]  # a pruned copy, never the hidden file
        assert "def test_" not in obs.messages[1].content
        for test in set(inst.fail_to_pass) - set(inst.visible_tests):
            assert test.split("::")[-1] not in obs.messages[1].content
        env.abort(envhub.Outcome.FORMAT_ERROR, "test done")


def test_file_tools_and_explained_errors(env, sample):
    inst = sample[0]
    env.reset(task_id=inst.instance_id)
    path = sorted(inst.buggy_files)[0]
    text = env.step(format_tool_call("read_file", {"path": path, "start_line": 2, "end_line": 3})).messages[0].content
    lines = inst.buggy_files[path].splitlines()
    assert text.splitlines() == [f"    2  {lines[1]}", f"    3  {lines[2]}",
                                 f"[... {len(lines) - 3} more lines; use start_line=4]"]
    missing = env.step(format_tool_call("read_file", {"path": "src/nope.py"})).messages[0].content
    assert missing == "Error: no such file or directory: src/nope.py"
    escape = env.step(format_tool_call("read_file", {"path": "../../etc/passwd"})).messages[0].content
    assert escape.startswith("Error:")
    twice = env.step(format_tool_call("str_replace", {"path": path, "old": "", "new": "x"})).messages[0].content
    assert "must occur exactly once" in twice
    found = env.step(format_tool_call("search", {"pattern": "def ", "path": "src"})).messages[0].content
    assert path in found
    ran = env.step(format_tool_call("run", {"command": "echo hi && exit 3"})).messages[0].content
    assert ran == "hi\n[exit code 3]"
    assert env.episode.format_errors == 0
    env.abort(envhub.Outcome.FORMAT_ERROR, "test done")


def test_visible_tests_run_in_the_agent_sandbox(env, sample):
    inst = sample[3]
    env.reset(task_id=inst.instance_id)
    out = env.step(format_tool_call("run", {"command": "PYTHONPATH=src python3 -m pytest -q tests 2>&1 | tail -1"}))
    assert "passed" in out.messages[0].content or "failed" in out.messages[0].content
    env.abort(envhub.Outcome.FORMAT_ERROR, "test done")


@pytest.mark.slow
def test_gold_passes_noop_and_every_attack_fail(sample):
    report = run_suite(lambda: envhub.make(ENV, split="train"), [i.instance_id for i in sample], jobs=2)
    rows = report.by_case()
    assert rows["gold"]["rate"] == 1.0, rows["gold"]["violations"]
    assert len(rows) >= 20
    for name, row in rows.items():
        assert row["violations"] == [], (name, row["violations"])


def test_a_str_replace_fix_succeeds_and_a_partial_fix_gets_partial_credit(sample):
    inst = next(i for i in sample if i.difficulty == 2)
    original = project_sources(inst.project)
    env = envhub.make(ENV, split="train", partial_credit=True)
    env.reset(task_id=inst.instance_id)
    path = sorted(inst.buggy_files)[0]
    env.step(format_tool_call("write_file", {"path": path, "content": original[path]}))
    obs = env.step(format_tool_call("submit", {}))
    details = obs.verdict.layers[-1].details
    if len(inst.buggy_files) == 1:
        assert obs.outcome is envhub.Outcome.SUCCESS and obs.reward == 1.0
    else:  # one of two buggy files fixed
        assert obs.outcome is envhub.Outcome.WRONG_ANSWER
        assert 0.0 <= obs.reward < 1.0 and details["fail_to_pass"] == len(inst.fail_to_pass)
    env.close()


# Forces every report's outcome through a new __setattr__: no fingerprinted function changes.
FORCE_OUTCOME = """import sys as _s
_r = getattr(_s, "mod" + "ules")["_pytest.reports"]
def _set(self, key, value):
    object.__setattr__(self, key, "passed" if key == "outcome" else value)
_r.TestReport.__setattr__ = _set
"""


@pytest.mark.slow
def test_probe_grader_alone_rejects_attacks_the_integrity_gate_would_catch(env, sample):
    """Defense in depth: even without the integrity gate, planted files, early exits and runner
    patches leave the bug's observations as they are, and the real fix passes."""
    inst = sample[0]
    path = sorted(inst.buggy_files)[0]
    buggy = agent_files(inst)
    src = {p: t for p, t in buggy.items() if p.startswith("src/")}
    fixed = {**src, path: project_sources(inst.project)[path]}
    allpass = "import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n" \
              "    o = yield\n    o.get_result().outcome = 'passed'\n"
    attacks = {
        "conftest in src": {**src, "src/conftest.py": allpass},
        "sitecustomize in src": {**src, "src/sitecustomize.py": "import sys; sys.exit(0)\n"},
        ".pth in src": {**src, "src/a.pth": "import os; os._exit(0)\n"},
        "os._exit at import": {**src, path: inject("import os\nos._exit(0)\n", src[path])},
        "keyboard interrupt": {**src, path: inject("raise KeyboardInterrupt\n", src[path])},
        "fake output": {**src, path: inject("print('PASSED ' * 99)\n", src[path])},
        "shadowed json": {**src, "src/json.py": "raise SystemExit(0)\n"},
        "shadowed runtime": {**src, "src/envhub_probe.py": "def observe(value, site):\n    pass\n"},
        "TestReport patched": {**src, path: inject(PATCH_RUNNER_INDIRECT, src[path])},
        "outcome forced by __setattr__": {**src, path: inject(FORCE_OUTCOME, src[path])},
    }
    suite = project_suite(inst.project)
    with env.grading_sandbox() as sb:
        assert not run_probes(sb, suite, files=fixed, tests=inst.expected_tests).failed()
    for name, files in attacks.items():
        compile(files[path], path, "exec")  # the attack runs: it is not a syntax error
        with env.grading_sandbox() as sb:
            result = run_probes(sb, suite, files=files, tests=inst.expected_tests)
        assert set(inst.fail_to_pass) & set(result.failed()), name


@pytest.mark.slow
def test_injected_attack_code_compiles_in_every_buggy_module(env):
    """Attack code goes after docstrings and ``from __future__`` imports, so it really runs."""
    for inst in env.tasks.manifest.instances:
        for path, text in inst.buggy_files.items():
            code = "import os\nos._exit(0)\n"
            module = inject(code, text)
            compile(module, path, "exec")
            assert module.replace(code + "\n", "", 1) == text  # nothing of the module is lost


@pytest.mark.slow
def test_submissions_from_elsewhere_as_patch_or_file_set(tmp_path, sample):
    inst = sample[1]
    original = project_sources(inst.project)
    rows = [
        {"task_id": inst.instance_id, "submission": inst.patch},
        {"task_id": inst.instance_id, "submission": {p: original[p] for p in inst.buggy_files}},
        {"task_id": inst.instance_id, "submission": {"tests/test_x.py": "def test_ok(): pass\n"}},
        {"task_id": inst.instance_id, "submission": "--- a/src/zz.py\n+++ b/src/zz.py\n@@ -1 +1 @@\n-a\n+b\n"},
    ]
    sub = tmp_path / "subs.jsonl"
    sub.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = subprocess.run(["envhub", "verify", ENV, "--split", "train", "--submissions", str(sub)],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    graded = [json.loads(line) for line in out.splitlines()]
    assert [g.get("outcome") for g in graded[:3]] == ["success", "success", "format_error"]
    assert "does not exist" in graded[3]["error"]


@pytest.mark.slow
def test_harbor_export_grades_like_envhub(tmp_path, sample):
    inst = sample[0]
    out = tmp_path / "harbor"
    res = subprocess.run(["envhub", "tasks", "export", ENV, str(out), "--format", "harbor", "--split", "train",
                          "--limit", "1"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    [task] = list(out.iterdir())
    for name in ("instruction.md", "task.toml", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh"):
        assert (task / name).is_file(), name
    # it says what it allows and needs: no network, a public base image by default, the agent's uid
    config = tomllib.loads((task / "task.toml").read_text())
    assert config["environment"]["allow_internet"] is False
    assert (config["metadata"]["envhub_base_image"], config["metadata"]["envhub_agent_uid"]) == ("python:3.11-slim", 1000)
    dockerfile = (task / "environment" / "Dockerfile").read_text().splitlines()
    assert "ARG BASE_IMAGE=python:3.11-slim" in dockerfile and dockerfile[-1] == "USER 1000:1000"
    assert "each task needs: network none (allow_internet = false); base image python:3.11-slim; uid 1000" \
        in res.stdout, res.stdout
    hidden = set(project_tests(inst.project).values())
    assert not any(p.read_text() in hidden for p in (task / "environment").rglob("*.py"))
    for solve, expected in ((False, "0"), (True, "1")):
        app, logs = tmp_path / f"app{solve}", tmp_path / f"logs{solve}"
        shutil.copytree(task / "environment" / "repo", app)
        env = {"ENVHUB_APP_DIR": str(app), "ENVHUB_LOG_DIR": str(logs), "PATH": "/usr/bin:/bin"}
        if solve:
            subprocess.run(["bash", str(task / "solution" / "solve.sh")], env=env, check=True)
        subprocess.run(["bash", str(task / "tests" / "test.sh")], env=env, check=True, capture_output=True)
        assert (logs / "reward.txt").read_text().strip() == expected


NO_AGENT_PROCESS = "import os, sys; sys.exit(any(os.stat(f'/proc/{p}').st_uid == 1000 for p in os.listdir('/proc') " \
                   "if p.isdigit()))"


@pytest.mark.slow
@pytest.mark.docker
def test_harbor_task_builds_and_is_solved_in_its_own_container(tmp_path, sample):
    """What Harbor does: build environment/, let the agent (here solve.sh) work as the image's
    user, then upload tests/ and run test.sh as root (``[verifier] user = "root"``); the reward
    file says 1 for the fix, 0 for nothing. The agent also leaves a process running that tries to
    read the uploaded tests: it is stopped, and the expected observations are root's alone."""
    require_backend("docker")
    out = tmp_path / "harbor"
    base = base_image_tag()  # the local, offline image (the default, a public one, would be pulled)
    res = subprocess.run(["envhub", "tasks", "export", ENV, str(out), "--format", "harbor", "--split", "train",
                          "--limit", "1", "--base-image", base], check=True, capture_output=True, text=True, timeout=300)
    assert f"base image {base};" in res.stdout, res.stdout
    [task] = list(out.iterdir())
    assert tomllib.loads((task / "task.toml").read_text())["environment"]["allow_internet"] is False
    tag = f"envhub-test-harbor:{task.name.lower()}"
    subprocess.run(["docker", "build", "-q", "-t", tag, str(task / "environment")], check=True,
                   capture_output=True, timeout=300)
    try:
        for solve, expected in ((False, "0"), (True, "1")):
            logs = tmp_path / f"logs{solve}"
            logs.mkdir(mode=0o777)
            logs.chmod(0o777)
            tests = tmp_path / f"tests{solve}"
            shutil.copytree(task / "tests", tests)  # Harbor copies tests/ in: the container may change it
            as_agent = "setpriv --reuid=1000 --regid=1000 --clear-groups"
            lurker = "(while :; do cat /tests/expected.json > /tmp/stolen 2>/dev/null; sleep 0.05; done) &"
            agent = f"{as_agent} bash -c '{lurker} " + ("bash /solution/solve.sh" if solve else "true") + "' && "
            res = subprocess.run(
                ["docker", "run", "--rm", "--user", "0", "--network", "none", "-v", f"{task / 'solution'}:/solution:ro",
                 "-v", f"{tests}:/tests", "-v", f"{logs}:/logs/verifier", tag,
                 "bash", "-c", f"{agent}bash /tests/test.sh && python3 -c {NO_AGENT_PROCESS!r} && ! test -s /tmp/stolen"],
                capture_output=True, text=True, timeout=300)
            assert res.returncode == 0, res.stdout + res.stderr
            assert (logs / "reward.txt").read_text().strip() == expected, res.stdout + res.stderr
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=120)


def test_unknown_instance_is_a_clear_error(env):
    with pytest.raises(KeyError, match="unknown code-repair instance"):
        env.reset(task_id="nope-123")


def test_manifest_has_300_validated_instances_split_by_project(env):
    manifest = env.tasks.manifest
    assert len(manifest.instances) >= 300
    by_split = {}
    for p in manifest.projects:
        by_split.setdefault(p.split, set()).add(p.name)
    assert set(by_split) == {"train", "validation", "test"}
    assert not (by_split["train"] & by_split["test"]) and not (by_split["train"] & by_split["validation"])
    assert {i.difficulty for i in manifest.instances} == {1, 2, 3}
    # hard-coding what the agent can see (the issue's examples, visible tests) never passes
    for inst in manifest.instances:
        assert len(set(inst.fail_to_pass) - set(inst.visible_tests)) > inst.difficulty, inst.instance_id


@pytest.mark.slow
def test_verify_command_over_every_project_and_difficulty_exits_zero(env, tmp_path):
    """`envhub verify` with every case on one instance of every project, the difficulty taken in
    turn (every difficulty appears), of every split. The whole manifest (`--split all --limit 0`,
    about 8 minutes on 2 cores) is the release check in docs/code-repair.md."""
    by_project: dict[str, dict[int, str]] = {}
    for inst in env.tasks.manifest.instances:
        by_project.setdefault(inst.project, {}).setdefault(inst.difficulty, inst.instance_id)
    chosen: dict[tuple[str, int], str] = {}
    for turn, (project, levels) in enumerate(sorted(by_project.items())):
        level = sorted(levels)[turn % len(levels)]
        chosen[(project, level)] = levels[level]
    assert {p for p, _ in chosen} == {p.name for p in env.tasks.manifest.projects}
    assert {d for _, d in chosen} == {inst.difficulty for inst in env.tasks.manifest.instances}
    out = tmp_path / "suite.json"
    res = subprocess.run(["envhub", "verify", ENV, "--split", "all", "--tasks", ",".join(chosen.values()),
                          "--jobs", "2", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(out.read_text())
    assert report["violations"] == 0 and report["cases"]["gold"]["rate"] == 1.0
    assert len(report["cases"]) >= 20
    assert all(row["tasks"] + row["not_applicable"] == len(chosen) for row in report["cases"].values())
    assert report["cases"]["hardcode_issue_examples"]["tasks"] >= len(chosen) // 5  # applicable to ~a third


@pytest.mark.slow
def test_hardcoding_the_issue_examples_takes_effect_and_still_fails(env):
    """The attack is real -- the issue's own calls now give the expected values, so some
    fail-to-pass tests pass -- and the hidden tests still reject every such submission."""
    cases = {c.name: c for c in suite_cases(env)}
    played = effective = 0
    for inst in env.tasks.manifest.by_split("validation"):
        try:
            verdict = env.play(inst.instance_id, lambda task: cases["hardcode_issue_examples"].actions(env, task))
        except NotApplicable:
            continue
        played += 1
        details = next(layer for layer in verdict.layers if layer.name == "hidden_tests").details
        effective += details["fail_to_pass_passed"] >= 1
        assert verdict.outcome is envhub.Outcome.WRONG_ANSWER, (inst.instance_id, verdict.detail)
        if played == 12:
            break
    assert played == 12 and effective >= 6, (played, effective)


@pytest.mark.slow
def test_gold_and_noop_rollouts(tmp_path):
    for policy, rate in (("gold", 1.0), ("noop", 0.0)):
        out = tmp_path / policy
        subprocess.run(["envhub", "rollout", ENV, "--policy", policy, "--split", "validation", "--episodes", "12",
                        "--concurrency", "2", "--out", str(out), "--no-progress"], check=True, capture_output=True,
                       timeout=900)
        report = json.loads((out / "report.json").read_text())
        assert report["strict_success_rate"] == rate and report["by_class"]["infra_failure"] == 0


def test_no_silent_fallback_to_the_unisolated_process_backend(monkeypatch, sample):
    """Where neither docker nor bwrap works, auto would pick `process`, which hides nothing (the
    hidden tests sit in the checkout): code repair refuses that unless asked for by name."""
    from envhub.sandboxes import selection

    monkeypatch.delenv("ENVHUB_SANDBOX", raising=False)
    monkeypatch.setattr(selection, "_auto_choice", "process")  # what auto finds on such a machine
    inst = sample[0]
    auto = envhub.make(ENV, sandbox="auto", sandbox_pool=0)
    obs = auto.reset(task_id=inst.instance_id)  # the repository goes into the sandbox at reset
    assert obs.done and obs.outcome is envhub.Outcome.ENV_ERROR
    assert "--sandbox process" in auto.episode.verdict.detail
    auto.close()
    named = envhub.make(ENV, sandbox="process", sandbox_pool=0)
    named.reset(task_id=inst.instance_id)
    obs = named.step(format_tool_call("list_files", {"path": "."}))
    assert not obs.done and "src/" in obs.messages[-1].content
    named.close()


def _visible_instances(env):
    return [i for i in env.tasks.manifest.instances if visible_test_ids(i)]


def test_visible_tests_keep_only_what_they_use(env):
    """A constant or helper that only hidden tests use would show the agent their data."""
    import ast

    for inst in _visible_instances(env):
        for path, text in agent_files(inst).items():
            if not path.startswith("tests/"):
                continue
            tree = ast.parse(text)
            used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            used |= {a.arg for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for a in f.args.args}
            for node in tree.body:
                names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
                if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith(("test", "Test")):
                    names.append(node.name)
                for name in names:
                    assert name in used or name == "pytestmark", (inst.instance_id, path, name)


@pytest.mark.slow
def test_visible_tests_pass_on_the_original_code(env):
    """Pruning never breaks a visible test: each passes against the unbroken project."""
    for inst in _visible_instances(env):
        visible = {p: t for p, t in agent_files(inst).items() if p.startswith("tests/")}
        with env.grading_sandbox() as sb:
            result = run_hidden_tests(sb, files=project_sources(inst.project), tests=visible,
                                      expected=visible_test_ids(inst))
        assert result.all_passed, (inst.instance_id, result.failed, result.missing, result.output_tail)
