"""Whatever the agent does to its own repository is the agent's: through ``env.step``, on docker and
bwrap, permissions taken away, a 1,500-deep directory chain, FIFOs, sockets and symlinks out of
the tree end as tool results the episode goes on after, and at ``submit`` as a policy outcome --
never ``env_error`` or ``verifier_error``."""

import os

import pytest
from played import tool
from sandbox_fixtures import require_backend

from envhub.parsing import format_tool_call
from envhub.tasks.code_repair.workspace import project_sources
from envhub.types import Outcome

ENV = "envhub/CodeRepair-v0"
#: The host reads the agent's files with root's privileges only when it is root (CI, these machines).
PRIVILEGED = os.geteuid() == 0
DEEP = "/".join(["d"] * 1500)


def submit(env):
    obs = env.step(format_tool_call("submit", {}))
    assert obs.done
    return obs


def test_an_unreadable_work_dir_gives_tool_errors_and_grades_as_wrong_answer(env, inst):
    env.reset(task_id=inst.instance_id)
    source = sorted(inst.buggy_files)[0]
    assert tool(env, "run", command="chmod 000 /work") == "[no output]"
    assert "Permission denied" in tool(env, "list_files")
    assert tool(env, "read_file", path=source).startswith("Error:")
    assert tool(env, "write_file", path=source, content="x = 1\n").startswith("Error:")
    assert tool(env, "str_replace", path=source, old="a", new="b").startswith("Error:")
    assert "cannot use working directory" in tool(env, "run", command="ls")
    assert "cannot use working directory" in tool(env, "search", pattern="def")
    obs = submit(env)
    assert obs.outcome is Outcome.WRONG_ANSWER, obs.verdict.detail


def test_a_fix_the_agent_made_unreadable_is_still_graded(env, inst):
    """The snapshot is read with privileges the agent's uid cannot take away: the fixed files are
    graded though the agent removed every permission on them and on /work."""
    env.reset(task_id=inst.instance_id)
    original = project_sources(inst.project)
    for path in inst.buggy_files:
        assert tool(env, "write_file", path=path, content=original[path]).startswith("wrote")
    locked = " ".join(sorted(inst.buggy_files))
    assert tool(env, "run", command=f"chmod 000 {locked} src && chmod 000 /work") == "[no output]"
    assert tool(env, "read_file", path=sorted(inst.buggy_files)[0]).startswith("Error:")
    obs = submit(env)
    assert obs.outcome is (Outcome.SUCCESS if PRIVILEGED else Outcome.WRONG_ANSWER), obs.verdict.detail


def test_a_1500_deep_directory_chain_is_listed_up_to_a_bound_and_graded(env, inst):
    env.reset(task_id=inst.instance_id)
    assert tool(env, "run", command=f"mkdir -p src/{DEEP} && touch src/{DEEP}/x.py") == "[no output]"
    listing = tool(env, "list_files")
    assert sorted(inst.buggy_files)[0] in listing
    assert "directories deeper than 128 levels were not entered" in listing
    assert "x.py" not in listing
    obs = submit(env)  # what lies past the bound cannot be graded: the agent's doing, a policy outcome
    assert obs.outcome is Outcome.FORMAT_ERROR and "too large to grade" in obs.verdict.detail, obs.verdict.detail
    env.reset(task_id=inst.instance_id)  # the next episode's repository is clean again
    assert "/d/d" not in tool(env, "list_files")
    env.abort(Outcome.FORMAT_ERROR, "test done")


def test_fifos_sockets_and_symlinks_out_of_the_tree_are_reported_never_followed(env, inst):
    env.reset(task_id=inst.instance_id)
    made = tool(env, "run", command=(
        "mkfifo src/pipe && ln -s /etc/shadow src/shadow.py && ln -s / src/root"
        " && python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('src/sock')\""))
    assert made == "[no output]"
    listing = tool(env, "list_files").splitlines()
    assert {"src/pipe", "src/shadow.py", "src/root", "src/sock"} <= set(listing)
    for path, kind in (("src/pipe", "fifo"), ("src/shadow.py", "symlink"), ("src/root", "symlink"),
                       ("src/sock", "socket")):
        shown = tool(env, "read_file", path=path)
        assert shown.startswith("Error:") and kind in shown, (path, shown)
    assert "root:" not in tool(env, "search", pattern="root", path="src")  # grep -r follows no link
    obs = submit(env)
    assert obs.outcome is Outcome.WRONG_ANSWER, obs.verdict.detail


@pytest.mark.parametrize("backend", ["process", "docker"])
def test_an_agent_that_deletes_its_own_repository_fails_as_policy_not_infra(backend):
    """Reading the agent's tree at grading time fails only through what the agent did to it (here:
    its work directory removed, by a path relative to it); that is the agent's outcome, never
    verifier_error or env_error."""
    from envhub.registry import make
    from envhub.types import Action, ToolCall

    if backend == "docker":
        require_backend("docker")
    env = make("envhub/CodeRepair-v0", sandbox=backend, split="train")
    try:
        env.reset(task_id=env.tasks.task_ids("train")[0])
        env.sandbox().exec("cd .. && rm -rf work; true")  # relative: the process backend is the host
        obs = env.step(Action(tool_calls=[ToolCall(name=env.terminal_tool, arguments={})]))
        assert obs.done and not obs.outcome.is_infra, (obs.outcome, obs.verdict.detail[:300])
    finally:
        env.close()
