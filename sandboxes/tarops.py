"""Tar transfers into and out of a work dir (``copy_in``, ``copy_out``), built on :mod:`.fsops`.

Loaded by the executor inside every sandbox (``resident.executor_argv`` injects its source) and
imported by the host to unpack ``copy_out``: **stdlib only, Python >= 3.8, no envhub imports**
(the helpers are found under their injected names inside a sandbox).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tarfile

if __name__ == "envhub_tarops":  # inside a sandbox: loaded by the executor's bootstrap
    fsops = sys.modules["envhub_fsops"]
else:
    from envhub.sandboxes import fsops

OpError, open_dir, rel_parts, safe_write = fsops.OpError, fsops.open_dir, fsops.rel_parts, fsops.safe_write


def link_stays_inside(member_name: str, target: str) -> bool:
    """True when a relative symlink at ``member_name`` points inside the tree, lexically,
    without any ``..`` (chains of ``..`` through other links could otherwise climb out)."""
    if target.startswith("/") or ".." in target.split("/"):
        return False
    return bool(target.strip("/"))


def extract_tar(root: str | int, dest: str, data: bytes, allow_links: bool) -> dict:
    """Unpack a tar under ``root/dest`` with the safe walkers; return what was written/skipped.

    Only directories and regular files are created (plus, when ``allow_links``, relative
    symlinks that stay inside). Devices, FIFOs, hard links, absolute or climbing names are
    skipped and listed, never followed.
    """
    base = rel_parts(dest)
    written, skipped = 0, []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            try:
                parts = base + rel_parts(member.name)
            except OpError:
                skipped.append(member.name)
                continue
            rel = "/".join(parts)
            if member.isdir():
                if parts:
                    os.close(open_dir(root, parts, create=True))
            elif member.isreg():
                fh = tar.extractfile(member)
                safe_write(root, rel, fh.read() if fh else b"", member.mode | 0o600)
                written += 1
            elif member.issym() and allow_links and parts and link_stays_inside(member.name, member.linkname):
                dfd = open_dir(root, parts[:-1], create=True)
                try:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(parts[-1], dir_fd=dfd)
                    os.symlink(member.linkname, parts[-1], dir_fd=dfd)
                finally:
                    os.close(dfd)
                written += 1
            else:
                skipped.append(member.name)
    return {"written": written, "skipped": skipped}


def pack_tar(root: str | int, src: str, max_bytes: int) -> dict:
    """Tar regular files and directories under ``root/src``; everything else is skipped (and
    listed), as is what a walk's bounds cut. Over ``max_bytes`` in all is ``too_large``.

    A directory ``src`` contributes its contents; a file ``src`` contributes itself by name.
    """
    found = fsops.scan_path(root, src, read_bytes=max_bytes, strict_bytes=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:") as tar:
        for path, kind, st in found.entries:
            info = tarfile.TarInfo(path)
            info.mtime = int(st.st_mtime)
            if kind == "dir" and path not in found.left_out:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif kind == "file" and path in found.files:
                data = found.files[path]
                info.size, info.mode = len(data), st.st_mode & 0o777
                tar.addfile(info, io.BytesIO(data))
    skipped = [p for p, kind, _ in found.entries if kind not in ("dir", "file")]
    skipped += [p for p in found.left_out if p not in skipped]
    return {"data": buf.getvalue(), "skipped": skipped, "cut": found.cut}
