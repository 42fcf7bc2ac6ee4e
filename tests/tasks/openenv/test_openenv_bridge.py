"""``envhub.make("openenv:URL")`` against a real server process: our Computation env served by
``python -m envhub.server`` (OpenEnv's /ws protocol, /schema, MCP actions), played through the
bridge and compared with the native env. The server is pinned to the ``process`` sandbox backend,
which every test machine has; the gold episodes' python calls really run in it.
"""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator

import pytest

import envhub
from envhub.episode import EpisodeEnv
from envhub.policies import NoopPolicy
from envhub.registry import env_arguments
from envhub.server.testing import serve_command_in_subprocess, serve_in_subprocess
from envhub.tasks.openenv.env import OpenEnvBridge
from envhub.tasks.openenv.hosted_tasks import HostedTasks
from envhub.tasks.openenv.session import ServerFault
from envhub.types import Action, Outcome, ToolCall, Verdict

pytest.importorskip("fastapi")
pytest.importorskip("openenv.core")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # guess_mcp_app, served from here

ENV_ID = "envhub/Computation-v0"
SERVE = [ENV_ID, "--sandbox", "process"]


@pytest.fixture(autouse=True)
def _quiet_process_backend() -> Iterator[None]:
    with warnings.catch_warnings():  # the process backend's warning is expected here
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serve_in_subprocess(SERVE) as (base, _proc):
        yield base


@pytest.fixture(scope="module")
def native() -> Iterator[envhub.Env]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        env = envhub.make(ENV_ID, sandbox="process")
        yield env
        env.close()


@pytest.fixture
def bridge(url: str) -> Iterator[OpenEnvBridge]:
    env = envhub.make("openenv:" + url)
    assert isinstance(env, OpenEnvBridge)
    yield env
    env.close()


def _noop(env: EpisodeEnv, task_id: str) -> Verdict:
    """One episode of the noop policy (an empty submission), its verdict."""
    obs = env.reset(task_id=task_id)
    agent = NoopPolicy().start(env, obs, seed=0)
    while not obs.done:
        obs = env.step(agent.act(obs).text)
    assert obs.verdict is not None
    return obs.verdict


def _call(name: str, **arguments: object) -> Action:
    import json

    return Action(text=f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>")


def test_make_routes_the_openenv_prefix_to_the_bridge(bridge: OpenEnvBridge, native: envhub.Env, url: str):
    assert isinstance(bridge, EpisodeEnv)
    assert bridge.env_id == "openenv:" + url and bridge.mode == "mcp"
    assert [t.name for t in bridge.tool_specs] == [t.name for t in native.tool_specs]
    assert {t.name: t.parameters for t in bridge.tool_specs} == {t.name: t.parameters for t in native.tool_specs}
    assert bridge.terminal_tool == native.terminal_tool == "answer"
    # the server documents its task ids: the same ids, split for split, as the native env
    for split in ("train", "test"):
        assert list(bridge.tasks.task_ids(split)) == list(native.tasks.task_ids(split))
    assert "mode" in (env_arguments("openenv:" + url) or [])
    twin = copy.deepcopy(bridge)  # a copy is the same bridge made again, with its own session
    try:
        assert isinstance(twin, OpenEnvBridge) and twin.env_id == bridge.env_id and twin.session is not bridge.session
    finally:
        twin.close()
    with pytest.raises(TypeError, match="takes no argument"):
        envhub.make("openenv:" + url, moed="mcp")


def test_gold_and_noop_earn_what_they_earn_natively(bridge: OpenEnvBridge, native: envhub.Env):
    for task_id in native.tasks.task_ids("train")[3:6]:
        gold = native.gold_actions(native.tasks.get(task_id))
        assert any("python" in a.text for a in gold[:-1])  # a real tool call before the answer
        want, got = native.play(task_id, lambda _t, g=gold: g), bridge.play(task_id, lambda _t, g=gold: g)
        assert (got.reward, got.outcome) == (want.reward, want.outcome) == (1.0, Outcome.SUCCESS)
        episode = bridge.episode
        assert episode is not None and episode.task.prompt == native.episode.task.prompt
        assert [m.content for m in episode.messages[:2]] == [m.content for m in native.episode.messages[:2]]
        assert episode.scratch["rewards"][-1] == 1.0
        floor_native, floor_bridge = _noop(native, task_id), _noop(bridge, task_id)
        assert floor_bridge.reward == floor_native.reward == 0.0
        assert floor_bridge.outcome == floor_native.outcome
        assert not floor_bridge.outcome.is_infra


def test_a_malformed_action_is_the_agents_tool_error_and_the_episode_goes_on(
        bridge: OpenEnvBridge, native: envhub.Env):
    task_id = native.tasks.task_ids("train")[7]
    gold = native.gold_actions(native.tasks.get(task_id))
    bridge.reset(task_id=task_id)
    obs = bridge.step(_call("answer", answer=5))  # the server rejects an int
    assert not obs.done and obs.messages[0].role == "tool" and obs.messages[0].content.startswith("Error")
    obs = bridge.step(_call("python", code="print(6 * 7)"))
    assert not obs.done and obs.messages[0].content.strip().endswith("42")
    obs = bridge.step(gold[-1])
    assert obs.done and obs.reward == 1.0 and obs.outcome is Outcome.SUCCESS


def test_an_action_too_large_for_the_server_is_the_agents_never_infra(url: str, native: envhub.Env):
    """The server (1 MiB messages) closes its socket with 1009 on a larger one: a step the bridge
    would send that large is refused as the agent's tool error; where the bridge's own limit lets it
    through, the closed session ends the episode as the agent's format error -- never env_error."""
    task_id = native.tasks.task_ids("train")[7]
    huge = Action(text="", tool_calls=[ToolCall(name="python", arguments={"code": "x" * (1 << 20)})])
    env = envhub.make(f"openenv:{url}")
    try:
        env.reset(task_id=task_id)
        obs = env.step(huge)
        assert not obs.done and "bytes" in obs.messages[0].content and obs.messages[0].content.startswith("Error")
        assert env.step(_call("python", code="print(6 * 7)")).messages[0].content.strip().endswith("42")
    finally:
        env.close()
    env = envhub.make(f"openenv:{url}", max_action_bytes=4 << 20)
    try:
        env.reset(task_id=task_id)
        obs = env.step(huge)
        assert obs.done and obs.outcome is Outcome.FORMAT_ERROR and "1009" in obs.verdict.detail
        env.reset(task_id=task_id)  # a new session: the next episode plays
        assert env.step(_call("python", code="print(6 * 7)")).messages[0].content.strip().endswith("42")
    finally:
        env.close()


def test_a_typed_action_env_is_one_tool_and_a_rejected_action_goes_on(url: str, native: envhub.Env):
    """Forced to typed mode, the bridge offers the server's /schema action as one tool; an action
    the server refuses (an unknown field: VALIDATION_ERROR) is answered to the agent."""
    task_id = native.tasks.task_ids("train")[9]
    gold = native.gold_actions(native.tasks.get(task_id))
    with envhub.make("openenv:" + url, mode="typed") as env:
        assert [t.name for t in env.tool_specs] == ["act"] and env.terminal_tool == "act"
        assert "metadata" not in env.tool_specs[0].parameters["properties"]
        assert "text" in env.tool_specs[0].parameters["properties"]
        env.reset(task_id=task_id)
        obs = env.step(_call("act", txt="typo"))
        assert not obs.done and "rejected" in obs.messages[0].content and "txt" in obs.messages[0].content
        for action in gold:  # structured calls: the gold's text holds tool-call markup itself
            obs = env.step(Action(tool_calls=[ToolCall(name="act", arguments={"text": action.text})]))
        assert obs.done and obs.reward == 1.0 and obs.outcome is Outcome.SUCCESS


def test_a_server_killed_mid_episode_is_env_error_not_a_crash(native: envhub.Env):
    task_id = native.tasks.task_ids("train")[11]
    with serve_in_subprocess(SERVE) as (base, proc):
        env = envhub.make("openenv:" + base)
        try:
            env.reset(task_id=task_id)
            assert not env.step(_call("python", code="print(1)")).done
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            obs = env.step(_call("python", code="print(2)"))
            assert obs.done and obs.outcome is Outcome.ENV_ERROR and obs.reward == 0.0
            assert "CONNECTION_LOST" in obs.verdict.detail
            again = env.reset(task_id=task_id)  # a new episode cannot start either: env_error again
            assert again.done and again.outcome is Outcome.ENV_ERROR
        finally:
            env.close()


def test_an_unreachable_server_fails_at_make(url: str):
    with serve_in_subprocess(SERVE) as (base, _proc):
        pass  # the server is gone: its port answers nothing
    with pytest.raises(ServerFault, match="UNREACHABLE"):
        envhub.make("openenv:" + base)
    with pytest.raises(ValueError, match="not a server URL"):
        envhub.make("openenv:nowhere")
    with pytest.raises(KeyError, match="no target"):
        envhub.make("openenv:")


def test_numbered_tasks_split_deterministically():
    tasks = HostedTasks("openenv:x", num_tasks=200)
    splits = {s: list(tasks.task_ids(s)) for s in ("train", "validation", "test")}
    assert sum(len(v) for v in splits.values()) == 200
    assert not set(splits["train"]) & set(splits["test"])
    assert splits == {s: list(HostedTasks("openenv:y", num_tasks=200).task_ids(s)) for s in splits}
    assert 120 < len(splits["train"]) < 190 and splits["test"] and splits["validation"]
    task = tasks.get(splits["test"][0])
    assert task.split == "test" and tasks.reset_data(task.task_id) == {"seed": int(task.task_id[5:])}
    with pytest.raises(KeyError):
        tasks.get("seed-200")


# ---- environments written with OpenEnv's own code -------------------------------------------------

HERE = os.path.dirname(os.path.abspath(__file__))


def _uvicorn(app: str) -> list[str]:
    return [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", "0"]


@pytest.fixture(scope="module")
def guess_url() -> Iterator[str]:
    pytest.importorskip("fastmcp")
    with serve_command_in_subprocess(_uvicorn("guess_mcp_app:app"), cwd=HERE) as (base, _proc):
        yield base


def test_an_openenv_mcp_environment_plays_through_its_tools(guess_url: str):
    """``MCPEnvironment`` + ``create_app``: tools from ``list_tools``, one ``call_tool`` per call;
    the tool's own failures go back to the agent; reward and done are the server's."""
    from guess_mcp_app import secret_of

    with envhub.make("openenv:" + guess_url, terminal_tool="guess") as env:
        assert env.mode == "mcp" and [t.name for t in env.tool_specs] == ["hint", "guess", "explode"]
        assert env.tool_specs[1].parameters["properties"] == {"n": {"type": "integer"}}
        assert env.tasks.version == "seeds-1000"  # no documented task list: numbered seeds
        task_id = env.tasks.task_ids("train")[0]
        secret = secret_of(int(task_id.removeprefix("seed-")))
        obs = env.reset(task_id=task_id)
        assert obs.messages[-1].content == "Guess my number (1..20)."
        assert "between" in env.step(_call("hint")).messages[0].content
        for bad in (_call("explode"), _call("guess", n="x")):  # execution errors: the agent's
            obs = env.step(bad)
            assert not obs.done and obs.messages[0].content.startswith("Error") and "execution_error" in \
                obs.messages[0].content
        obs = env.step(_call("guess", n=secret))
        assert obs.done and obs.reward == 1.0 and obs.outcome is Outcome.SUCCESS
        env.reset(task_id=task_id)
        obs = env.step(_call("guess", n=secret % 20 + 1))
        assert obs.done and obs.reward == 0.0 and obs.outcome is Outcome.WRONG_ANSWER
        floor = _noop(env, task_id)  # an empty guess fails in the tool, turn after turn
        assert floor.reward == 0.0 and floor.outcome is Outcome.BUDGET_EXHAUSTED


def test_a_typed_env_whose_step_raises_on_the_action_is_the_agents_tool_error():
    """OpenEnv answers a step whose env code raised with an error frame; the action provoked it, so
    it is the agent's tool error, the episode goes on, and the server's reward still decides."""
    with serve_command_in_subprocess(_uvicorn("fragile_typed_app:app"), cwd=HERE) as (base, _proc), \
            envhub.make("openenv:" + base, task_ids=["seed-1"]) as env:
        assert env.mode == "typed" and [t.name for t in env.tool_specs] == ["act"]
        env.reset(task_id="seed-1")
        obs = env.step(_call("act", message="crash"))
        assert not obs.done and obs.messages[0].content.startswith("Error"), obs.messages
        assert '"length": 5' in env.step(_call("act", message="hello")).messages[0].content
        obs = env.step(_call("act", message="done"))
        assert obs.done and obs.reward == 1.0 and obs.outcome is Outcome.SUCCESS


@pytest.mark.slow  # the hung step's thread holds the server's shutdown for a while
def test_a_step_that_hangs_on_a_healthy_server_is_the_agents_time_never_infra():
    """The action made the env's step hang; the server answers /health all along: the agent's wall
    time (budget_exhausted), not env_error -- and the next episode plays on a new session."""
    with serve_command_in_subprocess(_uvicorn("fragile_typed_app:app"), cwd=HERE) as (base, _proc), \
            envhub.make("openenv:" + base, task_ids=["seed-1"], timeout_s=3) as env:
        env.reset(task_id="seed-1")
        obs = env.step(_call("act", message="hang"))
        assert obs.done and obs.outcome is Outcome.BUDGET_EXHAUSTED and not obs.outcome.is_infra, obs.verdict
        env.reset(task_id="seed-1")
        assert env.step(_call("act", message="done")).outcome is Outcome.SUCCESS


@pytest.mark.slow
def test_an_openenv_scaffolded_typed_env_is_one_tool(tmp_path):
    """The package ``openenv init`` generates (a typed ``message`` action, a reward per step, never
    done), started from its directory: one tool with the action schema; the turn budget ends its
    episodes."""
    init = subprocess.run([sys.executable, "-m", "openenv.cli", "init", "echo_probe"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    if init.returncode != 0:
        init = subprocess.run(["openenv", "init", "echo_probe"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120)
    assert init.returncode == 0, init.stdout + init.stderr
    with envhub.make(f"openenv:{tmp_path / 'echo_probe'}", budget={"max_turns": 3}) as env:  # its openenv.yaml
        assert env.mode == "typed" and env.terminal_tool == "act" and env.reward_range == (0.0, 1.0)
        params = env.tool_specs[0].parameters
        assert set(params["properties"]) == {"message"} and params["required"] == ["message"]
        env.reset(task_id=env.tasks.task_ids("train")[0])
        obs = env.step(_call("act", message="hello"))
        assert not obs.done and '"echoed_message": "hello"' in obs.messages[0].content
        obs = env.step(_call("act", text="no such field"))  # VALIDATION_ERROR: the agent's
        assert not obs.done and "rejected" in obs.messages[0].content
        obs = env.step(_call("act", message="hi"))
        assert obs.done and obs.outcome is Outcome.BUDGET_EXHAUSTED
        assert env.episode.scratch["rewards"] == [0.5, 0.2]


@pytest.mark.slow
def test_a_package_runs_in_an_environment_made_for_it(tmp_path):
    """``venv=True``: the package directory pip-installed with its dependencies into an environment
    of its own (made once), its server started with that interpreter -- never installed into ours."""
    init = subprocess.run([sys.executable, "-m", "openenv.cli", "init", "venv_probe"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert init.returncode == 0, init.stdout + init.stderr
    with envhub.make(f"openenv:{tmp_path / 'venv_probe'}", venv=True) as env:
        python = env.package.proc.args[0]
        assert "/envs/openenv-venv_probe-" in python and python != sys.executable
        found = subprocess.run([python, "-c", "import venv_probe.server.app"], capture_output=True, text=True)
        assert found.returncode == 0, found.stderr  # installed there ...
        assert subprocess.run([sys.executable, "-c", "import venv_probe"], cwd="/",
                              capture_output=True).returncode != 0  # ... and not here
        env.reset(task_id=env.tasks.task_ids("train")[0])
        assert '"echoed_message": "hi"' in env.step(_call("act", message="hi")).messages[0].content
    with pytest.raises(ValueError, match="choose one way"):
        envhub.make(f"openenv:{tmp_path / 'venv_probe'}", venv=True, docker=True)


def test_the_cli_rolls_out_an_openenv_id(url: str, tmp_path):
    """The same id on the command line: ``envhub rollout openenv:URL``."""
    import json

    cmd = [sys.executable, "-W", "ignore", "-m", "envhub.cli", "rollout", "openenv:" + url, "--policy", "noop",
           "--episodes", "2", "--out", str(tmp_path), "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["attempted"] == 2 and report["strict_success_rate"] == 0.0
    records = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert [r["env_id"] for r in records] == ["openenv:" + url] * 2
    assert all(r["outcome"] == "format_error" for r in records)  # the floor, never infra


def test_list_counts_a_bridged_ids_tasks_and_gold_is_refused_in_one_line(url: str):
    listed = subprocess.run([sys.executable, "-m", "envhub.cli", "list", f"openenv:{url}"], capture_output=True,
                            text=True, timeout=120)
    ids = envhub.make(f"openenv:{url}")
    try:
        counts = [len(ids.tasks.task_ids(s)) for s in ("train", "validation", "test")]
    finally:
        ids.close()
    cells = [c.strip() for c in listed.stdout.replace("┃", "│").split("│")]
    assert listed.returncode == 0 and " ".join(map(str, counts)) in " ".join(cells), listed.stdout
    for command in (["profile", f"openenv:{url}", "--out", "/tmp/envhub-never-written"],
                    ["rollout", f"openenv:{url}", "--out", "/tmp/envhub-never-written"]):
        done = subprocess.run([sys.executable, "-m", "envhub.cli", *command], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2 and "no reference solution for --policy gold" in done.stderr, done.stderr


def test_a_bridge_registered_at_run_time_makes_its_ids():
    from envhub import registry

    made: list[str] = []

    def factory(target: str, *, split: str = "train") -> envhub.Env:
        made.append(target)
        return envhub.make(ENV_ID, split=split)

    registry.register_bridge("relaytest", factory)
    try:
        env = envhub.make("relaytest:any/thing:1", split="test")
        assert made == ["any/thing:1"] and env.split == "test"
        with pytest.raises(TypeError, match="takes no argument"):
            envhub.make("relaytest:x", mode="mcp")
    finally:
        registry._BRIDGES.pop("relaytest", None)
    with pytest.raises(ValueError, match="identifier"):
        registry.register_bridge("not a prefix", factory)
    with pytest.raises(KeyError, match="unknown env"):
        envhub.make("relaytest:x")


# ---- an OpenEnv package directory ------------------------------------------------------------------

def _guess_package(root, reward_range: str = "[0.0, 1.0]"):
    """A package directory serving ``guess_mcp_app`` (OpenEnv's MCPEnvironment), with a manifest."""
    import shutil

    pkg = root / "guess_pkg"
    pkg.mkdir()
    shutil.copy(os.path.join(HERE, "guess_mcp_app.py"), pkg / "guess_mcp_app.py")
    (pkg / "openenv.yaml").write_text(
        "spec_version: 1\nname: guess\ntype: space\nruntime: fastapi\napp: guess_mcp_app:app\nport: 8000\n"
        f"validation:\n  reward:\n    range: {reward_range}\n")
    return pkg


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead
        return stat.read().split(") ")[-1][0] != "Z"


@pytest.mark.slow  # the package's server imports openenv and fastmcp: ~10 s
def test_a_package_directory_is_started_played_and_stopped(tmp_path):
    from guess_mcp_app import secret_of

    pkg = _guess_package(tmp_path)
    env = envhub.make(f"openenv:{pkg}", terminal_tool="guess")
    try:
        assert env.env_id == f"openenv:{pkg}" and env.package is not None and env.reward_range == (0.0, 1.0)
        pid = env.package.proc.pid
        assert _alive(pid) and env.mode == "mcp"
        task_id = env.tasks.task_ids("train")[1]
        env.reset(task_id=task_id)
        obs = env.step(_call("guess", n=secret_of(int(task_id.removeprefix("seed-")))))
        assert obs.done and obs.reward == 1.0 and obs.outcome is Outcome.SUCCESS
    finally:
        env.close()
    assert not _alive(pid)  # stopped at close: no process left


@pytest.mark.slow  # the package's server imports openenv and fastmcp: ~10 s
def test_a_reward_outside_the_declared_range_is_a_wrong_answer_at_the_floor(tmp_path):
    """It came in reply to the agent's action, which may have provoked it: never infra (out of the
    loss), never clamped into a success."""
    from guess_mcp_app import secret_of

    with envhub.make(f"openenv:{_guess_package(tmp_path, '[-0.5, 0.5]')}", terminal_tool="guess") as env:
        task_id = env.tasks.task_ids("train")[1]
        env.reset(task_id=task_id)
        obs = env.step(_call("guess", n=secret_of(int(task_id.removeprefix("seed-")))))
        assert obs.done and obs.outcome is Outcome.WRONG_ANSWER and obs.reward == -0.5
        assert "outside its declared range" in obs.verdict.detail


@pytest.mark.slow  # the package's server imports openenv and fastmcp: ~10 s
def test_a_package_server_dies_with_a_killed_parent(tmp_path):
    """``kill -9`` of the process that started a package's server leaves no server behind."""
    pkg = _guess_package(tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-W", "ignore", "-c",
         "import sys, time, envhub\n"
         f"env = envhub.make({f'openenv:{pkg}'!r}, terminal_tool='guess')\n"
         "print(env.package.proc.pid, flush=True)\ntime.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        server_pid = int(child.stdout.readline())
        assert _alive(server_pid)
    finally:
        child.kill()
        child.wait(timeout=30)
    deadline = time.monotonic() + 15
    while _alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(server_pid)
