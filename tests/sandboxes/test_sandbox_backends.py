"""The Sandbox protocol, behaving identically on every backend (process, bwrap, docker)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import sandbox_fixtures
from sandbox_fixtures import backend_params, get_sandbox, require_backend

from envhub.sandboxes import ExecResult, Sandbox, SandboxError, SandboxSpec, new_sandbox
from envhub.sandboxes.base import Limits

LIMITS = Limits(timeout_s=10.0, output_bytes=4096, memory_mb=512, disk_mb=32)
ALL = backend_params("process", "bwrap", "landlock", "docker")
sandboxes = sandbox_fixtures.sandboxes


@pytest.fixture(params=ALL)
def sb(request: pytest.FixtureRequest, sandboxes: dict[str, Sandbox]) -> Sandbox:
    """One long-lived sandbox per backend, reset before every test (resets are cheap)."""
    sandbox = get_sandbox(sandboxes, request.param, SandboxSpec(limits=LIMITS))
    sandbox.reset()
    return sandbox


def test_implements_the_protocol(sb: Sandbox) -> None:
    assert isinstance(sb, Sandbox)
    assert sb.limits == LIMITS


def test_exit_code_stdout_stderr(sb: Sandbox) -> None:
    res = sb.exec("echo out; echo err >&2; exit 3")
    assert isinstance(res, ExecResult)
    assert (res.exit_code, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert not res.ok and not res.timed_out and not res.oom_killed and not res.truncated
    assert "[exit code 3]" in res.summary()


def test_argv_is_not_parsed_by_a_shell(sb: Sandbox) -> None:
    res = sb.exec(["printf", "%s|", "a b", "$HOME", "*"])
    assert res.stdout == "a b|$HOME|*|"


def test_stdin_env_and_cwd(sb: Sandbox) -> None:
    assert sb.exec(["cat"], stdin="piped ✓").stdout == "piped ✓"
    big = b"x" * 1_000_000
    assert sb.exec("wc -c", stdin=big).stdout.strip() == str(len(big))
    assert sb.exec("echo $GREETING", env={"GREETING": "hi"}).stdout == "hi\n"
    sb.write_files({"sub/dir/f.txt": "x"})
    assert sb.exec("ls", cwd="sub/dir").stdout == "f.txt\n"
    missing = sb.exec("true", cwd="nope")
    assert missing.exit_code != 0 and "working directory" in missing.stderr


def test_environment_is_scrubbed(sb: Sandbox) -> None:
    os.environ["ENVHUB_SECRET_FOR_TEST"] = "leak"
    try:
        env = sb.exec("env").stdout
    finally:
        del os.environ["ENVHUB_SECRET_FOR_TEST"]
    assert "ENVHUB_SECRET_FOR_TEST" not in env
    assert "PATH=" in env


def test_command_not_found_and_signals_are_results(sb: Sandbox) -> None:
    res = sb.exec(["definitely-not-a-command"])
    assert res.exit_code == 127 and "not found" in res.stderr
    seg = sb.exec("kill -SEGV $$")
    assert seg.exit_code == 128 + 11 and seg.signal == 11
    assert "SIGSEGV" in seg.summary()


def test_timeout_kills_the_process_group(sb: Sandbox) -> None:
    res = sb.exec("sleep 30 & sleep 30", timeout=0.5)
    assert res.timed_out and not res.ok
    assert "timed out" in res.summary()
    assert sb.exec("echo still-here").stdout == "still-here\n"


def test_output_is_capped_with_a_marker(sb: Sandbox) -> None:
    res = sb.exec("head -c 100000 /dev/zero | tr '\\0' a; head -c 50000 /dev/zero | tr '\\0' b >&2")
    assert res.exit_code == 0 and res.truncated
    assert res.stdout.startswith("a" * 4096)
    assert "truncated by envhub: 95904 more bytes" in res.stdout
    assert "truncated by envhub: 45904 more bytes" in res.stderr


def test_files_roundtrip(sb: Sandbox) -> None:
    sb.write_files({"a.txt": "hello", "deep/er/b.bin": bytes(range(256)), "/work/abs.txt": "abs"})
    assert sb.read_file("a.txt") == b"hello"
    assert sb.read_file("deep/er/b.bin") == bytes(range(256))
    assert sorted(sb.list_files()) == sorted(
        [p for p in ("a.txt", "deep/er/b.bin", "abs.txt")] if sb.workdir == "/work"
        else ["a.txt", "deep/er/b.bin", "work/abs.txt"])
    assert sb.list_files("deep") == ["er/b.bin"]
    assert sb.exec("cat a.txt").stdout == "hello"
    with pytest.raises(FileNotFoundError):
        sb.read_file("missing.txt")
    with pytest.raises(IsADirectoryError):
        sb.read_file("deep")
    with pytest.raises(ValueError):
        sb.read_file("../../etc/passwd")
    with pytest.raises(ValueError):
        sb.write_files({"../escape.txt": "x"})


def test_write_replaces_a_planted_symlink(sb: Sandbox) -> None:
    sb.exec("ln -s /tmp/elsewhere test_hidden.py")
    sb.write_files({"test_hidden.py": "assert True\n"})
    assert sb.exec("test -L test_hidden.py || echo regular").stdout == "regular\n"
    assert sb.read_file("test_hidden.py") == b"assert True\n"
    with pytest.raises(ValueError):  # reads never follow the agent's symlinks either
        sb.exec("ln -s a.txt link.txt; echo hi > a.txt")
        sb.read_file("link.txt")


def test_copy_in_and_out(sb: Sandbox, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("X = 1\n")
    (src / "top.txt").write_text("top")
    sb.copy_in(str(src), "proj")
    assert sorted(sb.list_files("proj")) == ["pkg/mod.py", "top.txt"]
    sb.exec("cd proj && python3 -c 'import pkg.mod as m; open(\"out.txt\",\"w\").write(str(m.X))'")
    out = tmp_path / "out"
    sb.copy_out("proj", str(out))
    assert (out / "out.txt").read_text() == "1"
    assert (out / "pkg" / "mod.py").read_text() == "X = 1\n"
    single = tmp_path / "single"
    sb.copy_out("proj/top.txt", str(single))
    assert [p.name for p in single.iterdir()] == ["top.txt"]


def test_reset_restores_pristine(sb: Sandbox) -> None:
    sb.write_files({"left.txt": "x"})
    sb.exec("echo x > /tmp/left; nohup sleep 300 >/dev/null 2>&1 & echo $! > pid")
    pid = sb.read_file("pid").decode().strip()
    assert _job_alive(sb, pid)  # the background job outlives its exec
    sb.reset()
    assert sb.list_files() == []
    assert sb.exec("ls -A /tmp" if sb.backend not in ("process", "landlock") else "ls -A $TMPDIR").stdout == ""
    assert not _job_alive(sb, pid)


def _job_alive(sb: Sandbox, pid: str) -> bool:
    """Asked from inside; on landlock from here: each of its commands is a Landlock domain of its
    own, which cannot signal what an earlier command started (the pid is this host's)."""
    if sb.backend != "landlock":
        return sb.exec(f"kill -0 {pid}").exit_code == 0
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_python_and_pytest_are_available(sb: Sandbox) -> None:
    if sb.backend == "process":
        pytest.skip("the process backend uses whatever python the host has")
    sb.write_files({"test_x.py": "def test_ok():\n    assert 1 + 1 == 2\n"})
    res = sb.exec(["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_x.py"], timeout=60)
    assert res.exit_code == 0, res.summary()
    assert "1 passed" in res.stdout


@pytest.mark.parametrize("backend", ALL)
def test_close_is_idempotent_and_final(backend: str) -> None:
    require_backend(backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with new_sandbox(backend, SandboxSpec(limits=LIMITS)) as sandbox:
            assert sandbox.exec("echo hi").stdout == "hi\n"
    sandbox.close()
    sandbox.close()
    with pytest.raises(SandboxError):
        sandbox.exec("true")


@pytest.mark.parametrize("backend", ALL)
def test_sandbox_outlives_the_thread_that_started_it(backend: str) -> None:
    """bwrap --die-with-parent fires on the *thread's* exit; sandboxes must not die with it."""
    import threading
    import time

    require_backend(backend)
    box: dict[str, Sandbox] = {}

    def start() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            box["sb"] = new_sandbox(backend, SandboxSpec(limits=LIMITS))

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    time.sleep(0.3)  # give a stray parent-death signal time to land
    with box["sb"] as sandbox:
        assert sandbox.exec("echo alive").stdout == "alive\n"
