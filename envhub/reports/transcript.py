"""Episodes rendered as readable HTML transcripts: prompt, each turn's text and tool calls, the
env's observations, the verdict.

Everything in a record may be model-written (action text, tool arguments, observations that echo
them, even a verifier's detail quoting an answer), so every string goes through :func:`esc`; no
record value is ever placed in a tag, an attribute name, a URL or a script. Anchors are numbered by
the report, never taken from the record.
"""

from __future__ import annotations

import html
import json
from typing import Any

from envhub.types import Outcome

#: Characters of one text block shown before it is cut (the record on disk keeps it all).
MAX_BLOCK = 4000


def esc(value: Any, limit: int | None = None) -> str:
    """``value`` as text safe inside HTML element content and quoted attribute values."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if limit is not None and len(text) > limit:
        text = f"{text[:limit]}\n... [{len(text) - limit} more characters in the record]"
    return html.escape(text, quote=True)


def _block(role: str, body: str, extra: str = "") -> str:
    return (f'<div class="msg {esc(role)}"><div class="role">{esc(role)}{extra}</div>'
            f"<pre>{esc(body, MAX_BLOCK)}</pre></div>")


def _tool_calls(calls: list[dict[str, Any]]) -> str:
    if not calls:
        return ""
    rows = "".join(f"<tr><td><code>{esc(c.get('name', '?'))}</code></td>"
                   f"<td><pre>{esc(c.get('arguments', {}), MAX_BLOCK)}</pre></td></tr>" for c in calls)
    return f'<table class="calls"><tr><th>tool call</th><th>arguments</th></tr>{rows}</table>'


def _sampled_mark(turn: dict[str, Any]) -> str:
    """A marker when the policy's exact samples are on record: token count and mean logprob."""
    ids = turn.get("token_ids") or []
    if not ids:
        return ""
    logprobs = turn.get("logprobs") or []
    mean = f", mean logprob {sum(logprobs) / len(logprobs):.3f}" if logprobs else ""
    version = turn.get("weight_version")
    weights = f", weights {esc(version)}" if version else ""
    return (f' <span class="sampled" title="the model\'s own sampled tokens">sampled: {len(ids)} tokens'
            f"{mean}{weights}; finish {esc(turn.get('finish_reason') or '?')}</span>")


def transcript(rec: dict[str, Any], anchor: str, back: str = "examples") -> str:
    """One episode as a ``<section>`` with ``id=anchor``, ending in a link to section ``back``
    (both are the report's own ids, never a record's)."""
    outcome = Outcome(rec["outcome"])
    parts = [f'<section class="episode" id="{esc(anchor)}">',
             f"<h3>{esc(rec['task_id'])} &middot; {esc(outcome.value)} ({esc(outcome.outcome_class.value)})"
             f" &middot; reward {float(rec.get('reward', 0.0) or 0.0):.3f}</h3>",
             f"<p class=\"meta\">episode <code>{esc(rec.get('episode_id', ''))}</code>, "
             f"{int(rec.get('num_turns', 0) or 0)} turns, policy {esc(rec.get('policy', ''))}</p>"]
    if rec.get("outcome_detail"):
        parts.append(f'<div class="detail"><b>outcome detail</b><pre>{esc(rec["outcome_detail"], MAX_BLOCK)}'
                     "</pre></div>")
    turns = rec.get("turns") or []
    # The prompt: the messages before the first assistant turn.
    for msg in rec.get("messages") or []:
        if msg.get("role") == "assistant":
            break
        parts.append(_block(msg.get("role", "?"), msg.get("content", "")))
    for turn in turns:
        parts.append(f'<div class="turn"><div class="turn-head">turn {int(turn.get("index", 0) or 0)}</div>')
        parts.append(_block("assistant", turn.get("action_text", ""), _sampled_mark(turn)))
        parts.append(_tool_calls(turn.get("tool_calls") or []))
        if turn.get("parse_error"):
            parts.append(f'<p class="parse-error">parse error: {esc(turn["parse_error"], MAX_BLOCK)}</p>')
        for obs in turn.get("observation") or []:
            name = obs.get("name")
            parts.append(_block(obs.get("role", "tool"), obs.get("content", ""),
                                f" &middot; {esc(name)}" if name else ""))
        parts.append("</div>")
    verdict = rec.get("verdict") or {}
    layers = verdict.get("layers") or []
    if layers:
        rows = "".join(f"<tr><td>{esc(la.get('layer', ''))}</td><td>{esc(la.get('name', ''))}</td>"
                       f"<td>{'pass' if la.get('passed') else 'fail'}</td>"
                       f"<td>{float(la.get('score', 0.0) or 0.0):.2f}</td><td>{esc(la.get('reason', ''), 500)}</td></tr>"
                       for la in layers)
        parts.append('<table class="layers"><tr><th>layer</th><th>check</th><th>result</th><th>score</th>'
                     f"<th>reason</th></tr>{rows}</table>")
    parts.append(f'<p><a href="#{esc(back)}">back to the list</a></p></section>')
    return "\n".join(p for p in parts if p)
