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

from envhub.types import ToolCall, TrajectoryRecord, Turn

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


def _tool_calls(calls: list[ToolCall]) -> str:
    if not calls:
        return ""
    rows = "".join(f"<tr><td><code>{esc(c.name)}</code></td>"
                   f"<td><pre>{esc(c.arguments, MAX_BLOCK)}</pre></td></tr>" for c in calls)
    return f'<table class="calls"><tr><th>tool call</th><th>arguments</th></tr>{rows}</table>'


def _sampled_mark(turn: Turn) -> str:
    """A marker when the policy's exact samples are on record: token count and mean logprob."""
    if not turn.token_ids:
        return ""
    logprobs = turn.logprobs
    mean = f", mean logprob {sum(logprobs) / len(logprobs):.3f}" if logprobs else ""
    weights = f", weights {esc(turn.weight_version)}" if turn.weight_version else ""
    return (f' <span class="sampled" title="the model\'s own sampled tokens">sampled: {len(turn.token_ids)} tokens'
            f"{mean}{weights}; finish {esc(turn.finish_reason or '?')}</span>")


def transcript(rec: TrajectoryRecord, anchor: str, back: str = "examples") -> str:
    """One episode as a ``<section>`` with ``id=anchor``, ending in a link to section ``back``
    (both are the report's own ids, never a record's)."""
    outcome = rec.outcome
    parts = [f'<section class="episode" id="{esc(anchor)}">',
             f"<h3>{esc(rec.task_id)} &middot; {esc(outcome.value)} ({esc(outcome.outcome_class.value)})"
             f" &middot; reward {rec.reward:.3f}</h3>",
             f"<p class=\"meta\">episode <code>{esc(rec.episode_id)}</code>, "
             f"{rec.num_turns} turns, policy {esc(rec.policy)}</p>"]
    if rec.outcome_detail:
        parts.append(f'<div class="detail"><b>outcome detail</b><pre>{esc(rec.outcome_detail, MAX_BLOCK)}'
                     "</pre></div>")
    # The prompt: the messages before the first assistant turn.
    for msg in rec.messages:
        if msg.role == "assistant":
            break
        parts.append(_block(msg.role, msg.content))
    for turn in rec.turns:
        parts.append(f'<div class="turn"><div class="turn-head">turn {turn.index}</div>')
        parts.append(_block("assistant", turn.action_text, _sampled_mark(turn)))
        parts.append(_tool_calls(turn.tool_calls))
        if turn.parse_error:
            parts.append(f'<p class="parse-error">parse error: {esc(turn.parse_error, MAX_BLOCK)}</p>')
        for obs in turn.observation:
            parts.append(_block(obs.role, obs.content, f" &middot; {esc(obs.name)}" if obs.name else ""))
        parts.append("</div>")
    layers = rec.verdict.layers if rec.verdict is not None else []
    if layers:
        rows = "".join(f"<tr><td>{esc(la.layer)}</td><td>{esc(la.name)}</td>"
                       f"<td>{'pass' if la.passed else 'fail'}</td>"
                       f"<td>{la.score:.2f}</td><td>{esc(la.reason, 500)}</td></tr>"
                       for la in layers)
        parts.append('<table class="layers"><tr><th>layer</th><th>check</th><th>result</th><th>score</th>'
                     f"<th>reason</th></tr>{rows}</table>")
    parts.append(f'<p><a href="#{esc(back)}">back to the list</a></p></section>')
    return "\n".join(p for p in parts if p)
