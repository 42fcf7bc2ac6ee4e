"""The sections of a training run's HTML report (the data and plots: :mod:`envhub.reports.training`).

Every section is a plot and a plain HTML table of the numbers behind it, readable without
JavaScript. Per-step tables show every step up to :data:`MAX_STEP_ROWS` and an even sample of a
longer run (first and last always in); ``steps.jsonl`` has them all. A statistic a step did not
record shows as a dash, never as 0. :data:`SECTIONS` lists them in report order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from envhub.reports.tables import Section, html_table, img, seed_rows, seed_table
from envhub.reports.training import TrainingData, stat
from envhub.reports.training_plots import ASYNC_PANELS, HEALTH, TIME_PARTS
from envhub.reports.transcript import esc, transcript
from envhub.run_dir import TrainingRun
from envhub.trainer.async_metrics import ASYNC_METRICS
from envhub.types import Outcome, OutcomeClass

MAX_STEP_ROWS = 60
#: Final-eval failures rendered as transcripts, per outcome; the failure table lists up to FAILURE_ROWS.
FAILURES_PER_OUTCOME = 5
FAILURE_ROWS = 100
DASH = "&ndash;"


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return DASH
    if value.is_integer() and abs(value) < 1e15:
        return f"{value:.0f}"
    return f"{value:.{digits}g}" if abs(value) < 1e-3 else f"{value:.{digits}f}"


def _rate(value: float | None) -> str:
    return DASH if value is None else f"{value:.3f}"


def _shown_steps(data: TrainingData) -> list[dict[str, Any]]:
    steps = data.steps
    if len(steps) <= MAX_STEP_ROWS:
        return steps
    picks = {round(i * (len(steps) - 1) / (MAX_STEP_ROWS - 1)) for i in range(MAX_STEP_ROWS)}
    return [steps[i] for i in sorted(picks)]


Column = tuple[str, Callable[[dict[str, Any]], str]]


def _col(head: str, key: str, digits: int = 3, *, rate: bool = False) -> Column:
    if rate:
        return head, lambda row: _rate(stat(row, key))
    return head, lambda row: _fmt(stat(row, key), digits)


def _step_table(data: TrainingData, columns: list[Column], cls: str, totals: list[str] | None = None) -> str:
    shown = _shown_steps(data)
    rows = [[str(int(r["step"])), *(fn(r) for _, fn in columns)] for r in shown]
    if totals is not None:
        rows.append(["<b>all steps</b>", *totals])
    more = (f"<p>{len(shown)} of {len(data.steps)} steps shown, evenly spaced; steps.jsonl has every step.</p>"
            if len(shown) < len(data.steps) else "")
    if not data.steps:
        return '<p class="none">no step logged yet</p>'
    return html_table(["step", *(h for h, _ in columns)], rows, cls) + more


def _raw(head: str, key: str) -> Column:
    """A column of a value shown as recorded (a weight version is a string)."""
    return head, lambda row: esc(row[key]) if row.get(key) is not None else DASH


def _total(data: TrainingData, key: str) -> float:
    return sum(stat(r, key) or 0.0 for r in data.steps)


def _headline(data: TrainingData, plots: dict[str, str]) -> str:
    cfg, rollout = data.config, data.config.get("rollout") or {}
    algorithm = data.config.get("algorithm") or {}
    done, planned = len(data.steps), cfg.get("steps")
    finished = TrainingRun(data.run_dir).summary_path.is_file()
    facts = [
        ["model", esc(cfg.get("model", "?"))],
        ["env", f"{esc(data.summary['env_id'])} (train split {esc(data.run.get('split'))}, "
                f"validation split {esc(data.validation_split)})"],
        ["steps", f'<span id="n-steps">{done}</span> of {esc(planned)} '
                  + ("(finished: summary.json)" if finished else '<span class="warn">(not finished)</span>')],
        ["step shape", f"{esc(rollout.get('groups_per_step', '?'))} groups x {esc(rollout.get('group_size', '?'))}"
                       " episodes"],
        ["trained", _trained(data)],
        ["loss", esc(algorithm.get("loss", "?"))],
        ["step seconds", f"{data.summary['wall_seconds']:.1f} (rollout + train + weight sync, all steps)"],
    ]
    train = seed_rows(data.headline(), "train-")
    parts = [html_table(["run", ""], facts, "facts"),
             f"<h3>Training episodes: every episode of the {done} steps (rollouts/)</h3>", seed_table(train)]
    final = data.final_eval
    parts.append(f"<h3>Final validation eval: {esc(data.final_tag or 'none')} on the "
                 f"{esc(data.validation_split)} split (eval/{esc(data.final_tag or '')})</h3>")
    if final is None:
        parts.append('<p class="none">no validation eval in this run (env.validation_split unset, or none ran '
                     'yet)</p>')
    else:
        parts.append(seed_table(seed_rows(final.headline(), "final-"))
                     + '<p><a href="#final-failures">the final eval\'s failing episodes</a></p>')
    return "\n".join(parts)


def _trained(data: TrainingData) -> str:
    """Optimizer steps, trained samples and the weight version reached; a run that updated nothing says so."""
    updates, samples = _total(data, "optimizer_steps"), _total(data, "trained_samples")
    version = data.steps[-1].get("weight_version") if data.steps else (data.evals[-1].get("weight_version")
                                                                        if data.evals else None)
    text = (f'<span id="optimizer-steps">{updates:.0f}</span> optimizer steps on '
            f'<span id="trained-samples">{samples:.0f}</span> samples; weight version {esc(version)}')
    if data.steps and not updates:
        text += (' <span class="warn">(trained nothing: every group of every step had zero variance, so the final '
                 "model is the one the GRPO steps started from)</span>")
    return text


def _evals(data: TrainingData, plots: dict[str, str]) -> str:
    if not data.evals:
        return '<p class="none">no evals.jsonl: this run evaluated nothing (env.validation_split unset)</p>'
    rows = []
    for i, e in enumerate(data.evals):
        rep = data.eval_reports.get(str(e["tag"]), {})
        cls = rep.get("by_class") or {}

        def count(name: str, rep: dict[str, Any] = rep, cls: dict[str, Any] = cls) -> str:
            return esc(cls.get(name, DASH)) if rep else DASH

        same = f' (the weights of {esc(e["same_as"])})' if e.get("same_as") else ""
        rows.append([f'<span id="eval-{i}-tag">{esc(e["tag"])}</span>{same}', esc(e.get("step", "?")),
                     esc(e.get("split", "?")), f'<span id="eval-{i}-episodes">{esc(e.get("episodes", "?"))}</span>',
                     f'<b id="eval-{i}-strict">{_rate(stat(e, "strict_success"))}</b>',
                     f'<span id="eval-{i}-interval">{_interval(e.get("interval"))}</span>',
                     _rate(stat(rep, "success_rate_excluding_infra")),
                     count(OutcomeClass.POLICY_FAILURE.value), count(OutcomeClass.TRUNCATION.value),
                     f'<span id="eval-{i}-infra">{count(OutcomeClass.INFRA_FAILURE.value)}</span>',
                     _fmt(stat(rep, "mean_reward"))])
    head = ["eval", "step", "split", "episodes", "strict success", "95 % interval (Wilson)", "success excl. infra",
            "failed by policy", "truncated", "failed by environment", "mean reward"]
    best = data.best
    kept = (f'<p id="best">best checkpoint: eval <b>{esc(best.get("tag"))}</b> (step {esc(best.get("step"))}, strict '
            f'success {_rate(stat(best, "strict_success"))} {_interval(best.get("interval"))}), weights in '
            f'<code>{esc(best.get("weights"))}</code></p>') if best else ""
    return (f"<p>Validation only ({esc(data.validation_split)} split), from evals.jsonl and eval/TAG/report.json; "
            "never mixed with the training episodes.</p>" + html_table(head, rows, "evals") + kept
            + img(plots, "final_eval_outcomes", "final eval: episodes by outcome"))


def _interval(value: Any) -> str:
    if not isinstance(value, list | tuple) or len(value) != 2:
        return DASH
    return f"[{value[0]:.3f}, {value[1]:.3f}]"


def _learning(data: TrainingData, plots: dict[str, str]) -> str:
    parts = []
    pair = data.paired
    if pair is None:
        parts.append('<p class="none">no paired comparison: the run needs a before or after-sft eval and a later '
                     'one with their episodes</p>')
    else:
        verdict = ("the gain is not noise" if pair["interval"][0] > 0 else "a loss beyond noise"
                   if pair["interval"][1] < 0 else "the difference is within noise")
        parts.append(
            f"<p>{esc(pair['second'])} against {esc(pair['first'])} on the same {pair['n']} validation episodes "
            "(same tasks, same seeds): wins are episodes only the later model solved, losses those only the "
            f"earlier one did. 95 % interval of the difference (paired): {verdict}; "
            f"<span id=\"paired-evidence\">{esc(pair['evidence_sentence'])}</span>.</p>"
            + html_table(["pairs", "wins", "losses", "ties", f"{esc(pair['first'])}", f"{esc(pair['second'])}",
                          "difference", "95 % interval"],
                         [[str(pair["n"]), f'<b id="paired-wins">{pair["wins"]}</b>',
                           f'<b id="paired-losses">{pair["losses"]}</b>', str(pair["ties"]),
                           _rate(pair["first_rate"]), _rate(pair["second_rate"]),
                           f'<span id="paired-difference">{pair["difference"]:+.3f}</span>',
                           f'{_interval(pair["interval"])}, exact McNemar '
                           f'<span id="paired-p">p = {pair["mcnemar_p"]:.2g}</span>']], "paired"))
    groups = sorted({g for e in data.evals for g in (e.get("by_group") or {})})
    if groups:
        rows = [[esc(g), *(_group_cell((e.get("by_group") or {}).get(g)) for e in data.evals)] for g in groups]
        parts.append("<p>Strict success per task kind (the task id without its index), each eval's episodes.</p>"
                     + html_table(["kind", *(esc(e["tag"]) for e in data.evals)], rows, "by-kind"))
    return "\n".join(parts)


def _group_cell(group: dict[str, Any] | None) -> str:
    if not group:
        return DASH
    return f"{group['successes']}/{group['n']} = {group['rate']:.3f} {_interval(group.get('interval'))}"


def _stages(data: TrainingData, plots: dict[str, str]) -> str:
    timings = (data.run_summary or {}).get("timings") or {}
    rows = [[f"eval {esc(e['tag'])}", _fmt(stat(e, "seconds"), 1)] for e in data.evals if not e.get("same_as")]
    rows += [["SFT", _fmt((data.sft or {}).get("seconds") or timings.get("sft_s"), 1)],
             ["GRPO steps", _fmt(timings.get("grpo_s"), 1)]]
    parts = ["<p>Wall seconds of each stage (evals from evals.jsonl, SFT from sft.json, GRPO from summary.json; "
             "a dash: not recorded or not run).</p>" + html_table(["stage", "seconds"], rows, "stages")]
    curve = (data.sft or {}).get("steps") or []
    if curve:
        parts.append(f"<p>SFT on {esc(data.sft.get('examples'))} examples: token NLL and mean token entropy "
                     "(nats, temperature 1) of each step's examples, before its update.</p>"
                     + html_table(["SFT step", "epoch", "token NLL", "token entropy"],
                                  [[str(c["step"]), str(c["epoch"]), _fmt(c["loss"], 4), _fmt(c["entropy"], 4)]
                                   for c in curve], "sft-curve"))
    return "\n".join(parts)


def _reward(data: TrainingData, plots: dict[str, str]) -> str:
    cols = [_raw("weight version", "weight_version"), _col("attempted", "attempted"),
            _col("reward mean", "reward_mean", rate=True), _col("strict success", "strict_success", rate=True),
            _col("success excl. infra", "success_excluding_infra", rate=True)]
    judged = any(stat(r, "judge.judged") for r in data.steps)
    note = ""
    if judged:  # an env with an LLM judge: its bounded term, and replies it could not read
        cols += [_col("judge term", "judge.term_mean", 4), _col("judged", "judge.judged", 0),
                 _col("judge unparseable", "judge.unparseable", 0)]
        note = ("<p>Judge term: the mean of the LLM judge's bounded quality term (weight x score) over the "
                "episodes it judged (successes only: it never scores a failed correctness layer); unparseable: "
                "judge replies that were not the closed answer form (each scored 0).</p>")
    return (img(plots, "reward_over_steps", "train reward and strict success per step; validation strict success")
            + "<p>Train: each step's own episodes (steps.jsonl). Validation: the evals above.</p>" + note
            + _step_table(data, cols, "reward"))


def _outcomes(data: TrainingData, plots: dict[str, str]) -> str:
    cols = [(f"{o.value} ({o.outcome_class.value})", _outcome_cell(o)) for o in Outcome]
    totals = [f'<span id="outcome-total-{o.value}">{_total(data, f"outcomes.{o.value}"):.0f}</span>'
              for o in Outcome]
    return (img(plots, "outcomes_over_steps", "episodes per step by outcome")
            + "<p>Every outcome is a column, zero or not; infra outcomes (env_error, verifier_error, "
              "engine_error) are left out of the loss, never out of this table.</p>"
            + _step_table(data, cols, "outcomes", totals))


def _outcome_cell(outcome: Outcome) -> Callable[[dict[str, Any]], str]:
    return lambda row: _fmt(stat(row, f"outcomes.{outcome.value}"))


def _groups(data: TrainingData, plots: dict[str, str]) -> str:
    cols = [_col("groups", "groups"), _col("zero-variance groups", "zero_variance_groups"),
            _col("zero-variance fraction", "zero_variance_fraction", rate=True), _col("kept samples", "kept"),
            _col("excluded infra", "excluded_infra"), _col("masked truncated", "masked_truncated"),
            _col("audit dropped", "audit_dropped"), _col("trained samples", "trained_samples"),
            ("updated", lambda r: esc(r["updated"]) if "updated" in r else DASH)]
    return (img(plots, "groups_over_steps", "zero-variance group fraction per step")
            + "<p>A group whose episodes all got the same reward has no advantage: it teaches GRPO nothing.</p>"
            + _step_table(data, cols, "groups"))


def _cost(data: TrainingData, plots: dict[str, str]) -> str:
    cols = [_col("successes", "outcomes.success"),
            ("sampled tokens per success", lambda r: _fmt(stat(r, "tokens_per_success"), 1)
             if (stat(r, "outcomes.success") or 0) > 0 else "n/a (no success)"),
            _col("tokens / s", "tokens_per_second", 1)]
    return (img(plots, "cost_over_steps", "sampled tokens per success and sampling speed per step")
            + _step_table(data, cols, "cost"))


def _health(data: TrainingData, plots: dict[str, str]) -> str:
    keys = [("loss", "loss"), *((label, key) for group in HEALTH.values() for label, key in group.items()),
            ("ratio mean", "ratio_mean"), ("lr", "lr")]
    cols = [_col(label, key, 4) for label, key in keys if data.has(key)]
    missing = [key for _, key in keys if not data.has(key)]
    note = (f"<p>Not recorded in this run: {esc(', '.join(missing))} (no KL term, the bypass mismatch mode, or "
            "no update).</p>" if missing else "")
    return img(plots, "health_over_steps", "KL, clip fraction, IS weights, entropy, grad norm, logprob gap") \
        + note + _step_table(data, cols, "health")


def _time(data: TrainingData, plots: dict[str, str]) -> str:
    parts = {**TIME_PARTS, "verify": "time.verify_s"}
    cols = [_col(f"{name} s", key) for name, key in parts.items()]
    wall = sum(_total(data, k) for k in TIME_PARTS.values()) or 1.0
    totals = [f'<span id="time-total-{name.replace(" ", "-")}">{_total(data, key):.2f}</span>'
              + (f" ({_total(data, key) / wall:.0%})" if key in TIME_PARTS.values() else "")
              for name, key in parts.items()]
    return (img(plots, "time_over_steps", "seconds per step: rollout, train, weight sync; verify")
            + "<p>Wall seconds of each part of a step; verify is the verifier's seconds summed over the step's "
              "episodes, spent inside the rollout (episodes run concurrently).</p>"
            + _step_table(data, cols, "time", totals))


def _lag(data: TrainingData, plots: dict[str, str]) -> str:
    cols = [_raw("weight version after the step", "weight_version"),
            _col("lag of the samples (max)", "weight_version_lag")]
    return (img(plots, "lag_over_steps", "weight-version lag per step")
            + "<p>How many weight versions behind the trained policy the oldest sampled token of a step was "
              "(0: every sample came from the weights being trained).</p>" + _step_table(data, cols, "lag"))


def _async(data: TrainingData, plots: dict[str, str]) -> str:
    summary = []
    for m in ASYNC_METRICS:
        ys = data.series(m.key)[1]
        summary.append([f"<code>{esc(m.key)}</code>", esc(m.description),
                        *((_fmt(sum(ys) / len(ys)), _fmt(max(ys)), _fmt(ys[-1])) if ys else (DASH,) * 3)])
    cols = [_col(label if len(keys) == 1 else f"version lag {label}", key, rate=key.endswith("_ratio"))
            for keys in ASYNC_PANELS.values() for label, key in keys.items()]
    return (img(plots, "async_over_steps", "queue size, version lag, trainer and rollout idle ratio per step")
            + "<p>Rollouts run while the trainer updates; finished groups wait in a bounded buffer. A sample's "
              "version lag is the trainer's weight version when its step trained minus the version of the "
              "sample's first turn.</p>"
            + html_table(["key", "what it is", "mean over steps", "max over steps", "last step"], summary,
                         "async-summary")
            + _stale_counts(data)
            + _step_table(data, cols, "async") + _staleness(data, plots))


def _stale_counts(data: TrainingData) -> str:
    """The samples over the staleness bound, dropped and reweighted, over the run (as recorded)."""
    kinds = {"async_stale_dropped": ("stale-dropped", "dropped"),
             "async_stale_reweighted": ("stale-reweighted", "kept and reweighted"),
             "async_resume_dropped_groups": ("resume-dropped", "buffered groups dropped at resume")}
    counts = [f'<span id="async-{anchor}">{_total(data, key):.0f}</span> {what}'
              for key, (anchor, what) in kinds.items() if data.has(key)]
    out = f"<p>Samples over the staleness bound, summed over steps: {', '.join(counts)}.</p>" if counts else ""
    if data.has("sglang_requests_reissued"):
        out += (f'<p>SGLang requests aborted by a weight push\'s pause and sent again: <span id="async-reissued">'
                f'{_total(data, "sglang_requests_reissued"):.0f}</span>.</p>')
    return out


def _staleness(data: TrainingData, plots: dict[str, str]) -> str:
    source, values = data.staleness()
    if not values:
        return '<p class="none">no staleness recorded: no episode of a step has its versions on disk and no step ' \
               "recorded async_version_lag_mean</p>"
    if source == "samples":
        trained, every = Counter(int(v) for v, t in values if t), Counter(int(v) for v, _ in values)
        rows = [[str(lag), str(every[lag]), str(trained[lag]), str(every[lag] - trained[lag]),
                 f"{every[lag] / len(values):.1%}"] for lag in range(min(0, *every), max(every) + 1)]
        what = (f'the <span id="async-lag-n">{len(values)}</span> episodes of the steps (rollouts/, the steps\' '
                "trained and untrained episodes) whose turns recorded their weight versions")
        head = ["version lag", "samples", "trained", "not trained", "share"]
    else:
        counts = Counter(round(v, 2) for v, _ in values)
        rows = [[_fmt(lag), str(n), f"{n / len(values):.1%}"] for lag, n in sorted(counts.items())]
        what = (f'the <span id="async-lag-n">{len(values)}</span> steps\' async_version_lag_mean (steps.jsonl): no '
                "episode on disk recorded its turns' weight versions")
        head = ["mean version lag", "steps", "share"]
    rollout = data.config.get("rollout") or {}
    bound = (f" Bound: max_staleness {esc(rollout['max_staleness'])}, stale samples "
             f"{esc(rollout.get('stale_samples', '?'))}." if "max_staleness" in rollout else "")
    return (img(plots, "staleness_distribution", "staleness distribution")
            + f'<p>Staleness distribution, from <span id="async-lag-source">{source}</span>: {what}.{bound}</p>'
            + html_table(head, rows, "async-staleness"))


def _failures(data: TrainingData, plots: dict[str, str]) -> str:
    final = data.final_eval
    if final is None:
        return '<p class="none">no final eval episodes</p>'
    failing = [(i, r) for i, r in enumerate(final.records) if r.outcome is not Outcome.SUCCESS]
    if not failing:
        return f'<p class="none">every one of the {len(final.records)} final-eval episodes succeeded</p>'
    shown: dict[Outcome, int] = {}
    rendered = set()
    for i, r in failing:
        if shown.get(r.outcome, 0) < FAILURES_PER_OUTCOME:
            shown[r.outcome] = shown.get(r.outcome, 0) + 1
            rendered.add(i)
    rows = []
    for i, r in failing[:FAILURE_ROWS]:
        outcome = r.outcome
        link = f'<a href="#final-ep-{i}">#{i}</a>' if i in rendered else f"#{i}"
        rows.append([link, esc(r.task_id), esc(outcome.value),
                     f'<span class="cls {esc(outcome.outcome_class.value)}">{esc(outcome.outcome_class.value)}</span>',
                     esc(r.outcome_detail, 300)])
    more = (f"<p>{len(failing) - FAILURE_ROWS} more failing episodes are in eval/{esc(data.final_tag)}/"
            "trajectories.jsonl.</p>" if len(failing) > FAILURE_ROWS else "")
    transcripts = [f'<details open><summary>#{i} {esc(r.task_id)} ({esc(r.outcome.value)})</summary>'
                   f'{transcript(r, f"final-ep-{i}", back="final-failures")}</details>'
                   for i, r in failing if i in rendered]
    return (f"<p>{len(failing)} of {len(final.records)} final-eval episodes failed; up to {FAILURES_PER_OUTCOME} "
            "per outcome are shown as transcripts. Model-written text is shown as text.</p>"
            + html_table(["episode", "task", "outcome", "class", "outcome detail"], rows, "final-failing")
            + more + "\n".join(transcripts))


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        return [kv for k, v in value.items() for kv in _flatten(v, f"{prefix}{k}.")]
    return [(prefix.rstrip("."), value)]


def _config(data: TrainingData, plots: dict[str, str]) -> str:
    rows = [[f"<code>{esc(k)}</code>", esc(v, 300)] for k, v in _flatten(data.config)]
    return "<p>config.json, as the trainer saved it.</p>" + html_table(["key", "value"], rows, "config")


SECTIONS: list[Section[TrainingData]] = [
    Section("headline", "Headline", _headline),
    Section("evals", "Validation evals", _evals),
    Section("learning", "Did it learn? Paired comparison and per-kind validation", _learning),
    Section("stages", "Stages: wall time and the SFT curve", _stages),
    Section("reward", "Reward and strict success over steps", _reward),
    Section("outcomes", "Outcome mix over steps", _outcomes),
    Section("groups", "GRPO groups and selection", _groups),
    Section("cost", "Tokens per success", _cost),
    Section("health", "Update health", _health),
    Section("time", "Time split", _time),
    Section("lag", "Weight-version lag", _lag),
    Section("async", "Asynchronous rollouts: buffer, staleness, idle time", _async,
            when=lambda data: data.is_async),
    Section("final-failures", "Final eval: failing episodes", _failures),
    Section("config", "Config", _config),
]
