"""The plots of a training run's report (its numbers: :mod:`envhub.reports.training`).

Each plotter takes a :class:`~envhub.reports.training.TrainingData` and returns PNG bytes, or None
when it has nothing to show; :data:`PLOTS` lists them in report order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from envhub.reports.plots import SMALL_TEXT, new_figure, new_panels, outcome_mix, png
from envhub.reports.training import TrainingData, stat
from envhub.types import Outcome

#: One colour per outcome, shades of its class's colour: infra outcomes are purple, never left out.
OUTCOME_COLORS = {
    Outcome.SUCCESS: "#2e7d32", Outcome.WRONG_ANSWER: "#c62828", Outcome.FORMAT_ERROR: "#ef9a9a",
    Outcome.BUDGET_EXHAUSTED: "#ef6c00", Outcome.CONTEXT_OVERFLOW: "#ffcc80", Outcome.ENV_ERROR: "#4a148c",
    Outcome.VERIFIER_ERROR: "#8e24aa", Outcome.ENGINE_ERROR: "#ce93d8",
}


def _step_axis(ax) -> None:
    """Whole step numbers on x, plain numbers on y (no offset notation for a flat curve)."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.ticklabel_format(axis="y", useOffset=False)


def merged_series(data: TrainingData, keys: dict[str, str]) -> list[tuple[str, list[int], list[float]]]:
    """The recorded series of ``keys`` (label -> key), identical ones merged into one line whose label
    names them all ("reward mean = strict success"): a line drawn on top of another hides it."""
    merged: list[tuple[str, list[int], list[float]]] = []
    for label, key in keys.items():
        xs, ys = data.series(key)
        if not xs:
            continue
        same = next((i for i, (_, mx, my) in enumerate(merged) if (mx, my) == (xs, ys)), None)
        if same is None:
            merged.append((label, xs, ys))
        else:
            merged[same] = (f"{merged[same][0]} = {label}", xs, ys)
    return merged


def _lines(data: TrainingData, ax, keys: dict[str, str], title: str, ylabel: str = "") -> None:
    """One line per recorded key (label -> key); a panel without any says so instead of staying blank."""
    _step_axis(ax)
    drawn = merged_series(data, keys)
    for label, xs, ys in drawn:
        ax.plot(xs, ys, marker="o" if len(xs) <= 30 else None, markersize=3, label=label)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step", fontsize=SMALL_TEXT)
    if ylabel:
        ax.set_ylabel(ylabel, fontsize=SMALL_TEXT)
    ax.tick_params(labelsize=SMALL_TEXT)
    if drawn:
        ax.legend(fontsize=SMALL_TEXT)
    else:
        ax.text(0.5, 0.5, "not recorded\n(" + ", ".join(keys.values()) + ")", ha="center", va="center",
                fontsize=SMALL_TEXT, transform=ax.transAxes, color="#757575")


def reward_over_steps(data: TrainingData) -> bytes:
    """Train (steps.jsonl) on the left, validation (evals.jsonl) on the right: two panels, never one line."""
    fig, (train, val) = new_panels(1, 2, 9.6, 3.4)
    shown = {"reward mean": "reward_mean", "strict success": "strict_success",
             "success excl. infra": "success_excluding_infra"}
    if any(stat(r, "judge.judged") for r in data.steps):
        shown["judge term (weight x score)"] = "judge.term_mean"
    _lines(data, train, shown, "train episodes (steps.jsonl)")
    train.set_ylim(-0.05, 1.05)
    xs = [float(e.get("step", 0) or 0) for e in data.evals if stat(e, "strict_success") is not None]
    ys = [float(e["strict_success"]) for e in data.evals if stat(e, "strict_success") is not None]
    _step_axis(val)
    shown = [e for e in data.evals if stat(e, "strict_success") is not None]
    bars = [[y - float((e.get("interval") or (y, y))[0]) for e, y in zip(shown, ys, strict=True)],
            [float((e.get("interval") or (y, y))[1]) - y for e, y in zip(shown, ys, strict=True)]]
    val.errorbar(xs, ys, yerr=bars, marker="s", color="#6a1b9a", capsize=3, label="strict success, 95 % interval")
    best = [(x, y) for e, x, y in zip(shown, xs, ys, strict=True) if data.best and e["tag"] == data.best.get("tag")]
    if best:
        val.plot(*best[0], marker="*", markersize=12, color="#f9a825", linestyle="", label="best/")
        val.legend(fontsize=SMALL_TEXT, loc="lower right")
    for e, x, y in zip([e for e in data.evals if stat(e, "strict_success") is not None], xs, ys, strict=True):
        val.annotate(str(e["tag"]), (x, y), fontsize=SMALL_TEXT, xytext=(3, 3), textcoords="offset points")
    val.set_ylim(-0.05, 1.05)
    val.set_title(f"validation: {data.validation_split} split (evals.jsonl)", fontsize=9)
    val.set_xlabel("step", fontsize=SMALL_TEXT)
    val.tick_params(labelsize=SMALL_TEXT)
    if not xs:
        val.text(0.5, 0.5, "no validation evals", ha="center", va="center", transform=val.transAxes)
    return png(fig)


def outcomes_over_steps(data: TrainingData) -> bytes:
    fig, ax = new_figure(9.6, 3.8)
    _step_axis(ax)
    xs = [int(r["step"]) for r in data.steps]
    bottom = [0.0] * len(xs)
    for outcome in Outcome:
        counts = [stat(r, f"outcomes.{outcome.value}") or 0.0 for r in data.steps]
        total = int(sum(counts))
        ax.bar(xs, counts, bottom=bottom, width=0.9 if len(xs) < 200 else 1.0, color=OUTCOME_COLORS[outcome],
               label=f"{outcome.value} ({outcome.outcome_class.value}) {total}")
        bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    ax.set_xlabel("step")
    ax.set_ylabel("episodes")
    ax.set_title("outcome mix per step (every outcome listed; infra in purple)")
    ax.legend(fontsize=SMALL_TEXT, ncols=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return png(fig)


def groups_over_steps(data: TrainingData) -> bytes:
    fig, ax = new_figure(6.4, 3.2)
    _lines(data, ax, {"zero-variance group fraction": "zero_variance_fraction"}, "GRPO groups", "fraction")
    xs = [int(r["step"]) for r in data.steps if stat(r, "kept") is not None and stat(r, "attempted")]
    ys = [float(r["kept"]) / float(r["attempted"]) for r in data.steps
          if stat(r, "kept") is not None and stat(r, "attempted")]
    if xs:
        ax.plot(xs, ys, marker="x" if len(xs) <= 30 else None, markersize=4, linestyle="--", label="kept / attempted")
        ax.legend(fontsize=SMALL_TEXT)
    ax.set_ylim(-0.05, 1.05)
    return png(fig)


def cost_over_steps(data: TrainingData) -> bytes:
    """Tokens per success only where a step had one (the trainer's value for 0 successes is no cost)."""
    fig, (tps, speed) = new_panels(1, 2, 9.6, 3.2)
    xs = [int(r["step"]) for r in data.steps if (stat(r, "outcomes.success") or 0) > 0
          and stat(r, "tokens_per_success") is not None]
    ys = [float(r["tokens_per_success"]) for r in data.steps if (stat(r, "outcomes.success") or 0) > 0
          and stat(r, "tokens_per_success") is not None]
    _step_axis(tps)
    tps.plot(xs, ys, marker="o" if len(xs) <= 30 else None, markersize=3, color="#ef6c00")
    tps.set_title("sampled tokens per success (steps with a success)", fontsize=9)
    tps.set_xlabel("step", fontsize=SMALL_TEXT)
    tps.tick_params(labelsize=SMALL_TEXT)
    if not xs:
        tps.text(0.5, 0.5, "no step had a success", ha="center", va="center", fontsize=SMALL_TEXT,
                 transform=tps.transAxes, color="#757575")
    _lines(data, speed, {"tokens / s (rollout)": "tokens_per_second"}, "sampling speed")
    return png(fig)


HEALTH = {
    "KL to the reference": {"kl": "kl"},
    "clip fraction": {"clip fraction": "clip_fraction"},
    "ratio and IS weights": {"ratio max": "ratio_max", "IS weight mean": "is_weight_mean",
                             "IS weight max": "is_weight_max", "IS capped fraction": "is_capped_fraction",
                             "IS group tilt removed": "is_group_tilt"},
    "entropy": {"entropy": "entropy"},
    "grad norm": {"grad norm": "grad_norm"},
    "trainer-engine logprob gap": {"mean |engine - trainer|": "trainer_engine_gap",
                                   "mismatch |.| mean": "mismatch_abs_mean"},
}


def health_panels(data: TrainingData) -> tuple[dict[str, dict[str, str]], list[str]]:
    """The health panels with something recorded, and the titles of the others."""
    shown = {title: keys for title, keys in HEALTH.items() if merged_series(data, keys)}
    return shown, [title for title in HEALTH if title not in shown]


def health_over_steps(data: TrainingData) -> bytes | None:
    """Only the panels with something recorded (a run without a reference has no KL); the figure's
    title names the rest. None when nothing was recorded at all."""
    shown, missing = health_panels(data)
    if not shown:
        return None
    cols = min(3, len(shown))
    rows = -(-len(shown) // cols)
    fig, axes = new_panels(rows, cols, 3.5 * cols, 2.7 * rows)
    for ax, (title, keys) in zip(axes[:len(shown)], shown.items(), strict=True):
        _lines(data, ax, keys, title)
    for ax in axes[len(shown):]:
        ax.set_visible(False)
    if missing:
        fig.suptitle("not recorded in this run: " + ", ".join(missing), fontsize=SMALL_TEXT, color="#757575")
    return png(fig)


TIME_PARTS = {"rollout": "time.rollout_s", "train": "time.train_s", "weight sync": "time.weight_sync_s"}


def time_over_steps(data: TrainingData) -> bytes:
    """Wall seconds stacked (rollout, train, weight sync); verifier seconds, summed over the step's
    episodes and spent inside the rollout, drawn as a line over them rather than stacked twice."""
    fig, ax = new_figure(9.6, 3.4)
    _step_axis(ax)
    xs = [int(r["step"]) for r in data.steps]
    bottom = [0.0] * len(xs)
    for (name, key), color in zip(TIME_PARTS.items(), ("#1565c0", "#2e7d32", "#ef6c00"), strict=True):
        values = [stat(r, key) or 0.0 for r in data.steps]
        ax.bar(xs, values, bottom=bottom, color=color, width=0.9 if len(xs) < 200 else 1.0,
               label=f"{name} {sum(values):.1f}s")
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    vx, vy = data.series("time.verify_s")
    if vx:
        ax.plot(vx, vy, color="#6a1b9a", marker="o" if len(vx) <= 30 else None, markersize=3,
                label=f"verify (inside rollout, summed over episodes) {sum(vy):.2f}s")
    ax.set_xlabel("step")
    ax.set_ylabel("seconds")
    ax.set_title("time per step")
    ax.legend(fontsize=SMALL_TEXT)
    return png(fig)


def lag_over_steps(data: TrainingData) -> bytes | None:
    xs, ys = data.series("weight_version_lag")
    if not xs:
        return None
    fig, ax = new_figure(6.4, 3.0)
    _step_axis(ax)
    ax.plot(xs, ys, marker="o", markersize=3 if len(xs) <= 60 else 0, drawstyle="steps-mid", color="#00838f")
    ax.set_ylim(-0.5, max([1.0, *ys]) + 0.5)
    ax.set_xlabel("step")
    ax.set_ylabel("weight versions")
    ax.set_title("weight-version lag of the step's samples (max)")
    return png(fig)


#: An async run's four series over steps (:mod:`envhub.trainer.async_metrics`): panel -> label -> key.
ASYNC_PANELS = {
    "buffer: queued groups": {"queue size": "async_queue_groups"},
    "staleness: version lag of the step's samples": {"mean": "async_version_lag_mean",
                                                      "max": "async_version_lag_max"},
    "trainer idle ratio (waiting for samples)": {"trainer idle": "async_trainer_idle_ratio"},
    "rollout idle ratio (waiting for admission or weights)": {"rollout idle": "async_rollout_idle_ratio"},
}


def async_over_steps(data: TrainingData) -> bytes | None:
    """Queue size, mean and max version lag, trainer and rollout idle ratio; None for a sync run."""
    if not data.is_async:
        return None
    from matplotlib.ticker import MaxNLocator

    fig, axes = new_panels(2, 2, 9.6, 5.6)
    for ax, (title, keys) in zip(axes, ASYNC_PANELS.items(), strict=True):
        _lines(data, ax, keys, title)
    for ax in axes[:2]:
        ax.set_ylim(bottom=0)
    axes[0].yaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes[2:]:
        ax.set_ylim(-0.05, 1.05)
    return png(fig)


def staleness_distribution(data: TrainingData) -> bytes | None:
    """The steps' episodes by version lag, each lag from 0 to the largest a bar, trained and not
    stacked, the staleness bound a dashed line; without per-sample versions, the steps' mean lags
    (said in the title). None for a sync run or nothing recorded."""
    source, values = data.staleness()
    if not data.is_async or not values:
        return None
    from matplotlib.ticker import MaxNLocator

    fig, ax = new_figure(6.4, 3.2)
    if source == "samples":
        trained, other = Counter(int(v) for v, t in values if t), Counter(int(v) for v, t in values if not t)
        lags = list(range(min(0, *trained, *other), max([*trained, *other]) + 1))
        ax.bar(lags, [trained[lag] for lag in lags], color="#00838f", label="trained")
        bars = ax.bar(lags, [other[lag] for lag in lags], bottom=[trained[lag] for lag in lags], color="#b0bec5",
                      label="not trained (stale, zero-variance, infra, ...)")
        ax.bar_label(bars, labels=[str(trained[lag] + other[lag]) for lag in lags], fontsize=SMALL_TEXT)
        bound = stat(data.config, "rollout.max_staleness")
        if bound is not None:
            ax.axvline(bound + 0.5, color="#c62828", linestyle="--", label=f"max_staleness {bound:.0f}")
        ax.set_ylim(0, max(trained[lag] + other[lag] for lag in lags) * 1.5)  # room for the legend
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("version lag (trainer version - first-turn version)")
        ax.set_ylabel("samples")
        ax.set_title(f"staleness of the {len(values)} samples the steps took", fontsize=9)
        ax.legend(fontsize=SMALL_TEXT, loc="upper right")
    else:
        means = [v for v, _ in values]
        ax.hist(means, bins=min(20, max(len(set(means)), 5)), color="#00838f")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("mean version lag of a step")
        ax.set_ylabel("steps")
        ax.set_title(f"staleness of {len(values)} steps (steps.jsonl; no per-sample versions on disk)", fontsize=9)
    return png(fig)


def final_eval_outcomes(data: TrainingData) -> bytes | None:
    return outcome_mix(data.final_eval) if data.final_eval is not None and data.final_eval.records else None


#: name -> plotter; the name is the PNG file's suffix and the HTML anchor.
PLOTS: dict[str, Callable[[TrainingData], bytes | None]] = {
    "reward_over_steps": reward_over_steps,
    "outcomes_over_steps": outcomes_over_steps,
    "groups_over_steps": groups_over_steps,
    "cost_over_steps": cost_over_steps,
    "health_over_steps": health_over_steps,
    "time_over_steps": time_over_steps,
    "lag_over_steps": lag_over_steps,
    "async_over_steps": async_over_steps,
    "staleness_distribution": staleness_distribution,
    "final_eval_outcomes": final_eval_outcomes,
}
