"""Progress of the long commands (on stderr, never on stdout) and what Ctrl-C says.

Every test runs the real command in a subprocess. Progress is forced on with ENVHUB_PROGRESS=1
(stderr is a pipe here, so it is plain lines); without it nothing of it appears.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from sandbox_fixtures import require_backend

ENV = "envhub/Computation-v0"


def envhub(*args: str, progress: bool | None = None, cache: Path | None = None, timeout: float = 300):
    return subprocess.run([sys.executable, "-m", "envhub.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=_env(progress, cache))


def _env(progress: bool | None = None, cache: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ENVHUB_PROGRESS"}
    if progress is not None:
        env["ENVHUB_PROGRESS"] = "1" if progress else "0"
    if cache is not None:
        env["ENVHUB_CACHE"] = str(cache)
    return env


class Stderr:
    """A running command's stderr, read as it comes (to wait for a line before signalling)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.text, self._proc = "", proc
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._proc.stderr:
            self.text += line

    def wait_for(self, pattern: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.text):
            assert time.monotonic() < deadline and self._proc.poll() is None, self.text
            time.sleep(0.05)

    def all(self) -> str:
        self._thread.join(timeout=30)
        return self.text

    def finish(self, timeout: float = 60) -> str:
        """Wait for the command's exit; its stdout. (Not ``communicate()``: that reads stderr too,
        racing this reader for the last lines -- the ones that say where the command stood.)"""
        self._proc.wait(timeout=timeout)
        assert self._proc.stdout is not None
        return self._proc.stdout.read()


@pytest.mark.slow
def test_verify_shows_plays_and_violations_only_on_stderr_and_only_when_asked(tmp_path):
    args = ("verify", ENV, "--limit", "3", "--sandbox", "process")
    quiet, shown = envhub(*args, "--out", str(tmp_path / "suite.json")), envhub(*args, progress=True)
    assert quiet.returncode == shown.returncode == 0, shown.stderr
    assert shown.stdout == quiet.stdout and "verifier suite" in quiet.stdout
    cases = len(json.loads((tmp_path / "suite.json").read_text())["cases"])
    plays = 3 * cases
    assert re.search(rf"^verify \(3 tasks x {cases} cases\) {plays}/{plays} plays \(0 violations\) [\d.]+s$",
                     shown.stderr, re.M), shown.stderr
    assert "plays" not in quiet.stderr and "verify (" not in quiet.stderr


@pytest.mark.slow
def test_ctrl_c_of_verify_says_where_it_stood_and_writes_nothing(tmp_path):
    out = tmp_path / "suite.json"
    proc = subprocess.Popen([sys.executable, "-m", "envhub.cli", "verify", ENV, "--split", "all", "--limit", "0",
                             "--jobs", "1", "--sandbox", "process", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(progress=True))
    stderr = Stderr(proc)
    stderr.wait_for(r"plays \(\d+ violations?\)")  # the first progress line: plays are under way
    proc.send_signal(signal.SIGINT)
    stdout = stderr.finish()
    text = stderr.all()
    assert proc.returncode == 130, text
    done = re.search(r"interrupted: verify \(\d+ tasks x \d+ cases\) (\d+)/(\d+) plays \(0 violations\) "
                     r"[\d.]+s; verify keeps no partial results, rerun it to start over", text)
    assert done and 0 < int(done[1]) < int(done[2]), text
    assert not out.exists() and stdout == ""


@pytest.mark.slow
def test_ctrl_c_of_a_rollout_says_what_is_on_disk_and_the_same_command_resumes(tmp_path):
    """SIGINT once a few episodes are on disk: the message counts them (as the file does) and
    exits 130; rerunning the very same command skips them and finishes the rest."""
    episodes = 150
    cmd = [sys.executable, "-m", "envhub.cli", "rollout", ENV, "--policy", "gold", "--episodes", str(episodes),
           "--concurrency", "1", "--sandbox", "process", "--out", str(tmp_path)]
    path = tmp_path / "trajectories.jsonl"
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    deadline = time.monotonic() + 120
    while not path.exists() or path.read_bytes().count(b"\n") < 3:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and stdout == "", stderr
    said = re.search(r"interrupted: (\d+) episodes on disk in (\S+) \(of (\d+) planned\); "
                     r"rerun the same command to resume: episodes on disk are skipped", stderr)
    assert said, stderr
    on_disk = len(path.read_text().splitlines())
    assert int(said[1]) == on_disk and 3 <= on_disk < episodes
    assert said[2] == str(path) and int(said[3]) == episodes
    assert "episodes " not in stderr.replace(said[0], "")  # no progress without a terminal or ENVHUB_PROGRESS

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(progress=True))
    assert again.returncode == 0, again.stderr
    assert f"resumed: {on_disk} episodes were already in {path}" in again.stdout
    lines = re.findall(r"^episodes (\d+)/(\d+) \((\d+) already on disk; (\d+) success\) [\d.]+s$", again.stderr, re.M)
    assert lines, again.stderr
    assert [int(g) for g in lines[-1]] == [episodes, episodes, on_disk, episodes - on_disk]  # the summary line
    assert json.loads((tmp_path / "report.json").read_text())["attempted"] == episodes
    assert len(path.read_text().splitlines()) == episodes


#: The process backend's "trusted code only" RuntimeWarning is the one stderr line a process
#: sandbox run always has; these tests look at everything else.
QUIET = {"PYTHONWARNINGS": "ignore::RuntimeWarning"}


@pytest.mark.slow
def test_sigterm_of_a_rollout_says_what_is_on_disk_as_ctrl_c_does_and_exits_143(tmp_path):
    """SIGTERM (a scheduler, ``kill``, a container stop) stops a rollout as Ctrl-C does: the same
    line, counting what is on disk, exit 143 -- and nothing else: no warnings of pools about the
    sandboxes the stop itself closed."""
    episodes = 300
    path = tmp_path / "trajectories.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "envhub.cli", "rollout", ENV, "--policy", "gold", "--episodes",
                             str(episodes), "--concurrency", "4", "--sandbox", "process", "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**_env(), **QUIET})
    deadline = time.monotonic() + 120
    while not path.exists() or path.read_bytes().count(b"\n") < 5:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    time.sleep(0.3)  # episodes in flight: sandboxes in use, being reset, handed back
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143 and stdout == "", (proc.returncode, stderr)
    said = re.search(r"interrupted: (\d+) episodes on disk in (\S+) \(of (\d+) planned\); "
                     r"rerun the same command to resume: episodes on disk are skipped", stderr)
    assert said, stderr
    assert int(said[1]) == len(path.read_text().splitlines()) < episodes
    assert stderr.replace(said[0], "").strip() == "", stderr  # no pool warnings, nothing else


#: ``envhub verify`` with one pooled sandbox made to break (its third reset fails), so that the
#: pool replaces it in the background -- and that replacement's start is held, once its executor
#: runs, until the test creates the file ``argv[1]``. Says when the held start begins and if it ends.
REPLACEMENT_HELD = textwrap.dedent("""\
    import os, sys, threading, time
    from envhub.sandboxes.base import SandboxError
    from envhub.sandboxes.process_backend import ProcessSandbox
    from envhub.sandboxes.resident import ResidentSandbox

    release, resets = sys.argv[1], []
    reset, launch, start = ResidentSandbox.reset, ProcessSandbox._launch, ResidentSandbox.start

    def failing_reset(self):
        resets.append(self)
        if len(resets) == 3:
            raise SandboxError("injected: the reset failed")
        return reset(self)

    def held_launch(self):
        transport = launch(self)
        if threading.current_thread().name == "envhub-pool-refill":
            print("replacement starting", file=sys.stderr, flush=True)
            deadline = time.monotonic() + 90
            while not os.path.exists(release) and time.monotonic() < deadline:
                time.sleep(0.01)
        return transport

    def reported_start(self):
        started = start(self)
        if threading.current_thread().name == "envhub-pool-refill":
            print("replacement started", file=sys.stderr, flush=True)
        return started

    ResidentSandbox.reset, ProcessSandbox._launch, ResidentSandbox.start = failing_reset, held_launch, reported_start
    from envhub.cli.commands import main

    sys.argv = ["envhub", *sys.argv[2:]]
    main()
""")


@pytest.mark.slow
def test_ctrl_c_while_the_pool_starts_a_replacement_is_said_at_once_and_replaces_nothing(tmp_path):
    """The race of a Ctrl-C while the pool is replacing a broken sandbox, made deterministic: the
    replacement's start is held. The stop must say where it stood at once, whatever the pool is
    doing; the held start must not be kept when it ends; the sandboxes the stop closes are not
    "broken", so nothing warns and nothing else is replaced."""
    release, out = tmp_path / "release", tmp_path / "suite.json"
    proc = subprocess.Popen([sys.executable, "-c", REPLACEMENT_HELD, str(release), "verify", ENV, "--split", "all",
                             "--limit", "0", "--jobs", "1", "--sandbox", "process", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**_env(progress=True), **QUIET})
    stderr = Stderr(proc)
    try:
        stderr.wait_for("replacement starting")
        proc.send_signal(signal.SIGINT)
        # The start stays held until `release`: a line before then was printed while the pool was busy. (Old code
        # printed it only when the bounded 10 s cleanup gave up; 8 s leaves a loaded machine room.)
        stderr.wait_for(r"interrupted: verify", timeout=8)
    finally:
        release.touch()
    stdout = stderr.finish()
    text = stderr.all()
    assert proc.returncode == 130, text
    done = re.search(r"interrupted: verify \(\d+ tasks x \d+ cases\) (\d+)/(\d+) plays \(0 violations\) "
                     r"[\d.]+s; verify keeps no partial results, rerun it to start over", text)
    assert done and 0 < int(done[1]) < int(done[2]), text
    assert not out.exists() and stdout == ""
    assert text.count("replacing it") == 1 and text.count("replacement starting") == 1, text  # the injected one only
    assert "could not replace" not in text and "replacement started" not in text, text


def test_no_progress_flag_wins_over_the_environment(tmp_path):
    res = subprocess.run([sys.executable, "-m", "envhub.cli", "rollout", ENV, "--policy", "noop", "--episodes", "2",
                          "--sandbox", "process", "--out", str(tmp_path), "--no-progress"],
                         capture_output=True, text=True, timeout=300, env=_env(progress=True))
    assert res.returncode == 0 and "episodes 2/2" not in res.stderr
    res = subprocess.run([sys.executable, "-m", "envhub.cli", "rollout", ENV, "--policy", "noop", "--episodes", "3",
                          "--sandbox", "process", "--out", str(tmp_path), "--progress"],
                         capture_output=True, text=True, timeout=300, env=_env())
    assert res.returncode == 0 and re.search(r"^episodes 3/3 \(2 already on disk; 0 success\)", res.stderr, re.M)


def _cache_with_tokenizer(root: Path) -> Path:
    """A fresh model cache holding only the SmolLM2 tokenizer (converted from its GGUF file once)."""
    from envhub.adapters.engines.models import prepare_tokenizer

    shutil.copytree(prepare_tokenizer("smollm2-135m"), root / "tokenizers" / "smollm2-135m")
    return root


@pytest.mark.slow
def test_models_prepare_tiny_shows_its_stages_and_stdout_is_unchanged(tmp_path):
    cache = _cache_with_tokenizer(tmp_path / "cache")
    built = envhub("models", "prepare", "tiny", progress=True, cache=cache)
    assert built.returncode == 0, built.stderr
    path = re.fullmatch(r"tiny: (\S+) \([\d.]+s\)\n", built.stdout)
    assert path and Path(path[1], "config.json").is_file()
    for stage in ("check the cache done (not prepared)", "load torch and transformers done",
                  "tokenizer done", "random weights, saved done"):
        assert re.search(rf"^models prepare tiny: {re.escape(stage)}.* in [\d.]+s$", built.stderr, re.M), built.stderr
    assert re.search(r"^models prepare tiny: done in [\d.]+s \(check the cache [\d.]+s, load torch", built.stderr, re.M)
    assert "Writing model shards" not in built.stderr  # transformers' own bar is off meanwhile

    again = envhub("models", "prepare", "tiny", progress=True, cache=cache)
    assert again.returncode == 0 and again.stdout.split(" (")[0] == built.stdout.split(" (")[0]
    assert "check the cache done (already prepared)" in again.stderr and "random weights" not in again.stderr
    quiet = envhub("models", "prepare", "tiny", cache=cache)
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout.startswith(f"tiny: {path[1]} (")


def test_models_prepare_failure_names_the_stage_and_the_error_exit_code_is_kept(tmp_path):
    res = envhub("models", "prepare", "no-such-model", progress=True, cache=tmp_path)
    assert res.returncode == 2 and "error: unknown model 'no-such-model'" in res.stderr
    assert re.search(r"^models prepare no-such-model: failed in [\d.]+s$", res.stderr, re.M)


@pytest.mark.slow
def test_models_prepare_smollm2_counts_the_tensors_it_dequantizes(tmp_path):
    """The real GGUF -> safetensors conversion (about 40 s): every stage, and the tensor count."""
    res = envhub("models", "prepare", "smollm2-135m", progress=True, cache=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("converting ") and f"smollm2-135m: {tmp_path}/models/smollm2-135m (" in res.stdout
    counted = re.search(r"^models prepare smollm2-135m: dequantize to fp32 done (\d+)/(\d+) tensors .* in [\d.]+s$",
                        res.stderr, re.M)
    assert counted and counted[1] == counted[2] and int(counted[1]) > 100, res.stderr
    for stage in ("find the GGUF file", "tokenizer from the GGUF file", "save safetensors and tokenizer",
                  "checksum the source"):
        assert f"models prepare smollm2-135m: {stage} done" in res.stderr
    assert "Converting and de-quantizing GGUF tensors" not in res.stderr  # transformers' tqdm bar is replaced


@pytest.mark.docker
def test_sandbox_build_shows_its_stages_on_stderr_only():
    """The cached path (a real debootstrap takes a minute and more: its stages are in the report of
    the change that added them, and its output summary is tested below on a real process)."""
    require_backend("docker")
    quiet = envhub("sandbox", "build")
    shown = envhub("sandbox", "build", progress=True)
    assert quiet.returncode == shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout == quiet.stdout and "is up to date" in quiet.stdout and "ready: envhub/base:" in quiet.stdout
    for stage in ("find mirror", "wait for other builders", "check the cached image"):
        assert re.search(rf"^sandbox build: {stage} done.* in [\d.]+s$", shown.stderr, re.M), shown.stderr
    assert "check the cached image done (up to date)" in shown.stderr
    assert re.search(r"^sandbox build: done in [\d.]+s \(find mirror", shown.stderr, re.M)
    assert "sandbox build" not in quiet.stderr


def test_debootstrap_output_is_summarized_and_its_tail_kept_for_the_error():
    """run_summarized streams a real process's merged output; the summary counts packages per
    step, shows warnings and errors at once, and the tail of the output survives for the message."""
    import io

    from envhub.progress import Progress
    from envhub.sandboxes.images import DebootstrapSummary, run_summarized

    script = ("echo 'I: Retrieving InRelease'; echo 'I: Retrieving libc6 2.36-9'; echo 'I: Validating libc6 2.36-9';"
              "echo 'I: Unpacking the base system...'; echo 'I: Unpacking libc6:amd64...' >&2;"
              "echo 'W: Failure trying to run: chroot'; echo 'I: Configuring libc6:amd64...'; exit 3")
    stream = io.StringIO()
    progress = Progress("debootstrap", show=True, stream=stream)
    code, tail = run_summarized(["sh", "-c", script], DebootstrapSummary(progress))
    assert code == 3
    assert tail.splitlines()[0] == "I: Retrieving InRelease" and "W: Failure trying to run: chroot" in tail
    assert progress.note == "Configuring libc6:amd64...; 1 retrieved, 1 validated, 1 unpacked, 1 configured"
    assert "debootstrap: W: Failure trying to run: chroot\n" in stream.getvalue()
    code, tail = run_summarized(["sh", "-c", "for i in $(seq 1 2000); do echo line-$i; done"], lambda _line: None,
                                tail_chars=100)
    assert code == 0 and tail.endswith("line-2000\n") and len(tail) <= 100
