"""The one door to a sandbox: ``create_sandbox`` (pool sizes, isolation) and an env's
:class:`~envhub.sandboxes.door.SandboxDoor`, the only caller of it. Process backend: no
Docker or bubblewrap needed."""

from __future__ import annotations

import pytest

import envhub
from envhub.errors import InfraError
from envhub.sandboxes import PooledSandbox, SandboxError, create_sandbox, factory, selection
from envhub.sandboxes.base import Limits
from envhub.sandboxes.door import SandboxDoor
from envhub.tasks.computation.env import ComputationEnv

pytestmark = pytest.mark.filterwarnings("ignore:envhub is using the 'process' sandbox backend")


def test_pool_zero_is_a_cold_sandbox_of_its_own_and_bad_sizes_fail(monkeypatch):
    monkeypatch.setenv("ENVHUB_SANDBOX_POOL", "3")
    with create_sandbox("process", pool=0) as sb:  # an explicit size wins over the variable
        assert not isinstance(sb, PooledSandbox)
        assert sb.exec_python("print(6 * 7)").stdout.strip() == "42"
    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError, match="pool size"):
            create_sandbox("process", pool=bad)
    monkeypatch.setenv("ENVHUB_SANDBOX_POOL", "lots")
    with pytest.raises(ValueError, match="ENVHUB_SANDBOX_POOL='lots'"):
        create_sandbox("process")


def test_isolation_refuses_the_process_fallback_but_not_process_by_name(monkeypatch):
    monkeypatch.delenv("ENVHUB_SANDBOX", raising=False)
    monkeypatch.setattr(selection, "_auto_choice", "process")  # what auto finds with no docker or bwrap
    with pytest.raises(SandboxError, match="--sandbox process") as refused:
        create_sandbox("auto", pool=0, isolate=True)
    assert "can read all of that" in str(refused.value)  # the way around says what it costs
    monkeypatch.setattr(factory, "_waived", False)
    with pytest.warns(RuntimeWarning, match="rewards and evaluations mean nothing"), \
            create_sandbox("process", pool=0, isolate=True) as sb:
        assert sb.backend == "process"
    monkeypatch.setenv("ENVHUB_SANDBOX", "process")  # by name, for the whole run
    with create_sandbox("auto", pool=0, isolate=True) as sb:
        assert sb.backend == "process"


class _StrictGrading(ComputationEnv):
    grading_limits = Limits(timeout_s=3.0, output_bytes=1024)


class _TrustedTools(ComputationEnv):
    needs_isolation = False


def test_isolation_is_every_env_default_and_a_server_refuses_without_it(monkeypatch):
    """Computation (a python tool) needs isolation without saying so; an author opts out in the
    class. Where auto would fall back to process, the server does not start, and says why."""
    from envhub.server.app import create_app
    from envhub.server.hub import IsolationUnavailable, ServerConfig

    assert ComputationEnv.needs_isolation and not _TrustedTools.needs_isolation
    monkeypatch.delenv("ENVHUB_SANDBOX", raising=False)
    monkeypatch.setattr(selection, "_auto_choice", "process")
    problem = ComputationEnv(sandbox="auto").sandboxes.isolation_problem()
    assert problem and "landlock:" in problem and "bwrap:" in problem and "docker:" in problem
    assert _TrustedTools(sandbox="auto").sandboxes.isolation_problem() is None
    assert ComputationEnv(sandbox="process").sandboxes.isolation_problem() is None  # by name: served, warned
    with pytest.raises(IsolationUnavailable, match="is not served here"):
        create_app("envhub/Computation-v0", ServerConfig())


def test_an_env_gets_its_sandboxes_through_its_door(monkeypatch):
    """Agent sandboxes have the family's spec, grading ones its grading limits; the episode's
    sandbox is released when the episode ends; an env that needs isolation and finds none ends
    the episode as env_error with the fix in the detail, never running unisolated."""
    env = _StrictGrading(sandbox="process", sandbox_pool=0)
    assert isinstance(env.sandboxes, SandboxDoor) and env.sandbox_backend == "process" and env.sandbox_pool == 0
    env.reset(seed=0)
    agent = env.sandbox()
    assert env.sandbox() is agent and agent.limits == ComputationEnv.sandbox_spec.limits
    assert env.episode.sandbox_image == "process:host" and env.episode.metrics.sandbox_seconds > 0
    with env.grading_sandbox() as grading:
        assert grading is not agent and grading.limits == _StrictGrading.grading_limits
    env.abort(envhub.Outcome.FORMAT_ERROR, "done")
    assert env.episode.sandbox is None
    env.close()

    monkeypatch.delenv("ENVHUB_SANDBOX", raising=False)
    monkeypatch.setattr(selection, "_auto_choice", "process")
    auto = _StrictGrading(sandbox="auto", sandbox_pool=0)
    auto.reset(seed=0)
    with pytest.raises(InfraError, match=r"could not start a sandbox.*--sandbox process"):
        auto.sandbox()
    auto.close()


def test_an_unknown_backend_or_pool_fails_when_the_env_is_made():
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        envhub.make("envhub/Computation-v0", sandbox="vm")
    with pytest.raises(TypeError, match="sandbox_pool"):
        envhub.make("envhub/Computation-v0", sandbox_pool=-1)
