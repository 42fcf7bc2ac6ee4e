"""A minimal asyncio WebSocket client for load tests and benchmarks.

Why not the ``websockets`` client: on two cores the load generator shares the CPU with the
server it measures, so its cost per message must be small next to the server's, or every
server looks alike. This client does only what a load generator needs -- the opening handshake,
unfragmented text frames with a zero mask key (valid per RFC 6455; servers do not check the
key), pong replies, and an abrupt ``kill`` that drops the TCP connection without a closing
handshake, as a crashed client would. It is not a general-purpose client.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
from collections import deque
from typing import Any

_ZERO_MASK = b"\x00\x00\x00\x00"


class LeanWebSocket(asyncio.Protocol):
    def __init__(self) -> None:
        self._buf = bytearray()
        self._handshake: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._waiter: asyncio.Future[bytes] | None = None
        self._upgraded = False
        self._partial = bytearray()
        self._inbox: deque[bytes] = deque()  # messages that arrived with nobody waiting
        self.transport: asyncio.Transport | None = None
        self.headers: dict[str, str] = {}
        self.close_code: int | None = None

    # ---- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if not self._upgraded:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self._buf[:end])
            del self._buf[: end + 4]
            self._upgraded = True
            if not self._handshake.done():
                self._handshake.set_result(head)
        self._frames()

    def connection_lost(self, exc: Exception | None) -> None:
        error = ConnectionError(f"connection lost (close code {self.close_code})")
        for fut in (self._handshake, self._waiter):
            if fut is not None and not fut.done():
                fut.set_exception(error)

    # ---- frames -------------------------------------------------------------------------------

    def _frames(self) -> None:
        buf = self._buf
        while len(buf) >= 2:
            length = buf[1] & 0x7F
            offset = 2
            if length == 126:
                if len(buf) < 4:
                    return
                length = struct.unpack_from("!H", buf, 2)[0]
                offset = 4
            elif length == 127:
                if len(buf) < 10:
                    return
                length = struct.unpack_from("!Q", buf, 2)[0]
                offset = 10
            if len(buf) < offset + length:
                return
            fin, opcode = buf[0] & 0x80, buf[0] & 0x0F
            payload = bytes(buf[offset: offset + length])
            del buf[: offset + length]
            if opcode in (0, 1):
                self._partial += payload
                if fin:
                    message, self._partial = bytes(self._partial), bytearray()
                    if self._waiter is not None and not self._waiter.done():
                        self._waiter.set_result(message)
                    else:
                        self._inbox.append(message)
            elif opcode == 9:
                self._send(payload, 0xA)
            elif opcode == 8:
                self.close_code = struct.unpack_from("!H", payload)[0] if len(payload) >= 2 else 1005
                if self.transport is not None:
                    self.transport.close()

    def _send(self, payload: bytes, opcode: int = 1) -> None:
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        assert self.transport is not None
        self.transport.write(head + _ZERO_MASK + payload)

    # ---- API ----------------------------------------------------------------------------------

    async def roundtrip(self, payload: bytes) -> bytes:
        """Send one text message and wait for the next message."""
        self._waiter = asyncio.get_running_loop().create_future()
        self._send(payload)
        return await self._waiter

    async def recv(self) -> bytes:
        if self._inbox:
            return self._inbox.popleft()
        if self.transport is None or self.transport.is_closing():
            raise ConnectionError(f"connection closed (close code {self.close_code})")
        self._waiter = asyncio.get_running_loop().create_future()
        return await self._waiter

    async def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        return dict(json.loads(await self.roundtrip(json.dumps(message).encode())))

    def close(self) -> None:
        """Say goodbye as OpenEnv's client does: a ``close`` message, then a close frame."""
        if self.transport is not None and not self.transport.is_closing():
            self._send(b'{"type":"close"}')
            self._send(struct.pack("!H", 1000), 0x8)
            self.transport.close()

    def kill(self) -> None:
        """Drop the connection with no closing handshake (TCP reset), like a crashed client."""
        if self.transport is not None:
            self.transport.abort()

    def freeze(self) -> None:
        """Go silent without closing, like a peer whose machine vanished: the connection stays
        open (half-open from the server's side) and pings go unanswered."""
        if self.transport is not None:
            self.transport.pause_reading()


async def open_ws(host: str, port: int, path: str = "/ws",
                  headers: dict[str, str] | None = None) -> LeanWebSocket:
    loop = asyncio.get_running_loop()
    _, ws = await loop.create_connection(LeanWebSocket, host, port)
    key = base64.b64encode(os.urandom(16)).decode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    request = (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n")
    assert ws.transport is not None
    ws.transport.write(request.encode())
    head = await ws._handshake
    lines = head.decode("latin-1").split("\r\n")
    if " 101 " not in lines[0] + " ":
        ws.transport.close()
        raise ConnectionError(f"handshake refused: {lines[0]}")
    for line in lines[1:]:
        name, _, value = line.partition(":")
        ws.headers[name.strip().lower()] = value.strip()
    return ws
