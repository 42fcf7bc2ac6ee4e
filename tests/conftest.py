"""Shared pytest configuration: nothing here may hide a failure or skip a test that should run."""

import os
import time

import pytest

os.environ.setdefault("ENVHUB_TESTING", "1")


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


def pytest_sessionfinish(session, exitstatus):
    """After the whole suite no envhub container may be left -- ours, or one whose owner died."""
    from sandbox_fixtures import backend_problem

    from envhub.sandboxes import close_all

    close_all()
    if backend_problem("docker") is not None:
        return
    from envhub.sandboxes.docker_backend import owned_containers
    from envhub.sandboxes.dockerapi import LABEL_PID

    def leaked() -> list[str]:
        return [c.id[:12] for c in owned_containers()
                if c.labels.get(LABEL_PID) == str(os.getpid()) or not _pid_alive(c.labels.get(LABEL_PID, ""))]

    deadline = time.monotonic() + 15  # a server subprocess that just exited may still be removing its own
    while leaked() and time.monotonic() < deadline:
        time.sleep(0.5)
    if leaked():
        print(f"\nenvhub containers leaked by the test suite: {leaked()}")
        session.exitstatus = 1
