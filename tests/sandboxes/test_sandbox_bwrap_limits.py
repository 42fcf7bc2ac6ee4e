"""A bwrap sandbox's total memory is bounded by its own cgroup, and a seccomp filter applies.

Measured before: rlimits count per process, so one sandbox held 2.4 GiB under a 512 MiB limit
by forking; and bwrap ran with no seccomp filter while docker has one. Here a program forks four
children of 128 MiB each under a 256 MiB limit: the kernel kills what does not fit, the tool
result says so, the sandbox never held more than its limit, and the episode goes on to succeed.
Denied syscalls fail with EPERM while ordinary work goes on; cgroups go at close (and after a
``kill -9`` of their owner, at the next process's sweep); the doctor names both.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from sandbox_fixtures import REQUIRED, require_backend

import envhub
from envhub.parsing import format_tool_call
from envhub.sandboxes import SandboxSpec, selection
from envhub.sandboxes.base import Limits
from envhub.sandboxes.bwrap_backend import OOM_RESTARTED, BwrapSandbox, Hardening, hardening
from envhub.sandboxes.bwrap_cgroups import CgroupPlan, sweep_dead_owners
from envhub.sandboxes.bwrap_seccomp import SeccompProgram
from envhub.types import Outcome

pytestmark = pytest.mark.bwrap

MIB = 1024 * 1024
LIMITS = Limits(memory_mb=256, pids=64, timeout_s=20.0, disk_mb=32)
#: Four children that each allocate and touch 128 MiB (half the sandbox's limit, far below the
#: per-process one), hold it a moment, and report; the parent says how each child ended.
FORK_HOG = textwrap.dedent("""
    import os, time
    kids = []
    for i in range(4):
        pid = os.fork()
        if pid == 0:
            block = bytearray(b"\\x01") * (128 << 20)
            print("allocated", i, flush=True)
            time.sleep(1.5)
            os._exit(0)
        kids.append(pid)
    for pid in kids:
        _, status = os.waitpid(pid, 0)
        print("child", pid, "killed by signal" if os.WIFSIGNALED(status) else "exited", flush=True)
""")


def require_hardening(need_cgroup: bool = True, need_seccomp: bool = True) -> Hardening:
    """bwrap works here and has what the test checks; where CI requires bwrap, missing is a failure."""
    require_backend("bwrap")
    found = hardening()
    missing = [what for what, need, ok in (("a writable memory cgroup", need_cgroup, found.cgroup.ok),
                                           ("the seccomp filter", need_seccomp, found.seccomp.ok)) if need and not ok]
    if missing:
        why = f"bwrap sandboxes get no {' and no '.join(missing)} here: {found.describe()}"
        if "bwrap" in REQUIRED:
            pytest.fail(f"bwrap is required (ENVHUB_REQUIRE_SANDBOXES): {why}")
        pytest.skip(why)
    return found


@pytest.fixture
def env():
    require_hardening(need_seccomp=False)
    e = envhub.make("envhub/Computation-v0", sandbox="bwrap", sandbox_pool=0)
    e.sandbox_spec = dataclasses.replace(type(e).sandbox_spec, limits=LIMITS)
    yield e
    e.close()


@pytest.mark.slow
def test_forked_children_share_one_memory_limit_and_the_episode_goes_on(env):
    task = "comp-bigint-L1-0"
    env.reset(task_id=task)
    obs = env.step(format_tool_call("python", {"code": FORK_HOG}))
    assert not obs.done, env.episode.verdict
    [message] = obs.messages
    assert "[killed: out of memory]" in message.content, message.content
    assert message.content.count("killed by signal") >= 2, message.content  # at most ~1 of 4 fits
    sandbox = env.episode.sandbox
    assert sandbox.cgroup is not None
    peak = sandbox.cgroup.peak_bytes()
    assert peak is not None and peak <= LIMITS.memory_mb * MIB, peak / MIB  # the host kept the rest
    assert sandbox.cgroup.oom_kills() >= 2
    paths = list(sandbox.cgroup.paths.values())

    again = env.step(format_tool_call("python", {"code": "print(sum(range(10)))"}))
    assert again.messages[0].content.strip() == "45", again.messages[0].content
    gold = env.tasks.get(task).hidden["answer"]
    final = env.step(format_tool_call("answer", {"answer": gold}))
    assert final.outcome is Outcome.SUCCESS, env.episode.verdict
    env.close()
    assert not any(os.path.exists(p) for p in paths), paths  # the cgroups went with the sandbox


def test_everything_of_the_sandbox_is_in_its_cgroup_from_the_start():
    require_hardening(need_seccomp=False)
    with BwrapSandbox(SandboxSpec(limits=LIMITS)).start() as sb:
        assert sb.cgroup is not None
        members = sb.cgroup.members()
        executor = sb._executor_host_pid()
        assert sb._proc is not None and {sb._proc.pid, executor} <= members, (members, executor)
        for role, path in sb.cgroup.paths.items():
            knob = {"memory": "memory.limit_in_bytes", "pids": "pids.max"}.get(role, "memory.max")
            with open(os.path.join(path, knob)) as fh:
                assert int(fh.read()) in (LIMITS.memory_mb * MIB, LIMITS.pids + 2)
        paths = list(sb.cgroup.paths.values())
    assert not any(os.path.exists(p) for p in paths)


def test_memory_held_by_files_kills_no_call():
    """Files in the tmpfs dirs hold memory no process owns. Under 96 MB, the third 38 MB file is
    over the bound: the kernel kills the writing command or, when nothing else is left to kill, the
    executor itself (the sandbox then restarts empty). Either way the call answers as killed for
    memory, later calls answer, and a file operation fails as an OSError (ENOMEM) the tools report
    to the agent -- never a SandboxError."""
    require_hardening(need_seccomp=False)
    limits = Limits(memory_mb=96, pids=32, timeout_s=20.0, disk_mb=40)
    with BwrapSandbox(SandboxSpec(limits=limits)).start() as sb:
        results = [sb.exec(f"head -c 38000000 /dev/zero > {d}/fill") for d in ("/work", "/tmp", "/dev/shm")]
        killed = [r for r in results if r.oom_killed]
        assert killed, [r.summary() for r in results]
        assert all(r.exit_code == 137 and "[killed: out of memory]" in r.summary() for r in killed)
        if any(OOM_RESTARTED.strip() in r.stderr for r in results):  # the executor was the one killed
            assert sb.exec("ls -A /work /tmp /dev/shm | grep -c fill || true").stdout.strip() == "0"
        sb.exec("rm -f /work/fill /tmp/fill /dev/shm/fill")
        after = sb.exec_python("block = bytearray(b'1') * (20 << 20)\nprint('fits')")
        assert after.stdout == "fits\n" or after.oom_killed, after.summary()

        for d in ("/work", "/tmp"):
            sb.exec(f"head -c 38000000 /dev/zero > {d}/fill")
        try:
            sb.write_files({"big": b"x" * (20 << 20)})
        except OSError as failed:  # the executor died decoding this write
            assert failed.errno == errno.ENOMEM and "ran out of memory" in str(failed)
        assert sb.exec("echo alive").stdout == "alive\n"
        assert sb.cgroup is not None and sb.cgroup.peak_bytes() <= limits.memory_mb * MIB


SYSCALLS = textwrap.dedent("""
    import ctypes, errno, multiprocessing, os, socket, subprocess, threading
    libc = ctypes.CDLL(None, use_errno=True)

    def outcome(result):
        return "ok" if result != -1 else errno.errorcode[ctypes.get_errno()]

    print("mount", outcome(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)))
    print("unshare", outcome(libc.unshare(0x10000000)))  # CLONE_NEWUSER
    print("ptrace", outcome(libc.ptrace(0, 0, None, None)))  # PTRACE_TRACEME
    print("keyctl", outcome(libc.syscall(250 if os.uname().machine == "x86_64" else 219, 0, 0)))
    print("seccomp", open("/proc/self/status").read().split("Seccomp:")[1].split()[0])
    with open("data.txt", "w") as fh:
        fh.write("kept")
    print("file", open("data.txt").read())
    print("subprocess", subprocess.run(["sh", "-c", "echo $((6 * 7))"], capture_output=True, text=True).stdout.strip())
    box = []
    worker = threading.Thread(target=lambda: box.append("thread"))
    worker.start(); worker.join()
    print("thread", box[0])
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    conn, _ = server.accept()
    client.sendall(b"ping")
    print("socket", conn.recv(4).decode())
    with multiprocessing.Pool(2) as pool:
        print("pool", sum(pool.map(abs, [-1, -2, -3])))
""")


def test_seccomp_denies_the_dangerous_syscalls_and_ordinary_work_goes_on():
    require_hardening(need_cgroup=False)
    with BwrapSandbox(SandboxSpec(limits=Limits(memory_mb=512, timeout_s=20.0))).start() as sb:
        result = sb.exec_python(SYSCALLS)
    assert result.ok, result.summary()
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert {k: lines[k] for k in ("mount", "unshare", "ptrace", "keyctl")} == dict.fromkeys(
        ("mount", "unshare", "ptrace", "keyctl"), "EPERM"), lines
    assert lines["seccomp"] == "2"  # a filter is loaded
    assert (lines["file"], lines["subprocess"], lines["thread"], lines["socket"], lines["pool"]) == \
        ("kept", "42", "thread", "ping", "6")


def test_cgroups_of_a_killed_owner_are_swept():
    require_hardening(need_seccomp=False)
    owner = subprocess.Popen(
        [sys.executable, "-c",
         "from envhub.sandboxes.bwrap_backend import BwrapSandbox\n"
         "sb = BwrapSandbox().start()\n"
         "print('\\n'.join(sb.cgroup.paths.values()), flush=True)\n"
         "print('ready', flush=True)\n"
         "import time; time.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    paths = []
    for line in owner.stdout:
        if line.strip() == "ready":
            break
        paths.append(line.strip())
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    owner.stdout.close()
    assert paths and all(os.path.isdir(p) for p in paths)  # a kill -9 runs no cleanup
    assert sweep_dead_owners() >= len(paths)
    assert not any(os.path.exists(p) for p in paths)


def test_doctor_names_the_bound_and_the_filter():
    found = require_hardening()
    status = selection.probe_bwrap()
    assert status.ok, status.reason
    assert "total memory bounded per sandbox by its own cgroup" in status.detail, status.detail
    assert "seccomp filter (libseccomp)" in status.detail, status.detail
    assert found.complete and status.fix == ""


def test_doctor_says_what_is_missing_and_what_to_prefer():
    bare = Hardening(CgroupPlan(0, reason="no cgroup memory controller is mounted"),
                     SeccompProgram(None, reason="pyseccomp is not installed"))
    text = bare.describe()
    assert "total memory NOT bounded per sandbox (no cgroup memory controller is mounted)" in text
    assert "no seccomp filter (pyseccomp is not installed)" in text
    assert "prefer docker for untrusted code" in text
    assert "envhub[bwrap]" in bare.fix() and "cgroup" in bare.fix()
