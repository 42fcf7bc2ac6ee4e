"""The resident executor: one long-lived ``python3`` process inside a sandbox.

Why it exists: ``docker exec`` costs ~80 ms per call and a fresh ``bwrap`` spawn ~20 ms, which
dominates an agent episode of many short tool calls. Instead every backend starts this script
once, as the sandbox's PID 1 where it can (docker, bwrap ``--as-pid-1``), and talks to it over
its stdin/stdout. It then runs commands with ``subprocess`` plus rlimits, a wall-clock timeout
that kills everything the command started, and output caps -- so these semantics are
implemented once and behave the same in every backend.

It is started as ``python3 -I -c <bootstrap> <helpers...> <this file> <config json>`` (see
``resident.executor_argv``): the bootstrap loads the helper modules' sources as ``envhub_confine``,
``envhub_fsops``, ``envhub_scratch``, ``envhub_tarops`` and ``envhub_procs``, then runs this one,
so no image needs any of them baked in. Hence: **stdlib only, Python >= 3.8, no imports from envhub** in all. The host imports
this module too (with the helpers from the package); nothing runs at import time.

Protocol: every message is a 4-byte big-endian length followed by that many bytes of UTF-8
JSON. Requests are ``{"id": n, "op": name, ...}``; replies ``{"id": n, "ok": true, ...}`` or
``{"id": n, "ok": false, "kind": k, "error": text}`` with kind one of ``not_found``,
``bad_path``, ``is_dir``, ``too_large``, ``os_error`` (with ``errno``), ``internal``. Binary
payloads are base64. The host never pipelines: one request, then its reply. Nothing the agent
does to its files or processes makes an op answer ``internal`` (the host's ``SandboxError``):
walks are bounded and iterative, and file errors are ``os_error`` or ``bad_path`` replies.

Being PID 1 matters: from inside its PID namespace, PID 1 cannot be killed by signals it has no
handler for (the agent's ``kill -9 1`` does nothing), ``kill(-1, SIGKILL)`` wipes every other
process on reset, and orphans are re-parented to it, so it reaps them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
import time

if __name__ == "__main__":  # inside a sandbox: the bootstrap loaded the helpers under these names
    confine, fsops, procs, scratch, tarops = (sys.modules[f"envhub_{name}"]
                                              for name in ("confine", "fsops", "procs", "scratch", "tarops"))
else:
    from envhub.sandboxes import confine, fsops, procs, scratch, tarops

# The helpers, under the names the host has always imported from here.
Capture, ForkedPython, apply_limits = procs.Capture, procs.ForkedPython, procs.apply_limits
OpError, rel_parts, open_dir = fsops.OpError, fsops.rel_parts, fsops.open_dir
safe_write, safe_read, wipe = fsops.safe_write, fsops.safe_read, fsops.wipe
extract_tar, pack_tar = tarops.extract_tar, tarops.pack_tar

HEADER = struct.Struct(">I")
MAX_FRAME = 512 * 1024 * 1024
CHUNK = procs.CHUNK
#: Signs in stderr that a command died of an rlimit memory cap (no cgroup OOM counter there).
OOM_MARKERS = (b"MemoryError", b"Cannot allocate memory", b"std::bad_alloc", b"out of memory")
OOM_COUNTER_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")
#: The container's own memory cgroup statistics (v2, v1): ``shmem`` is what no process holds alone.
MEMORY_STAT_FILES = ("/sys/fs/cgroup/memory.stat", "/sys/fs/cgroup/memory/memory.stat")
#: How long a command's OOM score may take to become writable (see ``procs.prefer_oom``).
PREFER_OOM_SETTLE_S = 0.001
#: IPC filesystems emptied on reset where the sandbox has its own IPC namespace.
IPC_DIRS = ("/dev/shm", "/dev/mqueue")


class HostGone(Exception):
    """stdin hit EOF: the host process went away, so the sandbox must wind down."""


# ---- the server ------------------------------------------------------------------------------


def _bounds(req: dict) -> dict:
    """The walk bounds a request may lower (``fsops.scan``'s defaults otherwise)."""
    return {key: int(req[key]) for key in ("max_entries", "max_depth") if req.get(key) is not None}


class Executor:
    def __init__(self, config: dict, confinement=None) -> None:
        self.workdir = config["workdir"]
        #: The landlock backend's (entered already): every command enters its nested domain.
        self.enter_child = confinement.enter_child if confinement is not None else None
        #: Every file operation and command goes through this descriptor (see :mod:`.scratch`).
        self.work = scratch.HeldDir(self.workdir, create=True)
        os.fchdir(self.work.fd)
        self.held = [self.work]
        for path in config.get("wipe", []):
            if os.path.normpath(path) != os.path.normpath(self.workdir):
                with contextlib.suppress(OSError):  # a dir this sandbox does not have
                    self.held.append(scratch.HeldDir(path))
        self.tidy = config.get("tidy")
        self.base_env = dict(config.get("env", {}))
        self.kill_all = bool(config.get("kill_all")) and os.getpid() == 1
        # Only where the IPC namespace is the sandbox's own (docker, bwrap): on the process
        # backend it is the host's, and its objects are not ours to remove.
        self.wipe_ipc = bool(config.get("wipe_ipc"))
        self.oom_mode = config.get("oom", "heuristic")
        self.groups: set[int] = set()
        self.inbuf = bytearray()
        # Modules imported once here so that ``pyexec`` children start with them loaded (a grading
        # sandbox preloads pytest: each hidden-test run then skips ~100 ms of imports).
        self.preloaded = []
        for name in config.get("preload", []):
            try:
                __import__(name)
                self.preloaded.append(name)
            except Exception:
                pass

    # -- framing --

    def fill(self) -> None:
        data = os.read(0, CHUNK)
        if not data:
            raise HostGone()
        self.inbuf += data

    def read_frame(self):
        while len(self.inbuf) < 4:
            self.fill()
        (size,) = HEADER.unpack(self.inbuf[:4])
        if size > MAX_FRAME:
            raise HostGone()
        while len(self.inbuf) < 4 + size:
            self.fill()
        payload = bytes(self.inbuf[4 : 4 + size])
        del self.inbuf[: 4 + size]
        return json.loads(payload.decode("utf-8"))

    @staticmethod
    def write_frame(obj: dict) -> None:
        payload = json.dumps(obj, separators=(",", ":")).encode("utf-8")
        view = memoryview(HEADER.pack(len(payload)) + payload)
        while view:
            n = os.write(1, view)
            view = view[n:]

    def serve(self) -> None:
        try:
            while True:
                req = self.read_frame()
                op = req.get("op", "")
                try:
                    reply = getattr(self, "op_" + op)(req) if hasattr(self, "op_" + op) else None
                    if reply is None:
                        raise OpError("internal", f"unknown op {op!r}")
                    reply.update(id=req.get("id"), ok=True)
                except OpError as exc:
                    reply = {"id": req.get("id"), "ok": False, "kind": exc.kind, "error": str(exc)}
                    if exc.errno is not None:
                        reply["errno"] = exc.errno
                except HostGone:
                    raise
                except UnicodeError as exc:  # a name or argument no file system or exec takes
                    reply = {"id": req.get("id"), "ok": False, "kind": "bad_path", "error": f"invalid text: {exc}"}
                except MemoryError:  # our own rlimit (bwrap/process): the transfer is too big
                    reply = {"id": req.get("id"), "ok": False, "kind": "too_large",
                             "error": "the transfer does not fit the sandbox's memory limit"}
                except OSError as exc:  # e.g. ENOSPC: the agent filled the disk; not a broken sandbox
                    reply = {"id": req.get("id"), "ok": False, "kind": "os_error", "errno": exc.errno,
                             "error": "{}: {}".format(exc.strerror or exc, exc.filename or "")}
                except Exception as exc:
                    reply = {"id": req.get("id"), "ok": False, "kind": "internal", "error": repr(exc)}
                self.write_frame(reply)
                if op == "shutdown":
                    break
        except (HostGone, BrokenPipeError):
            pass
        finally:
            self.kill_everything()

    # -- ops --

    def op_hello(self, req: dict) -> dict:
        return {"pid": os.getpid(), "uid": os.getuid(), "python": sys.version.split()[0], "kill_all": self.kill_all,
                "work": self.work.identity()}

    def op_ping(self, req: dict) -> dict:
        return {}

    def op_shutdown(self, req: dict) -> dict:
        return {}

    def op_write(self, req: dict) -> dict:
        for rel, b64, mode in req["files"]:
            safe_write(self.work.fd, rel, base64.b64decode(b64), int(mode))
        return {"written": len(req["files"])}

    def op_read(self, req: dict) -> dict:
        data = safe_read(self.work.fd, req["path"], int(req.get("max_bytes", 64 * 1024 * 1024)))
        return {"data": base64.b64encode(data).decode("ascii")}

    def op_list(self, req: dict) -> dict:
        """Every non-directory entry under ``path``, plus the directories that could not be
        listed (``left_out``) and the walk's bounds it hit (``cut``)."""
        found = fsops.scan_path(self.work.fd, req.get("path", "."), **_bounds(req))
        return {"files": [p for p, kind, _ in found.entries if kind != "dir"], "left_out": found.left_out,
                "cut": found.cut}

    def op_read_tree(self, req: dict) -> dict:
        """Every regular file under ``path`` with its content (see ``fsops.scan``)."""
        return fsops.tree_reply(fsops.scan_path(self.work.fd, req.get("path", "."),
                                                read_bytes=int(req["max_bytes"]), **_bounds(req)))

    def op_put_tar(self, req: dict) -> dict:
        return extract_tar(self.work.fd, req.get("dest", "."), base64.b64decode(req["data"]), allow_links=True)

    def op_get_tar(self, req: dict) -> dict:
        packed = pack_tar(self.work.fd, req.get("src", "."), int(req.get("max_bytes", 256 * 1024 * 1024)))
        return {"data": base64.b64encode(packed["data"]).decode("ascii"), "skipped": packed["skipped"],
                "cut": packed["cut"]}

    def op_reset(self, req: dict) -> dict:
        killed = self.kill_everything()  # first: a segment still attached is not removed at once
        ipc = 0
        if self.wipe_ipc:
            ipc = procs.remove_sysv_ipc(self.base_env.get("PATH"))
            held = {os.path.normpath(d.path) for d in self.held}
            for path in IPC_DIRS:
                if path not in held and os.access(path, os.W_OK):
                    wipe(path)
        for held_dir in self.held:
            held_dir.reset()
        if self.tidy:
            scratch.tidy(self.work.parent, self.tidy["keep"], int(self.tidy["mode"]))
        with contextlib.suppress(OSError):
            os.fchdir(self.work.fd)
        return {"killed": killed, "ipc_removed": ipc, "work": self.work.identity()}

    def op_exec(self, req: dict) -> dict:
        """Run ``argv``; everything it does is in the reply, never an error reply."""
        timeout, cap, env, problem = self._command_setup(req)
        if problem:
            return self._failed(2, problem)
        argv = req["argv"]
        stdin_data = base64.b64decode(req["stdin"]) if req.get("stdin") is not None else None
        oom_before = self.oom_count()
        start, since = time.monotonic(), procs.ticks_now()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,
                close_fds=True,
                preexec_fn=self.enter_child,
            )
        except FileNotFoundError:
            return self._failed(127, f"envhub: command not found: {argv[0]}\n")
        except PermissionError:
            return self._failed(126, f"envhub: permission denied: {argv[0]}\n")
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            return self._failed(126, f"envhub: cannot start the command: {exc}\n")
        finally:
            self._back_to_work()
        return self._complete(proc, stdin_data, cap, (start, since), start + timeout, oom_before,
                              bool(req.get("contain")))

    # -- exec helpers --

    def op_pyexec(self, req: dict) -> dict:
        """Run Python source in a child forked from this executor (preloaded modules included).

        The child gets exactly what an ``exec`` command gets -- its own session, the work dir, the
        request's environment, our rlimits, output pipes -- and none of our descriptors: the
        protocol channel is closed before any of its code runs.
        """
        timeout, cap, env, problem = self._command_setup(req)
        if problem:
            return self._failed(2, problem)
        oom_before = self.oom_count()
        start, since = time.monotonic(), procs.ticks_now()
        try:
            proc = ForkedPython(req["source"], env, self.enter_child)
        except OSError as exc:  # e.g. EAGAIN: the agent's processes hold the whole pids limit
            return self._failed(126, f"envhub: cannot start the command: {exc}\n")
        finally:
            self._back_to_work()
        return self._complete(proc, None, cap, (start, since), start + timeout, oom_before,
                              bool(req.get("contain")))

    def _command_setup(self, req: dict) -> tuple[float, int, dict, str | None]:
        """Timeout, output cap and environment of an exec-like request, and why the command
        cannot start in its working directory (missing, a symlink, or the agent took away the
        permission to enter it), else None. The executor itself moves there (``fchdir``, through
        the held work dir), so the command inherits it; ``_back_to_work`` returns."""
        env = dict(self.base_env)
        env.update(req.get("env") or {})
        timeout, cap = float(req.get("timeout", 10.0)), int(req.get("cap", 65536))
        shown = req.get("cwd") or "."
        try:
            fd = open_dir(self.work.fd, rel_parts(shown))
        except OpError as exc:
            return timeout, cap, env, f"envhub: cannot use working directory: {exc}\n"
        try:
            os.fchdir(fd)
        except OSError:
            self._back_to_work()
            return timeout, cap, env, f"envhub: cannot use working directory {shown}: permission denied\n"
        finally:
            os.close(fd)
        return timeout, cap, env, None

    def _back_to_work(self) -> None:
        with contextlib.suppress(OSError):  # the agent took the permission away: commands say so
            os.fchdir(self.work.fd)

    def _complete(self, proc, stdin_data, cap: int, started: tuple[float, int], deadline: float,
                  oom_before: int, contain: bool = False) -> dict:
        """Wait for a started command (``exec`` or ``pyexec``) and build its reply.

        ``started`` is (monotonic time, clock ticks since boot) from just before the start. On a
        timeout -- or always, with ``contain`` -- everything the command started is killed: its
        process group and whatever left the group (``setsid``, double forks) alike.
        """
        start, since = started
        self.groups.add(proc.pid)
        # PID 1 (docker, bwrap): a refusal is the moment before an exec'd command is dumpable (wait
        # it out; a forked pyexec child never is), and what it forked meanwhile and earlier calls'
        # jobs rank above us too
        settle = PREFER_OOM_SETTLE_S if self.kill_all and not isinstance(proc, ForkedPython) else 0.0
        procs.prefer_oom(proc.pid, settle)
        if self.kill_all:
            procs.prefer_oom_all(os.getpid())
        out, err = Capture(cap), Capture(cap)
        timed_out = procs.pump(proc, stdin_data, out, err, deadline, self.fill)
        if timed_out or contain:
            self._kill_call(proc, since)
        rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        duration = time.monotonic() - start
        self.reap()
        try:  # forget the group once nothing of it is left (background jobs keep it alive)
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            self.groups.discard(proc.pid)
        sig = -rc if rc < 0 else None
        exit_code = 128 + sig if sig else rc
        if self.oom_mode == "cgroup":
            oom = self.oom_count() > oom_before
        else:
            oom = exit_code != 0 and not timed_out and any(m in err.tail for m in OOM_MARKERS)
        extra = {"pinned": self.shmem_bytes()} if oom and self.oom_mode == "cgroup" else {}
        return {
            **extra,
            "exit_code": exit_code,
            "signal": sig,
            "stdout": base64.b64encode(bytes(out.head)).decode("ascii"),
            "stdout_dropped": out.dropped,
            "stderr": base64.b64encode(bytes(err.head)).decode("ascii"),
            "stderr_dropped": err.dropped,
            "timed_out": timed_out,
            "oom_killed": oom,
            "duration": duration,
        }

    def _failed(self, code: int, message: str) -> dict:
        return {
            "exit_code": code,
            "signal": None,
            "stdout": "",
            "stdout_dropped": 0,
            "stderr": base64.b64encode(message.encode()).decode("ascii"),
            "stderr_dropped": 0,
            "timed_out": False,
            "oom_killed": False,
            "duration": 0.0,
        }

    def _kill_call(self, proc, since: int) -> None:
        """SIGKILL everything a command started, collecting the main process first.

        First its process group: killpg is atomic against forks inside the group, so a fork
        bomb cannot outrun it; it is repeated until the group is empty (members turn into
        zombies until reaped). Then whatever left the group, found by descent and by start time
        (``procs.kill_call``).
        """
        for attempt in range(50):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                break
            if attempt == 0:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
            self.reap()
            time.sleep(0.002)
        if proc.returncode is None:  # collected before anything reaps at random
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        procs.kill_call(proc.pid, since, self.reap)

    def oom_count(self) -> int:
        return procs.stat_value(OOM_COUNTER_FILES, "oom_kill")

    def shmem_bytes(self) -> int:
        """Memory of the sandbox's cgroup that no process holds alone -- files in its tmpfs dirs, SysV
        segments, memfds (``shmem`` of memory.stat) -- which killing processes does not free."""
        return procs.stat_value(MEMORY_STAT_FILES, "shmem")

    def reap(self) -> None:
        """Collect exited children and orphans (as PID 1 every orphan becomes ours)."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    def kill_everything(self) -> int:
        """SIGKILL every process the agent started; as PID 1 that is everyone but us.

        Otherwise (process backend) it is our descendant tree: we are a child subreaper, so even
        jobs that detached with setsid are re-parented to us when their parent exits.
        """
        killed = 0
        if not self.kill_all:
            for _ in range(20):
                tree = procs.descendants(os.getpid())
                if not tree:
                    break
                for pid in tree:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        killed += 1
                    except (ProcessLookupError, PermissionError):
                        pass
                self.reap()
                time.sleep(0.002)
        if self.kill_all:
            end = time.monotonic() + 5
            while time.monotonic() < end:
                try:
                    os.kill(-1, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    break
                self.reap()
                time.sleep(0.001)
        for pgid in list(self.groups):
            try:
                os.killpg(pgid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                self.groups.discard(pgid)
        self.reap()
        return killed


def main() -> None:
    config = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {"workdir": os.getcwd()}
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE=0: no ptrace, no /proc/<us>/fd to forge frames
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come back to us to be reaped
    except Exception:
        pass
    # Python's default SIGINT handler would make us killable by the agent: as PID 1 of a
    # namespace, only signals we handle get through, so handle none.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.makedirs(config["workdir"], exist_ok=True)
    os.chdir(config["workdir"])
    apply_limits(config.get("limits", {}))
    os.umask(0o022)
    confinement = None
    if config.get("confine"):
        confinement = confine.Confinement(config["confine"])
        try:
            confinement.enter()
        except OSError as exc:  # serve nothing rather than serve unconfined
            sys.stderr.write(f"envhub executor: cannot confine itself: {exc}\n")
            sys.exit(70)
    Executor(config, confinement).serve()


if __name__ == "__main__":
    main()
