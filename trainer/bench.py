"""Benchmark: trajectory building, token in / token out against re-templating every turn.

Both sides build the same multi-turn episodes (each on a different computation task) with SmolLM2's
tokenizer and tool-aware template; the model's turns are pre-tokenized so that only trajectory
building is timed:

* **incremental** (what envhub does): the real :class:`~envhub.trainer.model_policy.ModelAgent`
  renders the prompt once, then per turn appends the sampled ids and the env reply's tokens;
* **re-templating** (the baseline, measured in the same run): per turn, ``apply_chat_template``
  over the whole history, tokenized, as a pipeline that keeps only messages must do.

Throughput is trajectory tokens per second; the figure of merit is the ratio (target >= 10x).
No figure here is ever a test assertion.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from envhub.adapters.chat_format import ChatMLFormat, message_dicts
from envhub.adapters.engine import GenerateResult, SamplingParams
from envhub.types import Message, Observation


class _ReplayEngine:
    """Returns pre-tokenized turns instantly, so the benchmark times trajectory building only."""

    name = "replay"
    max_context = 1 << 20
    weight_version = "bench"

    def __init__(self, turns: list[list[int]]) -> None:
        self.turns = turns
        self.i = 0

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerateResult:
        ids = self.turns[self.i % len(self.turns)]
        self.i += 1
        return GenerateResult(ids, [-0.5] * len(ids), "stop", "bench")

    def close(self) -> None:
        pass


def _first_observations(n: int) -> list[Observation]:
    """The first observations of ``n`` different computation tasks (each episode its own prompt)."""
    from envhub.registry import make

    env = make("envhub/Computation-v0", sandbox="process")
    ids = env.tasks.task_ids("train")
    firsts = [env.reset(task_id=ids[i * 7 % len(ids)]) for i in range(n)]
    env.close()
    return firsts


def _script(turns: int) -> tuple[list[str], list[Message]]:
    """Scripted assistant texts (python tool calls) and the tool replies they get."""
    from envhub.parsing import format_tool_call

    texts, replies = [], []
    for k in range(turns):
        code = "\n".join(f"x{j} = ({k} + {j}) * 12345 // 7\nprint('step', {j}, x{j})" for j in range(4))
        texts.append(format_tool_call("python", {"code": code}))
        out = "\n".join(f"step {j} {(k + j) * 12345 // 7}" for j in range(4))
        replies.append(Message(role="tool", name="python", content=f"exit code 0\nstdout:\n{out}\n"))
    return texts, replies


def _measure(tokenizer: Any, firsts: list[Observation], turns: int, repeats: int) -> dict[str, Any]:
    from envhub.adapters.model_policy import ModelPolicy

    texts, replies = _script(turns)
    sampled = [list(tokenizer.encode(t + ChatMLFormat.end_token, add_special_tokens=False)) for t in texts]
    tools = [t.to_openai() for t in firsts[0].tools]
    engine = _ReplayEngine(sampled)

    def incremental() -> int:
        # A fresh policy per repeat: its encoder cache starts cold, as in a new run.
        policy = ModelPolicy(engine, tokenizer, params=SamplingParams(max_new_tokens=512, temperature=1.0))
        tokens = 0
        for first in firsts:
            engine.i = 0
            agent = policy.start(None, first, seed=0)  # type: ignore[arg-type]
            obs = first
            for k in range(turns):
                agent.act(obs)
                obs = Observation(messages=[replies[k]])
            tokens += agent.length
        return tokens

    def retemplate() -> int:
        tokens = 0
        for first in firsts:
            history = message_dicts(first.messages)
            ids: list[int] = []
            for k in range(turns):
                ids = list(tokenizer.apply_chat_template(history, tools=tools, add_generation_prompt=True,
                                                         tokenize=True, return_dict=False))
                tokenizer.decode(sampled[k])
                ids += sampled[k]
                history += [{"role": "assistant", "content": texts[k]}, *message_dicts([replies[k]])]
            tokens += len(ids)
        return tokens

    # Interleaved repeats, best of each: the machine may be shared, and the minimum is the least
    # disturbed measurement.
    best = {"incremental": math.inf, "retemplate": math.inf}
    counts = {"incremental": 0, "retemplate": 0}
    for _ in range(repeats):
        for name, fn in (("incremental", incremental), ("retemplate", retemplate)):
            t0 = time.perf_counter()
            counts[name] = fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    run = {
        "turns": turns, "tokens_per_episode": counts["incremental"] // len(firsts),
        "incremental_tokens_per_s": counts["incremental"] / best["incremental"],
        "retemplate_tokens_per_s": counts["retemplate"] / best["retemplate"],
        "incremental_s": best["incremental"], "retemplate_s": best["retemplate"],
    }
    run["speedup"] = run["incremental_tokens_per_s"] / run["retemplate_tokens_per_s"]
    return run


def run_bench(out: Callable[[Any], None] = print, *, episodes: int = 20, turns: int | Sequence[int] = (4, 8, 16),
              repeats: int = 5) -> dict[str, Any]:
    """Both builders over ``episodes`` tasks for each episode length in ``turns``; the headline is
    8 turns (or the longest measured), a typical tool-using episode."""
    from transformers import AutoTokenizer

    from envhub.trainer.models import prepare_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(prepare_tokenizer("smollm2-135m")))
    firsts = _first_observations(episodes)
    lengths = [turns] if isinstance(turns, int) else list(turns)
    runs = [_measure(tokenizer, firsts, n, repeats) for n in lengths]
    out(f"trajectory building, {episodes} episodes (a different task each), best of {repeats}:")
    out(f"  {'turns':>5} {'tokens/ep':>9} {'token in/out tok/s':>19} {'re-template tok/s':>18} {'speedup':>8}")
    for r in runs:
        out(f"  {r['turns']:>5} {r['tokens_per_episode']:>9} {r['incremental_tokens_per_s']:>19,.0f} "
            f"{r['retemplate_tokens_per_s']:>18,.0f} {r['speedup']:>7.1f}x")
    head = next((r for r in runs if r["turns"] == 8), runs[-1])
    out(f"  headline ({head['turns']} turns): {head['speedup']:.1f}x (target >= 10x)")
    return {"episodes": episodes, "repeats": repeats, "runs": runs, "headline_turns": head["turns"],
            "speedup": head["speedup"], "incremental_tokens_per_s": head["incremental_tokens_per_s"],
            "retemplate_tokens_per_s": head["retemplate_tokens_per_s"],
            "tokens_per_episode": head["tokens_per_episode"]}


if __name__ == "__main__":
    print(json.dumps(run_bench(), indent=2))
