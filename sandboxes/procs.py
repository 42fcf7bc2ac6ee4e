"""Processes and IPC objects inside a sandbox: start commands, feed and limit them, find them,
kill them, remove them.

Loaded by the executor inside every sandbox (``resident.executor_argv`` injects its source), so:
**stdlib only, Python >= 3.8, no imports from envhub**.
"""

from __future__ import annotations

import contextlib
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import time

#: SysV IPC kinds: (/proc/sysvipc file, ipcrm flag). They live in the IPC namespace, not in any
#: directory we wipe, so without this a segment would carry state from one episode to the next.
SYSV_IPC = (("shm", "-m"), ("sem", "-s"), ("msg", "-q"))
#: Rounds of a tree kill: each round kills what it finds, forks included, until nothing is left.
KILL_ROUNDS = 100
CHUNK = 65536


def prefer_oom(pid: int, settle_s: float = 0.0) -> None:
    """Make a command (and what it forks later) the OOM killer's first choice, not us.

    ``settle_s``: how long to retry a refusal. A command just started by a non-dumpable executor
    is non-dumpable itself until its ``exec`` is through -- which its parent may see before it
    is -- and until then its /proc files are root's (as a zombie's are: it ended already)."""
    deadline = time.monotonic() + settle_s
    while True:
        try:
            with open(f"/proc/{pid}/oom_score_adj", "w") as fh:
                fh.write("1000")
            return
        except PermissionError:
            if time.monotonic() >= deadline or _state(pid) in ("Z", "X", None):
                return
            time.sleep(0.0001)
        except OSError:
            return


def _state(pid: int) -> str | None:
    """The state letter of /proc/<pid>/stat (``R``, ``S``, ``Z``, ...), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return None


def prefer_oom_all(me: int) -> None:
    """:func:`prefer_oom` for every process this /proc shows but ``me``: where ``me`` is PID 1 of
    the sandbox's own PID namespace, every process the agent has. A job that forked before
    :func:`prefer_oom` reached its parent, or lowered its own score, goes back to 1000: at each
    command's start every process of the agent's ranks above the executor for the OOM killer."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            prefer_oom(int(entry))


def pidfd(pid: int):
    """A pollable fd that becomes readable when ``pid`` exits (Linux >= 5.3), else None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def process_table() -> dict[int, tuple[int, int]]:
    """``pid -> (parent pid, start time in clock ticks)`` of every live, non-zombie process
    this /proc shows."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 19 and fields[0] not in (b"Z", b"X"):
            table[int(entry)] = (int(fields[1]), int(fields[19]))
    return table


def ticks_now() -> int:
    """Now, on the clock of :func:`process_table`'s start times, one tick early (they round down)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK")) - 1


def descendants(root: int, table: dict[int, tuple[int, int]] | None = None) -> list[int]:
    """Live (non-zombie) processes below ``root``."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in (table if table is not None else process_table()).items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def call_processes(main_pid: int, since: int, table: dict[int, tuple[int, int]] | None = None) -> list[int]:
    """Every live process one call started: the command ``main_pid`` and its descendants, plus
    whatever was re-parented to us (we are PID 1 or a child subreaper, so a process that left
    with ``setsid`` or a double fork ends up here) since the call began, and their descendants.

    "Since the call began" is a start time at or after ``since`` (clock ticks, 10 ms apart) and
    a pid at or above ``main_pid``: pids are handed out in increasing order, which tells apart
    what an earlier call left running in the same tick (a pid wrap-around during the call
    could hide a process from this, never blame one on the wrong call)."""
    table = process_table() if table is None else table
    me = os.getpid()
    roots = {main_pid} if main_pid in table else set()
    roots |= {pid for pid, (ppid, started) in table.items()
              if ppid == me and started >= since and pid >= main_pid}
    found = set(roots)
    for root in roots:
        found.update(descendants(root, table))
    found.discard(me)
    return sorted(found)


def kill_call(main_pid: int, since: int, reap) -> int:
    """SIGKILL everything the call of ``main_pid`` started (see :func:`call_processes`), forks
    made meanwhile included, until nothing of it is left; returns how many kills were sent."""
    killed = 0
    for _ in range(KILL_ROUNDS):
        victims = call_processes(main_pid, since)
        if not victims:
            break
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        reap()
        time.sleep(0.001)
    return killed


def sysv_ipc_objects(uid: int) -> list[tuple[str, int]]:
    """``(kind, id)`` of every SysV shared-memory segment, semaphore set and message queue
    listed in /proc/sysvipc that ``uid`` created or owns."""
    found = []
    for kind, _ in SYSV_IPC:
        try:
            with open("/proc/sysvipc/" + kind) as fh:
                rows = [line.split() for line in fh.read().splitlines() if line.strip()]
        except OSError:
            continue
        if not rows:
            continue
        header = rows[0]
        owners = [header.index(c) for c in ("uid", "cuid") if c in header]
        for row in rows[1:]:
            try:
                ident = int(row[1])
                if any(int(row[i]) == uid for i in owners):
                    found.append((kind, ident))
            except (IndexError, ValueError):
                continue
    return found


def remove_sysv_ipc(path=None) -> int:
    """Remove our SysV IPC objects; returns how many went away.

    With ``ipcrm`` (util-linux, in the image and under the host's /usr) if there is one, else --
    or for whatever it left -- with the ``*ctl(IPC_RMID)`` calls themselves, through ctypes.
    """
    uid = os.getuid()
    before = sysv_ipc_objects(uid)
    if not before:
        return 0
    flags = dict(SYSV_IPC)
    ipcrm = shutil.which("ipcrm", path=path)
    if ipcrm:
        argv = [ipcrm]
        for kind, ident in before:
            argv += [flags[kind], str(ident)]
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=10, close_fds=True)
    left = sysv_ipc_objects(uid)
    if left:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            ipc_rmid = 0
            for kind, ident in left:
                if kind == "shm":
                    libc.shmctl(ident, ipc_rmid, None)
                elif kind == "sem":
                    libc.semctl(ident, 0, ipc_rmid)
                else:
                    libc.msgctl(ident, ipc_rmid, None)
        except Exception:
            pass
        left = sysv_ipc_objects(uid)
    return len(before) - len(left)


# ---- running commands (the executor's exec and pyexec) ---------------------------------------

RLIMITS = {
    "as": resource.RLIMIT_AS,
    "cpu": resource.RLIMIT_CPU,
    "fsize": resource.RLIMIT_FSIZE,
    "nproc": resource.RLIMIT_NPROC,
    "nofile": resource.RLIMIT_NOFILE,
    "core": resource.RLIMIT_CORE,
}


class Capture:
    """Keep the first ``cap`` bytes of a stream, count the rest, and remember a short tail."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.head = bytearray()
        self.dropped = 0
        self.tail = b""

    def feed(self, data: bytes) -> None:
        room = self.cap - len(self.head)
        if room > 0:
            self.head += data[:room]
        self.dropped += max(0, len(data) - max(room, 0))
        self.tail = (self.tail + data)[-4096:]


def apply_limits(limits: dict) -> None:
    """Lower our own rlimits once at startup; every command inherits them.

    Why not per command: a ``preexec_fn`` forces ``fork()`` instead of ``vfork()``, which costs
    4-8 ms on small VMs against ~1 ms, and would dominate a warm exec. The executor lives under
    the same limits as the commands, which its small, bounded transfers fit into.
    """
    for name, value in limits.items():
        if name not in RLIMITS or value is None:
            continue
        try:
            _, hard = resource.getrlimit(RLIMITS[name])
            value = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
            resource.setrlimit(RLIMITS[name], (value, value))
        except (ValueError, OSError):
            pass


class ForkedPython:
    """The part of ``subprocess.Popen`` that :func:`pump` and the executor's ``_kill_call`` use, for a forked child."""

    def __init__(self, source: str, env: dict, enter_child=None) -> None:
        """Fork the child, in our working directory; ``OSError`` when it cannot be (the agent
        holds every pid or fd).
        ``enter_child`` runs in the child before anything else (the commands' confinement)."""
        fds: list[int] = []
        try:
            fds += os.pipe()
            fds += os.pipe()
            out_r, out_w, err_r, err_w = fds
            pid = os.fork()
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        if pid == 0:  # pragma: no cover - runs in the child
            if enter_child is not None:
                try:
                    enter_child()
                except BaseException:
                    os._exit(126)  # never run the source less confined than asked
            _forked_child(source, env, out_w, err_w)
        os.close(out_w)
        os.close(err_w)
        self.pid = pid
        self.stdin = None
        self.stdout = open(out_r, "rb", buffering=0)  # noqa: SIM115 - closed by pump
        self.stderr = open(err_r, "rb", buffering=0)  # noqa: SIM115 - closed by pump
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("pyexec", timeout)
            time.sleep(0.001)
        return self.returncode


def _forked_child(source: str, env: dict, out_w: int, err_w: int) -> None:
    """Become a fresh-looking Python process for ``source``; never returns."""
    code = 1
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 65536)  # the protocol channel, pidfds, pipes: nothing of ours survives
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(env)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the child exits with os._exit
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.argv = ["-c"]
        try:
            exec(compile(source, "<pyexec>", "exec"), {"__name__": "__main__"})
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, int) and exc.code is not None:
                print(exc.code, file=sys.stderr)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


def pump(proc, stdin_data, out: Capture, err: Capture, deadline: float, on_host) -> bool:
    """Shovel stdin/stdout/stderr until the command has exited *and* both outputs closed,
    or the deadline passed (then return True). A background job that keeps the outputs
    open therefore counts against the timeout, as with ``subprocess.run``.

    Also watches our own stdin (``on_host`` reads what arrives: EOF there means the host died
    mid-command).
    """
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    sel.register(0, selectors.EVENT_READ, "host")
    exit_fd = pidfd(proc.pid)
    if exit_fd is not None:
        sel.register(exit_fd, selectors.EVENT_READ, "exit")
    pending = memoryview(stdin_data) if stdin_data is not None else None
    if pending is not None:
        os.set_blocking(proc.stdin.fileno(), False)
        if len(pending):
            sel.register(proc.stdin, selectors.EVENT_WRITE, "stdin")
        else:
            proc.stdin.close()
    open_outputs, exited = 2, False
    try:
        while open_outputs or not exited:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            if exit_fd is None and not open_outputs:  # no pidfd: fall back to polling
                try:
                    proc.wait(timeout=remaining)
                except subprocess.TimeoutExpired:
                    return True
                return False
            for key, _ in sel.select(min(remaining, 1.0)):
                if key.data == "host":
                    on_host()
                elif key.data == "exit":
                    sel.unregister(key.fd)
                    proc.wait()
                    exited = True
                elif key.data == "stdin":
                    try:
                        n = os.write(key.fd, pending[:CHUNK])
                        pending = pending[n:]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not len(pending):
                        sel.unregister(key.fileobj)
                        proc.stdin.close()
                else:
                    data = os.read(key.fd, CHUNK)
                    if data:
                        key.data.feed(data)
                    else:
                        sel.unregister(key.fileobj)
                        key.fileobj.close()
                        open_outputs -= 1
        return False
    finally:
        for key in list(sel.get_map().values()):
            if key.data in ("host", "exit"):
                continue
            key.fileobj.close()
        sel.close()
        if exit_fd is not None:
            os.close(exit_fd)


def stat_value(paths, wanted: str) -> int:
    """The value of the ``wanted`` line of the first readable ``key value`` file of ``paths``, else 0."""
    for path in paths:
        try:
            with open(path) as fh:
                for line in fh:
                    key, _, value = line.partition(" ")
                    if key == wanted:
                        return int(value)
        except (OSError, ValueError):
            continue
    return 0
