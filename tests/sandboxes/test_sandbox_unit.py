"""Sandbox pieces that need neither Docker nor bubblewrap: parsing, safety helpers, selection,
cleanup chaining, pools on the process backend, and the CI bring-up script (with stubs)."""

from __future__ import annotations

import io
import os
import signal
import stat
import subprocess
import tarfile
import warnings
from pathlib import Path

import pytest

from envhub.sandboxes import (
    ExecResult,
    PooledSandbox,
    SandboxError,
    SandboxPool,
    SandboxSpec,
    apt_sources,
    cap_output,
    cleanup,
    create_sandbox,
    doctor,
    executor,
    images,
    process_backend,
    select_backend,
    selection,
    workdir_path,
)
from envhub.sandboxes.base import Limits
from envhub.sandboxes.bench import _pct, _stats
from envhub.sandboxes.docker_backend import container_config

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore:envhub is using the 'process' sandbox backend")


# ---- base -----------------------------------------------------------------------------------


def test_cap_output_and_workdir_path() -> None:
    assert cap_output(b"abc", 10) == ("abc", False)
    text, cut = cap_output(b"x" * 20, 5)
    assert cut and text.startswith("xxxxx") and "15 more bytes" in text
    assert workdir_path("/work", "a/b") == "/work/a/b"
    assert workdir_path("/work", "/work/a") == "/work/a"
    assert workdir_path("/work", "/workspace/x") == "/work/workspace/x"
    with pytest.raises(ValueError):
        workdir_path("/work", "a/../../etc")


def test_summary_names_the_signal() -> None:
    assert "SIGSEGV" in ExecResult(139, "", "", signal=11).summary()
    assert ExecResult(0, "", "").summary() == "[no output]"
    assert issubclass(SandboxError, RuntimeError) or issubclass(SandboxError, Exception)
    from envhub.errors import InfraError

    assert issubclass(SandboxError, InfraError)  # the env base class maps it to env_error


# ---- apt sources ----------------------------------------------------------------------------

ONE_LINE = """\
# a comment
deb [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] http://mirror.example/debian bookworm main contrib
deb-src http://mirror.example/debian bookworm main
deb http://mirror.example/debian bookworm-updates main
"""
DEB822 = """\
Types: deb deb-src
URIs: http://one.example/debian http://two.example/debian
Suites: trixie trixie-updates
Components: main
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 abc
 -----END PGP PUBLIC KEY BLOCK-----

Types: deb
URIs: http://off.example/debian
Suites: trixie
Components: main
Enabled: no
"""


def test_parse_one_line_sources() -> None:
    found = apt_sources.parse_one_line(ONE_LINE)
    assert [(s.uri, s.suites) for s in found] == [
        ("http://mirror.example/debian", ("bookworm",)),
        ("http://mirror.example/debian", ("bookworm-updates",)),
    ]
    assert found[0].signed_by == "/usr/share/keyrings/x.gpg"
    assert found[0].components == ("main", "contrib")


def test_parse_deb822_sources() -> None:
    found = apt_sources.parse_deb822(DEB822)
    assert [s.uri for s in found] == ["http://one.example/debian", "http://two.example/debian"]
    assert found[0].suites == ("trixie", "trixie-updates") and found[0].signed_by is None


def test_find_mirror_reads_the_machine_config(tmp_path: Path) -> None:
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "sources.list").write_text("")
    (apt / "sources.list.d" / "debian.sources").write_text(DEB822)
    (apt / "sources.list.d" / "ignored.list.disabled").write_text("deb http://no.example/ trixie main\n")
    release = tmp_path / "os-release"
    release.write_text('ID=debian\nVERSION_CODENAME=trixie\n')
    mirror = apt_sources.find_mirror(apt, release)
    assert mirror is not None
    assert (mirror.uri, mirror.suite, mirror.components) == ("http://one.example/debian", "trixie", ("main",))
    release.write_text("ID=debian\nVERSION_CODENAME=sid\n")
    assert apt_sources.find_mirror(apt, release) is None


def test_this_machine_has_a_mirror_and_no_host_is_hard_coded() -> None:
    if not Path("/etc/apt").is_dir():
        pytest.skip("not a Debian-family machine")
    assert apt_sources.find_mirror() is not None
    for path in (REPO / "sandboxes").glob("*.py"):
        assert "deb.debian.org" not in path.read_text(), path


def test_inputs_hash_tracks_every_input() -> None:
    m1 = apt_sources.Mirror("http://a/debian", "bookworm", ("main",))
    m2 = apt_sources.Mirror("http://b/debian", "bookworm", ("main",))
    assert images.inputs_hash(images.base_inputs(m1)) == images.inputs_hash(images.base_inputs(m1))
    assert images.inputs_hash(images.base_inputs(m1)) != images.inputs_hash(images.base_inputs(m2))


def test_no_mirror_points_to_the_from_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "find_mirror", lambda: None)
    with pytest.raises(SandboxError, match="--from"):
        images.build_base_image()


def test_from_dockerfile_and_family_tags() -> None:
    text = images.FROM_DOCKERFILE.format(base="python:3.11-slim", uid=1000)
    assert text.startswith("FROM python:3.11-slim") and "USER 1000:1000" in text and "pytest" in text
    assert images.family_image_tag("Code Repair!").startswith("envhub/code-repair:")
    assert images.base_image_tag().startswith("envhub/base:")


def test_container_config_is_hardened() -> None:
    spec = SandboxSpec(limits=Limits(cpus=2, memory_mb=100, pids=10, disk_mb=5))
    create, host = container_config(spec, "img", ["python3"])
    assert host["network_mode"] == "none" and create["network_disabled"]
    assert host["cap_drop"] == ["ALL"] and host["security_opt"][0] == "no-new-privileges"
    assert host["security_opt"][1].startswith('seccomp={"defaultAction":')  # envhub's profile (test_sandbox_seccomp)
    assert host["mem_limit"] == host["memswap_limit"] == "100m"
    assert host["pids_limit"] == 10 and host["nano_cpus"] == 2_000_000_000
    assert host["read_only"] and "size=5m" in host["tmpfs"]["/work"]
    assert create["user"] == "1000:1000" and create["stdin_open"] and not create["detach"]
    networked = container_config(SandboxSpec(limits=Limits(network=True)), "img", [])[1]
    assert networked["network_mode"] == "bridge"


# ---- executor safety helpers ----------------------------------------------------------------


def test_safe_write_never_follows_symlinks(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside / "target.txt")
    executor.safe_write(str(root), "link", b"data")
    assert (root / "link").is_file() and not (root / "link").is_symlink()
    assert not (outside / "target.txt").exists()
    (root / "dirlink").symlink_to(outside)
    with pytest.raises(executor.OpError):
        executor.safe_write(str(root), "dirlink/x", b"data")
    assert list(outside.iterdir()) == []
    with pytest.raises(executor.OpError):
        executor.rel_parts("a/../../b")


def _tar(entries: list[tarfile.TarInfo], data: bytes = b"hi") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:") as tar:
        for info in entries:
            if info.isreg():
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return buf.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def test_extract_tar_skips_everything_unsafe(tmp_path: Path) -> None:
    data = _tar([
        _member("ok.txt"), _member("/abs.txt"), _member("../up.txt"),
        _member("in", tarfile.SYMTYPE, "ok.txt"), _member("out", tarfile.SYMTYPE, "/etc/passwd"),
        _member("climb", tarfile.SYMTYPE, "../x"), _member("hard", tarfile.LNKTYPE, "ok.txt"),
        _member("dev", tarfile.CHRTYPE),
    ])
    strict = executor.extract_tar(str(tmp_path), ".", data, allow_links=False)
    assert sorted(os.listdir(tmp_path)) == ["ok.txt"]
    assert {"/abs.txt", "../up.txt", "in", "out", "climb", "hard", "dev"} == set(strict["skipped"])
    lenient = executor.extract_tar(str(tmp_path), ".", data, allow_links=True)
    assert os.readlink(tmp_path / "in") == "ok.txt"
    assert "out" in lenient["skipped"] and "climb" in lenient["skipped"]


def test_pack_tar_carries_only_files_and_dirs(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    (tmp_path / "l").symlink_to("/etc/passwd")
    os.mkfifo(tmp_path / "fifo")
    packed = executor.pack_tar(str(tmp_path), ".", 1 << 20)
    with tarfile.open(fileobj=io.BytesIO(packed["data"])) as tar:
        names = tar.getnames()
    assert sorted(names) == ["d", "d/f"] and sorted(packed["skipped"]) == ["fifo", "l"]
    with pytest.raises(executor.OpError):
        executor.pack_tar(str(tmp_path), ".", 0)


def test_capture_keeps_head_and_counts_rest() -> None:
    cap = executor.Capture(4)
    cap.feed(b"abcdef")
    cap.feed(b"gh")
    assert bytes(cap.head) == b"abcd" and cap.dropped == 4 and cap.tail.endswith(b"gh")


# ---- selection, doctor, warnings ------------------------------------------------------------


def test_select_backend_explicit_and_override(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("docker", "bwrap", "process"):
        assert select_backend(name) == name
    with pytest.raises(ValueError):
        select_backend("vm")
    monkeypatch.setenv("ENVHUB_SANDBOX", "process")
    assert select_backend("auto") == "process"
    assert select_backend("bwrap") == "bwrap"


def test_auto_falls_back_to_process_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    from envhub.sandboxes.base import BackendStatus

    monkeypatch.delenv("ENVHUB_SANDBOX", raising=False)
    monkeypatch.setattr(selection, "probe_docker", lambda full=False: BackendStatus("docker", False, "none"))
    monkeypatch.setattr(selection, "probe_bwrap", lambda: BackendStatus("bwrap", False, "none"))
    monkeypatch.setattr(selection, "probe_landlock", lambda full=False: BackendStatus("landlock", False, "none"))
    monkeypatch.setattr(process_backend, "_warned", False)
    selection.reset_selection_cache()
    try:
        with pytest.warns(RuntimeWarning, match="trusted code only"):
            assert select_backend() == "process"
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once only
            process_backend.warn_trusted_only()
    finally:
        selection.reset_selection_cache()


def test_auto_prefers_an_isolating_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENVHUB_SANDBOX", raising=False)
    selection.reset_selection_cache()
    try:
        choice = select_backend()
        docker_ok, bwrap_ok = selection.probe_docker().ok, selection.probe_bwrap().ok
        landlock_ok = selection.probe_landlock().ok
        expected = "docker" if docker_ok else "bwrap" if bwrap_ok else "landlock" if landlock_ok else "process"
        assert choice == expected
    finally:
        selection.reset_selection_cache()


@pytest.mark.slow
def test_doctor_reports_every_backend_with_a_fix() -> None:
    statuses = doctor()
    assert [s.name for s in statuses] == ["docker", "bwrap", "landlock", "process"]
    for status in statuses:
        assert status.ok or (status.reason and status.fix), status
    bwrap = statuses[1]
    if bwrap.ok:  # the bound and the filter, or what is missing and what to prefer
        from envhub.sandboxes.bwrap_backend import hardening

        found = hardening()
        assert ("total memory bounded per sandbox" if found.cgroup.ok else "NOT bounded") in bwrap.detail
        assert "seccomp" in bwrap.detail and (found.complete or "prefer docker" in bwrap.detail)


# ---- cleanup --------------------------------------------------------------------------------


class _Dummy:
    closed = 0

    def close(self) -> None:
        self.closed += 1


def test_signal_handler_cleans_up_then_chains(monkeypatch: pytest.MonkeyPatch) -> None:
    dummy = _Dummy()
    cleanup.track(dummy)
    seen: list[int] = []
    monkeypatch.setitem(cleanup._previous, signal.SIGTERM, lambda signum, frame: seen.append(signum))
    cleanup._handler(signal.SIGTERM, None)
    assert dummy.closed == 1 and seen == [signal.SIGTERM]
    assert dummy not in cleanup.live()
    cleanup.track(dummy)
    monkeypatch.setitem(cleanup._previous, signal.SIGTERM, signal.SIG_IGN)
    cleanup._handler(signal.SIGTERM, None)
    assert dummy.closed == 2
    for signum in cleanup.HANDLED_SIGNALS:  # whatever earlier tests left installed: start from the default
        monkeypatch.setattr(cleanup, "_installed", set())
        previous = signal.signal(signum, signal.SIG_DFL)
        monkeypatch.setitem(cleanup._previous, signum, previous)
    try:
        assert cleanup.install_signal_handlers()
        assert signal.getsignal(signal.SIGTERM) is cleanup._handler
    finally:
        for signum in cleanup.HANDLED_SIGNALS:
            signal.signal(signum, cleanup._previous.get(signum) or signal.SIG_DFL)


# ---- process backend and pools --------------------------------------------------------------


def test_process_backend_pool_roundtrip() -> None:
    with SandboxPool("process", size=1) as pool:
        with pool.acquire() as lease:
            assert isinstance(lease, PooledSandbox)
            lease.write_files({"f.txt": "x"})
            first = lease.sandbox
        with pool.acquire() as lease:
            assert lease.sandbox is first and lease.list_files() == []
        assert pool.stats.resets == 2 and pool.stats.created == 1
        held = [pool.acquire(), pool.acquire()]  # more than size: a fresh one, no deadlock
        assert pool.stats.created == 2
        for lease in held:
            lease.release()
            lease.release()  # idempotent
        assert pool.idle == 1
        with pytest.raises(SandboxError):
            held[0].exec("true")


def test_a_stop_while_the_pool_starts_a_replacement_keeps_and_replaces_nothing(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The race behind a Ctrl-C that once went unsaid, made deterministic: a broken sandbox's
    replacement is held mid-start (its executor runs) while a stop begins. During the stop, a lease
    given back is closed, not reset or replaced, and nothing is handed out; the pool's close closes
    the starting replacement, whose start then fails without a warning; nothing is kept."""
    import logging
    import threading

    from envhub.sandboxes.process_backend import ProcessSandbox

    held, go, replacements = threading.Event(), threading.Event(), []
    launch = ProcessSandbox._launch

    def held_launch(self: ProcessSandbox):
        transport = launch(self)
        if threading.current_thread().name == "envhub-pool-refill":
            replacements.append(self)
            held.set()
            go.wait(30)
        return transport

    monkeypatch.setattr(ProcessSandbox, "_launch", held_launch)
    pool = SandboxPool("process", size=2, prestart=False)
    end_stop = None
    try:
        broken, fine = pool.acquire(), pool.acquire()

        def fail_reset() -> None:
            raise SandboxError("injected: the reset failed")

        monkeypatch.setattr(broken.sandbox, "reset", fail_reset)
        broken.release()  # broken: warned about, and replaced in the background
        assert held.wait(30), "the pool did not start a replacement"
        with caplog.at_level(logging.WARNING, logger="envhub.sandboxes.pool"):
            caplog.clear()
            end_stop = cleanup.begin_stop()  # a run is stopping while the replacement starts
            kept = fine.sandbox
            fine.release()
            assert kept.closed and pool.idle == 0  # closed by the stop: not reset, not kept, not replaced
            with pytest.raises(SandboxError):
                pool.acquire()
            closer = threading.Thread(target=pool.close)
            closer.start()
            closer.join(0.5)
            [replacement] = replacements
            assert replacement.closed  # the close closed the starting sandbox at once
            go.set()
            closer.join(30)
            assert not closer.is_alive()
            assert [r.message for r in caplog.records] == []  # nothing was broken: no warnings
        assert len(replacements) == 1 and not os.path.exists(replacement._base)
        assert pool.stats.created == 2 and pool.idle == 0  # the replacement never started
    finally:
        go.set()
        if end_stop is not None:
            end_stop()
        pool.close()


def test_create_sandbox_pooled_close_returns_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVHUB_SANDBOX_POOL", "1")
    sb = create_sandbox("process")
    assert isinstance(sb, PooledSandbox)
    inner = sb.sandbox
    sb.exec("echo x > f")
    sb.close()
    again = create_sandbox("process")
    try:
        assert again.sandbox is inner and again.list_files() == []
    finally:
        again.close()
        from envhub.sandboxes.pool import shared_pool

        shared_pool("process").close()


def test_process_scratch_dir_is_removed() -> None:
    sb = create_sandbox("process")
    base = Path(sb.workdir).parent
    assert base.is_dir()
    sb.close()
    assert not base.exists()


def test_bench_statistics() -> None:
    samples = [float(i) for i in range(1, 101)]
    assert _pct(samples, 0.99) == 99.0
    assert _stats(samples)["p50_ms"] == 50.5


# ---- .ci/docker-up.sh, with stubbed tools ---------------------------------------------------

SCRIPT = REPO / ".ci" / "docker-up.sh"


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def _run_script(tmp_path: Path, *, installed: bool, dockerd_works: bool, up: bool = False) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    if up:
        (state / "up").touch()
    _stub(bin_dir, "dpkg-query", "echo 'install ok installed'\n" if installed else "exit 1\n")
    _stub(bin_dir, "apt-get", f'echo "$@" >> {state}/apt.log\n'
                              f'case "$1" in install) [ -f {state}/updated ] || exit 100;; update) touch {state}/updated;; esac\n')
    _stub(bin_dir, "docker", f'[ -f {state}/up ] || exit 1\necho 99.0\n')
    _stub(bin_dir, "dockerd", f"touch {state / 'up'}\n" if dockerd_works else "true\n")
    _stub(bin_dir, "pgrep", "exit 1\n")
    _stub(bin_dir, "sudo", 'shift; exec "$@"\n')  # "sudo -n cmd..." when tests run unprivileged
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "DOCKER_WAIT_S": "3", "DOCKERD_LOG": str(tmp_path / "dockerd.log")}
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def test_docker_up_is_a_noop_when_everything_is_there(tmp_path: Path) -> None:
    res = _run_script(tmp_path, installed=True, dockerd_works=True, up=True)
    assert res.returncode == 0 and "already answers" in res.stderr
    assert not (tmp_path / "state" / "apt.log").exists()


def test_docker_up_installs_then_starts_dockerd(tmp_path: Path) -> None:
    res = _run_script(tmp_path, installed=False, dockerd_works=True)
    assert res.returncode == 0, res.stderr
    apt_log = (tmp_path / "state" / "apt.log").read_text().splitlines()
    assert apt_log[0].startswith("install") and apt_log[1].startswith("update")  # update only when needed
    assert "docker.io" in apt_log[0] and "bubblewrap" in apt_log[0] and "debootstrap" in apt_log[0]
    assert "docker engine is up" in res.stderr


@pytest.mark.slow
def test_docker_up_fails_clearly_when_the_engine_never_answers(tmp_path: Path) -> None:
    res = _run_script(tmp_path, installed=True, dockerd_works=False)
    assert res.returncode == 1
    assert "did not answer within 3s" in res.stderr


def test_image_builds_are_serialized_across_threads_and_processes():
    """A second builder waits for the first (then finds the image built) instead of debootstrapping too."""
    import threading
    import time

    from envhub.sandboxes.images import build_lock

    order: list[str] = []
    inside = threading.Event()

    def first() -> None:
        with build_lock("envhub/test-lock:1"):
            order.append("first in")
            inside.set()
            time.sleep(0.3)
            order.append("first out")

    t = threading.Thread(target=first)
    t.start()
    inside.wait(5)
    with build_lock("envhub/test-lock:1"):
        order.append("second in")
    t.join()
    assert order == ["first in", "first out", "second in"]


@pytest.mark.parametrize("transport", ["pipe", "socket"])
def test_closing_a_channel_ends_the_call_in_flight_and_never_frees_its_fds_under_it(transport: str) -> None:
    """A cleanup thread closes a channel while another thread waits for a reply that will never
    come. The waiting call must end at once as "closed", and the fds it waits on must stay its
    own until it has: fd numbers freed under a blocked reader go to the next file the process
    opens, and the reader then waits on (or reads from) that unrelated file."""
    import socket
    import sys
    import threading

    from envhub.sandboxes.channel import DockerAttachTransport, ExecutorChannel, PipeTransport

    # A real peer that reads every request and never answers.
    peer = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.buffer.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    ours, theirs = socket.socketpair()
    channel = ExecutorChannel(PipeTransport(peer.stdin, peer.stdout) if transport == "pipe"
                              else DockerAttachTransport(ours))
    outcome: dict[str, BaseException] = {}

    def call() -> None:
        try:
            channel.call("ping", 60.0)
        except BaseException as exc:
            outcome["error"] = exc

    caller = threading.Thread(target=call)
    caller.start()
    try:
        while caller.is_alive() and channel._lock.acquire(blocking=False):  # wait until it is blocked
            channel._lock.release()
        channel.close()
        fresh = [os.pipe() for _ in range(8)]  # these would get the freed fd numbers
        for _, w in fresh:
            os.write(w, b"mine")
        caller.join(10)
        assert not caller.is_alive(), "the call in flight did not notice the close"
        assert isinstance(outcome.get("error"), SandboxError) and "closed" in str(outcome["error"])
        for r, w in fresh:
            assert os.read(r, 16) == b"mine"
            os.close(r)
            os.close(w)
        with pytest.raises(SandboxError, match="unusable: closed"):
            channel.call("ping", 1.0)
    finally:
        peer.kill()
        peer.wait()
        theirs.close()
