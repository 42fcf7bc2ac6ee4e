"""Export code-repair instances as Harbor task directories, so the same tasks run in Harbor.

Layout per task (Harbor's task format): ``instruction.md``; ``task.toml``; ``environment/Dockerfile``
with the buggy repository as its build context (the agent works in /app as uid 1000);
``tests/test.sh`` that runs ``grade.py`` as root (``[verifier] user = "root"``) and writes
``/logs/verifier/reward.txt``; ``solution/solve.sh`` that restores the original files.

``tests/`` (uploaded by Harbor only after the agent has finished) holds the same grader as envhub's:
the probe modules, runtime and runner, run as the agent's uid; and ``expected.json`` with the gold's
observations, mode 0600, read and compared by the root process only.

What a task needs is written into it: no network (``[environment] allow_internet = false``: the
agent fixes code and runs tests, and nothing may reach out), a base image with ``python3``
(``FROM`` a public one by default, :data:`PUBLIC_BASE_IMAGE`, so the task builds on any machine
that can pull it; ``base_image=`` names another, such as the offline ``envhub/base``), and uid
1000 for the agent, made by the Dockerfile where the base image has no such user. The same
facts are in ``[metadata]`` (``envhub_base_image``, ``envhub_agent_uid``) for tools to read.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from envhub import safe_ast
from envhub.verifiers import integrity
from envhub.verifiers.probes import compare, grader

from ..manifest import Instance
from ..observations import project_suite
from ..workspace import agent_files, project_sources

HERE = Path(__file__).resolve().parent
VERIFIERS = Path(integrity.__file__).resolve().parent
AGENT_UID = 1000  # the agent's user, as in envhub's sandboxes (envhub.sandboxes.docker_backend)
#: The default ``FROM``: public, so the task builds wherever the image can be pulled.
PUBLIC_BASE_IMAGE = "python:3.11-slim"

TEST_SH = """#!/bin/bash
# Grade the agent's /app (runs as root): integrity checks, then the probes as the agent's uid.
mkdir -p "${ENVHUB_LOG_DIR:-/logs/verifier}"
python3 "$(dirname "$0")/grade.py" || echo 0 > "${ENVHUB_LOG_DIR:-/logs/verifier}/reward.txt"
"""


DOCKERFILE = """\
# The agent's environment: /app, owned by uid {uid}. No step needs the network on a base image
# that already has that user and pytest (envhub/base); on another, pip fetches pytest.
ARG BASE_IMAGE={base}
FROM ${{BASE_IMAGE}}
USER root
RUN set -e; \\
    if ! getent passwd {uid} >/dev/null 2>&1; then \\
        useradd -u {uid} -U -m -s /bin/sh agent 2>/dev/null || adduser -D -u {uid} agent; \\
    fi; \\
    mkdir -p /app && chown {uid}:{uid} /app; \\
    python3 -c "import pytest" 2>/dev/null || python3 -m pip install --no-cache-dir pytest
WORKDIR /app
COPY --chown={uid}:{uid} repo/ /app/
USER {uid}:{uid}
"""


def _dockerfile(base_image: str) -> str:
    # the agent runs as the unprivileged uid 1000 and must own the repository it edits
    return DOCKERFILE.format(base=base_image, uid=AGENT_UID)


def _instruction(prompt: str) -> str:
    """The env's prompt, for an agent with a shell instead of envhub's tools."""
    return (prompt.replace("Repository:", "Repository (in /app):", 1)
            .replace("then call `submit`", "then stop (your final /app is graded)") + "\n")


def _task_toml(inst: Instance, prompt_difficulty: str, base_image: str) -> str:
    tags = json.dumps(["python", "bug-fix", inst.project])
    return (
        'version = "1.0"\n\n'
        "[metadata]\n"
        'author_name = "envhub"\n'
        f'difficulty = "{prompt_difficulty}"\n'
        'category = "code-repair"\n'
        f"tags = {tags}\n"
        f'envhub_instance_id = "{inst.instance_id}"\n'
        f'envhub_split = "{inst.split}"\n'
        f"envhub_base_image = {json.dumps(base_image)}\n"
        f"envhub_agent_uid = {AGENT_UID}\n\n"
        '[verifier]\ntimeout_sec = 300.0\nuser = "root"\n\n'
        "[agent]\ntimeout_sec = 1800.0\n\n"
        "[environment]\nbuild_timeout_sec = 600.0\ncpus = 1\nmemory_mb = 2048\nstorage_mb = 4096\n"
        "allow_internet = false\n"
    )


def export_instance(inst: Instance, prompt: str, dest: Path, *, base_image: str | None = None) -> Path:
    """Write one Harbor task directory atomically (built in a temp dir, then renamed), ``FROM``
    ``base_image`` (default :data:`PUBLIC_BASE_IMAGE`)."""
    base_image = base_image or PUBLIC_BASE_IMAGE
    final = dest / inst.instance_id
    tmp = Path(tempfile.mkdtemp(prefix=f".{inst.instance_id}.", dir=dest))
    try:
        given = agent_files(inst)
        (tmp / "instruction.md").write_text(_instruction(prompt))
        (tmp / "task.toml").write_text(_task_toml(inst, {1: "easy", 2: "medium", 3: "hard"}[inst.difficulty], base_image))
        env_dir = tmp / "environment"
        for rel, text in given.items():
            path = env_dir / "repo" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        (env_dir / "Dockerfile").write_text(_dockerfile(base_image))
        tests = tmp / "tests"
        tests.mkdir()
        suite = project_suite(inst.project)
        run_plan, index_of = grader.plan(suite, inst.expected_tests, timeout_s=20.0)
        for rel, text in grader.probe_files(suite, run_plan).items():
            path = tests / "probe" / rel.removeprefix(f"{grader.PROBE_DIR}/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        shutil.copy(HERE / "grade.py", tests / "grade.py")
        shutil.copy(VERIFIERS / "integrity.py", tests / "integrity.py")
        shutil.copy(safe_ast.__file__, tests / "safe_ast.py")  # integrity.py parses through it
        shutil.copy(compare.__file__, tests / "compare.py")
        expected = tests / "expected.json"
        expected.write_text(json.dumps({
            "given": given, "tests": inst.expected_tests, "probe_dir": grader.PROBE_DIR,
            "command": grader.runner_command(), "env": grader.RUNNER_ENV, "agent_uid": AGENT_UID,
            "index": {str(i): [t, seg] for i, (t, seg) in index_of.items()},
            "expected": {t: suite.expected[t] for t in inst.expected_tests},
            "rules": {t: {str(k): v for k, v in suite.probes[suite.tests[t].module].sites.items()}
                      for t in inst.expected_tests},
            "classes": {name: list(fields) for name, fields in suite.classes.items()},
        }))
        expected.chmod(0o600)
        (tests / "test.sh").write_text(TEST_SH)
        (tests / "test.sh").chmod(0o755)
        original = project_sources(inst.project)
        restore = {rel: original[rel] for rel in inst.buggy_files}
        solve = ("#!/bin/bash\n# Restore the original files (the gold fix).\ncd ${ENVHUB_APP_DIR:-/app}\npython3 - <<'EOF'\n"
                 f"import json\nfor path, text in json.loads({json.dumps(json.dumps(restore))}).items():\n"
                 "    open(path, 'w').write(text)\nEOF\n")
        (tmp / "solution").mkdir()
        (tmp / "solution" / "solve.sh").write_text(solve)
        (tmp / "solution" / "solve.sh").chmod(0o755)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final
