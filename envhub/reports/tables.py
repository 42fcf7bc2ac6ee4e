"""The HTML pieces both kinds of report build their sections from: a :class:`Section`, tables,
images, and the seed's headline rows. Cell values are HTML already: callers escape with
:func:`~envhub.reports.transcript.esc`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from envhub.reports.data import RunData
from envhub.reports.transcript import esc

D = TypeVar("D", bound=RunData)


@dataclass(frozen=True)
class Section(Generic[D]):
    """One section of a report: its anchor, its title, and what renders it from the run and its
    plots (plot name -> ``data:`` URI); ``when``: the runs that have it (default: every run)."""

    id: str
    title: str
    render: Callable[[D, dict[str, str]], str]
    when: Callable[[D], bool] | None = None

    def applies(self, data: D) -> bool:
        return self.when is None or self.when(data)


def num(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "n/a (no success)"
    return f"{value:,.{digits}f}" if isinstance(value, float) and not value.is_integer() else f"{value:,.0f}"


def html_table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    """``rows`` are HTML already (escaped by the caller)."""
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{esc(cls)}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def img(plots: dict[str, str], name: str, alt: str) -> str:
    if name not in plots:
        return ""
    return f'<figure><img id="plot-{esc(name)}" src="{plots[name]}" alt="{esc(alt)}"></figure>'


def seed_rows(h: dict[str, Any], prefix: str = "") -> list[list[str]]:
    """The seed's numbers of a :meth:`RunData.headline` as ``[name, value HTML, what it counts]`` rows;
    the values carry ids ``{prefix}n-attempted``, ``{prefix}strict-success``, ... (unique per page)."""
    def tag(name: str, value: str, el: str = "span") -> str:
        return f'<{el} id="{esc(prefix)}{name}">{value}</{el}>'

    return [
        ["attempted", tag("n-attempted", str(h["attempted"])), "episodes with a record (infra included)"],
        ["successes", tag("n-successes", str(h["successes"])), ""],
        ["failed by policy", tag("n-policy-failures", str(h["policy_failures"])),
         "wrong_answer, format_error: the model's fault, signal for training"],
        ["truncated", str(h["truncations"]), "budget_exhausted, context_overflow (the model's, cut)"],
        ["failed by environment", tag("n-infra-failures", str(h["infra_failures"])),
         "env_error, verifier_error, engine_error: ours, never scored as the model's"],
        ["strict success rate", tag("strict-success", f'{h["strict_success_rate"]:.3f}', "b"), "success / attempted"],
        ["success excluding infra", f'{h["success_rate_excluding_infra"]:.3f}',
         "success / (attempted - infra); shown beside the strict rate, never instead"],
        ["mean reward", f'{h["mean_reward"]:.3f}', ""],
        ["tokens per success", tag("tokens-per-success", num(h["tokens_per_success"], 1)),
         "prompt + response tokens of all episodes / successes"],
        ["sampled tokens per success", num(h["sampled_tokens_per_success"], 1), "tokens the model sampled"],
        ["tool calls per success", tag("tool-calls-per-success", num(h["tool_calls_per_success"], 2)),
         "all tool calls / successes"],
        ["seconds per success", tag("seconds-per-success", num(h["seconds_per_success"], 3)),
         "episode wall seconds summed / successes"],
    ]


def seed_table(rows: list[list[str]]) -> str:
    """:func:`seed_rows` (and any rows added to them) as the headline table."""
    return html_table(["number", "value", "what it counts"], [[esc(a), b, esc(c)] for a, b, c in rows], "headline")
