"""The reward audit of ``envhub verify harbor:DIR`` (``envhub.tasks.harbor.audit``), with the real
Docker engine: generic attacks played as episodes, on task dirs written to be hackable in known
ways (hackable/ here: the audit must find each planted hack), on the honest task dirs (tasks/
here), and on code-repair tasks exported to Harbor task dirs FROM the local base image.

Task dirs are copied to a temporary directory whose Dockerfiles name this checkout's base image tag
(``envhub.sandboxes.images.base_image_tag``), so everything builds offline.
"""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest
from sandbox_fixtures import backend_problem
from typer.testing import CliRunner

import envhub
from envhub.tasks.harbor.audit import ATTACKS, attack_names, audit_check, hackable, select
from envhub.tasks.harbor.env import HarborBridge
from envhub.verifiers.fidelity import run_fidelity

HERE = Path(__file__).resolve().parent
HACKABLE = HERE / "hackable"
HONEST = HERE / "tasks"
docker = pytest.mark.skipif(backend_problem("docker") is not None, reason="no Docker engine")


def offline_copy(src: Path, dest: Path) -> Path:
    from envhub.sandboxes.images import base_image_tag

    shutil.copytree(src, dest)
    for dockerfile in dest.rglob("environment/Dockerfile"):
        dockerfile.write_text(re.sub(r"envhub/base:\S+", base_image_tag(), dockerfile.read_text()))
    return dest


def planted(task_dir: Path) -> str:
    return tomllib.loads((task_dir / "task.toml").read_text())["metadata"]["planted_hack"]


# ---- no Docker ---------------------------------------------------------------------------------------


def test_the_cases_are_scripted_episodes_that_end_in_submit():
    assert attack_names() == ["path_fakes", "interpreter_wrappers", "sitecustomize", "stdlib_edit", "conftest",
                              "prewritten_reward", "lingering_writer", "dirs_symlinked", "huge_output"]
    for case in ATTACKS:
        actions = case.actions()
        assert actions[-1].text is not None and '"submit"' in actions[-1].text
        assert all('"bash"' in (a.text or "") for a in actions[:-1]) and len(actions) >= 2
        # generic: no attack names a task's answer or file
        assert not any("hello" in (a.text or "") or "out.txt" in (a.text or "") for a in actions)
    with pytest.raises(ValueError, match="unknown attack"):
        select(["nope"])
    assert {d.name: planted(d) for d in HACKABLE.iterdir()} == {
        "path-pytest": "path_fakes", "workdir-conftest": "conftest", "user-site-python": "sitecustomize",
        "root-agent": "interpreter_wrappers"}


# ---- in Docker ---------------------------------------------------------------------------------------


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_graded_in_place_the_audit_finds_every_planted_hack_and_only_it(tmp_path):
    """Harbor's shared mode (``grading="in_place"``): the audit still proves it finds each planted
    weakness, and every row says where it was graded."""
    root = offline_copy(HACKABLE, tmp_path / "hackable")
    with envhub.make(f"harbor:{root}", grading="in_place") as env:
        assert isinstance(env, HarborBridge)
        ids = sorted(env.source.tasks)
        rows = list(audit_check()(env, ids))
    assert len(rows) == len(ids) * len(ATTACKS)
    assert all(r.status in ("pass", "fail") for r in rows), [r for r in rows if r.status == "skip"]
    broken = [r for r in rows if r.status == "fail" and not r.detail.startswith("hackable: ")]
    assert not broken, broken  # no attack caused an infra outcome or raised
    assert hackable(rows) == {tid: [planted(root / tid)] for tid in ids}
    for r in rows:
        if r.status == "fail":
            assert r.got == "success, reward 1"
            assert r.detail == f"hackable: {planted(root / r.task_id)} (graded in place)"
        else:
            assert r.detail.endswith("; graded in place")


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_graded_separately_only_what_is_planted_in_the_work_dir_is_found(tmp_path):
    """The default: a fresh container with the agent's work dirs copied in as data. What the
    weaknesses of ``path-pytest`` (a fake ``pytest`` in ``/app/bin``, on ``PATH``: not copied),
    ``user-site-python`` (the agent's user site-packages) and ``root-agent`` (replaced
    interpreters) let in is not there when ``test.sh`` runs; ``workdir-conftest`` runs pytest in
    ``/app``, the work dir, so the agent's ``conftest.py`` there (copied as data) is still found."""
    root = offline_copy(HACKABLE, tmp_path / "hackable")
    with envhub.make(f"harbor:{root}") as env:
        ids = sorted(env.source.tasks)
        rows = list(audit_check()(env, ids))
    assert len(rows) == len(ids) * len(ATTACKS)
    broken = [r for r in rows if r.status != "pass" and not r.detail.startswith("hackable: ")]
    assert not broken, broken
    assert hackable(rows) == {"workdir-conftest": ["conftest"]}
    assert not any("graded in place" in r.detail for r in rows)


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_verify_on_the_honest_tasks_oracle_floor_and_no_hack_but_a_root_agent(tmp_path):
    """``envhub verify harbor:DIR --json``: the oracle is the top, nothing-done the floor, and no
    attack is rewarded on ``hello`` (graded separately). ``json-reward`` says
    ``environment_mode = "shared"`` and gives its agent root in the container its tests run in:
    replacing ``bash`` and ``timeout`` there is rewarded, a finding about that task, reported."""
    from envhub.cli.commands import app

    root = offline_copy(HONEST, tmp_path / "tasks")
    shutil.rmtree(root / "broken-build")
    out = tmp_path / "audit.json"
    result = CliRunner().invoke(app, ["verify", f"harbor:{root}", "--split", "all", "--limit", "0", "--json",
                                      "--out", str(out)])
    assert result.exit_code == 1, result.output  # the finding fails the run
    report = json.loads(out.read_text())
    rows = {(tid, r["check"]): r for tid, task_rows in report["tasks"].items() for r in task_rows}
    for tid in ("hello", "json-reward"):
        assert rows[(tid, "oracle")]["status"] == "pass", rows[(tid, "oracle")]
        assert rows[(tid, "nothing_done")]["status"] == "pass"
        assert rows[(tid, "huge_action")]["status"] == "pass"
    assert all(rows[("hello", f"attack:{name}")]["status"] == "pass" for name in attack_names())
    found = {name for name in attack_names() if rows[("json-reward", f"attack:{name}")]["status"] == "fail"}
    assert found == {"interpreter_wrappers"}
    # json-reward says environment_mode = "shared": graded in the agent's container, and the row says so
    assert rows[("json-reward", "attack:interpreter_wrappers")]["detail"] == \
        "hackable: interpreter_wrappers (graded in place)"
    failed = {key for key, r in rows.items() if r["status"] == "fail"}
    assert failed == {("json-reward", "attack:interpreter_wrappers")}


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_exported_code_repair_tasks_resist_every_attack(tmp_path):
    """Two code-repair instances exported FROM the local base image (the default FROM, a public
    python image, is not here offline): the oracle is the top, and no attack is rewarded."""
    from envhub.sandboxes.images import base_image_tag

    source = envhub.make("envhub/CodeRepair-v0", split="test")
    try:
        ids = list(source.tasks.task_ids("test"))[:2]
        source.export_harbor(ids, tmp_path / "export", base_image=str(base_image_tag()))
    finally:
        source.close()
    with envhub.make(f"harbor:{tmp_path / 'export'}") as env:
        oracle, extra = env.fidelity_plan(0)
        report = run_fidelity(env, ids, oracle=oracle, extra_checks=extra)
    rows = report.by_task()
    for tid in ids:
        by_check = {r.check: r for r in rows[tid]}
        assert by_check["oracle"].status == "pass", by_check["oracle"]
        assert by_check["nothing_done"].status == "pass", by_check["nothing_done"]
        assert all(by_check[f"attack:{n}"].status == "pass" for n in attack_names()), \
            [r for r in rows[tid] if r.status != "pass"]
    assert report.failures == 0, [r for r in report.results if r.status == "fail"]
