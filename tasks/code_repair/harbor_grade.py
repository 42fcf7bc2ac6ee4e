"""Standalone grader for Harbor exports: runs as ``python3 /tests/grade.py`` after the agent.

Harbor uploads ``tests/`` to ``/tests`` only after the agent has finished, so the hidden tests are
never in the agent's container. This script repeats envhub's verifier with the standard library
alone: integrity checks against the files the agent was given (``integrity.py``, copied from
``envhub.verifiers.integrity`` with the ``safe_ast.py`` it imports), then the hidden tests in a
fresh directory with our report plugin, and writes the reward to /logs/verifier/reward.txt.
"""

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import integrity  # noqa: E402

APP = os.environ.get("ENVHUB_APP_DIR", "/app")
LOGS = os.environ.get("ENVHUB_LOG_DIR", "/logs/verifier")


def read_tree(root):
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ("__pycache__", ".pytest_cache")]
        for name in filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            if integrity.is_ignored(rel) or os.path.islink(path):
                continue
            with open(path, "rb") as fh:
                files[rel] = fh.read().decode("utf-8", "replace")
    return files


def finish(reward, reason):
    os.makedirs(LOGS, exist_ok=True)
    with open(os.path.join(LOGS, "reward.txt"), "w") as fh:
        fh.write(f"{reward}\n")
    print(f"reward={reward}: {reason}")
    sys.exit(0)


def main():
    with open(os.path.join(HERE, "expected.json")) as fh:
        spec = json.load(fh)
    final = read_tree(APP)
    findings = integrity.file_findings(spec["given"], final, ["src"])
    findings += integrity.code_findings(spec["given"], {p: t for p, t in final.items() if p.startswith("src/")})
    if findings:
        finish(0, "tampering detected: " + "; ".join(str(f) for f in findings[:10]))
    work = tempfile.mkdtemp(prefix="grade-")
    for rel, text in final.items():
        if rel.startswith("src/"):
            os.makedirs(os.path.dirname(os.path.join(work, rel)), exist_ok=True)
            with open(os.path.join(work, rel), "w") as fh:
                fh.write(text)
    shutil.copytree(os.path.join(HERE, "hidden"), os.path.join(work, "tests"))
    grade_dir = os.path.join(work, spec["grade_dir"])  # where the bootstrap imports the plugin from
    os.makedirs(grade_dir)
    shutil.copy(os.path.join(HERE, spec["plugin"]), grade_dir)
    report = os.path.join(grade_dir, f"report-{secrets.token_hex(12)}.json")
    boot = spec["bootstrap"]  # the same command line as envhub's own grader
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "ENVHUB_REPORT": report,
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    try:
        subprocess.run([sys.executable, "-I", "-c", boot], cwd=work, env=env, timeout=300, check=False)
    except subprocess.TimeoutExpired:
        finish(0, "the hidden tests timed out")
    if not os.path.exists(report):
        finish(0, "no test report (the run exited early)")
    with open(report) as fh:
        data = json.load(fh)
    if data.get("tampered"):
        finish(0, "tampering detected while the tests ran: " + "; ".join(data["tampered"][:5]))
    outcomes = data["outcomes"]
    bad = [t for t in spec["expected"] if outcomes.get(t) != "passed"]
    if bad:
        finish(0, f"{len(bad)} of {len(spec['expected'])} hidden tests did not pass, e.g. {bad[0]}")
    finish(1, f"all {len(spec['expected'])} hidden tests passed")


if __name__ == "__main__":
    main()
