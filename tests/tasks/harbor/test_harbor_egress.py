"""Harbor's ``network_mode = "allowlist"`` (``envhub.tasks.harbor.egress``): the allowlist rules
without Docker, then a task container on an :class:`Egress` network reaching one allowed HTTP
server through the proxy and nothing else."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from types import SimpleNamespace

import pytest
from sandbox_fixtures import backend_problem

import envhub.tasks.harbor.egress as egress_module
from envhub.errors import InfraError
from envhub.sandboxes.dockerapi import owner_labels
from envhub.sandboxes.images import base_image_tag
from envhub.tasks.harbor.egress import Egress, host_allowed, normalize_allowed_hosts

docker = pytest.mark.skipif(backend_problem("docker") is not None, reason="no Docker engine")


def test_normalize_allowed_hosts() -> None:
    assert normalize_allowed_hosts([" Example.COM. ", "*.Foo.org", "10.0.0.0/8", "2001:DB8:0::1", "1.2.3.4",
                                    "2001:db8::/32", "localhost"]) == [
        "example.com", "*.foo.org", "10.0.0.0/8", "2001:db8::1", "1.2.3.4", "2001:db8::/32", "localhost"]
    assert normalize_allowed_hosts([]) == []


@pytest.mark.parametrize("entry", ["http://example.com", "example.com:443", "example.com/path", "", "  ", "*.",
                                   "*.1.2.3.4", "a*.example.com", "*example.com", "10.0.0.1/8", "fe80::1%eth0",
                                   "a_b.com", "[::1]", "1.2.3.4:80", "-a.com", "a..com"])
def test_normalize_refuses(entry: str) -> None:
    with pytest.raises(ValueError, match="allowed_hosts entry") as info:
        normalize_allowed_hosts(["ok.example", entry])
    assert repr(entry) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(("host", "expected"), [
    ("example.com", True), ("EXAMPLE.com.", True), ("a.example.com", False),
    ("a.foo.org", True), ("a.b.foo.org", True), ("foo.org", False), ("xfoo.org", False), ("evil-foo.org", False),
    ("a b.foo.org", False), ("10.1.2.3", True), ("11.0.0.1", False), ("1.2.3.4", True), ("1.2.3.5", False),
    ("[2001:db8::1]", True), ("2001:db8:ffff::5", True), ("2001:db9::1", False), ("::ffff:10.0.0.1", True),
    ("localhost", False), ("127.0.0.1", False),
])
def test_host_allowed(host: str, expected: bool) -> None:
    allowed = normalize_allowed_hosts(["example.com", "*.foo.org", "10.0.0.0/8", "1.2.3.4", "2001:db8::/32"])
    assert host_allowed(host, allowed) is expected


def test_hostnames_are_not_resolved_for_ip_rules() -> None:
    assert not host_allowed("localhost", ["127.0.0.0/8"])
    assert host_allowed("127.0.0.1", ["127.0.0.0/8"])


def test_bad_allowlist_creates_nothing() -> None:
    with pytest.raises(ValueError):
        Egress(["https://example.com/"])


def _docker(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s, check=False)


def _labels() -> list[str]:
    return [arg for k, v in owner_labels().items() for arg in ("--label", f"{k}={v}")]


def _leftovers(tag: str) -> tuple[str, str]:
    containers = _docker("ps", "-a", "--filter", f"name={tag}", "--format", "{{.Names}}").stdout.strip()
    networks = _docker("network", "ls", "--filter", f"name={tag}", "--format", "{{.Name}}").stdout.strip()
    return containers, networks


#: Run in the task container with python3: the results of each probe as JSON.
PROBE = r'''
import json, os, socket, sys, time, urllib.error, urllib.parse, urllib.request
a, b = sys.argv[1], sys.argv[2]
proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])

def get(url, opener=None, timeout=5):
    try:
        with (opener or urllib.request.build_opener()).open(url, timeout=timeout) as r:
            return [r.status, r.read(300).decode()]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode()]
    except Exception as e:
        return ["error", f"{type(e).__name__}: {e}"]

def raw(ip):
    t = time.monotonic()
    try:
        socket.create_connection((ip, 8000), timeout=2).close()
        return "connected"
    except OSError as e:
        return f"{type(e).__name__} after {time.monotonic() - t:.1f}s"

def connect(target):
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=5)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            break
        head += chunk
    status = head.split(b"\r\n")[0].decode()
    if " 200 " not in status + " ":
        return [status, head.decode(errors="replace")]
    s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
    body = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return [status, body.split(b"\r\n")[0].decode()]

def origin_form():
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=5)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    return s.recv(4096).split(b"\r\n")[0].decode()

out = {}
deadline = time.monotonic() + 20
while True:  # the servers may still be starting
    out["allowed"] = get(f"http://{a}:8000/")
    if out["allowed"][0] == 200 or time.monotonic() > deadline:
        break
    time.sleep(0.3)
out["blocked"] = get(f"http://{b}:8000/")
out["blocked_name"] = get("http://blocked.example/")
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
out["direct_a"] = get(f"http://{a}:8000/", direct, 2)
out["direct_b"] = get(f"http://{b}:8000/", direct, 2)
out["raw_a"], out["raw_b"] = raw(a), raw(b)
out["connect_a"], out["connect_b"] = connect(f"{a}:8000"), connect(f"{b}:8000")
out["origin_form"] = origin_form()
print(json.dumps(out))
'''


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_egress_allows_only_the_allowlist() -> None:
    tag = f"envhub-egress-test-{uuid.uuid4().hex[:10]}"
    image = base_image_tag()
    servers = [f"{tag}-srv-a", f"{tag}-srv-b"]
    task = f"{tag}-task"
    egress: Egress | None = None
    try:
        for name in servers:
            ran = _docker("run", "-d", "--rm", "--pull", "never", "--name", name, *_labels(), "--network", "bridge",
                          "--entrypoint", "python3", "-w", "/tmp", image, "-m", "http.server", "8000")
            assert ran.returncode == 0, ran.stderr
        ips = [_docker("inspect", "-f", "{{.NetworkSettings.IPAddress}}", name).stdout.strip() for name in servers]
        assert all(ips), ips
        started = time.monotonic()
        egress = Egress([ips[0]])
        setup_s = time.monotonic() - started
        assert egress.proxy_url.startswith("http://") and egress.proxy_url.endswith(":3128")
        assert egress.env()["HTTPS_PROXY"] == egress.proxy_url == egress.env()["http_proxy"]
        env = [arg for k, v in egress.env().items() for arg in ("-e", f"{k}={v}")]
        ran = _docker("run", "-d", "--rm", "--pull", "never", "--name", task, *_labels(), "--network", egress.network,
                      *env, "--entrypoint", "sleep", image, "infinity")
        assert ran.returncode == 0, ran.stderr
        ran = _docker("exec", task, "python3", "-c", PROBE, *ips, timeout_s=120)
        assert ran.returncode == 0, ran.stderr
        out = json.loads(ran.stdout)
        print(f"proxy set up in {setup_s:.1f}s; {json.dumps(out, indent=1)}")
        assert out["allowed"][0] == 200, out
        assert out["blocked"][0] == 403 and ips[1] in out["blocked"][1], out
        assert out["blocked_name"][0] == 403 and "blocked.example" in out["blocked_name"][1], out
        assert out["direct_a"][0] == "error" and out["direct_b"][0] == "error", out
        assert out["raw_a"] != "connected" and out["raw_b"] != "connected", out
        assert out["connect_a"][0].split()[1] == "200" and " 200 " in out["connect_a"][1] + " ", out
        assert out["connect_b"][0].split()[1] == "403", out
        assert out["origin_form"].split()[1] == "400", out
    finally:
        _docker("rm", "-f", task, *servers)
        if egress is not None:
            egress.close()
            egress.close()  # idempotent
    assert _leftovers(tag) == ("", "")
    if egress is not None:
        assert _leftovers(egress.network) == ("", "")


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_egress_failure_is_infra_and_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    fixed = uuid.uuid4()
    monkeypatch.setattr(egress_module, "uuid", SimpleNamespace(uuid4=lambda: fixed))
    with pytest.raises(InfraError, match="docker create"):
        Egress(["example.com"], image=f"envhub-missing-{fixed.hex[:8]}:none")  # --pull never: no such image
    assert _leftovers(fixed.hex[:16]) == ("", "")


FETCH = ("python3 -c \"import urllib.request, urllib.error, sys\n"
         "for url in sys.argv[1:]:\n"
         "    try: print(url, urllib.request.urlopen(url, timeout=10).status)\n"
         "    except urllib.error.HTTPError as e: print(url, e.code)\n"
         "    except OSError as e: print(url, 'error')\" ")


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_an_allowlist_task_reaches_its_hosts_through_the_bridge_and_nothing_else(tmp_path) -> None:
    from test_harbor_grading import task_copy

    import envhub
    from envhub.parsing import format_tool_call
    from envhub.types import Action, Outcome

    tag = f"envhub-egress-bridge-{uuid.uuid4().hex[:10]}"
    servers = [f"{tag}-a", f"{tag}-b"]
    try:
        for name in servers:
            ran = _docker("run", "-d", "--rm", "--pull", "never", "--name", name, *_labels(), "--network", "bridge",
                          "--entrypoint", "python3", "-w", "/tmp", base_image_tag(), "-m", "http.server", "8000")
            assert ran.returncode == 0, ran.stderr
        ips = [_docker("inspect", "-f", "{{.NetworkSettings.IPAddress}}", name).stdout.strip() for name in servers]
        task = task_copy("hello", tmp_path / "allow", toml={
            "allow_internet = false": f'network_mode = "allowlist"\nallowed_hosts = ["{ips[0]}"]'})
        with envhub.make(f"harbor:{task}") as env:
            env.reset(task_id="allow")
            urls = " ".join(f"http://{ip}:8000/" for ip in ips)
            seen = env.step(Action(text=format_tool_call("bash", {"command": FETCH + urls, "timeout_s": 60})))
            text = seen.messages[-1].content
            assert f"http://{ips[0]}:8000/ 200" in text and f"http://{ips[1]}:8000/ 403" in text, text
            direct = env.step(Action(text=format_tool_call("bash", {
                "command": f"env -u http_proxy -u HTTP_PROXY {FETCH}http://{ips[0]}:8000/", "timeout_s": 60})))
            assert f"http://{ips[0]}:8000/ error" in direct.messages[-1].content  # no route but the proxy
            env.step(Action(text=format_tool_call("bash", {"command": "echo hello > /app/out.txt"})))
            done = env.step(Action(text=format_tool_call("submit", {})))
            assert done.done and env.episode.verdict.outcome is Outcome.SUCCESS, env.episode.verdict.detail
    finally:
        _docker("rm", "-f", *servers)
    assert _docker("network", "ls", "--filter", "name=envhub-egress-", "--format", "{{.Name}}").stdout.strip() == ""


@docker
@pytest.mark.docker
@pytest.mark.slow
def test_an_owner_killed_with_sigkill_leaves_a_proxy_and_network_the_next_sweep_removes() -> None:
    import signal
    import sys

    from envhub.sandboxes.leftovers import sweep_dead_owners

    owner = subprocess.Popen([sys.executable, "-c", (
        "import time\nfrom envhub.tasks.harbor.egress import Egress\n"
        "e = Egress(['10.0.0.1'])\nprint(e.network, e.proxy_name, flush=True)\ntime.sleep(600)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        network, proxy = owner.stdout.readline().split()
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=30)
    assert _leftovers(proxy)[0] == proxy and _leftovers(network)[1] == network  # nothing ran its cleanup
    sweep_dead_owners()
    assert _leftovers(proxy) == ("", "") and _leftovers(network) == ("", "")
