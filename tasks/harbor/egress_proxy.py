"""The egress proxy of a Harbor allowlist (:mod:`.egress`), run in its own container as
``python3 -c <this file's source> <subnet> <port> <allowed hosts as JSON>``: **stdlib only, no
imports from envhub**. The host imports :func:`host_allowed` from here too: one rule for host and
proxy.

It binds only to its own address in ``subnet`` (the internal network's side) and prints
``READY ip:port`` once listening. Per client connection it reads one request head and decides once,
on the request line's host: ``CONNECT host:port`` opens a tunnel; an absolute ``http://`` URI is
forwarded with a plain path, hop-by-hop headers dropped and ``Connection: close``; a host that
:func:`host_allowed` refuses gets ``403`` naming it; anything else ``400``; an unreachable target
``502``. At most 256 connections at once.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import select
import socket
import socketserver
import sys
import threading
from urllib.parse import urlsplit

IDLE_S, CONNECT_S, MAX_HEAD = 300.0, 10.0, 65536
SLOTS = threading.BoundedSemaphore(256)
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-._")
HOP = {"connection", "proxy-connection", "keep-alive", "proxy-authorization", "te", "upgrade"}


def host_allowed(host: str, allowed: list[str]) -> bool:
    """Whether ``host`` (a name or an IP literal, brackets allowed) matches a normalized allowlist:
    a name equals an entry or is a subdomain of a ``*.suffix`` entry; an IP literal equals an address
    entry or lies in a CIDR entry (IPv4-mapped IPv6 counts as IPv4). Names are never resolved."""
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None and ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip is None and (not host or not set(host) <= NAME_CHARS):
        return False
    for rule in allowed:
        if ip is None:
            if host == rule or (rule.startswith("*.") and host.endswith(rule[1:]) and len(host) > len(rule) - 1):
                return True
            continue
        try:
            net = ipaddress.ip_network(rule)
        except ValueError:
            continue
        if net.version == ip.version and ip in net:
            return True
    return False


def reply(sock: socket.socket, status: str, text: str) -> None:
    body = (text + "\n").encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with contextlib.suppress(OSError):
        sock.sendall(head.encode() + body)


def relay(a: socket.socket, b: socket.socket, pending: bytes) -> None:
    """Copy both ways until either side closes or nothing moves for IDLE_S; ``pending`` goes to b first."""
    if pending:
        b.sendall(pending)
    while True:
        ready, _, _ = select.select([a, b], [], [], IDLE_S)
        if not ready:
            return
        for src in ready:
            data = src.recv(65536)
            if not data:
                return
            (b if src is a else a).sendall(data)


def split_target(target: str) -> tuple[str, int]:
    """A CONNECT target, ``host:port`` or ``[v6]:port``, as (host, port); ValueError otherwise."""
    if target.startswith("["):
        host, _, port = target[1:].partition("]:")
    else:
        host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(target)
    return host, int(port)


class Handler(socketserver.BaseRequestHandler):
    allowed: list[str] = []

    def handle(self) -> None:
        if not SLOTS.acquire(blocking=False):
            reply(self.request, "503 Service Unavailable", "too many connections")
            return
        try:
            with contextlib.suppress(OSError):
                self.serve()
        finally:
            SLOTS.release()

    def read_head(self) -> tuple[bytes, bytes] | None:
        self.request.settimeout(CONNECT_S)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.request.recv(4096)
            if not chunk or len(data) > MAX_HEAD:
                return None
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        return head, rest

    def serve(self) -> None:
        got = self.read_head()
        if got is None:
            return
        head, rest = got
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            reply(self.request, "400 Bad Request", "not an HTTP request line")
            return
        method, target, version = parts
        try:
            if method == "CONNECT":
                host, port = split_target(target)
                path = None
            else:
                url = urlsplit(target)
                if url.scheme != "http" or not url.hostname:
                    raise ValueError(target)
                host, port = url.hostname, url.port or 80
                path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        except ValueError:
            reply(self.request, "400 Bad Request", "send CONNECT host:port or an absolute http:// URI")
            return
        if not host_allowed(host, self.allowed):
            reply(self.request, "403 Forbidden", f"{host} is not on the task's allowlist")
            return
        try:
            upstream = socket.create_connection((host, port), timeout=CONNECT_S)
        except OSError as exc:
            reply(self.request, "502 Bad Gateway", f"{host}:{port} cannot be reached: {exc}")
            return
        with upstream:
            upstream.settimeout(None)
            self.request.settimeout(None)
            if path is None:
                self.request.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                relay(self.request, upstream, rest)
                return
            headers = [line for line in lines[1:] if line.split(":", 1)[0].strip().lower() not in HOP]
            request = "\r\n".join([f"{method} {path} {version}", *headers, "Connection: close", "", ""])
            relay(self.request, upstream, request.encode("latin-1") + rest)


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def own_address(subnet: str) -> str:
    """This container's IPv4 address in ``subnet`` (the internal network's side): the source address
    the kernel picks for the subnet's first host (a UDP connect sends nothing)."""
    net = ipaddress.ip_network(subnet)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((str(net.network_address + 1), 9))
        return probe.getsockname()[0]


def main() -> None:
    subnet, port, allowed = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    Handler.allowed = list(allowed)
    address = own_address(subnet)
    with Server((address, port), Handler) as server:
        print(f"READY {address}:{port}", flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main()
