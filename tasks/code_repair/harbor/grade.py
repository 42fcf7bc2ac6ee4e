"""Standalone grader for Harbor exports: ``python3 /tests/grade.py``, as root, after the agent.

It repeats envhub's verifier with the standard library alone, under the same rule: no process
that runs submitted code holds an expected value or decides the outcome.

1. Every process of the agent's uid is stopped (something left running must not watch the
   grading), and ``/tests`` -- with ``expected.json``, the gold's observations -- is made
   readable by root only.
2. The agent's ``/app`` is read as root and checked for tampering (``integrity.py``).
3. The submitted ``src/`` and the probes (the hidden tests without expected values) go into a
   fresh directory; the probe runner runs there as the agent's uid.
4. This root process compares the runner's output with ``expected.json`` (``compare.py``) and
   writes ``/logs/verifier/reward.txt``.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402
import integrity  # noqa: E402

APP = os.environ.get("ENVHUB_APP_DIR", "/app")
LOGS = os.environ.get("ENVHUB_LOG_DIR", "/logs/verifier")
MAX_FILE_BYTES = 512 * 1024
MAX_ENTRIES, MAX_DEPTH = 100_000, 128


def stop_user(uid):
    """SIGKILL every process of ``uid`` until none is left (they may fork while we look)."""
    for _ in range(50):
        found = False
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/status") as fh:
                    uids = next(line for line in fh if line.startswith("Uid:")).split()[1:]
            except (OSError, StopIteration):
                continue
            if str(uid) in uids and int(pid) != os.getpid():
                found = True
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)
        if not found:
            return


def read_tree(root):
    """The repository as text, walked without following links, as root (nothing can hide a file),
    within bounds: a tree past them cannot be graded whole, which is the agent's doing."""
    files, stack, seen = {}, [root], 0
    while stack:
        directory = stack.pop()
        seen += 1
        if seen > MAX_ENTRIES or directory.count(os.sep) - root.count(os.sep) > MAX_DEPTH:
            finish(0, f"the repository is too large to grade (over {MAX_ENTRIES} entries or {MAX_DEPTH} levels)")
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        seen += len(entries)
        for entry in entries:
            rel = os.path.relpath(entry.path, root).replace(os.sep, "/")
            if integrity.is_cache_file(rel) or entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                with open(entry.path, "rb") as fh:
                    data = fh.read(MAX_FILE_BYTES)
                files[rel] = "<binary>" if b"\0" in data else data.decode("utf-8", "replace")
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
    uid = int(spec["agent_uid"])
    # In Harbor's container (root, /app): nothing of the agent's may keep running. Elsewhere (a local
    # check with ENVHUB_APP_DIR) other processes of that uid are not ours to stop.
    own_container = os.geteuid() == 0 and "ENVHUB_APP_DIR" not in os.environ
    if own_container:
        stop_user(uid)
        with contextlib.suppress(OSError):
            os.chmod(HERE, 0o700)
    final = read_tree(APP)
    findings = integrity.file_findings(spec["given"], final, ["src"])
    findings += integrity.code_findings(spec["given"], {p: t for p, t in final.items() if p.startswith("src/")})
    if findings:
        finish(0, "tampering detected: " + "; ".join(str(f) for f in findings[:10]))
    work = tempfile.mkdtemp(prefix="envhub-grade-")
    for rel, text in final.items():
        if rel.startswith("src/"):
            os.makedirs(os.path.dirname(os.path.join(work, rel)), exist_ok=True)
            with open(os.path.join(work, rel), "w") as fh:
                fh.write(text)
    shutil.copytree(os.path.join(HERE, "probe"), os.path.join(work, spec["probe_dir"]))
    if os.geteuid() == 0:  # the runner, as the agent's uid, takes the probes off the disk before they run
        for dirpath, dirnames, filenames in os.walk(work):
            for name in [*dirnames, *filenames]:
                os.chown(os.path.join(dirpath, name), uid, uid)
        os.chown(work, uid, uid)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **spec["env"]}
    drop = {"user": uid, "group": uid, "extra_groups": []} if os.geteuid() == 0 else {}
    try:
        proc = subprocess.run(spec["command"], cwd=work, env=env, timeout=240, capture_output=True, text=True,
                              errors="replace", check=False, **drop)
        stdout = proc.stdout
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
    if own_container:
        stop_user(uid)  # nothing the run started may outlive it
    index = {int(i): (t, seg) for i, (t, seg) in spec["index"].items()}
    reported = compare.read_report(stdout, set(index))
    bad = []
    classes = {name: tuple(fields) for name, fields in spec.get("classes", {}).items()}
    for i, (test, segment) in sorted(index.items()):
        verdict = compare.judge(reported, i, spec["expected"][test][segment], spec["rules"][test], classes)
        if not verdict.passed and test not in bad:
            bad.append(test)
    if bad:
        finish(0, f"{len(bad)} of {len(spec['tests'])} hidden tests differ from the gold, e.g. {bad[0]}")
    finish(1, f"all {len(spec['tests'])} hidden tests observed as the gold")


if __name__ == "__main__":
    main()
