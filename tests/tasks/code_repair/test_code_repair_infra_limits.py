"""What the agent does to its sandbox's disk and memory is the agent's, played through the tools on
docker and bwrap (#20 item 6): a work dir filled to its last byte is graded (the grading sandbox has
room for the probes beside it), a submission that cannot fit beside them is too large to grade (a
policy outcome), and memory pinned where no process of the agent's holds it -- a SysV segment
an exited process left, a memfd of a background job -- gives tool results, the sandbox started
afresh when the kernel had to kill its executor: never ``verifier_error`` or ``env_error``."""

import errno
import textwrap

import pytest
from played import tool

import envhub
from envhub.parsing import format_tool_call
from envhub.sandboxes.base import ExecResult, Limits
from envhub.sandboxes.oom_restart import OOM_RESTARTED
from envhub.tasks.code_repair.env import PROBE_ROOM_MB, CodeRepairEnv
from envhub.tasks.code_repair.observations import project_suite
from envhub.tasks.code_repair.workspace import project_sources
from envhub.types import Outcome
from envhub.verifiers.placement import BATCH_BYTES, MIB, SubmissionTooLarge, footprint, place_files
from envhub.verifiers.probes.grader import run_probes

ENV = "envhub/CodeRepair-v0"
RESTARTED = OOM_RESTARTED.strip()
#: Files of 500,000 bytes of one byte value under src/pad/ until the disk is full or ``count`` are
#: written; each is under the snapshot's cut per file, so all of it is submitted.
FILL = ("python3 -c \"import os\nos.makedirs('src/pad', exist_ok=True)\nn = 0\ntry:\n"
        "    while n < {count}:\n        open('src/pad/%d.txt' % n, 'wb').write(bytes([{byte}]) * 500000)\n"
        "        n += 1\nexcept OSError:\n    pass\nprint(n)\"")
#: A SysV segment of N MiB, every page touched, left behind when the process exits.
SYSV = textwrap.dedent("""\
    import ctypes, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    size = int(sys.argv[1]) << 20
    segment = libc.shmget(0, ctypes.c_size_t(size), 0o1600)
    ctypes.memset(ctypes.c_void_p(libc.shmat(segment, None, 0)), 1, size)
    print("pinned")
""")
#: A memfd of N MiB written (never mapped: its holder's own footprint stays small), held by a process
#: that first sets its own OOM score to argv[2] where given; it closes its outputs once the memory is
#: pinned, which ends the ``run`` that started it in the background.
MEMFD = textwrap.dedent("""\
    import os, sys, time
    if len(sys.argv) > 2:
        open("/proc/self/oom_score_adj", "w").write(sys.argv[2])
    fd, chunk = os.memfd_create("pin"), b"1" * (1 << 20)
    for _ in range(int(sys.argv[1])):
        os.write(fd, chunk)
    os.close(1), os.close(2)
    time.sleep(600)
""")
#: With a 40 MB file in /work, this much pinned leaves the 512 MiB agent sandbox no room for the
#: executor to read that file (its data, base64 and JSON: about 150 MB).
PIN_MIB = 440


def submit(env):
    obs = env.step(format_tool_call("submit", {}))
    assert obs.done and obs.outcome is not None
    assert not obs.outcome.is_infra, (obs.outcome, obs.verdict.detail)
    return obs


# ---- the disk ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_fix_beside_a_work_dir_filled_to_the_last_byte_is_graded_as_a_fix(env, inst):
    """The grading sandbox holds all the agent's disk could, plus the probes: the fix passes."""
    env.reset(task_id=inst.instance_id)
    original = project_sources(inst.project)
    for path in inst.buggy_files:
        assert tool(env, "write_file", path=path, content=original[path]).startswith("wrote")
    written = int(tool(env, "run", command=FILL.format(count=1000, byte=ord("a"))))
    assert written * 500000 > (env.sandbox_spec.limits.disk_mb - 2) * MIB  # the disk is full
    assert "No space left" in tool(env, "write_file", path="src/more.txt", content="x" * 5000)
    obs = submit(env)
    assert obs.outcome is Outcome.SUCCESS, obs.verdict.detail


@pytest.mark.slow
def test_a_submission_that_cannot_fit_beside_the_probes_is_too_large_to_grade(env, inst):
    """30 MB of bytes that are not UTF-8 are submitted as 90 MB of text (U+FFFD): past the grading
    sandbox's 72 MiB, through the submission's own size -- a policy outcome."""
    env.reset(task_id=inst.instance_id)
    assert tool(env, "run", command=FILL.format(count=60, byte=0xFF)) == "60"
    obs = submit(env)
    assert obs.outcome is Outcome.FORMAT_ERROR and "too large to grade" in obs.verdict.detail, obs.verdict.detail


@pytest.mark.slow  # compiling every project's probes: about 3 s
def test_the_probes_of_every_project_fit_the_room_a_grading_sandbox_keeps_for_them():
    assert CodeRepairEnv.grading_limits.disk_mb == CodeRepairEnv.sandbox_spec.limits.disk_mb + PROBE_ROOM_MB
    for project in sorted({i.project for i in envhub.make(ENV).manifest.instances}):
        suite = project_suite(project)
        box = RecordingSandbox()
        run_probes(box, suite, files={}, tests=sorted(suite.tests))
        assert footprint(box.written) <= PROBE_ROOM_MB * MIB // 4, (project, footprint(box.written))


class RecordingSandbox:
    """A grading sandbox that keeps what is written (up to ``disk_mb``, then ENOSPC) and runs nothing."""

    def __init__(self, disk_mb: int = 64) -> None:
        self.limits = Limits(disk_mb=disk_mb)
        self.written: dict[str, str | bytes] = {}
        self.requests: list[int] = []

    def write_files(self, files):
        self.requests.append(sum(len(c) for c in files.values()))
        for path, content in files.items():
            if footprint({**self.written, path: content}) > self.limits.disk_mb * MIB:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written[path] = content

    def exec(self, *args, **kwargs):
        return ExecResult(exit_code=0, stdout="", stderr="")


def test_placing_files_is_the_submissions_failure_only_when_its_size_left_no_room():
    grader = {".envhub_probe/runner.py": "x" * 10_000}
    box = RecordingSandbox(disk_mb=4)
    place_files(box, {f"src/{i}.py": "y" * 500_000 for i in range(7)}, grader)  # 3.5 MB and the runner fit
    assert set(box.written) >= set(grader)

    with pytest.raises(SubmissionTooLarge, match="too large to grade") as caught:
        place_files(RecordingSandbox(disk_mb=4), {f"src/{i}.py": "y" * 500_000 for i in range(9)}, grader)
    assert caught.value.outcome is Outcome.FORMAT_ERROR

    class Broken(RecordingSandbox):  # a full disk the sizes do not explain: the grader's, raised as is
        def write_files(self, files):
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as raised:
        place_files(Broken(), {"src/a.py": "y"}, grader)
    assert not isinstance(raised.value, SubmissionTooLarge)

    box = RecordingSandbox(disk_mb=64)  # a large submission goes in bounded requests
    place_files(box, {f"src/{i}.txt": "y" * 500_000 for i in range(60)}, grader)
    assert len(box.requests) > 1 and max(box.requests) <= BATCH_BYTES


# ---- memory ----------------------------------------------------------------------------------------


def pinning_setup(env) -> None:
    """The pinning programs in /tmp and a 40 MB file in /work for the executor to read."""
    made = tool(env, "run", command=f"cat > /tmp/sysv.py <<'EOF'\n{SYSV}EOF\ncat > /tmp/memfd.py <<'EOF'\n{MEMFD}EOF\n"
                                    "head -c 40000000 /dev/zero | tr '\\0' a > src/big.txt && echo made")
    assert made == "made", made


@pytest.mark.slow
@pytest.mark.parametrize("pin", ["sysv segment of an exited process", "memfd of a job that lowered its OOM score"])
def test_memory_pinned_outside_the_agents_processes_restarts_the_sandbox_not_the_episode(env, inst, pin):
    """Nothing of the agent's is left to kill (or only a process at the executor's own OOM score):
    the kernel kills the executor when it reads the file. The call answers that the sandbox was
    started afresh, the episode goes on, and the submission is graded as the agent's."""
    env.reset(task_id=inst.instance_id)
    pinning_setup(env)
    if pin.startswith("sysv"):
        assert tool(env, "run", command=f"python3 /tmp/sysv.py {PIN_MIB}") == "pinned"
        hog = tool(env, "run", command="python3 -c \"b'1' * (100 << 20)\"")
        if getattr(env.sandbox(), "cgroup", True) is not None:  # docker, or bwrap with its cgroup
            # the command is the one killed, and told what holds the memory
            assert hog.endswith("[killed: out of memory]") and "MiB of the sandbox's 512 MiB of memory is held by " \
                "files in /work, /tmp and /dev/shm, shared memory segments and memfds" in hog, hog
    else:  # the job lowered its score to the executor's: of the two the kernel kills the larger, the executor
        assert tool(env, "run", command=f"python3 /tmp/memfd.py {PIN_MIB} 0 &") == "[no output]"
    shown = tool(env, "read_file", path="src/big.txt", start_line=1, end_line=1)
    assert RESTARTED in shown or "memory" in shown, shown  # bwrap without a cgroup: the executor's own ENOMEM
    if RESTARTED in shown:
        fresh = tool(env, "run", command="ipcs -m | grep -c agent; ls -A /work | wc -l")
        assert fresh.startswith("0\n0"), fresh  # no segment, an empty work dir
    assert tool(env, "run", command="echo alive") == "alive"
    submit(env)


@pytest.mark.slow
def test_a_job_holding_memory_is_the_oom_killers_choice_before_the_executor(env, inst):
    """A background job that holds a memfd (its own score untouched) ranks above the executor, though
    it started before the executor could raise its parent's score: killing it frees the memory, and
    the file is read. Where the kernel still picks the executor (on bwrap about one run in ten of
    the whole module: the job's score is raised at each command's start, a race with its fork), the
    sandbox restarts and the tool result says so -- never an infra outcome."""
    env.reset(task_id=inst.instance_id)
    pinning_setup(env)
    assert tool(env, "run", command=f"python3 /tmp/memfd.py {PIN_MIB} &") == "[no output]"
    # the next command's start raises every agent process, the job's fork included (it may have
    # forked before its parent's score was raised: the executor cannot wait for that)
    assert tool(env, "run", command="sleep 0.2") == "[no output]"
    shown = tool(env, "read_file", path="src/big.txt", start_line=1, end_line=1)
    if RESTARTED in shown:
        submit(env)
        return
    assert shown.startswith("    1  aaaa"), shown[:300]
    assert tool(env, "run", command="cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -c 'memfd[.]py'") == "0\n[exit code 1]"
    submit(env)
