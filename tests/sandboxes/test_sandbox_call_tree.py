"""What a command started does not outlive it: a timeout (or ``contain``) kills everything the
call started -- what left its process group with ``setsid`` or a double fork included -- and
nothing that an earlier call started."""

import time
import warnings

import pytest
from sandbox_fixtures import backend_params, require_backend

from envhub.sandboxes import SandboxSpec, new_sandbox, procs
from envhub.sandboxes.base import Limits

ALL = backend_params("process", "bwrap", "landlock", "docker")
#: Leaves the process group twice, each time out of the command's reach: ``setsid`` in a
#: background job, and a double fork whose grandchild is re-parented to the executor at once
#: (the command waits until that grandchild has exec'd: its copy of a close-on-exec pipe closes).
ESCAPE = (
    "setsid sleep {a} >/dev/null 2>&1 < /dev/null &\n"
    "python3 -c \"import os\nr, w = os.pipe()\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
    "        os.execvp('sleep', ['sleep', '{b}'])\n    os._exit(0)\nos.close(w)\nos.read(r, 1)\n\" >/dev/null 2>&1\n"
)


def _running_below(executor: int, cmdlines: set[str], expect: int | None) -> int:
    deadline = time.monotonic() + 3
    while True:
        count = 0
        for pid in procs.descendants(executor):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    count += fh.read().replace(b"\0", b" ").decode() in cmdlines
            except OSError:
                continue
        if expect is None or count == expect or time.monotonic() > deadline:
            return count
        time.sleep(0.05)


def running(sb, *durations: int, expect: int | None = None) -> int:
    """How many ``sleep <duration>`` processes this sandbox's /proc shows (waiting a little for
    ``expect`` of them: a background job may not have exec'd ``sleep`` yet)."""
    patterns = "|".join(f"sleep {d}" for d in durations)
    if sb.backend == "landlock":  # its commands have no /proc: count the executor's descendants from here
        return _running_below(sb._proc.pid, {f"sleep {d} " for d in durations}, expect)
    script = ("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done"
              f" | grep -cE '^({patterns}) $' || true")
    deadline = time.monotonic() + 3
    while True:
        count = int(sb.exec(["sh", "-c", script]).stdout.strip() or 0)
        if expect is None or count == expect or time.monotonic() > deadline:
            return count
        time.sleep(0.05)


@pytest.fixture(params=ALL)
def sb(request):
    require_backend(request.param)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # process backend: trusted-only
        sandbox = new_sandbox(request.param, SandboxSpec(limits=Limits(timeout_s=10.0)))
    yield sandbox
    sandbox.close()


@pytest.mark.slow
def test_a_timeout_kills_what_the_call_detached_and_spares_earlier_calls(sb):
    earlier = sb.exec(["sh", "-c", "setsid sleep 3301 >/dev/null 2>&1 < /dev/null &"])
    assert earlier.ok and running(sb, 3301, expect=1) == 1  # a background job may outlive a call that ends
    res = sb.exec(["sh", "-c", ESCAPE.format(a=3302, b=3303) + "sleep 60"], timeout=1.5)
    assert res.timed_out
    assert running(sb, 3302, 3303) == 0  # everything this call started is gone
    assert running(sb, 3301) == 1  # what an earlier call started is not this call's
    sb.reset()
    assert running(sb, 3301) == 0


def test_contain_kills_what_the_call_started_however_it_ends(sb):
    res = sb.exec(["sh", "-c", ESCAPE.format(a=3311, b=3312)], contain=True)
    assert res.ok and not res.timed_out
    assert running(sb, 3311, 3312) == 0
    py = sb.exec_python("import subprocess\nsubprocess.Popen(['sleep', '3313'], start_new_session=True, "
                        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n", contain=True)
    assert py.ok and running(sb, 3313) == 0
    loose = sb.exec(["sh", "-c", ESCAPE.format(a=3314, b=3315)])  # without contain they survive the call
    assert loose.ok and running(sb, 3314, 3315, expect=2) == 2
    sb.reset()
    assert running(sb, 3314, 3315) == 0
