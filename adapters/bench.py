"""Benchmark: trajectory building, token in / token out against re-templating every turn.

Both sides build the same multi-turn episodes (each on a different computation task) with SmolLM2's
tokenizer and tool-aware template; the model's turns are pre-tokenized so that only trajectory
building is timed:

* **incremental** (what envhub does): the real :class:`~envhub.adapters.model_policy.ModelAgent`
  renders the prompt once, then per turn appends the sampled ids and the env reply's tokens;
* **re-templating** (the baseline, measured in the same run): per turn, ``apply_chat_template``
  over the whole history, tokenized, as a pipeline that keeps only messages must do.

Every episode gets its own tool calls and tool replies (salted with the episode index and task
id), so the incremental side cannot replay one episode's replies from the
:class:`~envhub.adapters.chat_format.SegmentEncoder` cache in the next. It is measured twice:
**warm** (one policy for the whole run, its encoder cache shared by the episodes, as in a real
rollout: the system turn with the tool list repeats) and **cold** (the cache cleared before every
episode, so every piece of text is encoded from scratch).

Throughput is trajectory tokens per second; the figure of merit is the ratio (target >= 10x).
No figure here is ever a test assertion.
"""

from __future__ import annotations

import json
import math
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from envhub.adapters.chat_format import ChatMLFormat, message_dicts
from envhub.adapters.engines import GenerateResult, SamplingParams
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


def _script(turns: int, salt: str) -> tuple[list[str], list[Message]]:
    """Scripted assistant texts (python tool calls) and the tool replies they get; ``salt`` (the
    episode index and task id) makes every episode's calls and replies its own."""
    from envhub.parsing import format_tool_call

    seed = zlib.crc32(salt.encode()) % 100_003
    texts, replies = [], []
    for k in range(turns):
        code = f"# {salt}\n" + "\n".join(f"x{j} = ({k} + {j} + {seed}) * 12345 // 7\nprint('step', {j}, x{j})"
                                         for j in range(4))
        texts.append(format_tool_call("python", {"code": code}))
        out = "\n".join(f"step {j} {(k + j + seed) * 12345 // 7}" for j in range(4))
        replies.append(Message(role="tool", name="python", content=f"exit code 0\nstdout:\n{out}\n"))
    return texts, replies


def _measure(tokenizer: Any, firsts: list[Observation], turns: int, repeats: int) -> dict[str, Any]:
    from envhub.adapters.model_policy import ModelPolicy

    # one script per episode: different tool calls and replies, so no episode hits another's cache
    scripts = [_script(turns, salt=f"episode {e} task {first.info.get('task_id', e)}")
               for e, first in enumerate(firsts)]
    sampled = [[list(tokenizer.encode(t + ChatMLFormat.end_token, add_special_tokens=False)) for t in texts]
               for texts, _ in scripts]
    tools = [t.to_openai() for t in firsts[0].tools]
    engine = _ReplayEngine([])  # each episode's turns are loaded before it runs

    def incremental(cold: bool) -> int:
        # A fresh policy per repeat: its encoder cache starts empty, as in a new run; ``cold``
        # also empties it before every episode.
        policy = ModelPolicy(engine, tokenizer, params=SamplingParams(max_new_tokens=512, temperature=1.0))
        tokens = 0
        for e, first in enumerate(firsts):
            if cold:
                policy._encoder.clear_cache()
            engine.turns, engine.i = sampled[e], 0
            replies = scripts[e][1]
            agent = policy.start(None, first, seed=0)  # type: ignore[arg-type]
            obs = first
            for k in range(turns):
                agent.act(obs)
                obs = Observation(messages=[replies[k]])
            tokens += agent.length
        return tokens

    def retemplate() -> int:
        tokens = 0
        for e, first in enumerate(firsts):
            texts, replies = scripts[e]
            history = message_dicts(first.messages)
            ids: list[int] = []
            for k in range(turns):
                ids = list(tokenizer.apply_chat_template(history, tools=tools, add_generation_prompt=True,
                                                         tokenize=True, return_dict=False))
                tokenizer.decode(sampled[e][k])
                ids += sampled[e][k]
                history += [{"role": "assistant", "content": texts[k]}, *message_dicts([replies[k]])]
            tokens += len(ids)
        return tokens

    # Interleaved repeats, best of each: the machine may be shared, and the minimum is the least
    # disturbed measurement.
    builders: dict[str, Callable[[], int]] = {
        "warm": lambda: incremental(cold=False), "cold": lambda: incremental(cold=True), "retemplate": retemplate}
    best = dict.fromkeys(builders, math.inf)
    counts = dict.fromkeys(builders, 0)
    for _ in range(repeats):
        for name, fn in builders.items():
            t0 = time.perf_counter()
            counts[name] = fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    run: dict[str, Any] = {"turns": turns, "tokens_per_episode": counts["warm"] // len(firsts)}
    for name in builders:
        run[f"{name}_tokens_per_s"] = counts[name] / best[name]
        run[f"{name}_s"] = best[name]
    run["speedup_warm"] = run["warm_tokens_per_s"] / run["retemplate_tokens_per_s"]
    run["speedup_cold"] = run["cold_tokens_per_s"] / run["retemplate_tokens_per_s"]
    return run


def run_bench(out: Callable[[Any], None] = print, *, episodes: int = 20, turns: int | Sequence[int] = (4, 8, 16),
              repeats: int = 5) -> dict[str, Any]:
    """Both builders over ``episodes`` tasks for each episode length in ``turns``; the headline is
    8 turns (or the longest measured), a typical tool-using episode."""
    from transformers import AutoTokenizer

    from envhub.adapters.engines.models import prepare_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(prepare_tokenizer("smollm2-135m")))
    firsts = _first_observations(episodes)
    lengths = [turns] if isinstance(turns, int) else list(turns)
    runs = [_measure(tokenizer, firsts, n, repeats) for n in lengths]
    out(f"trajectory building, {episodes} episodes (own task and tool replies each), best of {repeats}; "
        "warm: encoder cache kept across episodes, cold: cleared per episode:")
    out(f"  {'turns':>5} {'tokens/ep':>9} {'tok-in/out warm':>16} {'tok-in/out cold':>16} "
        f"{'re-template tok/s':>18} {'warm':>7} {'cold':>7}")
    for r in runs:
        out(f"  {r['turns']:>5} {r['tokens_per_episode']:>9} {r['warm_tokens_per_s']:>16,.0f} "
            f"{r['cold_tokens_per_s']:>16,.0f} {r['retemplate_tokens_per_s']:>18,.0f} "
            f"{r['speedup_warm']:>6.1f}x {r['speedup_cold']:>6.1f}x")
    head = next((r for r in runs if r["turns"] == 8), runs[-1])
    out(f"  headline ({head['turns']} turns): {head['speedup_warm']:.1f}x warm-cache, "
        f"{head['speedup_cold']:.1f}x cold-cache (target >= 10x)")
    # the headline run's figures at the top level; "speedup" is the warm-cache one
    return {"episodes": episodes, "repeats": repeats, "runs": runs, "headline_turns": head["turns"],
            "speedup": head["speedup_warm"],
            **{k: head[k] for k in ("speedup_warm", "speedup_cold", "warm_tokens_per_s", "cold_tokens_per_s",
                                    "retemplate_tokens_per_s", "tokens_per_episode")}}


if __name__ == "__main__":
    print(json.dumps(run_bench(), indent=2))
