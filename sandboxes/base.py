"""The ``Sandbox`` protocol every backend implements, and the value types it speaks.

A sandbox is a place where code that a model wrote runs: a Docker container, a bubblewrap
namespace, or (trusted code only) a plain process. Task families and verifiers talk to this
protocol only, so a backend can change without touching a task.
"""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Protocol, runtime_checkable

from envhub.errors import InfraError

#: Backend names, best isolation first.
BACKENDS = ("docker", "bwrap", "landlock", "process")
TRUNCATION_MARKER = "\n[... output truncated by envhub: {dropped} more bytes ...]\n"


class SandboxError(InfraError):
    """The sandbox itself failed (crashed, unreachable, died). Maps to the ``env_error`` outcome.

    It is never raised for what the *agent's* code does inside the sandbox: a segfault, an OOM kill
    or a timeout of a command is reported in the :class:`ExecResult` instead.
    """


@dataclass(frozen=True)
class Limits:
    """Resource limits applied to every command a sandbox runs.

    docker enforces cpus / memory / pids with cgroups for the whole sandbox; bwrap and process
    can only use per-process rlimits (memory is address space there, pids a per-uid count).
    ``disk_mb`` sizes each writable tmpfs (work dir, /tmp). ``timeout_s`` is the default
    wall-clock limit of one ``exec``; ``output_bytes`` caps stdout and stderr separately.
    """

    cpus: float = 1.0
    memory_mb: int = 512
    pids: int = 128
    timeout_s: float = 10.0
    output_bytes: int = 64 * 1024
    disk_mb: int = 64
    network: bool = False

    @property
    def shm_mb(self) -> int:
        """The size of a sandbox's own ``/dev/shm`` (docker, bwrap): ``disk_mb``, never more than
        ``memory_mb`` -- its pages count against the memory limit (the sandbox's memory cgroup)."""
        return min(self.disk_mb, self.memory_mb)


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    oom_killed: bool = False
    duration_s: float = 0.0
    truncated: bool = False
    #: The signal that ended the command (``exit_code`` is then 128 + signal, as in a shell).
    signal: int | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed

    def summary(self) -> str:
        """A tool-result text for the agent: what it would see in a terminal, plus the verdict."""
        parts = []
        if self.stdout:
            parts.append(self.stdout.rstrip("\n"))
        if self.stderr:
            parts.append(self.stderr.rstrip("\n"))
        if self.timed_out:
            parts.append(f"[timed out after {self.duration_s:.1f}s]")
        elif self.oom_killed:
            parts.append("[killed: out of memory]")
        elif self.signal:
            parts.append(f"[killed by signal {_signal_name(self.signal)}, exit code {self.exit_code}]")
        elif self.exit_code != 0:
            parts.append(f"[exit code {self.exit_code}]")
        return "\n".join(parts) if parts else "[no output]"


def _signal_name(signum: int) -> str:
    try:
        return _signal.Signals(signum).name
    except ValueError:
        return str(signum)


def cap_output(data: bytes, limit: int) -> tuple[str, bool]:
    """Decode ``data`` leniently and cut it at ``limit`` bytes with a visible marker."""
    if len(data) <= limit:
        return data.decode("utf-8", errors="replace"), False
    kept = data[:limit].decode("utf-8", errors="replace")
    return kept + TRUNCATION_MARKER.format(dropped=len(data) - limit), True


def workdir_path(root: str, path: str) -> str:
    """Resolve ``path`` inside the sandbox work dir; refuse anything that climbs out of it."""
    pure = PurePosixPath(path)
    if pure.is_absolute():
        pure = pure.relative_to(root) if pure.is_relative_to(root) else pure.relative_to("/")
    parts = [p for p in pure.parts if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise ValueError(f"path {path!r} leaves the work directory")
    return str(PurePosixPath(root, *parts))


class Tree(dict[str, bytes]):
    """What ``read_tree`` read: relative path -> content of every regular file under it.

    Beside the files: ``left_out`` maps each path that is not in the tree to why (a symlink,
    FIFO, socket or device node, a file or directory that could not be read, a file over the
    byte budget, a directory below the depth bound), and ``cut`` holds one line per bound of
    the walk it hit (entries, depth, bytes), saying what is missing beyond it. A tree the
    agent made hostile is described this way; it is never an error.
    """

    def __init__(self, files: dict[str, bytes] | None = None, left_out: dict[str, str] | None = None,
                 cut: list[str] | None = None) -> None:
        super().__init__(files or {})
        self.left_out: dict[str, str] = dict(left_out or {})
        self.cut: list[str] = list(cut or [])

    @property
    def complete(self) -> bool:
        """True when nothing under the directory was left out or cut."""
        return not self.left_out and not self.cut


class Listing(list[str]):
    """What ``list_files`` found: every non-directory entry, relative and sorted; ``left_out``
    maps directories it could not list (unreadable, below the depth bound) to why, and ``cut``
    says which bound of the walk stopped it, as for :class:`Tree`."""

    def __init__(self, names: list[str] | None = None, left_out: dict[str, str] | None = None,
                 cut: list[str] | None = None) -> None:
        super().__init__(names or [])
        self.left_out: dict[str, str] = dict(left_out or {})
        self.cut: list[str] = list(cut or [])

    def notes(self) -> list[str]:
        """One line per directory left out and per bound hit, for a tool result."""
        return [f"[{path}: {why}]" for path, why in sorted(self.left_out.items())] + [f"[{c}]" for c in self.cut]


@runtime_checkable
class Sandbox(Protocol):
    """One isolated work directory plus a way to run commands in it.

    Paths given to the file methods are relative to the work directory (``workdir``).
    ``close`` is idempotent and every sandbox is a context manager.
    """

    backend: str
    workdir: str
    limits: Limits
    #: What the sandbox runs: ``docker:<tag>@<image id>``, or ``bwrap:host`` / ``process:host``.
    image_id: str

    def exec(
        self,
        cmd: str | list[str],
        *,
        timeout: float | None = None,
        stdin: str | bytes | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        contain: bool = False,
    ) -> ExecResult:
        """Run a command; what it does (exit code, signal, timeout, OOM) is in the result, never an
        exception. On a timeout -- or always, with ``contain`` -- everything it started is killed,
        ``setsid`` and double forks included."""
        ...

    def exec_python(self, source: str, *, timeout: float | None = None, env: dict[str, str] | None = None,
                    cwd: str | None = None, contain: bool = False) -> ExecResult:
        """Like ``exec(["python3", "-I", "-c", source])``, in a child forked from the sandbox's resident
        executor (its preloaded modules already imported)."""
        ...

    def write_files(self, files: dict[str, str | bytes]) -> None: ...

    def read_file(self, path: str) -> bytes: ...

    def list_files(self, path: str = ".") -> Listing:
        """Every non-directory entry under ``path``, relative and sorted (see :class:`Listing`)."""
        ...

    def read_tree(self, src: str = ".", max_bytes: int = ...) -> Tree:
        """Every regular file under ``src`` with its content, in one walk; a :class:`Tree` whose
        ``left_out`` and ``cut`` say what the (bounded) walk did not read."""
        ...

    def copy_in(self, host_dir: str, dest: str = ".") -> None: ...

    def copy_out(self, src: str, host_dir: str) -> list[str]:
        """Copy the regular files and directories under ``src`` to ``host_dir``; returns what was left out."""
        ...

    def reset(self) -> None: ...

    def close(self) -> None: ...

    def __enter__(self) -> Sandbox: ...

    def __exit__(self, *exc: object) -> None: ...


@dataclass
class SandboxSpec:
    """What a task needs from a sandbox: which image (docker) and which limits.

    ``image`` None means the base image (``envhub/base:<version>``); bwrap and process ignore it.
    """

    image: str | None = None
    limits: Limits = field(default_factory=Limits)
    #: what the sandbox is for ("agent", "grading"); pools never hand one role's sandboxes to another
    role: str = "agent"
    #: modules the resident executor imports at start, so ``exec_python`` children have them loaded
    preload: tuple[str, ...] = ()

    def key(self) -> tuple[str | None, Limits, str, tuple[str, ...]]:
        """A hashable identity, for pools keyed by spec (the dataclass itself is mutable)."""
        return (self.image, self.limits, self.role, self.preload)


@dataclass(frozen=True)
class BackendStatus:
    """Whether one backend works on this machine; if not, why and how to fix it."""

    name: str
    ok: bool
    reason: str = ""
    fix: str = ""
    detail: str = ""
