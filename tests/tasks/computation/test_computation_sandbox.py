"""The Computation ``python`` tool in real docker and bwrap sandboxes, through ``env.step``.

The code runs in a child forked from the sandbox's executor. It must behave like the
``python3 main.py`` it replaced, and nothing the agent's code does to its own sandbox may end
the episode as an infrastructure outcome: the next call gets a tool result saying what failed,
and the episode goes on to be graded.
"""

from __future__ import annotations

import time

import pytest
from sandbox_fixtures import assert_no_leaked_containers, backend_params, require_backend

import envhub
from envhub.parsing import format_tool_call
from envhub.types import Outcome

ENV = "envhub/Computation-v0"
TASK = "comp-bigint-L1-0"
#: What the tool result must say when the code could not run (the executor's exec result, or our
#: tool error when the executor refused the request itself)
NO_WORK_DIR = "permission denied"
NO_PROCESS_SLOT = "resource temporarily unavailable"


@pytest.fixture(scope="module", params=backend_params("docker", "bwrap"))
def env(request):
    require_backend(request.param)
    e = envhub.make(ENV, sandbox=request.param, sandbox_pool=2, budget={"max_turns": 12, "max_tool_calls": 12})
    yield e
    e.close()
    assert_no_leaked_containers()


def _calls(env, *codes: str, pause: float = 0.0) -> list[str]:
    """One episode: each code through the python tool (``pause`` seconds apart), then the gold
    answer, which must succeed."""
    env.reset(task_id=TASK)
    results = []
    for code in codes:
        time.sleep(pause)
        obs = env.step(format_tool_call("python", {"code": code}))
        assert not obs.done, (code, obs.outcome, env.episode.verdict)
        [message] = obs.messages
        results.append(message.content)
    gold = env.tasks.get(TASK).hidden["answer"]
    obs = env.step(format_tool_call("answer", {"answer": gold}))
    assert obs.outcome is Outcome.SUCCESS, env.episode.verdict
    return results


def test_code_runs_as_python3_main_py_did_in_the_work_dir(env):
    where, imported, listing, crash, syntax, threads, exits, stdin = _calls(
        env,
        "import os, sys\nprint(os.getcwd(), sys.path[0], __name__, sys.argv)\n"
        "open('helper.py', 'w').write('X = 41\\n')",
        "import helper\nprint(helper.X + 1)",  # files persist and import from the work dir
        "import os\nprint(sorted(os.listdir('.')))",
        "def f():\n    return 1 / 0\n\nf()",
        "x = (1,\n",
        "import threading, time, atexit\natexit.register(print, 'at exit')\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()\nprint('main')",
        "import sys\nprint('out')\nsys.exit(3)",
        "print(input())",
    )
    assert where == "/work /work __main__ ['-c']"
    assert imported == "42"
    assert listing == "['helper.py']"  # no main.py: nothing is written to run the code
    assert crash.splitlines() == [
        "Traceback (most recent call last):",
        '  File "<string>", line 4, in <module>',
        "    f()",
        '  File "<string>", line 2, in f',
        "    return 1 / 0",
        "           ~~^~~",
        "ZeroDivisionError: division by zero",
        "[exit code 1]",
    ]
    assert syntax.splitlines()[-2:] == ["SyntaxError: '(' was never closed", "[exit code 1]"]
    assert threads == "main\nthread\nat exit"
    assert exits == "out\n[exit code 3]"
    assert "EOFError" in stdin


def test_each_call_is_a_fresh_process(env):
    first, second, modules = _calls(
        env,
        "import random, os\nprint(random.random(), os.getpid())\nimport sys\nsys.modules['json'].dumps = None",
        "import random, os\nprint(random.random(), os.getpid())",
        "import json\nprint(json.dumps([1]))",  # the previous call's monkeypatch is gone
    )
    assert first.split()[0] != second.split()[0] and first.split()[1] != second.split()[1]
    assert modules == "[1]"


FAULTS = {
    "work_dir_mode_000": ("import os\nos.chmod('/work', 0)", NO_WORK_DIR),
    "work_dir_not_searchable": ("import os\nos.chmod('/work', 0o444)", NO_WORK_DIR),
    "work_dir_emptied": ("import os, shutil\nopen('a', 'w').close()\nshutil.rmtree('/work', ignore_errors=True)\n"
                         "try:\n    os.rmdir('/work')\nexcept OSError as exc:\n    print(exc)", "42"),
    "main_py_is_a_directory": ("import os\nos.mkdir('main.py')\nos.mkdir('main.py/x')", "42"),
    "disks_full": ("for path in ('/work/fill', '/tmp/fill', '/dev/shm/fill'):\n"
                   "    try:\n        open(path, 'wb').write(b'x' * (300 << 20))\n    except OSError:\n        pass",
                   "42"),
    "fds_exhausted": ("import os\nfds = []\ntry:\n    while True:\n        fds.append(os.open('/dev/null', 0))\n"
                      "except OSError as exc:\n    print(exc.errno)", "42"),
    "stdout_and_stderr_closed": ("import os\nos.close(1)\nos.close(2)", "42"),
    "executor_signalled": ("import os, signal\nfor sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):\n"
                           "    os.kill(os.getppid(), sig)\n    os.kill(1, sig)", "42"),
    # a detached process that takes every process slot and keeps taking any that frees up
    "process_slots_held": ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    os.closerange(0, 1024)\n"
                           "    end = time.time() + 30\n    while time.time() < end:\n        try:\n"
                           "            if os.fork() == 0:\n                time.sleep(600)\n                os._exit(0)\n"
                           "        except OSError:\n            time.sleep(0.001)\n    time.sleep(600)\n"
                           "time.sleep(1)", NO_PROCESS_SLOT),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_what_the_agent_does_to_its_sandbox_is_a_tool_result(env, fault):
    code, expected = FAULTS[fault]
    # the pause lets a process that waits for free slots take the one its parent's exit freed
    _, after, again = _calls(env, code, "print(6 * 7)", "print(6 * 7)", pause=0.3 * (expected == NO_PROCESS_SLOT))
    for result in (after, again):
        if expected == "42":
            assert result == "42"
        else:  # the code did not run, and the result says why
            assert expected in result.lower() and "42" not in result, result
    assert _calls(env, "print(6 * 7)") == ["42"]  # the next episode's (pooled, reset) sandbox is clean


@pytest.mark.parametrize("backend", backend_params("docker", "bwrap"))
def test_bench_compares_the_fork_path_with_main_py_in_the_same_run(backend):
    from envhub.rollout.bench import bench_python_tool

    require_backend(backend)
    lines: list[str] = []
    [(name, row)] = bench_python_tool(backends=(backend,), calls=5, out=lines.append).items()
    assert name == backend and row["fork_p50_ms"] > 0 and row["exec_p50_ms"] > 0
    assert row["speedup_p50"] == row["exec_p50_ms"] / row["fork_p50_ms"]
    assert len(lines) == 1 and f"python tool on {backend}" in lines[0] and "5 calls each" in lines[0]
