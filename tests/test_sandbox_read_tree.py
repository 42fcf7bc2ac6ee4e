"""`read_tree` and `exec_python`: the two one-round-trip operations the code-repair grader uses."""

import pytest
from sandbox_fixtures import backend_params, require_backend

from envhub.sandboxes import SandboxSpec, new_sandbox

ALL = backend_params("process", "bwrap", "docker")


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
        fds = sb.exec_python("import os\nprint(sorted(int(f) for f in os.listdir('/proc/self/fd')))")
        assert fds.stdout.strip() in ("[0, 1, 2]", "[0, 1, 2, 3]")  # 3: the listdir handle itself
        assert sb.exec(["true"]).ok  # the executor is healthy afterwards
