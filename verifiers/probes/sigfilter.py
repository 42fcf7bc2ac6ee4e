"""The seccomp filter of a probe batch's child: no new signal handler, no signal to the runner.

Standard library only; shipped beside the runner as ``envhub_probe_sigfilter.py`` and loaded by it
(this process and everything it starts keep the filter):

* ``rt_sigaction`` with a new action is refused: a Python signal handler is handed the frame it
  interrupts -- at times a frame of the sealed runtime (``seal.py``) -- and no audit event
  announces one. The handlers installed before stay.
* ``kill``, ``tkill``, ``tgkill``, ``rt_sigqueueinfo`` and ``rt_tgsigqueueinfo`` aimed at the runner,
  its process group or every process (``-1``), and ``pidfd_open`` of the runner, are refused. The
  runner ignores every signal but SIGKILL and SIGSTOP; a stopped runner could only be ended by the
  host's wall ceiling, which must be generous for a verdict not to depend on the machine's load.

Refused calls fail with EPERM. A machine this does not know is refused outright (``FilterError``).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

#: machine -> (AUDIT_ARCH_*, {syscall: number})
_SYSCALLS = {
    "x86_64": (0xC000003E, {"rt_sigaction": 13, "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129,
                            "rt_tgsigqueueinfo": 297, "pidfd_open": 434}),
    "aarch64": (0xC00000B7, {"rt_sigaction": 134, "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138,
                             "rt_tgsigqueueinfo": 240, "pidfd_open": 434}),
}
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_RET_ALLOW, _RET_EPERM = 0x7FFF0000, 0x00050001
_LD, _JEQ, _JA, _RET = 0x20, 0x15, 0x05, 0x06
_NR, _ARCH = 0, 4


class FilterError(RuntimeError):
    """The filter cannot be loaded here."""


def _arg(index: int, high: bool = False) -> int:
    """Offset of a syscall argument's low (or high) 32 bits in ``struct seccomp_data``."""
    return 16 + 8 * index + (4 if high else 0)


def program(runner: int, group: int) -> list[tuple[int, int, int, int]]:
    """The filter as BPF instructions ``(code, jt, jf, k)``."""
    arch, nr = _SYSCALLS[os.uname().machine]
    targets = sorted({runner, -1 & 0xFFFFFFFF, -group & 0xFFFFFFFF})
    #: syscall -> (argument, the values of its low 32 bits that are refused)
    rules = {name: (0, targets if name == "kill" else [runner]) for name in
             ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open")}
    blocks: list[list[tuple]] = []
    for name, (arg, values) in rules.items():
        blocks.append([("jeq_nr", nr[name]), (_LD, 0, 0, _arg(arg)),
                       *[("deny_if", v) for v in values], ("allow",)])
    # rt_sigaction(sig, act, ...): refused when act (argument 1) is not NULL
    blocks.append([("jeq_nr", nr["rt_sigaction"]), (_LD, 0, 0, _arg(1)), ("deny_unless", 0),
                   (_LD, 0, 0, _arg(1, high=True)), ("deny_unless", 0), ("allow",)])
    flat: list[tuple] = [(_LD, 0, 0, _ARCH), ("allow_unless", arch), (_LD, 0, 0, _NR)]
    starts = []
    for block in blocks:
        starts.append(len(flat))
        flat.extend(block)
    allow, deny = len(flat), len(flat) + 1
    out = []
    for pc, ins in enumerate(flat):
        op = ins[0]
        if op == "jeq_nr":  # not this syscall: on to the next block (which reloads nothing: A is nr)
            after = next((s for s in starts if s > pc), allow)
            out.append((_JEQ, 0, after - pc - 1, ins[1]))
        elif op == "deny_if":
            out.append((_JEQ, deny - pc - 1, 0, ins[1]))
        elif op == "deny_unless":
            out.append((_JEQ, 0, deny - pc - 1, ins[1]))
        elif op == "allow_unless":
            out.append((_JEQ, 0, allow - pc - 1, ins[1]))
        elif op == "allow":
            out.append((_JA, 0, 0, allow - pc - 1))
        else:
            out.append(ins)
    return [*out, (_RET, 0, 0, _RET_ALLOW), (_RET, 0, 0, _RET_EPERM)]


def load(libc: Any, runner: int) -> None:
    """Load the filter into this process (``runner``: the probe runner's pid)."""
    if libc is None or os.uname().machine not in _SYSCALLS:
        raise FilterError(f"no seccomp filter for {os.uname().machine} here")
    instructions = program(runner, os.getpgid(runner))

    class Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]

    array = (Instruction * len(instructions))(*[Instruction(*i) for i in instructions])
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.prctl(
            _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(Program(len(instructions), array)), 0, 0) != 0:
        raise FilterError(f"cannot load the seccomp filter: errno {ctypes.get_errno()}")
