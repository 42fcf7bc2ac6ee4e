"""The Verifiers side of the ``verifiers:`` bridge: a process in an environment made for
``verifiers`` (see :mod:`.venv`), which loads one taskset through Verifiers' own loader and plays
episodes of it with Verifiers' own env, harness and scoring, on request.

It imports nothing of envhub (it runs under another interpreter's packages). Its model is an
OpenAI-compatible endpoint, ``--base-url``: the bridge's relay, where the envhub policy answers.

Protocol: JSON lines. stdout carries only events; anything else goes to stderr.

- at start: ``{"event": "ready", "verifiers": VERSION, "harness": ID, "executes_code": BOOL,
  "tasks": [{"index": I, "id": ID, "prompt": TEXT}, ...]}``, or ``{"event": "fatal", "error": ...}``;
- stdin ``{"op": "run", "episode": N, "index": I}`` plays task ``I``; when it ends:
  ``{"event": "done", "episode": N, "trace": {...}}`` (rewards, errors, stop condition; see
  :func:`_trace_summary`);
- stdin ``{"op": "cancel", "episode": N}`` stops that episode (no ``done`` follows);
- end of stdin: the process stops.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import math
import sys
import threading
import traceback
from typing import Any


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event, default=str) + "\n")
    sys.stdout.flush()


def _prompt_text(data: Any) -> str:
    prompt = data.prompt
    if isinstance(prompt, str):
        return prompt
    return str(getattr(data, "prompt_text", "") or "")


def _trace_summary(trace: Any) -> dict[str, Any]:
    rewards = {name: (None if r is None else r.value) for name, r in trace.rewards.items()}
    total = trace.reward if all(v is not None for v in rewards.values()) else None
    if total is not None and not math.isfinite(total):
        total = str(total)
    return {
        "id": trace.id, "ok": trace.ok, "reward": total, "rewards": rewards,
        "stop_condition": trace.stop_condition, "is_timeout": trace.is_timeout,
        "is_truncated": trace.is_truncated, "num_turns": trace.num_turns,
        "errors": [{"type": e.type, "message": e.message[:2000]} for e in trace.errors],
    }


async def _main(args: argparse.Namespace) -> None:
    from verifiers.v1 import EvalClientConfig, ModelContext
    from verifiers.v1.envs.single_agent import SingleAgentEnvConfig
    from verifiers.v1.utils.loaders import load_environment

    taskset_id = args.taskset
    if args.version:
        installed = importlib.metadata.version(args.distribution or taskset_id)
        if installed != args.version:
            raise RuntimeError(f"taskset {taskset_id} is version {installed}, not {args.version}")
    from verifiers.v1.utils.loaders import default_harness_id

    harness_id = args.harness or default_harness_id(taskset_id)
    if not args.harness and harness_id == "bash":  # Verifiers' fallback runs the model's shell commands
        harness_id = "null"                        # on this machine; the chat loop runs none
    agent: dict[str, Any] = {"runtime": {"type": "subprocess"}, "harness": {"id": harness_id}}
    config = SingleAgentEnvConfig.model_validate(
        {"taskset": {"id": taskset_id, **json.loads(args.taskset_args)}, "agent": agent})
    env = load_environment(config)
    tasks = list(env.taskset.take(args.max_tasks))
    harness = env._harnesses["agent"]  # the one seat of a single-agent env
    ctx = ModelContext(model=args.model, client=EvalClientConfig(base_url=args.base_url, api_key_var="ENVHUB_NO_KEY"))
    running: dict[int, asyncio.Task[Any]] = {}
    loop = asyncio.get_running_loop()
    commands: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip():
                loop.call_soon_threadsafe(commands.put_nowait, json.loads(line))
        loop.call_soon_threadsafe(commands.put_nowait, None)

    async def play(episode: int, index: int) -> None:
        try:
            result = await env.run_episode(tasks[index], ctx)
            trace = result.traces[-1] if result.traces else None
            summary = _trace_summary(trace) if trace is not None else {"ok": False, "errors": []}
            summary["episode_errors"] = [{"type": e.type, "message": e.message[:2000]} for e in result.errors]
        except asyncio.CancelledError:
            return
        except Exception as exc:  # the episode machinery itself failed: reported, never fatal
            summary = {"ok": False, "errors": [], "episode_errors": [{"type": type(exc).__name__,
                                                                      "message": traceback.format_exc()[-2000:]}]}
        running.pop(episode, None)
        _emit({"event": "done", "episode": episode, "trace": summary})

    async with env.serving():
        _emit({"event": "ready", "verifiers": importlib.metadata.version("verifiers"),
               "harness": harness.config.id, "executes_code": bool(harness.EXECUTES_CODE),
               "tasks": [{"index": i, "id": t.data.id, "name": t.data.name, "prompt": _prompt_text(t.data)}
                         for i, t in enumerate(tasks)]})
        threading.Thread(target=read_stdin, daemon=True).start()
        while (command := await commands.get()) is not None:
            if command.get("op") == "run":
                episode = int(command["episode"])
                running[episode] = asyncio.create_task(play(episode, int(command["index"])))
            elif command.get("op") == "cancel":
                task = running.pop(int(command["episode"]), None)
                if task is not None:
                    task.cancel()
        for task in running.values():
            task.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--taskset", required=True)
    parser.add_argument("--version", default="")
    parser.add_argument("--distribution", default="")
    parser.add_argument("--harness", default="")
    parser.add_argument("--taskset-args", default="{}")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", default="envhub-policy")
    parser.add_argument("--max-tasks", type=int, default=10000)
    args = parser.parse_args()
    try:
        asyncio.run(_main(args))
    except Exception as exc:
        _emit({"event": "fatal", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
        sys.exit(1)


if __name__ == "__main__":
    main()
