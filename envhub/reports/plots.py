"""A rollout report's plots, and the figure helpers of every kind's, drawn with matplotlib's Agg
canvas (no display, no pyplot global state).

Each plotter takes a :class:`~envhub.reports.data.RunData` and returns PNG bytes, or None when it
has nothing to show (no profile.json: no difficulty histogram). :data:`PLOTS` lists them in report
order (a training run's: :mod:`envhub.reports.training_plots`); the HTML report inlines the same
bytes that are written beside it as PNG files.
"""

from __future__ import annotations

import io
from collections.abc import Callable

from envhub.reports.data import Group, RunData
from envhub.types import Outcome, OutcomeClass

CLASS_COLORS = {
    OutcomeClass.SUCCESS: "#2e7d32",
    OutcomeClass.POLICY_FAILURE: "#c62828",
    OutcomeClass.TRUNCATION: "#ef6c00",
    OutcomeClass.INFRA_FAILURE: "#6a1b9a",
}


#: the smallest text in a plot: legends, tick labels and annotations stay readable at the report's width
SMALL_TEXT = 8


def new_panels(rows: int, cols: int, width: float, height: float):  # -> (Figure, list[Axes])
    """A figure of ``rows`` x ``cols`` axes, on no display and outside pyplot's global state."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, [fig.add_subplot(rows, cols, i + 1) for i in range(rows * cols)]


def new_figure(width: float = 6.4, height: float = 3.4):  # -> (Figure, Axes)
    fig, (ax,) = new_panels(1, 1, width, height)
    return fig, ax


def png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def outcome_mix(data: RunData) -> bytes:
    """Every outcome, zero counts included, coloured by class: an infra failure is never hidden."""
    fig, ax = new_figure(7.2, 3.6)
    counts = data.summary["by_outcome"]
    names = [o.value for o in Outcome]
    bars = ax.bar(names, [counts[n] for n in names], color=[CLASS_COLORS[o.outcome_class] for o in Outcome])
    ax.bar_label(bars, fmt="%d", fontsize=SMALL_TEXT)
    ax.set_ylabel("episodes")
    ax.set_title(f"outcomes of {data.summary['attempted']} episodes (colour: class)")
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=c, label=k.value) for k, c in CLASS_COLORS.items()], fontsize=SMALL_TEXT)
    return png(fig)


def reward_distribution(data: RunData) -> bytes:
    fig, ax = new_figure()
    rewards = [r.reward for r in data.records]
    ax.hist(rewards or [0.0], bins=20, range=(min([0.0, *rewards]), max([1.0, *rewards])), color="#1565c0")
    ax.set_xlabel("reward")
    ax.set_ylabel("episodes")
    ax.set_title(f"reward distribution (mean {data.summary['mean_reward']:.3f})")
    return png(fig)


def _rate_bars(groups: dict, title: str, xlabel: str) -> bytes:
    fig, ax = new_figure()
    labels = [str(k) for k in groups]
    values: list[Group] = list(groups.values())
    bars = ax.bar(labels, [g.strict_rate for g in values], color="#2e7d32")
    ax.bar_label(bars, labels=[f"{g.successes}/{g.attempted}" for g in values], fontsize=SMALL_TEXT)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("strict success rate")
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=30 if len(labels) > 4 else 0, labelsize=8)
    return png(fig)


def success_by_difficulty(data: RunData) -> bytes:
    return _rate_bars(data.by_difficulty(), "success by difficulty", "difficulty")


def success_by_family(data: RunData) -> bytes:
    return _rate_bars(data.by_family(), "success by task family", "family")


def time_split(data: RunData) -> bytes:
    fig, ax = new_figure(6.4, 2.4)
    split = data.time_split()
    left = 0.0
    colors = {"agent": "#1565c0", "sandbox": "#00838f", "verifier": "#6a1b9a", "other": "#9e9e9e"}
    for name, seconds in split.items():
        ax.barh(["time"], [seconds], left=left, color=colors[name], label=f"{name} {seconds:.2f}s")
        left += seconds
    ax.set_xlabel("seconds, summed over episodes")
    ax.set_title("time split")
    ax.legend(fontsize=SMALL_TEXT, ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.35))
    return png(fig)


def difficulty_histogram(data: RunData) -> bytes | None:
    """Tasks by their per-sample success rate (from profile.json): the 0 and 1 bars teach GRPO nothing."""
    if not data.profile or not data.profile.get("tasks"):
        return None
    fig, ax = new_figure()
    k = int(data.profile.get("k", 1) or 1)
    rates = [t["pass@1"] for t in data.profile["tasks"] if t.get("pass@1") is not None]
    ax.hist(rates, bins=[(i - 0.5) / k for i in range(k + 2)], color="#ef6c00", edgecolor="white")
    ax.set_xlabel(f"per-task success rate over {k} samples")
    ax.set_ylabel("tasks")
    ax.set_title(f"difficulty histogram ({len(rates)} tasks)")
    return png(fig)


#: name -> plotter; the name is the PNG file's suffix and the HTML anchor.
PLOTS: dict[str, Callable[[RunData], bytes | None]] = {
    "outcome_mix": outcome_mix,
    "reward_distribution": reward_distribution,
    "success_by_difficulty": success_by_difficulty,
    "success_by_family": success_by_family,
    "time_split": time_split,
    "difficulty_histogram": difficulty_histogram,
}
