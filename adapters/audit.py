"""The token-fidelity audit of a run's trajectories (`envhub audit DIR`, in `envhub/cli/audit.py`).

A trainer learns only from what the model sampled, so every trajectory with tokens is checked:

* ``lengths``: response ids, mask and logprobs have equal lengths (and each turn's ids and logprobs);
* ``mask``: the mask holds only 0 and 1;
* ``logprobs``: finite and <= 0 where the mask is 1, exactly 0.0 where it is 0;
* ``turns``: the turns' sampled tokens (mask 1, their logprobs) and observation tokens (mask 0),
  in order, are exactly the response: observation tokens are masked, sampled ones are not;
* ``action_text``: decoding a turn's sampled tokens gives back its recorded action text;
* ``observation``: every turn but the last has observation tokens, and they contain the env's reply;
* ``prompt``: the prompt is there and contains the task.

Information, not errors:

* ``drift``: the messages re-rendered with the chat template, compared with the recorded tokens.
  Re-templating differs from what was sampled whenever the tokenizer would split the text
  differently, a turn ended without the end token, or the template rewrites history (Qwen3 drops
  earlier reasoning, Mistral moves its tool list; a template that refuses the conversation is
  reported with ``template_error``); the rate shows how much a re-templating pipeline would have
  corrupted.
* ``mismatch`` (with ``--model``): logprobs recomputed by one forward pass per trajectory against
  the recorded ones (mean and max |delta logprob| over sampled tokens): the train/inference mismatch.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from envhub.adapters.chat_format import ChatFormat, chat_format_for, message_dicts
from envhub.adapters.token_record import TokenRecord, is_sampled_logprob
from envhub.run_dir import Run
from envhub.types import TrajectoryRecord

MAX_ISSUES = 50


@dataclass
class Issue:
    episode_id: str
    check: str
    detail: str


@functools.lru_cache(maxsize=8)
def _load_tokenizer(path: str) -> Any | None:
    """A tokenizer by path or model name (None when it cannot be loaded); the audit only reads it."""
    from transformers import AutoTokenizer

    from envhub.adapters.engines.models import resolve_model

    try:
        return AutoTokenizer.from_pretrained(str(resolve_model(path, prepare=False)))
    except Exception:
        return None


class _Tokenizers:
    def __init__(self, override: str | None = None) -> None:
        self.override = override

    def get(self, record: TrajectoryRecord) -> Any | None:
        path = self.override or record.versions.tokenizer
        return _load_tokenizer(path) if path else None


def has_tokens(record: TrajectoryRecord) -> bool:
    return bool(record.prompt_ids or record.response_ids or any(t.token_ids for t in record.turns))


def check_record(record: TrajectoryRecord, tokenizer: Any | None) -> list[Issue]:
    """Every error of one trajectory (empty when it is faithful)."""
    issues: list[Issue] = []

    def fail(check: str, detail: str) -> None:
        issues.append(Issue(record.episode_id, check, detail))

    ids, mask, lps = record.response_ids, record.response_mask, record.response_logprobs
    if not len(ids) == len(mask) == len(lps):
        fail("lengths", f"response ids/mask/logprobs lengths {len(ids)}/{len(mask)}/{len(lps)}")
        return issues
    if set(mask) - {0, 1}:
        fail("mask", f"mask values {sorted(set(mask) - {0, 1})} besides 0 and 1")
    for i, (m, lp) in enumerate(zip(mask, lps, strict=True)):
        if m == 1 and not is_sampled_logprob(lp):
            fail("logprobs", f"position {i}: sampled token with logprob {lp}")
            break
        if m == 0 and lp != 0.0:
            fail("logprobs", f"position {i}: masked token with logprob {lp} (must be 0.0)")
            break
    if record.num_turns != len(record.turns):
        fail("turns", f"num_turns {record.num_turns} but {len(record.turns)} turns recorded")
    # The response the turns add up to, built as the model policy builds it (lengths aside: a turn
    # whose tokens and logprobs differ in number is a "lengths" error and adds its tokens with
    # logprobs that cannot match).
    rebuilt = TokenRecord(list(record.prompt_ids))
    last = len(record.turns) - 1
    for i, turn in enumerate(record.turns):
        if len(turn.token_ids) == len(turn.logprobs):
            rebuilt.append_sampled(turn.token_ids, turn.logprobs)
        else:
            fail("lengths", f"turn {i}: {len(turn.token_ids)} tokens but {len(turn.logprobs)} logprobs")
            rebuilt.append_sampled(turn.token_ids, [math.nan] * len(turn.token_ids))
        rebuilt.append_observation(turn.observation_ids)
        if i < last and not turn.observation_ids:
            fail("observation", f"turn {i}: the env's reply has no tokens, yet the episode went on")
        if i == last and turn.observation_ids:
            fail("observation", f"turn {i}: the last turn has observation tokens that no turn followed")
        if tokenizer is not None:
            text = tokenizer.decode(turn.token_ids)
            if text != turn.action_text:
                fail("action_text",
                     f"turn {i}: decoded tokens {text[:80]!r} != action text {turn.action_text[:80]!r}")
            if turn.observation_ids:
                reply = tokenizer.decode(turn.observation_ids)
                missing = [m.content[:60] for m in turn.observation if m.content not in reply]
                if missing:
                    fail("observation", f"turn {i}: observation tokens lack the reply {missing[0]!r}")
    seq, seq_mask, seq_lps = rebuilt.response_ids, rebuilt.response_mask, rebuilt.response_logprobs
    if (seq, seq_mask) != (list(ids), list(mask)):
        at = next((k for k, (a, b) in enumerate(zip(seq, ids, strict=False)) if a != b), min(len(seq), len(ids)))
        fail("turns", f"turns' sampled + observation tokens differ from the response at position {at} "
                      f"({len(seq)} vs {len(ids)} tokens)")
    elif seq_lps != list(lps):
        fail("turns", "turns' logprobs differ from the response logprobs")
    if not record.prompt_ids:
        fail("prompt", "no prompt tokens")
    elif tokenizer is not None:
        user = next((m.content for m in record.messages if m.role == "user"), None)
        if user and user not in tokenizer.decode(record.prompt_ids):
            fail("prompt", "the prompt tokens do not contain the task's user message")
    if tokenizer is None:
        fail("tokenizer", f"cannot load the tokenizer {record.versions.tokenizer!r} to decode the tokens")
    return issues


def _format_of(tokenizer: Any) -> ChatFormat | None:
    """The tokenizer's chat format; None for a template envhub does not render (no drift to measure)."""
    try:
        return chat_format_for(tokenizer)
    except ValueError:
        return None


def drift(record: TrajectoryRecord, tokenizer: Any, fmt: ChatFormat) -> dict[str, Any] | None:
    """Re-render the messages up to the last assistant turn; None when identical to the record."""
    msgs = list(record.messages)
    last_assistant = max((i for i, m in enumerate(msgs) if m.role == "assistant"), default=-1)
    msgs = msgs[: last_assistant + 1] if last_assistant >= 0 else msgs  # no turn: the prompt alone
    msgs = [m.model_copy(update={"content": fmt.strip_end(m.content)}) if m.role == "assistant" else m for m in msgs]
    try:
        text = tokenizer.apply_chat_template(message_dicts(msgs), tools=[t.to_openai() for t in record.tools] or None,
                                             add_generation_prompt=last_assistant < 0, tokenize=False)
    except Exception as exc:  # e.g. Mistral's template refuses two assistant turns in a row without tool_calls
        return {"episode_id": record.episode_id, "position": 0, "recorded_tokens": len(record.prompt_ids)
                + len(record.response_ids), "template_error": f"{type(exc).__name__}: {exc}"}
    rendered = list(tokenizer.encode(str(text), add_special_tokens=False))
    recorded = list(record.prompt_ids) + list(record.response_ids)
    if rendered[: len(recorded)] == recorded and not tokenizer.decode(rendered[len(recorded):]).strip():
        return None
    at = next((k for k, (a, b) in enumerate(zip(rendered, recorded, strict=False)) if a != b),
              min(len(rendered), len(recorded)))
    return {"episode_id": record.episode_id, "position": at, "rendered_tokens": len(rendered),
            "recorded_tokens": len(recorded), "recorded": tokenizer.decode(recorded[max(0, at - 5): at + 5]),
            "rendered": tokenizer.decode(rendered[max(0, at - 5): at + 5])}


def mismatch(records: Iterable[TrajectoryRecord], model: Any) -> dict[str, Any]:
    """Recomputed against recorded logprobs of sampled tokens (the train/inference mismatch)."""
    from envhub.adapters.engines import SamplingParams
    from envhub.adapters.engines.transformers_engine import score_tokens

    deltas: list[float] = []
    for rec in records:
        if not rec.response_ids or not rec.prompt_ids:
            continue
        p = SamplingParams.from_dict(rec.sampling_params) if rec.sampling_params else SamplingParams()
        ids = list(rec.prompt_ids) + list(rec.response_ids)
        fresh = score_tokens(model, ids, len(rec.prompt_ids), temperature=p.temperature, top_k=p.top_k, top_p=p.top_p)
        deltas += [abs(a - b) for a, b, m in zip(fresh, rec.response_logprobs, rec.response_mask, strict=True) if m]
    if not deltas:
        return {"tokens": 0, "mean_abs_delta": None, "max_abs_delta": None}
    return {"tokens": len(deltas), "mean_abs_delta": sum(deltas) / len(deltas), "max_abs_delta": max(deltas)}


def audit_run(run: str | Path, model: str | None = None) -> dict[str, Any]:
    """Audit ``run`` (a rollout dir or its ``trajectories.jsonl``); ``model`` (a dir or a known
    name) also supplies the tokenizer and turns on the logprob recomputation."""
    records = list(Run.at(run).require().records())
    model_dir: str | None = None
    if model is not None:
        from envhub.adapters.engines.models import resolve_model

        model_dir = str(resolve_model(model))
    tokenizers = _Tokenizers(model_dir)
    issues: list[Issue] = []
    drifts: list[dict[str, Any]] = []
    token_records = [r for r in records if has_tokens(r)]
    drift_checked = 0
    for rec in token_records:
        tokenizer = tokenizers.get(rec)
        issues += check_record(rec, tokenizer)
        fmt = _format_of(tokenizer) if tokenizer is not None and getattr(tokenizer, "chat_template", None) else None
        if fmt is not None:
            drift_checked += 1
            found = drift(rec, tokenizer, fmt)
            if found is not None:
                drifts.append(found)
    report: dict[str, Any] = {
        "trajectories": len(records), "with_tokens": len(token_records), "errors": len(issues),
        "by_check": dict(Counter(i.check for i in issues)),
        "issues": [asdict(i) for i in issues[:MAX_ISSUES]],
        "drift": {"checked": drift_checked, "drifted": len(drifts),
                  "rate": len(drifts) / drift_checked if drift_checked else 0.0, "examples": drifts[:5]},
        "sampled_tokens": sum(sum(r.response_mask) for r in token_records),
        "observation_tokens": sum(len(r.response_mask) - sum(r.response_mask) for r in token_records),
        "mismatch": None,
    }
    if model_dir is not None:
        import torch
        from transformers import AutoModelForCausalLM

        net = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        report["mismatch"] = mismatch(token_records, net)
    return report
