"""Harbor's ``network_mode = "allowlist"`` for one container: an HTTP(S) proxy and a network with
no route out.

:class:`Egress` creates, for one task container, a docker network made with ``--internal`` (the
engine drops everything from it to anything off it) and a proxy container on both it and the
default ``bridge``. The task container runs on :attr:`Egress.network` with :meth:`Egress.env`.

Enforced:

- Only HTTP(S) through the proxy reaches anything: plain-HTTP forward requests (absolute URI, any
  method) and ``CONNECT host:port`` tunnels, to hosts :func:`host_allowed` accepts; any other
  target gets ``403`` with a body naming the host. The decision is made once per client
  connection on the request line's host (forwarded requests carry ``Connection: close``).
- A direct connection (raw socket, a client ignoring ``HTTP_PROXY``) has no route out; UDP, ICMP
  and non-HTTP protocols get nothing. The proxy listens on one port, bound only to its address on
  the internal network.
- DNS is not offered: the proxy resolves names itself. The engine's embedded resolver still
  answers names of containers on the internal network; on the engine tested (20.10) its forwards
  leave from the container's own namespace, which has no route, so other names fail (moby >= 26
  does not forward for internal networks at all).

Not enforced: a hostname is matched by name, never resolved to match an IP/CIDR rule, and what an
allowed name resolves to is not checked (even a private address). IP rules match IP literals only.
A ``CONNECT`` tunnel carries any TCP protocol, on any port, to an allowed host; TLS is not
inspected. Programs that ignore the proxy variables have no network at all.
"""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
import time
import uuid
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from envhub.errors import InfraError
from envhub.sandboxes.dockerapi import LABEL_BACKEND, SERVE_BACKEND, owner_labels
from envhub.sandboxes.images import base_image_tag

from . import egress_proxy

PROXY_PORT = 3128
_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")

#: The proxy's source, run as ``python3 -c PROXY_SOURCE <subnet> <port> <allowed hosts as JSON>``.
PROXY_SOURCE = Path(egress_proxy.__file__).read_text(encoding="utf-8")
_host_allowed: Callable[[str, list[str]], bool] = egress_proxy.host_allowed


def _bad(raw: object, why: str) -> ValueError:
    return ValueError(f"allowed_hosts entry {raw!r}: {why}")


def normalize_allowed_hosts(hosts: list[str]) -> list[str]:
    """Harbor's ``allowed_hosts`` entries validated and normalized as Harbor does (strip, lower-case,
    no trailing dot; IPv6 and CIDRs in compressed form): hostnames, ``*.suffix`` wildcards, IP
    addresses, CIDR ranges (strict: no host bits). Raises ValueError naming the first bad entry."""
    out: list[str] = []
    for raw in hosts:
        host = str(raw).strip().lower().rstrip(".")
        if not host:
            raise _bad(raw, "empty")
        if "/" in host or ":" in host:  # a CIDR or an IPv6 address, or a URL/port/path (refused)
            try:
                if "%" in host:
                    raise ValueError(host)
                if "/" in host:
                    out.append(ipaddress.ip_network(host, strict=True).compressed)
                    continue
                addr = ipaddress.ip_address(host)
            except ValueError:
                raise _bad(raw, "want a hostname, IP address or CIDR range, not a URL, port or path") from None
            if addr.version != 6:
                raise _bad(raw, "want a hostname, IP address or CIDR range, not a URL, port or path")
            out.append(addr.compressed)
            continue
        name = host
        if host.startswith("*."):
            name = host[2:]
            if not name:
                raise _bad(raw, "a wildcard needs a hostname suffix")
            try:
                ipaddress.ip_address(name)
            except ValueError:
                pass
            else:
                raise _bad(raw, "a wildcard must target a hostname, not an IP address")
        elif "*" in host:
            raise _bad(raw, "wildcards must be a leading '*.'")
        if not all(_LABEL.match(label) for label in name.split(".")):
            raise _bad(raw, "a hostname has only letters, digits, hyphens and dots")
        out.append(host)
    return out


def host_allowed(host: str, allowed: list[str]) -> bool:
    """Whether the proxy lets a request to ``host`` (a hostname or IP literal, brackets allowed)
    through under the normalized ``allowed``: a hostname matches an equal entry or a ``*.suffix``
    entry of which it is a subdomain (``*.example.com`` matches ``a.example.com``, not
    ``example.com``); an IP literal matches an equal address or a CIDR holding it (IPv4-mapped
    IPv6 counts as IPv4). A hostname is never resolved to match an IP or CIDR entry."""
    return bool(_host_allowed(host, allowed))


def _docker(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["docker", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InfraError(f"docker {args[0]} {args[1] if len(args) > 1 else ''} failed: {exc}") from exc


class Egress:
    """The egress setup of one container (see the module docstring): ``Egress(allowed_hosts)``,
    then ``docker run --network egress.network`` with ``egress.env()``; :meth:`close` after the
    container is gone (it disconnects whatever is still attached).

    Raises:
        ValueError: a bad ``allowed_hosts`` entry (the task's fault).
        InfraError: the network or proxy could not be set up (never the agent's fault).
    """

    def __init__(self, allowed_hosts: list[str], *, image: str | None = None, port: int = PROXY_PORT,
                 start_timeout_s: float = 60.0) -> None:
        self.allowed_hosts = normalize_allowed_hosts(allowed_hosts)
        suffix = uuid.uuid4().hex[:16]
        self.network = f"envhub-egress-{suffix}"
        self.proxy_name = f"envhub-egress-proxy-{suffix}"
        self.proxy_url = ""
        self._made: list[str] = []
        labels = [arg for k, v in {**owner_labels(), LABEL_BACKEND: SERVE_BACKEND}.items()  # swept once we are gone
                  for arg in ("--label", f"{k}={v}")]
        try:
            self._made.append("network")  # before: a create that times out may still have made it
            self._check("network", "create", "--internal", *labels, self.network)
            subnets = self._check("network", "inspect", "-f", "{{range .IPAM.Config}}{{.Subnet}} {{end}}",
                                  self.network).split()
            subnet = next((s for s in subnets if ipaddress.ip_network(s).version == 4), None)
            if subnet is None:
                raise InfraError(f"network {self.network} has no IPv4 subnet: {subnets}")
            self._made.append("proxy")
            self._check("create", "--pull", "never", "--name", self.proxy_name, *labels, "--network", "bridge",
                        "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only",
                        "--user", "65534:65534", "--memory", "256m", "--pids-limit", "512",
                        "--entrypoint", "python3", image or base_image_tag(),
                        "-c", PROXY_SOURCE, subnet, str(port), json.dumps(self.allowed_hosts))
            self._check("network", "connect", self.network, self.proxy_name)
            self._check("start", self.proxy_name)
            self.proxy_url = f"http://{self._wait_ready(start_timeout_s)}"
        except BaseException:
            self.close()
            raise

    def _check(self, *args: str) -> str:
        ran = _docker(*args)
        if ran.returncode != 0:
            raise InfraError(f"docker {' '.join(args[:2])} failed (exit {ran.returncode}): "
                             f"{(ran.stderr or ran.stdout).strip()[-1000:]}")
        return ran.stdout

    def _wait_ready(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            logs = _docker("logs", self.proxy_name)
            found = re.search(r"^READY (\S+)$", logs.stdout, re.M)
            if found:
                return found.group(1)
            state = _docker("inspect", "-f", "{{.State.Running}}", self.proxy_name).stdout.strip()
            if state != "true" or time.monotonic() > deadline:
                raise InfraError(f"the egress proxy {self.proxy_name} did not start (running: {state}): "
                                 f"{(logs.stdout + logs.stderr)[-1500:]}")
            time.sleep(0.2)

    def env(self) -> dict[str, str]:
        """The task container's proxy variables (upper and lower case: tools read either)."""
        url, local = self.proxy_url, "localhost,127.0.0.1"
        return {"HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
                "NO_PROXY": local, "no_proxy": local}

    def close(self) -> None:
        """Remove the proxy and the network (anything still attached is disconnected first).
        Idempotent; never raises."""
        if "proxy" in self._made:
            with suppress(InfraError):
                if _docker("rm", "-f", self.proxy_name).returncode == 0:
                    self._made.remove("proxy")
        if "network" in self._made:
            with suppress(InfraError):
                attached = _docker("network", "inspect", "-f", "{{range $id, $c := .Containers}}{{$id}} {{end}}",
                                   self.network)
                for container in attached.stdout.split() if attached.returncode == 0 else []:
                    _docker("network", "disconnect", "-f", self.network, container)
                if _docker("network", "rm", self.network).returncode == 0 or attached.returncode != 0:
                    self._made.remove("network")

    def __enter__(self) -> Egress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
