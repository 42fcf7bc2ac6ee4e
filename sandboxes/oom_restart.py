"""A sandbox that survives the kernel killing its executor for the sandbox's memory limit.

Memory the agent pins where no process of its own holds it -- files in the tmpfs dirs, SysV
segments an exited process left, a memfd a process passed on or lowered its OOM score for -- can
leave the resident executor as the process the kernel kills for the sandbox's memory limit.
That death is the agent's doing, not a broken sandbox: a backend that can tell it apart
(:meth:`OomRestart._killed_for_memory`: bwrap from its cgroup's OOM counter, docker from the
engine's ``oom`` and ``die`` events) starts the sandbox afresh, empty, and the call that found
the executor dead answers as killed for memory (:meth:`OomRestart._after_restart`) -- never a
:class:`SandboxError`, which would end the episode as ``env_error``.

Mixed in before :class:`~.resident.ResidentSandbox`; the backend supplies the three hooks.
"""

from __future__ import annotations

import base64
import errno
import logging
import os
import threading
import time
from typing import Any

from envhub.sandboxes.base import SandboxError
from envhub.sandboxes.channel import ExecutorChannel
from envhub.sandboxes.resident import START_TIMEOUT_S, ResidentSandbox

log = logging.getLogger(__name__)

#: Executor ops whose reply is an exec result (what an OOM kill is reported in).
EXEC_OPS = ("exec", "pyexec")
OOM_RESTARTED = ("envhub: the sandbox ran out of memory and the kernel killed its executor, so it was "
                 "started afresh: every process is gone and /work, /tmp and /dev/shm are empty\n")


class OomRestart(ResidentSandbox):
    """See the module docstring. ``restarts`` counts the fresh starts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._restart_lock = threading.Lock()
        #: ``_memory_mark()`` after the last call the executor answered: a kill after it is this call's.
        self._memory_seen: Any = None
        self.restarts = 0

    # ---- hooks ---------------------------------------------------------------------------------

    def _memory_mark(self) -> Any:
        """Where the kernel's OOM kills in this sandbox stand now (a count, a time); None where the
        backend cannot tell (a dead executor then stays a :class:`SandboxError`)."""
        return None

    def _killed_for_memory(self, since: Any) -> bool:
        """Whether the executor, which stopped answering, was killed by the kernel for the
        sandbox's memory limit after the mark ``since``."""
        return False

    def _discard_executor(self) -> None:
        """Tear down what is left of the isolation whose executor died, so that ``_launch`` can
        start it afresh. Must not raise for what is already gone."""
        raise NotImplementedError

    # ---- the restart ---------------------------------------------------------------------------

    def start(self) -> OomRestart:
        super().start()
        self._memory_seen = self._memory_mark()
        return self

    def _call(self, op: str, wait: float, **fields: Any) -> dict[str, Any]:
        """As the base class; a call that failed because the kernel killed the executor for memory
        since the last answer restarts the sandbox and answers as :meth:`_after_restart` says."""
        since, t0 = self._memory_seen, time.monotonic()
        try:
            reply = super()._call(op, wait, **fields)
        except SandboxError:
            if since is None or self._closed or self._channel is None or not self._killed_for_memory(since):
                raise
            self._restart()
            return self._after_restart(op, wait, fields, time.monotonic() - t0)
        except Exception:  # the executor answered: the operation itself failed
            self._memory_seen = self._memory_mark()
            raise
        self._memory_seen = self._memory_mark()
        return reply

    def _restart(self) -> None:
        """A fresh executor in a fresh isolation. SandboxError when it does not start: then the
        sandbox is broken for real."""
        with self._restart_lock:
            if self._closed:
                raise SandboxError(f"the {self.backend} sandbox was closed")
            if self._channel is not None:
                self._channel.close()
            with self._proc_dir_lock:
                fd, self._proc_dir, self._proc_dir_known = self._proc_dir, None, False
            if fd is not None:
                os.close(fd)
            try:
                self._discard_executor()
                self._channel = ExecutorChannel(self._launch(), self._describe)
                self.info = self._channel.call("hello", START_TIMEOUT_S)
            except Exception as exc:
                raise SandboxError(f"the {self.backend} sandbox could not be restarted after running out of "
                                   f"memory: {exc}; {self._describe()}") from exc
            if self._closed:  # closed meanwhile (a signal's cleanup): what we started goes too
                self._channel.close()
                self._discard_executor()
                raise SandboxError(f"the {self.backend} sandbox was closed while restarting")
            self.restarts += 1
            self._memory_seen = self._memory_mark()
            log.info("the %s sandbox %s was restarted: the kernel killed its executor for memory",
                     self.backend, self._ident())

    def _after_restart(self, op: str, wait: float, fields: dict[str, Any], duration: float) -> dict[str, Any]:
        """The answer to ``op``, whose executor the kernel killed for memory, once restarted:
        an exec is a command killed for memory; a reset is done (the new sandbox is pristine);
        a ping goes to the new executor; a file operation fails as an OSError (ENOMEM), which
        tools report to the agent."""
        if op in EXEC_OPS:
            return oom_restarted_reply(duration)
        if op == "reset":
            return {"killed": 0, "ipc_removed": 0}
        if op in ("ping", "hello"):
            return self._call(op, wait, **fields)
        raise OSError(errno.ENOMEM, OOM_RESTARTED.strip())


def oom_restarted_reply(duration: float) -> dict[str, Any]:
    """The exec reply of a call whose sandbox was restarted after the kernel killed its executor."""
    return {"exit_code": 137, "signal": 9, "stdout": "", "stdout_dropped": 0,
            "stderr": base64.b64encode(OOM_RESTARTED.encode()).decode("ascii"), "stderr_dropped": 0,
            "timed_out": False, "oom_killed": True, "duration": duration}
