"""`read_tree` and `exec_python`: the two one-round-trip operations the code-repair grader uses."""

import os

import pytest
from sandbox_fixtures import backend_params, require_backend

from envhub.sandboxes import SandboxSpec, new_sandbox

ALL = backend_params("process", "bwrap", "landlock", "docker")
#: Backends whose commands run as an unprivileged uid (the process backend's run as the caller).
ISOLATED = backend_params("bwrap", "docker")
#: The host reads sandboxes with root's privileges only when it is root (CI and these machines).
PRIVILEGED = os.geteuid() == 0


@pytest.mark.parametrize("backend", ALL)
def test_read_tree_returns_regular_files_only(backend):
    require_backend(backend)
    with new_sandbox(backend) as sb:
        sb.write_files({"src/a.py": "x = 1\n", "src/pkg/b.py": b"\x00\x01", "top.txt": "t"})
        sb.exec(["sh", "-c", "ln -s /etc/passwd src/link && mkfifo src/fifo && mkdir -p empty"])
        tree = sb.read_tree(".")
        assert tree == {"src/a.py": b"x = 1\n", "src/pkg/b.py": b"\x00\x01", "top.txt": b"t"}
        assert sb.read_tree("src") == {"a.py": b"x = 1\n", "pkg/b.py": b"\x00\x01"}


@pytest.mark.parametrize("backend", ALL)
def test_exec_python_runs_like_a_fresh_interpreter_with_preloaded_modules(backend):
    require_backend(backend)
    with new_sandbox(backend, SandboxSpec(preload=("json",))) as sb:
        ok = sb.exec_python("import os, sys\nprint('json' in sys.modules)\nprint(os.environ['K'])\nsys.exit(3)",
                            env={"K": "v"})
        assert ok.exit_code == 3 and ok.stdout.splitlines() == ["True", "v"]
        crash = sb.exec_python("raise ValueError('boom')")
        assert crash.exit_code == 1 and "ValueError: boom" in crash.stderr
        slow = sb.exec_python("while True:\n    pass", timeout=1)
        assert slow.timed_out
        # the child cannot reach the executor's channel: every inherited descriptor is closed
        fds = sb.exec_python("import os\ndef is_open(fd):\n    try:\n        os.fstat(fd)\n        return True\n"
                             "    except OSError:\n        return False\nprint([fd for fd in range(4096) if is_open(fd)])")
        assert fds.stdout.strip() == "[0, 1, 2]"
        assert sb.exec(["true"]).ok  # the executor is healthy afterwards


# ---- hostile trees: nothing the agent does to its files makes a read fail --------------------

DEEP = "/".join(["d"] * 1500)
HOSTILE = (
    f"mkdir -p src/{DEEP} && echo deep > src/{DEEP}/f.py && mkdir -p src/shallow && echo ok > src/shallow/s.py"
    " && ln -s /etc/shadow src/shadow && ln -s / src/root && mkfifo src/fifo"
    " && python3 -c \"import os, stat; os.mknod('src/sock', stat.S_IFSOCK | 0o600)\""  # landlock: no socket()
    " && echo secret > src/locked.py && chmod 000 src/locked.py && mkdir src/closed && chmod 000 src/closed"
)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ALL)
def test_read_tree_and_list_files_describe_a_hostile_tree_instead_of_failing(backend, tmp_path):
    """A 1,500-deep chain, symlinks out of the tree, a FIFO, a socket, an unreadable file and an
    unreadable directory: both walks finish (iteratively), follow nothing, read no special file,
    and say what they left out and which bound they hit."""
    require_backend(backend)
    with new_sandbox(backend) as sb:
        assert sb.exec(["sh", "-c", HOSTILE]).ok
        tree = sb.read_tree(".")
        assert tree["src/shallow/s.py"] == b"ok\n"
        assert not any(p.endswith("f.py") for p in tree)  # below the depth bound
        assert tree.left_out["src/shadow"] == "symlink to '/etc/shadow': not followed"
        assert tree.left_out["src/root"] == "symlink to '/': not followed"
        assert tree.left_out["src/fifo"] == "FIFO: not read" and tree.left_out["src/sock"] == "socket: not read"
        assert any("deeper than" in why for why in tree.left_out.values())
        assert tree.cut == ["directories deeper than 128 levels were not entered"] and not tree.complete
        if PRIVILEGED:  # read with privileges the agent cannot take away: the host reads its files
            assert tree["src/locked.py"] == b"secret\n" and "src/closed" not in tree.left_out
        else:
            assert "not readable" in tree.left_out["src/locked.py"]
        listing = sb.list_files("src")
        assert {"shallow/s.py", "shadow", "root", "fifo", "sock", "locked.py"} <= set(listing)
        assert listing == sorted(listing) and listing.cut == tree.cut
        for path in ("src/shadow", "src/root", "src/fifo", "src/sock"):
            with pytest.raises(ValueError, match=r"symlink|fifo|socket"):
                sb.read_file(path)
        if backend != "process" or not PRIVILEGED:  # the tools see the tree as the agent's uid does
            assert listing.left_out["closed"] == "directory not readable (Permission denied)"
            with pytest.raises(PermissionError):
                sb.read_file("src/locked.py")
        skipped = sb.copy_out("src", str(tmp_path))
        assert {"shadow", "root", "fifo", "sock"} <= set(skipped) and (tmp_path / "shallow/s.py").read_text() == "ok\n"
        sb.reset()  # wipes the chain too (iteratively, one descriptor at a time)
        assert sb.list_files(".") == [] and sb.exec(["ls", "-A"]).stdout == ""


@pytest.mark.parametrize("backend", ISOLATED)
def test_an_unreadable_work_dir_is_a_result_of_every_operation_not_a_broken_sandbox(backend):
    require_backend(backend)
    with new_sandbox(backend) as sb:
        sb.write_files({"src/a.py": "x = 1\n"})
        assert sb.exec(["chmod", "000", "/work"]).ok
        ran = sb.exec(["true"])
        assert ran.exit_code == 2 and "cannot use working directory" in ran.stderr
        with pytest.raises(PermissionError):
            sb.read_file("src/a.py")
        with pytest.raises(PermissionError):
            sb.write_files({"b.py": "y"})
        listing = sb.list_files(".")
        assert listing == [] and "Permission denied" in listing.left_out["."]
        tree = sb.read_tree(".")  # the grader's read is not the agent's
        assert tree == {"src/a.py": b"x = 1\n"} if PRIVILEGED else "Permission denied" in tree.left_out["."]
        assert sb.alive()
        sb.reset()
        assert sb.exec(["ls"]).ok and sb.list_files(".") == []


@pytest.mark.parametrize("backend", ALL)
def test_names_no_file_system_takes_are_refused_not_a_broken_sandbox(backend):
    """A NUL byte or a lone surrogate in a path, an argument or an environment value -- as an
    agent's tool call can carry -- is an error of that call; the executor keeps serving."""
    require_backend(backend)
    with new_sandbox(backend) as sb:
        for path in ("src/a\x00b", "src/\ud800"):
            for call in (sb.read_file, lambda p: sb.write_files({p: "x"}), sb.list_files, sb.read_tree):
                with pytest.raises(ValueError):
                    call(path)
        for ran in (sb.exec(["echo", "a\x00b"]), sb.exec(["echo", "\ud800"]), sb.exec(["true"], env={"A": "\ud800"}),
                    sb.exec(["true"], cwd="a\x00b")):
            assert ran.exit_code in (2, 126) and ran.stderr.startswith("envhub:")
        assert sb.exec(["true"]).ok
