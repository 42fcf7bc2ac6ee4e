"""The executor's file walks on the host: bounded, iterative, and saying what they cut."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from envhub.sandboxes import fsops


def chain(root: Path, depth: int) -> Path:
    """A ``depth``-deep chain of directories named ``d`` (made one level at a time: no path limit)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = sub
        os.close(os.open("leaf.py", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    return root


@pytest.fixture
def deep_dir(tmp_path):
    """``tmp_path``, emptied afterwards with the iterative wipe (pytest's own rmtree recurses)."""
    yield tmp_path
    fsops.wipe(str(tmp_path))


@pytest.mark.slow
def test_a_chain_deeper_than_any_recursion_limit_is_walked_to_the_depth_bound(deep_dir):
    tmp_path = chain(deep_dir, 3000)
    found = fsops.scan_path(str(tmp_path), ".", read_bytes=1 << 20)
    dirs = [p for p, kind, _ in found.entries if kind == "dir"]
    assert len(dirs) == fsops.MAX_DEPTH and not found.files
    assert found.left_out == {"/".join(["d"] * fsops.MAX_DEPTH): f"directory deeper than {fsops.MAX_DEPTH} levels: not entered"}
    assert found.cut == [f"directories deeper than {fsops.MAX_DEPTH} levels were not entered"]


def test_entry_name_and_byte_budgets_stop_the_walk_and_say_so(tmp_path):
    for i in range(50):
        (tmp_path / f"f{i:02d}").write_bytes(b"x" * 100)
    few = fsops.scan_path(str(tmp_path), ".", max_entries=10)
    assert len(few.entries) == 10 and "10 entries" in few.cut[0]
    short = fsops.scan_path(str(tmp_path), ".", max_name_bytes=40)
    assert 0 < len(short.entries) < 50 and "bytes of names" in short.cut[0]
    read = fsops.scan_path(str(tmp_path), ".", read_bytes=1000)
    assert len(read.files) == 10 and len(read.left_out) == 40
    assert read.cut == ["files beyond 1000 bytes in all were not read"]
    with pytest.raises(fsops.OpError, match="more than 1000 bytes"):
        fsops.scan_path(str(tmp_path), ".", read_bytes=1000, strict_bytes=True)


def test_names_that_are_not_utf8_are_left_out_by_name(tmp_path):
    os.close(os.open(os.fsencode(tmp_path) + b"/bad\xff.py", os.O_WRONLY | os.O_CREAT, 0o644))
    (tmp_path / "good.py").write_text("g")
    found = fsops.scan_path(str(tmp_path), ".", read_bytes=1 << 20)
    assert found.files == {"good.py": b"g"} and found.left_out == {"bad\ufffd.py": "name is not valid UTF-8: left out"}


@pytest.mark.slow
def test_wipe_empties_any_depth_with_a_handful_of_descriptors(tmp_path):
    """One descriptor at a time: even under RLIMIT_NOFILE=16 a 3,000-deep chain goes, and so do
    directories the agent left without permissions."""
    work = tmp_path / "work"
    work.mkdir()
    chain(work, 3000)
    (work / "closed").mkdir()
    (work / "closed" / "f").write_text("x")
    (work / "closed").chmod(0)
    script = ("import resource, sys\nresource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))\n"
              "from envhub.sandboxes import fsops\nfsops.wipe(sys.argv[1])\n")
    subprocess.run([sys.executable, "-c", script, str(work)], check=True, timeout=120)
    assert list(work.iterdir()) == []
