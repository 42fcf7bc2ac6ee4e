"""The in-sandbox probe runner: runs probe tests in isolated children and reports what they observed.

Stdlib only; copied into the sandbox as ``<probe_dir>/envhub_probe_runner.py`` (the runtime beside
it as ``envhub_probe.py``) and started by ``envhub_probe_boot.py PLAN`` (``boot.py``), as a script
``python3 -s -P <it> PLAN``, or as source with
``sys.exit(main(PLAN))`` appended). It never imports submitted code, holds no expected value and
decides no verdict: one compact JSON line per test, then ``{"done": true}`` (docs/code-repair.md).

Before anything submitted runs, every probe module is read into a buffer and deleted from the
disk, and a sealed private copy of the runtime is made (``seal.py``). A batch: the parent (child subreaper; not dumpable, so no same-uid process can ptrace it or
open ``/proc/<it>/fd``) forks a child with a fresh pipe: ``setsid``, PDEATHSIG, stdio on /dev/null,
no other descriptor, RLIMIT_CPU, every other batch's buffer blanked, the probe's code sealed,
``sys.path = [probe_dir, *paths, *stdlib path]``, the audit hook, then the sealed ``run_batch``. The parent reads the pipe while the
child runs (poll, deadline, byte cap), then SIGKILLs the child's group and every remaining
descendant (orphans come back to the subreaper) until none is left, reaping all; only then it
drains the pipe and parses the frames. Each kill goes through a pidfd after re-checking the
``/proc/<pid>/stat`` ppid chain up to the runner: only our descendants are ever signalled.

Statuses: frames come in test order. A frame for an ended test (or a second end) makes it
``"late"``; a frame for a later test makes that test ``"malformed"``; an undecodable frame (or JSON
deeper than MAX_JSON_DEPTH) the current test, a length over ``max_bytes`` the current and all later
ones. A batch that ends early (``"timeout"``, ``"flood"``, ``"crashed"``) gives that status to every
test not yet ended. Each batch has its limit (``timeout_s``) inside one ``budget_s`` for the run,
spent as ``reaper.BatchClock`` counts (running time and CPU, never the time a busy machine kept the
batch waiting; the wall clock only as a ceiling of ``wall_factor`` times the limit); once the budget
is spent, later batches run nothing (``"timeout"``). A SIGSTOPped runner is the host's to end.
Without ``prctl`` (no subreaper) an orphan that also left the group escapes.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.machinery
import json
import os
import resource
import select
import signal
import struct
import sys
import time
import types
from typing import Any

HEADER = struct.Struct(">I")
CHUNK = 65536
KILL_GRACE_S = 3.0
CLOCK_MS = 10.0  # how often a running batch's clock is read
#: deeper than anything the runtime encodes (about 3 JSON levels per encoding level, 13 levels)
MAX_JSON_DEPTH = 64
MAX_FD = 1 << 20  # above every descriptor a process can hold (the kernel's nr_open ceiling)
RUNTIME_MODULE = "envhub_probe"
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36


class PlanError(ValueError):
    """The plan (written by the trusted side) is unusable."""


def load_plan(path: str) -> dict[str, Any]:
    """Read the plan; paths come back absolute (relative ones are taken from the cwd). The trusted
    side builds it (``grader.plan``): only its shape is checked here, to fail with a clear error."""
    try:
        with open(path, encoding="utf-8") as fh:
            plan = json.load(fh)
        timeout, cap, budget = plan.get("timeout_s", 10.0), plan.get("max_bytes", 1048576), plan.get("budget_s", 86400)
        wall_factor = plan.get("wall_factor", 10.0)
        batches = [{"module": os.path.abspath(b["module"]), "tests": list(b["tests"]),
                    "timeout_s": b.get("timeout_s", timeout)} for b in plan["batches"]]
        seen: set[int] = set()
        for test in (t for b in batches for t in b["tests"]):
            test.setdefault("indices", {})
            if type(test["index"]) is not int or not isinstance(test["function"], str) or test["index"] in seen:
                raise ValueError(f"test index {test['index']} appears twice" if test["index"] in seen
                                 else "a test needs an integer index and a function name")
            seen.add(test["index"])
        numbers = [timeout, budget, wall_factor, *(b["timeout_s"] for b in batches)]
        if not (all(type(t) in (int, float) and 0 < t <= 86400 for t in numbers) and type(cap) is int and cap > 0):
            raise ValueError("timeout_s, budget_s, wall_factor and max_bytes must be positive numbers")
        return {"probe_dir": os.path.abspath(plan["probe_dir"]), "batches": batches, "stats": bool(plan.get("stats")),
                "paths": [os.path.abspath(p) for p in plan.get("paths", [])], "preload": list(plan.get("preload", [])),
                "timeout_s": float(timeout), "budget_s": float(budget), "wall_factor": float(wall_factor),
                "max_bytes": cap}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PlanError(f"cannot use the plan {path}: {exc!r}") from exc


class Runner:
    def __init__(self, plan: dict[str, Any], shipped: dict[str, types.CodeType] | None = None) -> None:
        self.plan, self.pid, self.stuck, self.shipped = plan, os.getpid(), set(), shipped or {}
        self.libc: Any = None
        with contextlib.suppress(Exception):
            import ctypes

            self.libc = ctypes.CDLL(None, use_errno=True)
        self.subreaper = self.prctl(PR_SET_CHILD_SUBREAPER, 1)
        self.prctl(PR_SET_DUMPABLE, 0)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # SIG_IGN would auto-reap and hide exit statuses
        # a same-uid child may signal us: only SIGKILL and SIGSTOP still work (children get these back)
        self.handlers = {}
        for sig in set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD}:
            with contextlib.suppress(OSError, ValueError):
                self.handlers[sig] = signal.signal(sig, signal.SIG_IGN)
        sys.dont_write_bytecode = True
        self.base_path = _trusted_path(sys.path, [*plan["paths"], os.getcwd()])
        sys.path[:] = self.base_path
        for name in plan["preload"]:
            with contextlib.suppress(Exception):
                importlib.import_module(name)
        self.codes: dict[str, Any] = {}
        self.reaper = self._load("envhub_probe_reaper")
        self._load("envhub_probe_excinfo")
        self.runtime = self._load(RUNTIME_MODULE)  # the public one, which probe modules import
        self.batch = self._load("envhub_probe_batch")
        self.seal = self._load("envhub_probe_seal")
        self.sigfilter = self._load("envhub_probe_sigfilter")
        # what the probes really call; a batch child drops it once its probe is sealed
        self.sealed: Any = self.seal.private_runtime(self.codes, self.runtime._current)
        # Every probe module is read into memory and taken off the disk before any submitted code
        # runs: a batch can neither rewrite a later one nor read another test's rows (one test's
        # inputs may be another's expected values). Each child blanks every buffer but its own.
        self.sources = {m: _take(m) for m in dict.fromkeys(b["module"] for b in plan["batches"])}
        sys.path_importer_cache[plan["probe_dir"]] = importlib.machinery.FileFinder(  # made once, not per child
            plan["probe_dir"], (importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES))

    def prctl(self, option: int, value: int) -> bool:
        with contextlib.suppress(Exception):
            return self.libc.prctl(option, value, 0, 0, 0) == 0
        return False

    def _load(self, name: str) -> types.ModuleType:
        """The shipped module ``name``: the host's code (``boot.py``) or compiled here, once (its code
        is kept for the sealed copy)."""
        path = os.path.join(self.plan["probe_dir"], name + ".py")
        code = self.shipped.get(name)
        if code is None:
            try:
                with open(path, "rb") as fh:
                    code = compile(fh.read(), path, "exec", dont_inherit=True)
            except OSError as exc:
                raise PlanError(f"no {name} at {path}: {exc}") from exc
        self.codes[name] = code
        module = sys.modules[name] = types.ModuleType(name)
        module.__file__ = path
        exec(code, module.__dict__)
        return module

    def run(self) -> None:
        self.budget_left = self.plan["budget_s"]  # one budget for every batch of the run, spent as
        self.wall_end = time.monotonic() + self.plan["wall_factor"] * self.plan["budget_s"]  # BatchClock counts
        for number, batch in enumerate(self.plan["batches"]):
            try:
                records = self.run_batch(batch, number)
            except Exception as exc:  # a runner bug must not hide the other batches
                import traceback

                traceback.print_exc()
                records = [_record(t["index"], "crashed", f"runner error: {exc!r}"[:300]) for t in batch["tests"]]
            for record in records:
                # frames were decoded without NaN or huge ints and bounded in depth: this cannot fail
                sys.stdout.write(json.dumps(record, ensure_ascii=True, separators=(",", ":")) + "\n")
            sys.stdout.flush()
        sys.stdout.write('{"done":true}\n')
        sys.stdout.flush()

    def run_batch(self, batch: dict[str, Any], number: int) -> list[dict[str, Any]]:
        tests, t0, cpu0 = batch["tests"], time.monotonic(), _cpu()
        if self.budget_left <= 0 or t0 >= self.wall_end:  # spent: the rest fails unrun
            return [_record(t["index"], "timeout", f"not run: {self._cause_detail('budget', None, batch)[1]}")
                    for t in tests]
        limit = min(batch["timeout_s"], self.budget_left)
        sys.stdout.flush()  # nothing buffered may be inherited by the child
        sys.stderr.flush()
        read_fd, write_fd = os.pipe()
        gc.freeze()  # the child's collections then leave the parent's objects (and their pages) alone
        try:
            pid = self._fork()
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            return [_record(t["index"], "crashed", f"could not fork: {exc}") for t in tests]
        if pid == 0:  # pragma: no cover - the child
            _child(self, batch, write_fd)
        os.close(write_fd)
        clock = self.reaper.BatchClock(pid, self.pid, limit, self.plan["wall_factor"], self.wall_end)
        try:
            data, cause = self._collect(pid, read_fd, clock)
        finally:  # whatever happened, nothing of the batch outlives it
            self.budget_left -= clock.spent()
            t1 = time.monotonic()
            status, clean = self._kill_tree(pid)
            t2 = time.monotonic()
        if cause != "flood":  # what the batch wrote before it ended, read once all writers are dead
            data += self._drain(read_fd, self.plan["max_bytes"] - len(data) + 1)
            cause = "flood" if len(data) > self.plan["max_bytes"] else cause
        os.close(read_fd)
        if self.plan["stats"]:  # wall seconds until the child ended / for the kill; CPU of both processes
            sys.stderr.write(json.dumps({"batch": number, "tests": len(tests), "run_s": round(t1 - t0, 6),
                                         "kill_s": round(t2 - t1, 6), "cpu_s": round(_cpu() - cpu0, 6)}) + "\n")
        if not clean:
            return [_record(t["index"], "crashed", f"processes of the batch survived SIGKILL for {KILL_GRACE_S}s")
                    for t in tests]
        cause = "budget" if cause == "timeout" and limit < batch["timeout_s"] else cause
        ending = self._cause_detail(cause, status, batch)
        return records_from_frames(tests, data, ending, self.plan["max_bytes"])

    def _fork(self) -> int:
        for attempt in range(20):  # EAGAIN: the pids limit, still full of a fork bomb's remains
            with contextlib.suppress(BlockingIOError):
                return os.fork()
            self._reap()
            time.sleep(0.005 * (attempt + 1))
        return os.fork()

    def _collect(self, pid: int, fd: int, clock: Any) -> tuple[bytearray, str]:
        """Read frames until ``timeout`` (the clock's limit or ceiling), ``flood``, the child's
        ``exit`` or the pipe's ``eof``."""
        data, cap, exit_fd = bytearray(), self.plan["max_bytes"], self.reaper.pidfd(pid)
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if exit_fd is not None:
            poller.register(exit_fd, select.POLLIN)
        try:
            while True:
                if clock.over(CLOCK_MS / 1000):
                    return data, "timeout"
                remaining = clock.ceiling - time.monotonic()
                events = poller.poll(max(1, int(min(remaining * 1000, CLOCK_MS if exit_fd is not None else 5.0) + 1)))
                exited = False
                for ready, _ in events:
                    if ready == fd:
                        chunk = os.read(fd, CHUNK)
                        if not chunk:  # closed: the child is exiting (or hangs without a channel)
                            if exit_fd is not None:
                                poller.unregister(fd)
                                poller.poll(max(1, int(min(clock.ceiling - time.monotonic(), 0.05) * 1000)))
                            return data, "eof"
                        data += chunk
                        if len(data) > cap:
                            return data, "flood"
                    else:
                        exited = True
                # without a pidfd: poll, never reaping (the zombie keeps the pgid reserved)
                if exited or (exit_fd is None and os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)):
                    return data, "exit"
        finally:
            if exit_fd is not None:
                os.close(exit_fd)

    @staticmethod
    def _drain(fd: int, limit: int) -> bytes:
        """What is left in the pipe once every writer is dead (or at most ``limit`` bytes of it)."""
        os.set_blocking(fd, False)
        out = bytearray()
        with contextlib.suppress(BlockingIOError):  # a surviving writer (only when the kill failed)
            while len(out) < limit and (chunk := os.read(fd, CHUNK)):
                out += chunk
        return bytes(out)

    def _kill_tree(self, pid: int) -> tuple[int | None, bool]:
        """SIGKILL the child's group and all our descendants, reap them all; (child status, all gone)."""
        status = None
        leader_alive = True  # until reaped, the leader's zombie keeps its pgid from being reused
        end = time.monotonic() + KILL_GRACE_S
        pause, quiet = 0.0002, 0
        while True:
            if leader_alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            reaped, none_left = self._reap()
            if pid in reaped:
                status, leader_alive = reaped[pid], False
            if none_left:
                return status, True
            live = [p for p in self.reaper.descendants(self.pid) if p not in self.stuck]
            # children are left but none live: zombies (reaped next round) or stuck ones. Two empty scans
            # in a row: one may miss a process whose parent was reaped mid-scan; the next sees it as ours
            quiet = quiet + 1 if not live and not leader_alive else 0
            if quiet == 2:
                return status, True
            for victim in live:
                self.reaper.kill_descendant(victim, self.pid)
            if time.monotonic() > end:
                self.stuck.update(live)
                return status, False
            time.sleep(pause)
            pause = min(pause * 2, 0.005)

    @staticmethod
    def _reap() -> tuple[dict[int, int], bool]:
        """Collect every exited child: ({pid: wait status}, True when no child is left at all)."""
        reaped = {}
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return reaped, True
            if pid == 0:
                return reaped, False
            reaped[pid] = status

    def _cause_detail(self, cause: str, status: int | None, batch: dict[str, Any]) -> tuple[str, str]:
        if cause in ("timeout", "budget"):
            return "timeout", (f"the batch ran past its {batch['timeout_s']:g}s limit" if cause == "timeout" else
                               f"the run's grading budget of {self.plan['budget_s']:g}s was spent")
        if cause == "flood":
            return "flood", f"the batch sent more than {self.plan['max_bytes']} bytes of frames"
        how = (f"exited with code {os.WEXITSTATUS(status)}" if status is not None and os.WIFEXITED(status) else
               "closed its frame channel" if cause == "eof" or status is None else  # then it was our SIGKILL
               f"was killed by signal {os.WTERMSIG(status)}")
        return "crashed", f"the test process {how} before the test ended"


def _trusted_path(path: list[str], untrusted: list[str]) -> list[str]:
    """``path`` without relative entries and without anything under an untrusted directory (the
    submission's roots, the work dir): the parent must not be able to import submitted code."""
    roots = [os.path.abspath(u) for u in untrusted if os.path.abspath(u) != "/"]
    return [p for p in path if os.path.isabs(p) and not any(p == r or p.startswith(r + os.sep) for r in roots)]


def _take(path: str) -> bytearray:
    """The bytes of the probe module at ``path``, read straight into a buffer (no other copy in this
    process), and the file removed; a probe that cannot be removed is an unusable plan."""
    try:
        with open(path, "rb") as fh:
            buffer = bytearray(os.fstat(fh.fileno()).st_size)
            fh.readinto(buffer)
        os.unlink(path)
    except OSError as exc:
        raise PlanError(f"cannot take the probe {path} off the disk: {exc}") from exc
    return buffer


def _compile(source: bytearray, path: str, runner: Runner) -> Any:
    """The sealed code object of a probe module, or the exception compiling or sealing it raised."""
    try:
        code = compile(bytes(source), path, "exec", dont_inherit=True)
        return runner.seal.seal(code, {name: getattr(runner.sealed, attr) for name, attr in runner.seal.SEALED_NAMES.items()})
    except Exception as exc:
        return exc


def _cpu() -> float:
    return sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _record(index: int, status: str, detail: str, observations: list | None = None) -> dict[str, Any]:
    return {"index": index, "status": status, "observations": observations or [], "detail": detail}


def _too_deep(value: Any, depth: int = 1) -> bool:
    inner = value if isinstance(value, list) else value.values() if isinstance(value, dict) else ()
    return depth > MAX_JSON_DEPTH or any(_too_deep(v, depth + 1) for v in inner)


def frames(data: bytes, limit: int) -> tuple[list[Any], bool]:
    """Decode the length-prefixed frames: (frames, stream corrupt). An undecodable frame is None.

    A trailing incomplete frame is dropped (the child was killed mid-write); a length over
    ``limit`` means the stream is corrupt."""
    out, pos = [], 0
    while pos + HEADER.size <= len(data):
        (size,) = HEADER.unpack_from(data, pos)
        end = pos + HEADER.size + size
        if end > len(data):
            return out, size > limit  # cut by a kill, unless the header itself is absurd
        try:
            frame = json.loads(data[pos + HEADER.size:end].decode("utf-8"), parse_constant=_not_json)
            out.append(None if _too_deep(frame) else frame)
        except (ValueError, RecursionError):
            out.append(None)
        pos = end
    return out, False


def records_from_frames(tests: list[dict[str, Any]], data: bytes, ending: tuple[str, str],
                        limit: int) -> list[dict[str, Any]]:
    """Per-test records of one batch from its frames; ``ending`` is (status, detail) for unended tests."""
    order = [t["index"] for t in tests]
    where = {index: n for n, index in enumerate(order)}
    obs: dict[int, list] = {i: [] for i in order}
    ended: dict[int, tuple[str, str]] = {}
    bad: dict[int, tuple[str, str]] = {}
    current = 0  # position in ``order`` of the test frames are expected for

    decoded, corrupt = frames(data, limit)
    for frame in decoded:
        if not (isinstance(frame, list) and len(frame) >= 2 and type(frame[0]) is int and frame[0] in where):
            if current < len(order):
                bad.setdefault(order[current], ("malformed", "an undecodable or unattributable frame"))
            else:
                for index in order:
                    bad.setdefault(index, ("late", "a frame after the batch ended"))
            continue
        index = frame[0]
        if index in ended:
            bad.setdefault(index, ("late", "a frame after the test ended"))
            continue
        if where[index] != current:
            bad.setdefault(index, ("malformed", "a frame before the test started"))
            continue
        kind = frame[1]
        if kind == "end" and len(frame) == 2:
            ended[index] = ("ok", "")
            current += 1
        elif kind == "raised" and len(frame) in (3, 4) and all(isinstance(f, str) for f in frame[2:]):
            ended[index] = ("raised", ": ".join(frame[2:])[:500])
            current += 1
        elif type(kind) is int and len(frame) == 3:
            obs[index].append([kind, frame[2]])
        else:
            bad.setdefault(index, ("malformed", "a frame of unknown shape"))
    if corrupt:
        for index in order[current:]:
            bad.setdefault(index, ("malformed", "the frame stream is corrupt"))
    unended = {i: ending if n == current else (ending[0], f"not run: {ending[1]}") for n, i in enumerate(order)}
    return [_record(i, *(bad.get(i) or ended.get(i) or unended[i]), obs[i]) for i in order]


def _child(runner: Runner, batch: dict[str, Any], write_fd: int) -> None:  # pragma: no cover
    """Run the batch's tests with frames to ``write_fd``; never returns."""
    try:
        os.setsid()
        runner.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        for sig, handler in runner.handlers.items():
            if handler is not None:
                signal.signal(sig, handler)
        if os.getppid() != runner.pid:
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, write_fd)
        os.closerange(write_fd + 1, MAX_FD)
        cpu = int(batch["timeout_s"]) + 1
        with contextlib.suppress(ValueError, OSError):
            hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
            soft = cpu if hard == resource.RLIM_INFINITY else min(cpu, hard)
            resource.setrlimit(resource.RLIMIT_CPU, (soft, soft if hard != resource.RLIM_INFINITY else soft + 1))
        for source in (src for module, src in runner.sources.items() if module != batch["module"]):
            source[:] = bytes(len(source))  # other tests' probes leave this process's memory
        source = runner.sources[batch["module"]]
        code, signatures = [_compile(source, batch["module"], runner)], runner.batch.signatures(source)
        source[:] = bytes(len(source))  # its text shows where a raises block is, as its code does
        sys.path[:] = [runner.plan["probe_dir"], *runner.plan["paths"], *runner.base_path]
        for runtime in (runner.sealed, runner.runtime):  # the public copy writes there too: frames are
            runtime.bind(write_fd)  # anyone's to write, observations only the sealed copy's to make
        sys.dont_write_bytecode = False  # the submission's modules compile once, in the first batch
        runner.sealed = runtime = None  # from here on only the probe's constants lead to the sealed copy
        try:
            runner.sigfilter.load(runner.libc, runner.pid)
        except Exception as exc:  # no sealing, no run: every test of the batch says why
            code = [exc]
        runner.seal.guard([] if isinstance(code[0], BaseException) else runner.seal.code_tree(code[0]))
        runner.batch.run_batch(batch["module"], batch["tests"], code, signatures)
    finally:
        os._exit(0)


def main(plan_path: str, shipped: dict[str, types.CodeType] | None = None) -> int:
    """Run the plan at ``plan_path``; 0 once every test was reported, 2 for an unusable plan.
    ``shipped``: the host's code of the shipped modules, by module name (``boot.py``)."""
    try:
        runner = Runner(load_plan(plan_path), shipped)
    except PlanError as exc:
        sys.stderr.write(f"envhub probe runner: {exc}\n")
        return 2
    runner.run()
    return 0


if __name__ == "__main__" and len(sys.argv) > 1:  # as a script; through exec_python the caller calls main
    sys.exit(main(sys.argv[1]) if len(sys.argv) == 2 else "usage: envhub_probe_runner.py PLAN_PATH")
