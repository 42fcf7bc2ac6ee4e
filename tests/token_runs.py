"""Helpers for testing integrations: token-exact runs without a real model, and a local server.

:func:`scripted_token_run` plays real envhub episodes with the real model policy (the SmolLM2
tokenizer and chat template, masks, logprobs) behind a scripted engine, so a run has every kind of
record a trainer meets -- a success after a failed tool call (observation tokens in the middle), a
wrong answer, a truncation and an engine failure (infra) -- in seconds, with no model weights.
:class:`LocalServer` serves an ASGI app on 127.0.0.1 in a thread for tests that need real HTTP.
"""

from __future__ import annotations

import functools
import socket
import threading
import time
from pathlib import Path
from typing import Any

from envhub.errors import EngineError

MODES = ("success_after_retry", "wrong_answer", "never_answers", "engine_error")


@functools.lru_cache(maxsize=1)
def smollm2_tokenizer() -> Any:
    """SmolLM2's tokenizer with envhub's tool-aware template (the tiny test model's tokenizer)."""
    from transformers import AutoTokenizer

    from envhub.adapters.engines.tiny import build_tiny_model

    return AutoTokenizer.from_pretrained(str(build_tiny_model()))


def scripted_token_run(out_dir: str | Path, *, env_id: str = "envhub/Computation-v0", episodes: int = 8,
                       group_size: int = 2, seed: int = 0, tokenizer: Any = None) -> Path:
    """A run in ``out_dir`` whose tasks cycle through :data:`MODES`; returns ``out_dir``.

    Episodes use no tool that needs a sandbox: the failed call is to an unknown tool, and the
    answer goes straight to ``answer``. The env's budget is 2 turns, so a policy that never
    answers ends as ``budget_exhausted``.
    """
    from envhub.adapters.engines import SamplingParams
    from envhub.adapters.engines.scripted import ScriptedEngine
    from envhub.adapters.model_policy import ModelPolicy
    from envhub.registry import make
    from envhub.rollout.runner import plan_episodes, run_rollouts

    tokenizer = tokenizer or smollm2_tokenizer()
    env = make(env_id, split="train")
    try:
        plans = plan_episodes(env_id, env.tasks.task_ids("train"), episodes=episodes, group_size=group_size,
                              seed=seed)
        task_ids = list(dict.fromkeys(p.task_id for p in plans))
        tasks = {tid: env.tasks.get(tid) for tid in task_ids}
        answers = {tid: env.gold_actions(tasks[tid])[-1].text for tid in task_ids}
    finally:
        env.close()
    modes = {tid: MODES[i % len(MODES)] for i, tid in enumerate(task_ids)}
    marker = "<|im_start|>assistant\n"

    def respond(prompt: str) -> str:
        tid = next((t for t in task_ids if tasks[t].prompt in prompt), None)
        if tid is None:
            raise EngineError("scripted engine: the prompt holds no known task")
        turn, mode = prompt.count(marker) - 1, modes[tid]
        if mode == "wrong_answer":
            return '<tool_call>{"name": "answer", "arguments": {"answer": "0"}}</tool_call>'
        if mode == "never_answers":
            return "Let me think about this step by step."
        if turn == 0:
            return 'First a lookup.\n<tool_call>{"name": "lookup", "arguments": {"q": "x"}}</tool_call>'
        if mode == "engine_error":
            raise EngineError("scripted engine: simulated server failure")
        return answers[tid]

    engine = ScriptedEngine(tokenizer, respond, logprob=-0.25)
    policy = ModelPolicy(engine, tokenizer, params=SamplingParams(max_new_tokens=128, temperature=1.0),
                         name="scripted-model", model_id="scripted", tokenizer_id="smollm2-135m")
    run_rollouts(env_id, policy, out_dir=out_dir, episodes=episodes, group_size=group_size, seed=seed,
                 concurrency=2, env_kwargs={"budget": {"max_turns": 2, "max_format_errors": 4}})
    return Path(out_dir)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalServer:
    """``with LocalServer(app) as url:`` -- uvicorn on 127.0.0.1 in a daemon thread."""

    def __init__(self, app: Any, *, port: int | None = None, startup_timeout: float = 30.0) -> None:
        import uvicorn

        self.port = port or free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.startup_timeout = startup_timeout

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + self.startup_timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        return self.url

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


_runs: dict[str, Path] = {}
_runs_lock = threading.Lock()


def shared_token_run(root: str | Path) -> Path:
    """:func:`scripted_token_run` once per process under ``root`` (test modules share it)."""
    key = str(Path(root).resolve())
    with _runs_lock:
        if key not in _runs:
            _runs[key] = scripted_token_run(Path(root) / "scripted-token-run")
        return _runs[key]
