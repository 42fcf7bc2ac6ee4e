"""Shared pytest configuration: nothing here may hide a failure or skip a test that should run."""

import os
import signal
import time

import pytest

os.environ.setdefault("ENVHUB_TESTING", "1")

# A suite started in the background of a shell without job control (`cmd &`, nohup) inherits SIGINT
# ignored, and so would every process a test starts: tests that interrupt one would wait forever.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models need no intra-op threads, and on a busy 2-core machine they cost a lot."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _pid_alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


#: pids of the pytest-xdist workers that have finished (controller only): their containers count as ours.
_worker_pids: set[str] = set()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist (controller): a worker is done; remember its pid for the leak check."""
    pid = getattr(node, "workeroutput", {}).get("envhub_pid")
    if pid:
        _worker_pids.add(str(pid))


def pytest_sessionfinish(session, exitstatus):
    """After the whole suite no envhub container may be left -- ours, or one whose owner died.

    Under pytest-xdist each worker only closes its own sandboxes (the other worker may still be
    running tests, its containers alive, and a test's deliberately orphaned container is transient);
    the controller, whose session ends after every worker's, then checks the containers of all
    the workers and of every dead owner."""
    from sandbox_fixtures import backend_problem

    from envhub.sandboxes import close_all

    close_all()
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller checks once every worker is done
        workeroutput["envhub_pid"] = os.getpid()
        return
    if backend_problem("docker") is not None:
        return
    from envhub.sandboxes.docker_backend import owned_containers
    from envhub.sandboxes.dockerapi import LABEL_PID

    ours = {str(os.getpid())} | _worker_pids

    def leaked() -> list[str]:
        return [c.id[:12] for c in owned_containers()
                if c.labels.get(LABEL_PID) in ours or not _pid_alive(c.labels.get(LABEL_PID, ""))]

    deadline = time.monotonic() + 15  # a server subprocess that just exited may still be removing its own
    while leaked() and time.monotonic() < deadline:
        time.sleep(0.5)
    if leaked():
        print(f"\nenvhub containers leaked by the test suite: {leaked()}")
        session.exitstatus = 1


#: A test that takes longer than this (call phase, seconds) belongs to the slow lane; the fast lane
#: (``-m "not slow and not docker"``, README) stays fast only while the marks tell the truth.
SLOW_S = 10.0
_unmarked_slow: list[tuple[str, float]] = []


def pytest_runtest_logreport(report):
    if report.when == "call" and report.duration > SLOW_S and "slow" not in report.keywords:
        _unmarked_slow.append((report.nodeid, report.duration))


def pytest_terminal_summary(terminalreporter):
    """Name the tests that ran longer than SLOW_S without the ``slow`` mark: mark them (a list, not a
    failure: a busy machine makes anything slow now and then)."""
    if _unmarked_slow:
        terminalreporter.section(f"not marked slow but took over {SLOW_S:.0f} s")
        for nodeid, seconds in sorted(_unmarked_slow, key=lambda item: -item[1]):
            terminalreporter.write_line(f"{seconds:6.1f}s {nodeid}")
