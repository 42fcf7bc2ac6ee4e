"""The host side of the executor protocol: framing, request/reply, and the byte transports.

Framing is defined in :mod:`envhub.sandboxes.executor` (4-byte big-endian length + JSON). Two
transports carry the bytes:

* :class:`PipeTransport` -- the executor's stdin/stdout pipes (bwrap and process backends);
* :class:`DockerAttachTransport` -- the container's attach socket. Docker multiplexes a non-tty
  container's output in 8-byte-header frames, so this transport demultiplexes them.

Any transport failure (EOF, timeout, garbage) marks the channel broken and raises
:class:`SandboxError`: the sandbox itself is gone, which is ``env_error``, not the agent's doing.

Closing is two-phase because another thread may be blocked in a call when the channel is closed
(a signal's cleanup, an idle reaper): :meth:`Transport.interrupt` wakes that call and makes any
further I/O fail, but keeps the file descriptors; they are released only once no call is in
flight. Closing them under a blocked reader would free the fd numbers while it still uses them:
the next socket the process opens (often a docker API connection) gets the same number, and the
reader would then wait on -- or read from -- that unrelated connection.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO, Protocol

from envhub.sandboxes.base import SandboxError
from envhub.sandboxes.executor import HEADER, MAX_FRAME

log = logging.getLogger(__name__)


class Transport(Protocol):
    def send(self, data: bytes, deadline: float) -> None: ...

    def recv(self, deadline: float) -> bytes:
        """Some bytes of the executor's stdout; ``b""`` means EOF."""
        ...

    def interrupt(self) -> None:
        """Wake a blocked ``send``/``recv`` (it ends as EOF or an error) without freeing any fd.
        Safe from any thread, and more than once."""
        ...

    def close(self) -> None:
        """Release the fds. Only called while no ``send``/``recv`` runs; idempotent."""
        ...


class ExecutorTimeout(SandboxError):
    """The executor did not answer in time: it hung or its sandbox froze."""


#: How long ``close`` waits for a woken call to let go of the channel before leaving the fds to it.
CLOSE_WAIT_S = 5.0


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise ExecutorTimeout("the sandbox executor did not answer in time")
    return left


class PipeTransport:
    """Bytes over a child process's stdin/stdout pipes (it owns and closes both).

    A pipe has no ``shutdown``, so :meth:`interrupt` writes to a wake-up pipe that every
    ``select`` here also watches.
    """

    def __init__(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self._files = (stdin, stdout)
        self._in = stdin.fileno()
        self._out = stdout.fileno()
        self._wake_r, self._wake_w = os.pipe()  # readable for good once interrupted
        self._closed = False

    def send(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            readable, writable, _ = select.select([self._wake_r], [self._in], [], _remaining(deadline))
            if readable:
                raise BrokenPipeError("the channel was closed")
            if writable:
                view = view[os.write(self._in, view[:1 << 20]) :]

    def recv(self, deadline: float) -> bytes:
        while True:
            readable, _, _ = select.select([self._out, self._wake_r], [], [], _remaining(deadline))
            if self._wake_r in readable:
                return b""
            if readable:
                return os.read(self._out, 1 << 20)

    def interrupt(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for stream in self._files:
            with contextlib.suppress(OSError):
                stream.close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


class DockerAttachTransport:
    """Bytes over ``POST /containers/{id}/attach``: stdin raw, stdout in multiplexed frames."""

    def __init__(self, sock: Any) -> None:
        self._keep = sock  # docker-py's SocketIO wrapper keeps the HTTP response alive
        self._sock: socket.socket = getattr(sock, "_sock", sock)
        self._raw = bytearray()

    def send(self, data: bytes, deadline: float) -> None:
        self._sock.settimeout(_remaining(deadline))
        try:
            self._sock.sendall(data)
        except TimeoutError as exc:
            raise ExecutorTimeout("the container's stdin did not accept data in time") from exc

    def _fill(self, deadline: float) -> bool:
        self._sock.settimeout(_remaining(deadline))
        try:
            chunk = self._sock.recv(1 << 20)
        except TimeoutError as exc:
            raise ExecutorTimeout("the sandbox executor did not answer in time") from exc
        self._raw += chunk
        return bool(chunk)

    def recv(self, deadline: float) -> bytes:
        while True:
            while len(self._raw) < 8:
                if not self._fill(deadline):
                    return b""
            stream, size = self._raw[0], struct.unpack(">I", self._raw[4:8])[0]
            while len(self._raw) < 8 + size:
                if not self._fill(deadline):
                    return b""
            payload = bytes(self._raw[8 : 8 + size])
            del self._raw[: 8 + size]
            if stream == 1:
                return payload
            log.debug("executor stream %d: %r", stream, payload[:500])

    def interrupt(self) -> None:
        with contextlib.suppress(OSError):  # a blocked recv returns b"", a send fails with EPIPE
            self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        for closer in (lambda: self._sock.shutdown(socket.SHUT_RDWR), self._sock.close, self._keep.close):
            with contextlib.suppress(OSError):
                closer()


class ExecutorChannel:
    """Request/reply with one executor. Thread-safe: calls are serialised.

    ``describe`` is asked for context (container state, bwrap's stderr) when the channel breaks,
    so the :class:`SandboxError` says *why* the sandbox went away.
    """

    def __init__(self, transport: Transport, describe: Callable[[], str] = lambda: "") -> None:
        self._transport = transport
        self._describe = describe
        self._lock = threading.Lock()
        self._buf = bytearray()
        self._next_id = 0
        self.broken: str | None = None
        self._closing = False

    def call(self, op: str, wait: float, **fields: Any) -> dict[str, Any]:
        """Send one request and wait up to ``wait`` seconds for its reply."""
        with self._lock:
            try:
                if self.broken:
                    raise SandboxError(f"sandbox is unusable: {self.broken}")
                self._next_id += 1
                request = {"id": self._next_id, "op": op, **fields}
                deadline = time.monotonic() + wait
                try:
                    payload = json.dumps(request, separators=(",", ":")).encode()
                    self._transport.send(HEADER.pack(len(payload)) + payload, deadline)
                    reply = self._read_frame(deadline)
                except SandboxError as exc:
                    self._break(str(exc))
                except (OSError, ValueError) as exc:
                    self._break(f"lost the connection to the sandbox executor: {exc!r}")
                if reply.get("id") != request["id"]:
                    self._break(f"protocol error: reply {reply.get('id')} to request {request['id']}")
            finally:
                if self._closing:  # closed while this call was in flight: the fds are ours to free
                    self._transport.close()
        if not reply.get("ok"):
            _raise_op_error(reply)
        return reply

    def _break(self, why: str) -> None:
        if self._closing:
            raise SandboxError(f"the sandbox was closed during the call ({why})")
        try:
            context = self._describe()
        except Exception as exc:  # describing must never mask the real failure
            context = f"(no details: {exc!r})"
        self.broken = f"{why}{'; ' + context if context else ''}"
        raise SandboxError(self.broken)

    def _read_frame(self, deadline: float) -> dict[str, Any]:
        while True:
            if len(self._buf) >= 4:
                (size,) = HEADER.unpack(self._buf[:4])
                if size > MAX_FRAME:
                    raise SandboxError(f"protocol error: frame of {size} bytes")
                if len(self._buf) >= 4 + size:
                    payload = bytes(self._buf[4 : 4 + size])
                    del self._buf[: 4 + size]
                    return json.loads(payload)
            chunk = self._transport.recv(deadline)
            if not chunk:
                raise SandboxError("the sandbox executor exited (its sandbox died or was killed)")
            self._buf += chunk

    def refuse(self) -> None:
        """Fail every new call from now on, and a call in flight once it ends (as "closed during
        the call"), without waking it: whoever destroys the sandbox next wakes it by EOF. Safe
        from any thread, and more than once."""
        if not self.broken:
            self.broken = "closed"
        self._closing = True

    def close(self) -> None:
        """Refuse new calls, wake one in flight, and free the fds once none is (see the module
        docstring). Safe from any thread."""
        self.refuse()
        self._transport.interrupt()
        # The woken call frees the fds itself on its way out; waiting here covers the moment a
        # call is past that check but has not yet let go of the lock.
        if self._lock.acquire(timeout=CLOSE_WAIT_S):
            try:
                self._transport.close()
            finally:
                self._lock.release()


def _raise_op_error(reply: dict[str, Any]) -> None:
    kind, message = reply.get("kind", "internal"), reply.get("error", "")
    if kind == "not_found":
        raise FileNotFoundError(message)
    if kind == "is_dir":
        raise IsADirectoryError(message)
    if kind in ("bad_path", "too_large"):
        raise ValueError(message)
    if kind == "os_error":  # the sandbox works; the operation failed (disk full, permissions)
        raise OSError(int(reply.get("errno") or 0), message)
    raise SandboxError(f"sandbox executor failed: {message}")
