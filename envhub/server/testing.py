"""Run a server on 127.0.0.1 in a background thread or a subprocess: for tests and benchmarks.

Both bind port 0 (the kernel picks a free port) and report the real one, so parallel test runs
never collide, and neither leaves anything behind: the thread server is shut down on exit, the
subprocess is terminated (then killed) by its process id.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import httpx

from envhub.sandboxes.spawner import stop


@contextlib.contextmanager
def serve_in_thread(app: Any, *, ping_interval: float | None = 20.0, max_message_bytes: int = 1 << 20,
                    startup_timeout_s: float = 30.0) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a thread; yields the base URL ``http://127.0.0.1:<port>``."""
    import uvicorn

    from envhub.server.cli import uvicorn_options

    opts = uvicorn_options(host="127.0.0.1", port=0, ping_interval=ping_interval or 20.0,
                           max_message_bytes=max_message_bytes, log_level="warning")
    if ping_interval is None:
        opts["ws_ping_interval"] = opts["ws_ping_timeout"] = None
    server = uvicorn.Server(uvicorn.Config(app, **opts))
    thread = threading.Thread(target=server.run, name="envhub-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


_LISTENING = re.compile(rb"Uvicorn running on http://127\.0\.0\.1:(\d+)")


@contextlib.contextmanager
def serve_in_subprocess(args: Sequence[str], *, startup_timeout_s: float = 60.0,
                        env: dict[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``python -m envhub.server <args> --host 127.0.0.1 --port 0``; yields (base URL, process)."""
    cmd = [sys.executable, "-m", "envhub.server", *args, "--host", "127.0.0.1", "--port", "0",
           "--log-level", "info"]
    with _spawn(cmd, env) as proc:
        yield _await_listening(proc, startup_timeout_s), proc


@contextlib.contextmanager
def serve_command_in_subprocess(cmd: Sequence[str], *, cwd: str | None = None, startup_timeout_s: float = 60.0,
                                env: dict[str, str] | None = None
                                ) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Any uvicorn server (say an OpenEnv package's ``uvicorn server.app:app``): ``cmd`` must bind
    127.0.0.1 (port 0 recommended) and log uvicorn's "running on" line; yields (base URL, process)
    once ``/health`` answers, and stops the process at exit as :func:`serve_in_subprocess` does."""
    with _spawn(cmd, env, cwd) as proc:
        yield _await_listening(proc, startup_timeout_s), proc


@contextlib.contextmanager
def _spawn(cmd: Sequence[str], env: dict[str, str] | None, cwd: str | None = None
           ) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd,
                            env={**os.environ, **(env or {})})
    try:
        yield proc
    finally:
        stop(proc, 10)
        if proc.stdout is not None:
            proc.stdout.close()


def _await_listening(proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    """Read the server's log until uvicorn names its port; keep draining it afterwards."""
    assert proc.stdout is not None
    found: list[str] = []
    seen: list[bytes] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, b""):
            if not found:
                seen.append(line)
                match = _LISTENING.search(line)
                if match:
                    found.append(f"http://127.0.0.1:{int(match.group(1))}")
                    ready.set()
        ready.set()

    threading.Thread(target=pump, name="envhub-server-log", daemon=True).start()
    if not ready.wait(timeout_s) or not found:
        raise RuntimeError("the server did not start:\n" + b"".join(seen).decode(errors="replace")[-4000:])
    url = found[0]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return url
        time.sleep(0.05)
    raise RuntimeError(f"{url}/health did not answer")
