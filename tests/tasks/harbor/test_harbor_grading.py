"""Where a Harbor task is graded (``envhub.tasks.harbor.grade``, issue #42 item 3): by default in a
fresh container of the task's image with the agent's work directories copied in as data, so what
the agent planted elsewhere (a fake on ``PATH``, a process left running) is not there when
``test.sh`` runs; in the agent's own container for a task that says ``environment_mode = "shared"``
or a bridge made with ``grading="in_place"``.
"""

from __future__ import annotations

import io
import re
import shutil
import tarfile
from pathlib import Path

import pytest
from sandbox_fixtures import backend_problem

import envhub
from envhub.parsing import format_tool_call
from envhub.tasks.harbor.container import filter_work_tar, is_system_dir
from envhub.tasks.harbor.env import HarborBridge
from envhub.tasks.harbor.grade import IN_PLACE, SEPARATE, grading_mode
from envhub.tasks.harbor.task_dir import HarborTask
from envhub.types import Action, Outcome

TASKS = Path(__file__).resolve().parent / "tasks"
docker = pytest.mark.skipif(backend_problem("docker") is not None, reason="no Docker engine")

#: ``probe``: the agent is root; reward 1 only when /app/out.txt is "hello", no ``sleep 7777`` the
#: agent started is running, and the fake /usr/local/bin/envhub-fake it planted is absent.
PROBE_TEST = """#!/bin/bash
if grep -al '77[7]7' /proc/[0-9]*/cmdline >/dev/null 2>&1; then echo 0 > /logs/verifier/reward.txt; exit 0; fi
if [ -e /usr/local/bin/envhub-fake ]; then echo 0 > /logs/verifier/reward.txt; exit 0; fi
if [ "$(cat /app/out.txt 2>/dev/null)" = "hello" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
PLANT = ("echo hello > /app/out.txt && (nohup sleep 7777 >/dev/null 2>&1 &) && "
         "cp /bin/true /usr/local/bin/envhub-fake && ln -s /etc/passwd /app/escape && echo planted")


def call(name: str, **arguments: object) -> Action:
    return Action(text=format_tool_call(name, dict(arguments)))


def task_copy(name: str, dest: Path, *, toml: dict[str, str] | None = None, test_sh: str | None = None) -> Path:
    from envhub.sandboxes.images import base_image_tag

    shutil.copytree(TASKS / name, dest)
    dockerfile = dest / "environment" / "Dockerfile"
    dockerfile.write_text(re.sub(r"envhub/base:\S+", base_image_tag(), dockerfile.read_text()))
    text = (dest / "task.toml").read_text()
    for old, new in (toml or {}).items():
        assert old in text
        text = text.replace(old, new)
    (dest / "task.toml").write_text(text)
    if test_sh is not None:
        (dest / "tests" / "test.sh").write_text(test_sh)
    return dest


# ---- no Docker ---------------------------------------------------------------------------------------


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    buffer.seek(0)
    return buffer


def _info(name: str, kind: bytes = tarfile.REGTYPE, *, link: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    return info


def test_the_work_is_copied_as_data_links_out_of_it_and_search_paths_left_out():
    src = _tar([
        (_info("app", tarfile.DIRTYPE, mode=0o755), None),
        (_info("app/out.txt"), b"hello"),
        (_info("app/run.sh", mode=0o6755), b"#!/bin/sh\n"),  # setuid, setgid dropped
        (_info("app/inside", tarfile.SYMTYPE, link="out.txt"), None),
        (_info("app/up", tarfile.SYMTYPE, link="../etc/passwd"), None),
        (_info("app/abs", tarfile.SYMTYPE, link="/usr/bin"), None),
        (_info("app/hard", tarfile.LNKTYPE, link="app/out.txt"), None),
        (_info("app/hard-out", tarfile.LNKTYPE, link="etc/shadow"), None),
        (_info("app/fifo", tarfile.FIFOTYPE), None),
        (_info("app/bin/pytest", mode=0o755), b"#!/bin/sh\nexit 0\n"),  # /app/bin is on PATH
        (_info("app/.local/lib/python3.11/site-packages/usercustomize.py"), b"import os\n"),
        (_info("app/../etc/evil"), b"x"),
        (_info("etc/evil"), b"x"),
    ])
    dst = io.BytesIO()
    copied = filter_work_tar(src, dst, "/app", skip=["/app/bin", "/usr/bin"])
    dst.seek(0)
    with tarfile.open(fileobj=dst, mode="r") as tar:
        kept = {m.name: m for m in tar.getmembers()}
    assert set(kept) == {"app", "app/out.txt", "app/run.sh", "app/inside", "app/hard"}
    assert kept["app/run.sh"].mode == 0o755 and kept["app/inside"].linkname == "out.txt"
    assert (copied.files, copied.bytes, copied.too_large) == (2, len(b"hello") + len(b"#!/bin/sh\n"), False)
    reasons = "\n".join(copied.skipped)
    for what in ("/app/up: a symlink out", "/app/abs: a symlink out", "/app/hard-out: a hard link",
                 "/app/fifo: no file", "/app/bin/pytest: on a search path", "site-packages/usercustomize.py: a user site",
                 "/etc/evil: outside"):
        assert what in reasons, reasons
    small = filter_work_tar(_tar([(_info("app/big"), b"x" * 100)]), io.BytesIO(), "/app", limit_bytes=10)
    assert small.too_large


def test_where_each_task_is_graded(tmp_path):
    hello = HarborTask.load(TASKS / "hello")  # no environment_mode: the bridge's default
    assert (grading_mode(hello), grading_mode(hello, IN_PLACE)) == (SEPARATE, IN_PLACE)
    assert grading_mode(HarborTask.load(TASKS / "json-reward")) == IN_PLACE  # "shared", set explicitly
    separate = task_copy("hello", tmp_path / "sep", toml={"[verifier]\n": '[verifier]\nenvironment_mode = "separate"\n'})
    assert grading_mode(HarborTask.load(separate), IN_PLACE) == SEPARATE
    odd = task_copy("hello", tmp_path / "odd", toml={"[verifier]\n": '[verifier]\nenvironment_mode = "sideways"\n'})
    with pytest.raises(ValueError, match="sideways"):
        HarborBridge(str(odd))
    with pytest.raises(ValueError, match="grading"):
        HarborBridge(str(separate), grading="elsewhere")
    assert HarborBridge(str(separate), grading="in_place").grading_modes == {"sep": SEPARATE}
    assert is_system_dir("/") and is_system_dir("/usr/local/bin/x") and not is_system_dir("/app")


# ---- in Docker ---------------------------------------------------------------------------------------


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_separate_grading_oracle_noop_and_an_explicitly_shared_task_in_place(tmp_path):
    root = tmp_path / "tasks"
    task_copy("hello", root / "hello")
    task_copy("json-reward", root / "json-reward")
    with envhub.make(f"harbor:{root}") as env:
        gold = env.play("hello", env.gold_actions)
        assert (gold.outcome, gold.reward) == (Outcome.SUCCESS, 1.0), gold.detail
        details = gold.layers[0].details
        assert details["graded"] == "separate" and details["work_copied"]["/app"]["files"] == 1
        noop = env.play("hello", lambda task: [call("submit")])
        assert (noop.outcome, noop.reward) == (Outcome.WRONG_ANSWER, 0.0), noop.detail
        shared = env.play("json-reward", env.gold_actions)  # environment_mode = "shared": in place
        assert shared.outcome is Outcome.SUCCESS and shared.layers[0].details["graded"] == "in_place"
        assert "work_copied" not in shared.layers[0].details


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_a_process_left_running_and_a_planted_fake_are_absent_when_graded_separately(tmp_path):
    probe = task_copy("hello", tmp_path / "probe", toml={'user = "agent"': 'user = "root"'}, test_sh=PROBE_TEST)

    def plant(task):
        return [call("bash", command=PLANT), call("submit")]

    with envhub.make(f"harbor:{probe}") as env:
        ran = env.play("probe", plant)
        assert (ran.outcome, ran.reward) == (Outcome.SUCCESS, 1.0), ran.detail
        copied = ran.layers[0].details["work_copied"]["/app"]
        assert copied["files"] == 1 and any("/app/escape: a symlink out" in s for s in copied["skipped"])
    with envhub.make(f"harbor:{probe}", grading="in_place") as env:  # the agent's container: the fake is there
        ran = env.play("probe", plant)
        assert (ran.outcome, ran.reward) == (Outcome.WRONG_ANSWER, 0.0), ran.detail
        assert ran.layers[0].details["graded"] == "in_place"


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_environment_mode_separate_from_task_toml_runs_even_on_an_in_place_bridge(tmp_path):
    sep = task_copy("hello", tmp_path / "sep", toml={"[verifier]\n": '[verifier]\nenvironment_mode = "separate"\n'})
    with envhub.make(f"harbor:{sep}", grading="in_place") as env:
        gold = env.play("sep", env.gold_actions)
        assert (gold.outcome, gold.reward) == (Outcome.SUCCESS, 1.0), gold.detail
        assert gold.layers[0].details["graded"] == "separate"
        removed = env.play("sep", lambda task: [call("bash", command="echo hello > /app/out.txt && rm -f /app/*"),
                                                call("submit")])  # what the agent deleted is gone at grading too
        assert removed.outcome is Outcome.WRONG_ANSWER, removed.detail
        assert removed.layers[0].details["work_copied"]["/app"]["files"] == 0


#: Reward 1 for "hello" in /app/out.txt; the tests hang while /app/hang exists (the agent's doing) or
#: always where the task is a slow verifier (``ALWAYS`` set in the verifier's env).
SLOW_TEST = """#!/bin/bash
if [ -e /app/hang ] || [ -n "$ALWAYS" ]; then sleep 600; fi
if [ "$(cat /app/out.txt 2>/dev/null)" = "hello" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_a_timeout_is_the_agents_unless_the_tests_time_out_on_a_pristine_container_too(tmp_path):
    quick = {"timeout_sec = 60.0": "timeout_sec = 3.0"}
    agent_slow = task_copy("hello", tmp_path / "agent-slow", toml=quick, test_sh=SLOW_TEST)
    slow = task_copy("hello", tmp_path / "slow", toml={**quick, 'EXPECTED = "hello"': 'ALWAYS = "1"'},
                     test_sh=SLOW_TEST)
    with envhub.make(f"harbor:{agent_slow}") as env:
        hung = env.play("agent-slow", lambda task: [call("bash", command="echo hello > /app/out.txt && touch /app/hang"),
                                                    call("submit")])
        assert (hung.outcome, hung.reward) == (Outcome.WRONG_ANSWER, 0.0), hung.detail
        details = hung.layers[0].details
        assert details["pristine_timed_out"] is False and "on a pristine container it finished" in hung.detail
        gold = env.play("agent-slow", env.gold_actions)  # the same tests, no hang: graded normally
        assert gold.outcome is Outcome.SUCCESS and "pristine_timed_out" not in gold.layers[0].details
    with envhub.make(f"harbor:{slow}") as env:
        ran = env.play("slow", env.gold_actions)
        assert ran.outcome is Outcome.VERIFIER_ERROR, ran.detail
        assert ran.layers[0].details["pristine_timed_out"] is True and "too slow for its budget" in ran.detail


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_a_grading_container_that_starts_only_once_the_agents_is_gone_is_the_agents_failure(tmp_path, monkeypatch):
    # storage_mb is not enforced: an agent can fill the disk so that no grading container starts beside
    # its own. The first grader start is made to fail as it would then; the retry, with the agent's
    # container removed, starts -- so the failure was the agent's footprint, never infra
    from envhub.errors import InfraError
    from envhub.tasks.harbor import container as container_module

    real_init = container_module.Container.__init__
    failed: list[str] = []

    def crowded(self, image, task, *, start_timeout_s=120.0, phase="agent"):
        if phase == "grader" and not failed:
            failed.append(phase)
            raise InfraError("no space left on device (injected)")
        real_init(self, image, task, start_timeout_s=start_timeout_s, phase=phase)

    task = task_copy("hello", tmp_path / "crowded")
    with envhub.make(f"harbor:{task}") as env:
        monkeypatch.setattr(container_module.Container, "__init__", crowded)
        ran = env.play("crowded", env.gold_actions)
    assert failed == ["grader"] and ran.outcome is Outcome.WRONG_ANSWER, ran.detail
    assert "once the agent's container was removed" in ran.detail
