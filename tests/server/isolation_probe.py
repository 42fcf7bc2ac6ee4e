"""What agent code runs, through an env's own tools, inside a served container to look for secrets.

:func:`probe_source` is a Python program for the Computation ``python`` tool (CodeRepair's
``run`` tool runs it as a file). It prints one JSON line: where it found any of the markers (hex
in the program, so its own source holds none of them as they are; a control copy it writes in
its work dir first must be among them), which ``/proc`` entries of
other processes it could open at all, and which network connections it could make.
"""

from __future__ import annotations

import json

PROBE = r'''
import json, os, socket
MARKERS = [bytes.fromhex(h) for h in {markers!r}]
CONTROL = os.path.abspath("envhub-probe-control.txt")  # the search finds what it can read
with open(CONTROL, "wb") as fh:
    fh.write(MARKERS[0] + b"\n")
SKIP = ("/proc", "/sys", "/dev")
found, opened, network = [], [], {{}}
mine = {{os.getpid(), os.getppid()}}


def hit(where, data):
    for m in MARKERS:
        if m in data:
            found.append(where)
            return


# from /, and from every directory on the way to a secret or where one might be: where / or /opt
# cannot be listed, a tree below may still be
tops = {{"/", "/usr", "/opt", "/tmp", "/etc", "/var", "/home", "/root", "/srv", "/run", "/work", os.getcwd()}}
for path in {paths!r}:
    while path not in ("/", ""):
        path = os.path.dirname(path)
        tops.add(path)
seen = set()


def scan(top):
    for root, dirs, files in os.walk(top, onerror=lambda e: None):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in SKIP]
        for name in files:
            path = os.path.join(root, name)
            if path in seen:
                continue
            seen.add(path)
            try:
                if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > 64 << 20:
                    continue
                with open(path, "rb") as fh:
                    hit(path, fh.read())
            except OSError:
                pass


for top in sorted(tops):
    scan(top)
for path in {paths!r}:  # the secrets' own paths, by name: a directory listing may be what is refused
    try:
        with open(path, "rb") as fh:
            hit(path, fh.read())
    except OSError:
        pass
try:
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
except OSError:
    pids = []
pids = sorted(set(pids) | set(range(1, 64)))  # and by number: /proc may list nothing
for pid in pids:
    if pid in mine:
        continue
    for entry in ("cmdline", "environ", "maps", "status"):
        try:
            with open(f"/proc/{{pid}}/{{entry}}", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        opened.append(f"{{pid}}/{{entry}}")
        hit(f"/proc/{{pid}}/{{entry}}", data)
    try:
        with open(f"/proc/{{pid}}/maps") as fh:
            regions = [line.split()[0].split("-") for line in fh if " r" in line]
        with open(f"/proc/{{pid}}/mem", "rb") as mem:
            opened.append(f"{{pid}}/mem")
            for start, end in regions:
                try:
                    mem.seek(int(start, 16))
                    hit(f"/proc/{{pid}}/mem", mem.read(min(int(end, 16) - int(start, 16), 64 << 20)))
                except (OSError, OverflowError, ValueError):
                    pass
    except OSError:
        pass
for name, family, kind, address in {targets!r}:
    try:
        sock = socket.socket(family, kind)
        sock.settimeout(2)
        sock.connect(tuple(address))
        if kind == socket.SOCK_DGRAM:
            sock.send(b"x")
        network[name] = "connected"
    except OSError as exc:
        network[name] = type(exc).__name__ + ": " + str(exc)
os.unlink(CONTROL)
print("PROBE" + json.dumps({{"found": sorted(set(found)), "control": CONTROL, "opened": opened, "network": network}}))
'''

#: (name, family, type, address): the server's port in the container and an address outside it.
TARGETS = [
    ("server_port", 2, 1, ["127.0.0.1", 8000]),
    ("outside_tcp", 2, 1, ["10.255.255.1", 80]),
    ("outside_udp", 2, 2, ["10.255.255.1", 53]),
    ("outside_tcp6", 10, 1, ["::1", 8000]),
]


def probe_source(markers: list[bytes], paths: list[str]) -> str:
    """The probe program for ``markers`` (searched everywhere) and ``paths`` (opened by name)."""
    return PROBE.format(markers=[m.hex() for m in markers], paths=list(paths), targets=TARGETS)


def probe_report(output: str) -> dict:
    """The JSON the probe printed, out of a tool's output."""
    line = next(part for part in output.split("PROBE")[1:] if part.lstrip().startswith("{"))
    return json.JSONDecoder().raw_decode(line.lstrip())[0]
