"""The agent cannot swap its work dir for a link (issue 38): not through the tools, not at submit,
not for the episodes after it.

Where the executor runs as the uid that owns the work dir's parent (the process backend; the
landlock backend of a server that is not root, ``landlock-own-uid`` here), a command could rename
the work dir and put a symlink (to ``/proc``, to ``/``, to the project's source) or another
directory in its place. Each scenario does that through ``exec`` as an agent's ``run`` tool would,
then uses what the tools use: ``list_files``, ``read_file``, ``exec``, ``read_tree`` (what a grader
reads at submit), ``copy_out``; then resets the sandbox, as a pool does between episodes, and runs
a clean episode on it. Nothing may come from outside the real work dir, nothing outside it may be
wiped, and no call may raise ``SandboxError`` (an infra outcome the agent could cause).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_fixtures import backend_params, require_backend

import envhub
from envhub.parsing import format_tool_call
from envhub.sandboxes import SandboxPool, SandboxSpec, new_sandbox
from envhub.sandboxes.base import Limits, SandboxError
from envhub.sandboxes.resident import ResidentSandbox
from envhub.types import Outcome

SPEC = SandboxSpec(limits=Limits(memory_mb=256, timeout_s=10.0))
BACKENDS = [*backend_params("docker", "bwrap", "landlock", "process"), pytest.param("landlock-own-uid", id="landlock-own-uid")]
SECRET = "envhub-swap-project-marker"
#: ``$W`` is the work dir, ``$P`` the stand-in for the project's source (a host directory).
SWAPS = {
    "proc": 'mv "$W" "$W.x" && ln -s /proc "$W"',
    "root": 'mv "$W" "$W.x" && ln -s / "$W"',
    "project": 'mv "$W" "$W.x" && ln -s "$P" "$W"',
    "chmod-parent-first": 'chmod u+w "$W/.." ; mv "$W" "$W.x" && ln -s /proc "$W"',
    "planted-dir": 'mv "$W" "$W.x" && mkdir "$W" && echo planted > "$W/planted.txt"',
    "retargeted": 'mv "$W" "$W.x" && mkdir "$W.t" && echo decoy > "$W.t/decoy.txt" && ln -s "$W.t" "$W"',
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A host directory standing in for envhub's project data: the agent must neither read nor wipe it."""
    root = tmp_path_factory.mktemp("project")
    (root / "SECRET.txt").write_text(SECRET)
    (root / "src").mkdir()
    (root / "src" / "data.txt").write_text(SECRET)
    root.chmod(0o755)
    return root


def _open(backend: str, monkeypatch: pytest.MonkeyPatch) -> ResidentSandbox:
    if backend != "landlock-own-uid":
        require_backend(backend)
        return new_sandbox(backend, SPEC)
    require_backend("landlock")
    from envhub.sandboxes import landlock_backend

    with monkeypatch.context() as patched:  # built as a server that is not root builds it: one uid for both
        patched.setattr(landlock_backend.os, "geteuid", lambda: 1000)
        sandbox = landlock_backend.LandlockSandbox(SPEC)
    assert sandbox.uid is None
    return sandbox.start()


@pytest.fixture(params=BACKENDS)
def sandbox(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[ResidentSandbox]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the process backend's "trusted code only"
        sb = _open(request.param, monkeypatch)
    try:
        yield sb
    finally:
        sb.close()


def _refused(call) -> None:
    """A tool call the agent's own tree makes fail: an ``OSError`` or ``ValueError``, never infra."""
    try:
        data = call()
    except SandboxError as exc:  # an InfraError: the agent made an env_error
        pytest.fail(f"the agent's swap turned a tool call into an infra error: {exc}")
    except (OSError, ValueError):
        return
    assert SECRET.encode() not in data and b"envhub" not in data, data[:200]


def _assert_only_real_files(sb: ResidentSandbox, tmp_path: Path) -> None:
    assert list(sb.list_files()) == ["a.txt"]
    assert sb.read_file("a.txt") == b"mine"
    for path in ("self/cmdline", "1/cmdline", "self/environ", "etc/passwd", "SECRET.txt", "src/data.txt",
                 "planted.txt", "decoy.txt", "../work.x/a.txt"):
        _refused(lambda path=path: sb.read_file(path))
    assert sb.read_tree() == {"a.txt": b"mine"}  # what a grader reads at submit
    assert sb.read_tree().left_out == {}
    out = tmp_path / "out"
    sb.copy_out(".", str(out))
    assert sorted(p.name for p in out.rglob("*")) == ["a.txt"]
    ran = sb.exec("cat a.txt; ls")
    assert ran.exit_code == 0 and ran.stdout == "minea.txt\n", ran.summary()


def _assert_clean(sb: ResidentSandbox) -> None:
    """A following episode: an empty, real work dir under its own name, and everything works."""
    assert list(sb.list_files()) == [] and sb.read_tree() == {}
    ran = sb.exec(["sh", "-c", 'pwd; ls -A; test ! -L "$(pwd)" && echo real'])
    assert ran.exit_code == 0 and ran.stdout == f"{sb.workdir}\nreal\n", ran.summary()
    sb.write_files({"next.txt": "episode 2"})
    assert sb.read_file("next.txt") == b"episode 2" and sb.read_tree() == {"next.txt": b"episode 2"}
    assert sb.exec("cat next.txt").stdout == "episode 2"
    if sb.backend in ("process", "landlock"):  # the scratch base holds nothing the agent left
        assert sorted(os.listdir(os.path.dirname(sb.workdir))) == ["home", "work"]
    sb.reset()


@pytest.mark.parametrize("swap", sorted(SWAPS))
def test_a_swapped_work_dir_redirects_no_tool_and_the_next_episode_is_clean(sandbox, swap, project, tmp_path):
    sb = sandbox
    for episode in range(2):  # the swap, then the same again on the reset sandbox
        sb.write_files({"a.txt": "mine"})
        swapped = sb.exec(f'W=$(pwd); P={project}; {SWAPS[swap]}; echo done')
        assert "done" in swapped.stdout, swapped.summary()
        if sb.backend == "landlock" or (sb.backend in ("docker", "bwrap")):
            assert "Permission denied" in swapped.stderr or "busy" in swapped.stderr.lower() \
                or "read-only" in swapped.stderr.lower(), f"the swap was not refused: {swapped.summary()}"
        if sb.backend == "process":  # nothing refuses it there: the swap itself happened
            assert os.path.islink(sb.workdir) or swap == "planted-dir", swapped.summary()
        _assert_only_real_files(sb, tmp_path / f"e{episode}")
        if swap == "retargeted":  # the link's target changes after the tools first looked
            sb.exec('W=$(pwd); W=${W%.x}; test -L "$W" && ln -sfn /proc "$W"')
            _assert_only_real_files(sb, tmp_path / f"r{episode}")
        sb.reset()
        _assert_clean(sb)
    assert (project / "SECRET.txt").read_text() == SECRET, "the reset wiped what the link named"
    assert (project / "src" / "data.txt").read_text() == SECRET


@pytest.mark.parametrize("backend", backend_params("docker", "bwrap", "landlock", "process"))
def test_a_pooled_sandbox_is_clean_for_every_later_episode_after_a_swap(backend, project):
    """The attack that poisoned a pool: every later episode of every session ended at reset as
    env_error. Here each later episode gets the same sandbox back, pristine."""
    require_backend(backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        pool = SandboxPool(backend, SPEC, size=1)
    with pool:
        with pool.acquire() as sb:
            first = sb.sandbox
            sb.write_files({"a.txt": "mine"})
            sb.exec(f'W=$(pwd); mv "$W" "$W.x" && ln -s /proc "$W"; ln -s {project} "$W.y"; echo $?')
            assert SECRET.encode() not in b"".join(sb.read_tree().values())
        for episode in range(7):
            with pool.acquire() as sb:
                assert sb.sandbox is first, "the pool replaced the sandbox: the reset failed"
                assert list(sb.list_files()) == [], f"episode {episode} did not start clean"
                sb.write_files({"x.txt": str(episode)})
                ran = sb.exec("cat x.txt; pwd")
                assert ran.exit_code == 0 and ran.stdout == f"{episode}{sb.workdir}\n", ran.summary()
        assert pool.stats.replaced == 0
    assert (project / "SECRET.txt").read_text() == SECRET


def _tool(env, name: str, **arguments: object) -> str:
    obs = env.step(format_tool_call(name, arguments))
    assert not obs.done, (name, arguments, obs.outcome, obs.verdict and obs.verdict.detail)
    return obs.messages[-1].content


def _submit(env) -> tuple[Outcome, str]:
    """Submit; the outcome and what the grader's snapshot gate read."""
    obs = env.step(format_tool_call("submit", {}))
    assert obs.done and obs.verdict is not None
    assert obs.outcome is not Outcome.ENV_ERROR, obs.verdict
    snapshot = [layer.reason for layer in obs.verdict.layers if layer.name == "snapshot"]
    assert SECRET not in str(obs.verdict)
    return obs.outcome, "".join(snapshot)


@pytest.mark.parametrize("backend", backend_params("process", "landlock", "bwrap", "docker"))
def test_through_an_envs_tools_the_swap_is_the_agents_own_failure_and_later_episodes_are_clean(backend, project):
    """As an agent does it: ``run`` swaps the work dir, ``list_files`` and ``read_file`` see only the
    real work dir, ``submit`` grades the real work dir exactly as an episode without the swap, and
    every later episode on the same (pooled) sandbox runs and grades alike: no ``env_error``."""
    require_backend(backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        env = envhub.make("envhub/CodeRepair-v0", split="train", sandbox=backend)
    try:
        task_id = env.tasks.task_ids("train")[0]
        env.reset(task_id=task_id)
        listing = _tool(env, "list_files")
        baseline = _submit(env)  # the same task submitted untouched
        env.reset(task_id=task_id)
        _tool(env, "run", command=f'W=$(pwd); mv "$W" "$W.x" && ln -s /proc "$W"; ln -sfn {project} "$W.y"; echo ok')
        after = _tool(env, "list_files")
        assert after == listing and "cmdline" not in after and "self" not in after.split("\n")
        for path in ("self/cmdline", "1/cmdline", "self/environ", "SECRET.txt"):
            shown = _tool(env, "read_file", path=path)
            assert shown.startswith("Error:") and "envhub" not in shown and SECRET not in shown, shown
        assert _submit(env) == baseline
        for _ in range(3):  # later episodes, same pooled sandbox
            env.reset(task_id=task_id)
            assert _tool(env, "run", command='pwd; test -L "$(pwd)" || echo real').endswith("real")
            assert _tool(env, "list_files") == listing
            assert _submit(env) == baseline
    finally:
        env.close()
    assert (project / "SECRET.txt").read_text() == SECRET
