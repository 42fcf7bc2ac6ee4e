"""The Computation ``python`` tool: the agent's code in a child forked from the sandbox's executor.

Why a fork and not ``python3 main.py``: starting an interpreter costs 10-25 ms per call, a fork
of the resident executor 2-3 ms, with the same limits, session, environment and output caps
(:meth:`ResidentSandbox.exec_python`). Nothing is written to disk either, so nothing the agent
does to its own files (a directory named ``main.py``, a full disk) can stop the next call.

What the code sees is what ``python3 main.py`` in the work dir showed it: the work dir as its
current directory and first import path (files it writes persist between calls, and modules it
writes there import), ``__name__ == "__main__"`` in a fresh ``__main__`` module, tracebacks with
its source lines and without our frames, exit code 1 on an uncaught exception, non-daemon
threads joined and ``atexit`` handlers run before it ends, no ``__pycache__`` written (the
sandbox's environment sets ``PYTHONDONTWRITEBYTECODE``). What differs: ``sys.argv`` is ``["-c"]``
and there is no ``__file__``, as with ``python3 -c``; modules the sandbox preloads
(``SandboxSpec.preload``) are already imported; string hashes are seeded once per sandbox.

Background processes a call leaves running live on until the episode ends (as they did with
``python3 main.py``); the sandbox kills them at its reset.

Whatever the agent's code does to its sandbox is the agent's: a work dir it made unusable is an
exec result that says so, a request the sandbox refuses because of it (no process slot left)
comes back as a tool error that says so, and the episode goes on. Only a sandbox that stopped
answering (:class:`~envhub.sandboxes.base.SandboxError`) ends the episode, as env_error.
"""

from __future__ import annotations

from typing import Any

from envhub.errors import ToolError

#: The file name tracebacks show for the agent's code, as ``python3 -c`` does.
CODE_NAME = "<string>"

# Imports only what the executor has loaded already (atexit is built in): linecache and traceback
# cost ~1.5 ms to import, so only a failing program pays for them.
_BOOTSTRAP = '''\
import atexit as _atexit, os as _os, sys as _sys, threading as _threading, types as _types
_atexit._clear()
_src = {source!r}
_sys.dont_write_bytecode = bool(_os.environ.get("PYTHONDONTWRITEBYTECODE"))  # the executor ran with -I
_sys.path.insert(0, {workdir!r})
_sys.argv = ["-c"]
_main = _types.ModuleType("__main__")
_main.__builtins__ = __builtins__
_sys.modules["__main__"] = _main


def _finish():
    for thread in _threading.enumerate():
        if thread is not _threading.current_thread() and not thread.daemon:
            thread.join()
    _atexit._run_exitfuncs()


def _report(exc):
    import linecache, traceback
    linecache.cache[{name!r}] = (len(_src), None, _src.splitlines(True), {name!r})
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != {name!r}:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def _run():
    try:
        exec(compile(_src, {name!r}, "exec"), _main.__dict__)
    except SystemExit as exc:
        _finish()
        raise exc
    except BaseException as exc:
        _report(exc)
        _finish()
        _sys.exit(1)
    _finish()


_run()
'''


def program(code: str, workdir: str) -> str:
    """The source ``exec_python`` runs for the agent's ``code`` (see the module docstring)."""
    return _BOOTSTRAP.format(source=code, workdir=workdir, name=CODE_NAME)


def run_python(sandbox: Any, code: str) -> str:
    """Run ``code`` in ``sandbox`` (a resident or pooled sandbox) and return the tool result text.

    Raises :class:`ToolError` when the sandbox refuses to start the code for a reason of the
    agent's making; a broken sandbox raises ``SandboxError`` as before.
    """
    try:
        result = sandbox.exec_python(program(code, sandbox.workdir))
    except OSError as exc:  # the executor answered: the sandbox works, this request failed
        raise ToolError(f"your code did not run: the sandbox could not start it "
                        f"({(exc.strerror or str(exc)).rstrip(': ')}). Something done inside the sandbox "
                        "(processes, permissions, a full disk) may be the cause.") from None
    return result.summary()
