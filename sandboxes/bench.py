"""``envhub bench sandbox``: what the resident executor and warm pools buy, measured side by side.

Every comparison runs in the same process against the same image, so the ratios hold on
whatever machine runs it:

* warm exec through the executor vs docker-py ``exec_run`` on *the same container*;
* episode turnover from a warm pool (release = reset, then acquire) vs a cold
  ``containers.run`` (and vs a cold envhub sandbox, start to first exec);
* bwrap: warm exec through the executor vs a one-shot ``bwrap ... true``; process warm exec.

Targets on a 2-core machine: warm exec p50 <= 10 ms, warm reset p50 <= 100 ms.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable
from typing import Any

from envhub.sandboxes.base import SandboxError, SandboxSpec

Out = Callable[[str], None]


def _timed(fn: Callable[[], Any], n: int, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000.0)
    return samples


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _stats(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": statistics.median(samples), "p99_ms": _pct(samples, 0.99), "n": len(samples)}


def _line(out: Out, label: str, st: dict[str, float]) -> None:
    out(f"  {label:<44} p50 {st['p50_ms']:8.2f} ms   p99 {st['p99_ms']:8.2f} ms   (n={st['n']})")


def bench_docker(out: Out, n_exec: int = 300, n_slow: int = 30) -> dict[str, Any]:
    from envhub.sandboxes.docker_backend import DockerSandbox, container_config
    from envhub.sandboxes.dockerapi import docker_client
    from envhub.sandboxes.images import ensure_base_image
    from envhub.sandboxes.pool import SandboxPool

    image = ensure_base_image()
    client = docker_client()
    res: dict[str, Any] = {}
    out(f"docker ({image})")
    with DockerSandbox(SandboxSpec()).start() as sb:
        res["warm_exec"] = _stats(_timed(lambda: sb.exec(["true"]), n_exec, warmup=10))
        _line(out, "warm exec via resident executor", res["warm_exec"])
        res["warm_exec_shell"] = _stats(_timed(lambda: sb.exec("echo hi"), n_exec // 3))
        _line(out, "warm exec via executor, `sh -c 'echo hi'`", res["warm_exec_shell"])
        container = client.containers.get(sb.container_id)
        res["exec_run"] = _stats(_timed(lambda: container.exec_run(["true"]), n_slow))
        _line(out, "docker-py exec_run, same container", res["exec_run"])

    with SandboxPool("docker", SandboxSpec(), size=1) as pool:
        samples: list[float] = []
        for i in range(n_slow + 3):
            lease = pool.acquire()
            lease.write_files({"scratch.txt": "x" * 1000})
            lease.exec("nohup sleep 30 >/dev/null 2>&1 &")
            t0 = time.perf_counter()
            lease.release()  # the reset: kill every process, wipe /work, /tmp, /dev/shm
            nxt = pool.acquire()  # the next episode's sandbox: the same one, checked alive
            elapsed = (time.perf_counter() - t0) * 1000.0
            nxt.release()
            if i >= 3:
                samples.append(elapsed)
        res["warm_reset"] = _stats(samples)
        _line(out, "warm pool reset (release + acquire)", res["warm_reset"])

    create, host = container_config(SandboxSpec(), image, ["true"])
    hardened = {k: v for k, v in host.items() if k not in ("auto_remove", "log_config")}
    res["cold_run"] = _stats(_timed(
        lambda: client.containers.run(image, ["true"], remove=True, user=create["user"], **hardened),
        max(5, n_slow // 3), warmup=1))
    _line(out, "cold containers.run (hardened, `true`)", res["cold_run"])

    def cold_sandbox() -> None:
        with DockerSandbox(SandboxSpec()).start() as fresh:
            fresh.exec(["true"])

    res["cold_sandbox"] = _stats(_timed(cold_sandbox, max(5, n_slow // 3), warmup=1))
    _line(out, "cold envhub sandbox (start, exec, close)", res["cold_sandbox"])
    res["exec_speedup"] = res["exec_run"]["p50_ms"] / res["warm_exec"]["p50_ms"]
    res["reset_speedup"] = res["cold_run"]["p50_ms"] / res["warm_reset"]["p50_ms"]
    out(f"  => warm exec is {res['exec_speedup']:.1f}x faster than exec_run; "
        f"warm reset is {res['reset_speedup']:.1f}x faster than a cold containers.run")
    out(f"  => targets: warm exec p50 {res['warm_exec']['p50_ms']:.2f} ms (<= 10), "
        f"warm reset p50 {res['warm_reset']['p50_ms']:.2f} ms (<= 100)")
    return res


def bench_bwrap(out: Out, n_exec: int = 300, n_slow: int = 20) -> dict[str, Any]:
    from envhub.sandboxes.bwrap_backend import UNPRIVILEGED_UID, BwrapSandbox, bwrap_args, bwrap_binary

    res: dict[str, Any] = {}
    out("bwrap")
    with BwrapSandbox(SandboxSpec()).start() as sb:
        res["warm_exec"] = _stats(_timed(lambda: sb.exec(["true"]), n_exec, warmup=10))
        _line(out, "warm exec via resident executor", res["warm_exec"])
    argv = [bwrap_binary() or "bwrap", *bwrap_args(SandboxSpec(), {}), "--", "/usr/bin/true"]
    drop = os.getuid() == 0
    res["one_shot"] = _stats(_timed(lambda: subprocess.run(
        argv, check=True, cwd="/", user=UNPRIVILEGED_UID if drop else None,
        group=UNPRIVILEGED_UID if drop else None, extra_groups=[] if drop else None), n_slow))
    _line(out, "one-shot `bwrap ... true` (same flags)", res["one_shot"])

    def cold() -> None:
        with BwrapSandbox(SandboxSpec()).start() as fresh:
            fresh.exec(["true"])

    res["cold_sandbox"] = _stats(_timed(cold, max(5, n_slow // 2), warmup=1))
    _line(out, "cold envhub bwrap sandbox (start, exec, close)", res["cold_sandbox"])
    return res


def bench_process(out: Out, n_exec: int = 300) -> dict[str, Any]:
    import warnings

    from envhub.sandboxes.process_backend import ProcessSandbox

    out("process")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with ProcessSandbox(SandboxSpec()).start() as sb:
            res = {"warm_exec": _stats(_timed(lambda: sb.exec(["true"]), n_exec, warmup=10))}
    _line(out, "warm exec via resident executor", res["warm_exec"])
    return res


def run_bench(out: Out = print) -> dict[str, Any]:
    """Run every sandbox benchmark that this machine supports; print and return the figures."""
    out(f"sandbox benchmark on {os.cpu_count()} CPU(s)")
    results: dict[str, Any] = {}
    for name, fn in (("docker", bench_docker), ("bwrap", bench_bwrap), ("process", bench_process)):
        try:
            results[name] = fn(out)
        except (SandboxError, FileNotFoundError, subprocess.CalledProcessError) as exc:
            out(f"{name}: skipped ({exc})")
            results[name] = {"skipped": str(exc)}
    return results


if __name__ == "__main__":
    run_bench()
