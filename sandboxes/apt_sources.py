"""Read the machine's own apt configuration to find the Debian mirror to debootstrap from.

Why: no image can be pulled on our machines (nor behind many firewalls), but every Debian-family
machine already names a mirror it is allowed to reach. We never hard-code a mirror host; we use
the one apt uses. Both formats are parsed: one-line ``sources.list`` entries and deb822
``*.sources`` stanzas (``Enabled: no`` and ``deb-src`` entries are ignored).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

APT_DIR = Path("/etc/apt")


@dataclass(frozen=True)
class AptSource:
    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]
    signed_by: str | None = None
    origin: str = ""


@dataclass(frozen=True)
class Mirror:
    """What debootstrap needs: the mirror, the suite (release codename), and a keyring."""

    uri: str
    suite: str
    components: tuple[str, ...]
    keyring: str | None = None


def parse_one_line(text: str, origin: str = "") -> list[AptSource]:
    """``deb [opt=val ...] URI SUITE [COMPONENT ...]`` lines."""
    found = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        options: dict[str, str] = {}
        match = re.match(r"^(\S+)\s+\[([^\]]*)\]\s+(.*)$", line)
        if match:
            kind, opts, rest = match.groups()
            for opt in opts.split():
                key, _, value = opt.partition("=")
                options[key.lower()] = value
        else:
            kind, _, rest = line.partition(" ")
        if kind != "deb":
            continue
        fields = rest.split()
        if len(fields) < 2:
            continue
        found.append(AptSource(fields[0], (fields[1],), tuple(fields[2:]), options.get("signed-by"), origin))
    return found


def parse_deb822(text: str, origin: str = "") -> list[AptSource]:
    """RFC 822-style stanzas separated by blank lines; continuation lines start with a space."""
    found = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = None
        for line in stanza.splitlines():
            if line.startswith("#"):
                continue
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line.strip()
                continue
            name, sep, value = line.partition(":")
            if not sep:
                continue
            key = name.strip().lower()
            fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").strip().lower() == "no":
            continue
        signed_by = fields.get("signed-by")
        if signed_by and "\n" in signed_by:  # an inline key block, not a path
            signed_by = None
        for uri in fields.get("uris", "").split():
            found.append(AptSource(uri, tuple(fields.get("suites", "").split()),
                                   tuple(fields.get("components", "").split()), signed_by, origin))
    return found


def read_sources(apt_dir: Path = APT_DIR) -> list[AptSource]:
    """Every enabled ``deb`` source, in apt's order: sources.list, then sources.list.d sorted."""
    found: list[AptSource] = []
    main = apt_dir / "sources.list"
    if main.is_file():
        found += parse_one_line(main.read_text(errors="replace"), str(main))
    folder = apt_dir / "sources.list.d"
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            if path.suffix == ".list":
                found += parse_one_line(path.read_text(errors="replace"), str(path))
            elif path.suffix == ".sources":
                found += parse_deb822(path.read_text(errors="replace"), str(path))
    return found


def host_codename(os_release: Path = Path("/etc/os-release")) -> str | None:
    try:
        text = os_release.read_text()
    except OSError:
        return None
    for key in ("VERSION_CODENAME", "UBUNTU_CODENAME"):
        match = re.search(rf"^{key}=\"?([^\"\n]+)\"?$", text, re.M)
        if match:
            return match.group(1)
    return None


def pick_mirror(sources: list[AptSource], codename: str | None) -> Mirror | None:
    """The first source carrying the host's release itself (not -updates / -security)."""
    candidates = [s for s in sources if s.uri.split(":", 1)[0] in ("http", "https", "file")]
    for source in candidates:
        suites = [s for s in source.suites if s == codename] if codename else \
                 [s for s in source.suites if "-" not in s and "/" not in s]
        if suites and (not source.components or "main" in source.components):
            keyring = source.signed_by if source.signed_by and os.path.isfile(source.signed_by) else None
            return Mirror(source.uri.rstrip("/"), suites[0], ("main",), keyring)
    return None


def find_mirror(apt_dir: Path = APT_DIR, os_release: Path = Path("/etc/os-release")) -> Mirror | None:
    return pick_mirror(read_sources(apt_dir), host_codename(os_release))
