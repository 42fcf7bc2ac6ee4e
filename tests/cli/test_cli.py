import json
import subprocess
import sys

import pytest


def envhub(*args, check=False):
    return subprocess.run([sys.executable, "-m", "envhub.cli", *args], capture_output=True, text=True,
                          timeout=300, check=check)


def test_list_shows_computation_with_task_counts():
    out = envhub("list", check=True).stdout
    assert "envhub/Computation-v0" in out


def test_unknown_env_is_a_clear_error_with_suggestions(tmp_path):
    res = envhub("rollout", "envhub/Computaton-v0", "--out", str(tmp_path))
    assert res.returncode == 2
    assert "unknown env" in res.stderr and "envhub/Computation-v0" in res.stderr


def test_bad_group_size_and_unknown_policy(tmp_path):
    res = envhub("rollout", "envhub/Computation-v0", "--episodes", "5", "--group-size", "2", "--out", str(tmp_path))
    assert res.returncode == 2 and "multiple of --group-size" in res.stderr
    res = envhub("rollout", "envhub/Computation-v0", "--policy", "smart", "--out", str(tmp_path))
    assert res.returncode == 2 and "unknown policy" in res.stderr


def test_unwritable_out_is_reported_and_nothing_else_happens(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("keep me")
    res = envhub("rollout", "envhub/Computation-v0", "--policy", "noop", "--out", str(blocker / "x"))
    assert res.returncode == 2 and "cannot write to output directory" in res.stderr
    assert blocker.read_text() == "keep me"


def test_noop_rollout_via_cli_writes_report(tmp_path):
    envhub("rollout", "envhub/Computation-v0", "--policy", "noop", "--episodes", "6", "--out", str(tmp_path),
           check=True)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["attempted"] == 6 and report["strict_success_rate"] == 0.0


def test_verify_submissions_file_grades_each_line(tmp_path):
    from envhub.tasks.computation.env import ComputationTasks

    tasks = ComputationTasks()
    tid = "comp-bigint-L1-0"
    good = tasks.get(tid).hidden["answer"]
    sub = tmp_path / "subs.jsonl"
    sub.write_text("\n".join(json.dumps(r) for r in [
        {"task_id": tid, "submission": good},
        {"task_id": tid, "submission": "7"},
        {"task_id": tid, "submission": f"{good} or 7"},
        {"task_id": "comp-nope", "submission": "1"},
        {"submission": "1"},
    ]) + "\n")
    res = envhub("verify", "envhub/Computation-v0", "--submissions", str(sub), check=True)
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r.get("outcome") for r in rows] == ["success", "wrong_answer", "format_error", None, None]
    assert "unknown task" in rows[3]["error"] and "task_id" in rows[4]["error"]


def test_verify_rejects_a_malformed_submissions_file(tmp_path):
    sub = tmp_path / "subs.jsonl"
    sub.write_text('{"task_id": "a", "submission": "1"}\nnot json\n')
    res = envhub("verify", "envhub/Computation-v0", "--submissions", str(sub))
    assert res.returncode == 2 and "subs.jsonl:2: not JSON" in res.stderr


@pytest.mark.slow
def test_verify_suite_over_a_stratified_sample_of_every_split(tmp_path):
    """The computation suite through the command line; every instance is `--split all --limit 0` (~90 s)."""
    out = tmp_path / "suite.json"
    res = envhub("verify", "envhub/Computation-v0", "--split", "all", "--limit", "300", "--out", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(out.read_text())
    assert report["violations"] == 0 and report["cases"]["gold"]["rate"] == 1.0
    assert {"noop", "two_candidates", "candidate_list"} <= set(report["cases"])
    assert all(row["tasks"] + row["not_applicable"] == 300 for row in report["cases"].values())


def test_verify_rejects_an_unknown_split():
    res = envhub("verify", "envhub/Computation-v0", "--split", "everything")
    assert res.returncode == 2 and "unknown split" in res.stderr


def test_a_command_whose_optional_dependency_is_missing_names_the_extra():
    """`envhub serve` whose module cannot be imported (None in sys.modules: what Python does for a
    package that is not installed) says which extra brings it, and exits 2."""
    code = ("import sys; sys.modules['envhub.server.cli'] = None; sys.argv = ['envhub', 'serve', 'x']; "
            "from envhub.cli.commands import main; main()")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "`envhub serve` needs an optional dependency" in res.stderr
    assert "pip install 'envhub[serve]'" in res.stderr


@pytest.mark.parametrize("command", [["rollout", "--out", "{out}"], ["verify"], ["serve"], ["serve", "--docker"]],
                         ids=["rollout", "verify", "serve", "serve-docker"])
def test_an_unknown_env_arg_names_the_arguments_the_env_takes(command, tmp_path):
    """Before any run, server or image: exit 2 with the env's own arguments, not a Python-internal
    TypeError about an unexpected keyword argument."""
    from typer.testing import CliRunner

    from envhub.cli.commands import app

    name, *options = command
    args = [name, "envhub/Computation-v0", *(o.format(out=tmp_path / "run") for o in options),
            "--env-arg", "bogus=1", "--env-arg", "level=2"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert "envhub/Computation-v0 takes no argument 'bogus', 'level'; did you mean 'levels'?" in res.output
    assert "(it takes: budget, kinds, levels, parser, sandbox, sandbox_pool, split)" in res.output
    assert "unexpected keyword" not in res.output and "Traceback" not in res.output
    assert not (tmp_path / "run").exists()
