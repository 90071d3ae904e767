"""The results figures: return vs step, return vs wall-clock, SPS vs step, and, when the runs
evaluated, evaluation return vs step; and, from the aggregate table's normalised scores, the
rliable-style figures: IQM and mean with their 95% CIs per variant, and the performance profile.

One panel per task in a 3-column grid, one colour per variant, mean over seeds as a line and
± one (population) std over seeds as a band. The functions return matplotlib Figures and write
nothing; ``sacbench.report plots`` saves them. Each line carries its variant name as label and a
``gid`` of the form ``"{kind}:{variant}"`` so tests and readers can find it. The pr-424 final
return is named at the right of each panel title and drawn (gid ``"published:pr-424"``) only
where it lies inside the axes, so no text covers data and every legend entry is drawn.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")  # headless: the pipeline renders on compute nodes without a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

from sacbench import published  # noqa: E402
from sacbench.results import aggregate, definitions, stats  # noqa: E402
from sacbench.results.metrics import (  # noqa: E402
    STEADY_WARMUP_FRACTION,
    elapsed_points,
    steady_sps_points,
    times_from_wall_clock,
    warmup_end,
)
from sacbench.results.runs import MetricError, Run, RunSet  # noqa: E402
from sacbench.tags import (  # noqa: E402
    ELAPSED_TAG,
    EVAL_RETURN_TAG,
    RETURN_TAG,
    SPS_TAG,
)

COLUMNS = 3
GRID_POINTS = 200
PUBLISHED_LINE_LABEL = f"{published.LABEL} final return (1M steps)"
PUBLISHED_NOTE = (
    f"right of each title: {published.LABEL}'s published final return after 1M steps, dashed "
    "where inside the axis range, else ↑ above or ↓ below it"
)


def _grid(runset: RunSet) -> tuple[Figure, list[plt.Axes]]:
    env_ids = runset.selection.env_ids
    rows = math.ceil(len(env_ids) / COLUMNS)
    columns = min(COLUMNS, len(env_ids))
    figure, axes = plt.subplots(
        rows, columns, figsize=(4.6 * columns, 3.4 * rows + 1.2), squeeze=False
    )
    flat = list(axes.flat)
    for axis in flat[len(env_ids) :]:
        axis.remove()
    for axis, env_id in zip(flat, env_ids, strict=False):
        # Left-aligned, so the right-hand side of the title line can carry the reference value.
        # At the top (y=1.0) by hand: matplotlib's automatic placement moves a title only above a
        # y axis's offset text ("+2.26e2", "1e6") or top tick labels, which these panels never
        # have (plain numbers below), and measures every tick label at each draw to find out (a
        # sixth of a plots command's time).
        axis.set_title(env_id, loc="left", fontsize=10, y=1.0)
        axis.ticklabel_format(axis="y", style="plain", useOffset=False)
        axis.grid(alpha=0.3)
    return figure, flat[: len(env_ids)]


def _colours(variants: Sequence[str]) -> dict[str, str]:
    palette = plt.get_cmap("tab10").colors
    return {
        variant: matplotlib.colors.to_hex(palette[i % len(palette)])
        for i, variant in enumerate(variants)
    }


def _smoothed_returns(run: Run, window: int) -> tuple[np.ndarray, np.ndarray]:
    points = run.series(RETURN_TAG)
    values = points["value"]
    if window > 1:
        values = values.rolling(window, min_periods=1).mean()
    return points["step"].to_numpy(np.float64), values.to_numpy(np.float64)


def _elapsed_at(run: Run, steps: np.ndarray) -> np.ndarray:
    """Training-job seconds at ``steps``, interpolated from (0, 0) in charts/elapsed_seconds, or,
    for an external command's run, in its event wall times (metrics.elapsed_points); no times
    at all (MetricError) when they cannot be known."""
    elapsed = elapsed_points(run)
    known_steps = np.concatenate([[0.0], elapsed["step"].to_numpy(np.float64)])
    known_seconds = np.concatenate([[0.0], elapsed["value"].to_numpy(np.float64)])
    return np.interp(steps, known_steps, known_seconds)


def _band(
    axis: plt.Axes,
    curves: list[tuple[np.ndarray, np.ndarray]],
    *,
    colour: str,
    label: str,
    gid: str,
    linestyle: str = "-",
) -> None:
    """Mean ± std over seeds on a common x grid spanning the range every seed covers (where the
    seeds' ranges do not overlap, each seed counts only inside its own range)."""
    curves = [(x, y) for x, y in curves if x.size]
    if not curves:
        return
    low = max(float(x[0]) for x, _ in curves)
    high = min(float(x[-1]) for x, _ in curves)
    if high <= low:
        low = min(float(x[0]) for x, _ in curves)
        high = max(float(x[-1]) for x, _ in curves)
    grid = np.linspace(low, high, GRID_POINTS) if high > low else np.array([low])
    stacked = np.vstack([np.interp(grid, x, y, left=np.nan, right=np.nan) for x, y in curves])
    counted = np.isfinite(stacked).sum(axis=0)
    keep = counted > 0
    filled = np.where(np.isfinite(stacked), stacked, 0.0)
    mean = np.divide(filled.sum(axis=0), counted, where=keep, out=np.full(grid.shape, np.nan))
    squares = np.where(np.isfinite(stacked), (stacked - mean) ** 2, 0.0)
    std = np.sqrt(np.divide(squares.sum(axis=0), counted, where=keep, out=np.zeros(grid.shape)))
    (line,) = axis.plot(
        grid[keep], mean[keep], color=colour, label=label, linestyle=linestyle, marker=None
    )
    line.set_gid(gid)
    if grid[keep].size == 1:
        # A single point (e.g. only a final evaluation): a marker, and the std as an error bar.
        line.set_marker("o")
        axis.errorbar(grid[keep], mean[keep], yerr=std[keep], color=colour, capsize=3, fmt="none")
    axis.fill_between(
        grid[keep], (mean - std)[keep], (mean + std)[keep], color=colour, alpha=0.18, linewidth=0
    )


def _published_line(axis: plt.Axes, env_id: str, *, steps_done: float | None) -> None:
    """The pr-424 final return: its value in the panel's right-hand title, outside the data, and
    a dashed line where it falls inside the axis range. For runs of at least half of 1M steps the
    axis grows to take it in; shorter runs keep their own range, or their curves would flatten,
    and the title says on which side the off-scale value lies."""
    pr424 = published.PR424.get(env_id)
    if pr424 is None:
        return
    value = pr424.return_mean
    has_data = bool(axis.lines)
    low, high = axis.get_ylim()
    long_runs = steps_done is None or steps_done >= 0.5 * published.PR424_STEPS
    if long_runs or not has_data or low <= value <= high:
        line = axis.axhline(
            value, color="0.35", linestyle="--", linewidth=1.0, label=PUBLISHED_LINE_LABEL
        )
        line.set_gid(f"published:{published.LABEL}")
        if has_data and not long_runs:
            axis.set_ylim(low, high)  # the line is inside: keep the data's own range
        where = "dashed"
    else:
        where = "above ↑" if value > high else "below ↓"
    axis.set_title(
        f"{published.LABEL}: {value:,.2f} ({where})", loc="right", fontsize=8, color="0.35"
    )


def _steps_done(runset: RunSet, env_id: str) -> float | None:
    """The longest run's step count in a task's panel: the step of its last charts/elapsed_seconds
    (the trainer logs it at the last step) + 1. Evaluations are logged at the number of steps
    done, one more than the last step's index, so the last step of any tag would overcount."""
    steps = [
        float(elapsed["step"].max()) + 1.0
        for variant in runset.selection.variants
        for run in runset.runs_of(variant, env_id)
        if not (elapsed := run.series(ELAPSED_TAG)).empty
    ]
    return max(steps) if steps else None


def _missing_note(runset: RunSet) -> str:
    if not runset.problems:
        return ""
    labels = ", ".join(key.label for key in sorted(runset.problems))
    return f"\nLeft out (missing or unreadable): {labels}"


def _step_text(step: float, _position: int | None = None) -> str:
    """Step ticks as 500, 1.5k, 200k, 1M: seven-digit numbers crowd a 3-column grid."""
    for size, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(step) >= size:
            return f"{step / size:g}{suffix}"
    return f"{step:g}"


def _published_note(runset: RunSet) -> str:
    if not any(env_id in published.PR424 for env_id in runset.selection.env_ids):
        return ""
    return "\n" + PUBLISHED_NOTE


def _finish(
    figure: Figure,
    axes: list[plt.Axes],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    steps_on_x: bool = False,
    legend_columns: int = 3,
) -> None:
    """Labels, the shared legend (only of what some panel draws) below the grid, and layout."""
    handles, labels = [], []
    for index, axis in enumerate(axes):
        axis.set_xlabel(xlabel, fontsize=9)
        if index % COLUMNS == 0:
            axis.set_ylabel(ylabel)
        if steps_on_x:
            # At most 6 intervals: a short range's ticks (1.125k, 1.15k, ...) would run together.
            axis.xaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
            axis.xaxis.set_major_formatter(FuncFormatter(_step_text))
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    figure.suptitle(title, fontsize=9)
    columns = max(1, min(len(labels), legend_columns))
    legend_rows = math.ceil(len(labels) / columns)
    bottom = (0.3 + 0.25 * legend_rows) / figure.get_figheight()
    figure.tight_layout(rect=(0, bottom, 1, 1))
    if labels:
        figure.legend(handles, labels, loc="lower center", ncol=columns, frameon=False)


def _smoothing_text(window: int) -> str:
    if window <= 1:
        return "no smoothing"
    return f"each seed smoothed by a trailing mean over its last {window} episodes"


def returns_vs_steps(runset: RunSet, *, smoothing_episodes: int) -> Figure:
    """sac.png: episodic return vs global step."""
    figure, axes = _grid(runset)
    colours = _colours(runset.selection.variants)
    for axis, env_id in zip(axes, runset.selection.env_ids, strict=True):
        for variant in runset.selection.variants:
            curves = [
                _smoothed_returns(run, smoothing_episodes)
                for run in runset.runs_of(variant, env_id)
            ]
            _band(axis, curves, colour=colours[variant], label=variant, gid=f"return:{variant}")
        _published_line(axis, env_id, steps_done=_steps_done(runset, env_id))
    _finish(
        figure,
        axes,
        title="Training episodic return vs global step: mean over seeds, band ± 1 std (ddof=0);\n"
        f"{_smoothing_text(smoothing_episodes)}{_published_note(runset)}{_missing_note(runset)}",
        xlabel="global step (environment steps)",
        ylabel="episodic return",
        steps_on_x=True,
    )
    return figure


def returns_vs_time(runset: RunSet, *, smoothing_episodes: int) -> Figure:
    """sac-time.png: episodic return vs the training job's wall-clock minutes."""
    figure, axes = _grid(runset)
    colours = _colours(runset.selection.variants)
    for axis, env_id in zip(axes, runset.selection.env_ids, strict=True):
        for variant in runset.selection.variants:
            curves = []
            for run in runset.runs_of(variant, env_id):
                steps, values = _smoothed_returns(run, smoothing_episodes)
                with contextlib.suppress(MetricError):  # no times known: not drawn
                    curves.append((_elapsed_at(run, steps) / 60.0, values))
            _band(axis, curves, colour=colours[variant], label=variant, gid=f"time:{variant}")
        _published_line(axis, env_id, steps_done=_steps_done(runset, env_id))
    _finish(
        figure,
        axes,
        title="Training episodic return vs wall-clock: mean over seeds, band ± 1 std (ddof=0);\n"
        f"{_smoothing_text(smoothing_episodes)}; time from {ELAPSED_TAG} (resumes "
        f"summed, interpolated per episode)"
        f"{_wall_time_note(runset, what='event wall times since the command started')}"
        f"{_published_note(runset)}"
        f"{_missing_note(runset)}",
        xlabel="wall-clock minutes of the training job",
        ylabel="episodic return",
    )
    return figure


def _wall_time_note(runset: RunSet, *, what: str) -> str:
    """Said in a title when some run's times come from its event wall times, as `what`."""
    if not any(any(times_from_wall_clock(run)) for run in runset.runs.values()):
        return ""
    return f";\nexternal commands' runs (no sacbench time tags): {what}"


def _cleanrl_sps_points(run: Run) -> pd.DataFrame:
    return run.series(SPS_TAG)


# The SPS axis reaches this far above the highest value after the warm-up.
SPS_AXIS_HEADROOM = 1.15
SPS_CUT_NOTE = (
    "y axis up to {headroom}x the highest value after each run's first {warmup:.0%} of logged "
    "steps; start-up values above it are cut off"
)


def _after_warmup(steps: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The values logged after the warm-up (metrics.warmup_end); all of them where the points
    span no steps."""
    later = values[steps > warmup_end(steps)]
    return later if later.size else values


def _sps_panel(axis: plt.Axes, runset: RunSet, env_id: str, colours: dict[str, str]) -> bool:
    """One task's CleanRL SPS and steady SPS curves, its y axis from 0 to SPS_AXIS_HEADROOM
    above the highest value after the warm-up; whether that cuts off a higher value."""
    highest, highest_after_warmup = -np.inf, -np.inf
    for variant in runset.selection.variants:
        runs = runset.runs_of(variant, env_id)
        for points_of, style, kind, label in (
            (_cleanrl_sps_points, "-", "sps", f"{variant}: CleanRL SPS"),
            (steady_sps_points, "--", "steady_sps", f"{variant}: steady SPS"),
        ):
            curves = [
                (
                    points_of(run)["step"].to_numpy(np.float64),
                    points_of(run)["value"].to_numpy(np.float64),
                )
                for run in runs
            ]
            for steps, values in curves:
                if values.size:
                    highest = max(highest, float(values.max()))
                    highest_after_warmup = max(
                        highest_after_warmup, float(_after_warmup(steps, values).max())
                    )
            _band(
                axis,
                curves,
                colour=colours[variant],
                label=label,
                gid=f"{kind}:{variant}",
                linestyle=style,
            )
    top = SPS_AXIS_HEADROOM * highest_after_warmup
    if highest_after_warmup > 0 and highest > top:
        axis.set_ylim(0, top)
        return True
    axis.set_ylim(bottom=0)
    return False


def sps_vs_steps(runset: RunSet) -> Figure:
    """sac-sps.png: CleanRL SPS (solid) and steady training SPS (dashed) vs global step. CleanRL
    SPS is a cumulative average whose first points, over the random-action steps, run many
    times higher than training does: each panel's y axis stops SPS_AXIS_HEADROOM above the
    highest value after the warm-up, so that the training throughput fills the panel, and the
    title says when something is cut off."""
    figure, axes = _grid(runset)
    colours = _colours(runset.selection.variants)
    cut = [
        _sps_panel(axis, runset, env_id, colours)
        for axis, env_id in zip(axes, runset.selection.env_ids, strict=True)
    ]
    cut_note = (
        "\n" + SPS_CUT_NOTE.format(headroom=SPS_AXIS_HEADROOM, warmup=STEADY_WARMUP_FRACTION)
        if any(cut)
        else ""
    )
    _finish(
        figure,
        axes,
        title="Throughput vs global step: CleanRL SPS (solid; cumulative since start) and steady "
        "SPS\n(dashed; per 100-step window): mean over seeds, band ± 1 std; no smoothing"
        f"{cut_note}"
        f"{_wall_time_note(runset, what='steady SPS between consecutive charts/SPS points')}"
        f"{_missing_note(runset)}",
        xlabel="global step (environment steps)",
        ylabel="environment steps per second",
        steps_on_x=True,
        # Entries come in (CleanRL, steady) pairs: one legend column per variant.
        legend_columns=len(runset.selection.variants),
    )
    return figure


def _evaluation_curve(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """Each evaluation's step and the mean return of its episodes."""
    means = run.series(EVAL_RETURN_TAG).groupby("step", sort=True)["value"].mean()
    return means.index.to_numpy(np.float64), means.to_numpy(np.float64)


def has_evaluations(runset: RunSet) -> bool:
    """Whether any run logged an evaluation (eval/episodic_return)."""
    return any((run.scalars["tag"] == EVAL_RETURN_TAG).any() for run in runset.runs.values())


def _no_evaluation_note(runset: RunSet) -> str:
    labels = [
        key.label
        for key, run in sorted(runset.runs.items())
        if not (run.scalars["tag"] == EVAL_RETURN_TAG).any()
    ]
    if not labels:
        return ""
    more = f" and {len(labels) - 3} more" if len(labels) > 3 else ""
    return f"\nNo evaluation logged (not drawn): {', '.join(labels[:3])}{more}"


def evaluation_returns(runset: RunSet) -> Figure:
    """sac-eval.png: the mean return of each evaluation (deterministic policy) vs global step."""
    if not has_evaluations(runset):
        raise ValueError(
            f"no run logged {EVAL_RETURN_TAG}: the runs did not evaluate (--eval-episodes 0, or a "
            "trainer without evaluation)"
        )
    figure, axes = _grid(runset)
    colours = _colours(runset.selection.variants)
    for axis, env_id in zip(axes, runset.selection.env_ids, strict=True):
        for variant in runset.selection.variants:
            curves = [_evaluation_curve(run) for run in runset.runs_of(variant, env_id)]
            _band(axis, curves, colour=colours[variant], label=variant, gid=f"eval:{variant}")
        steps = {float(x) for line in axis.get_lines() for x in line.get_xdata()}
        if len(steps) == 1 and min(steps) > 0:
            # Only the final evaluation: show where it lies in the run, from step 0.
            axis.set_xlim(0, 1.05 * min(steps))
    _finish(
        figure,
        axes,
        title="Evaluation return vs global step: each evaluation's mean over its episodes "
        "(deterministic policy),\nthen mean over seeds, band ± 1 std (ddof=0); "
        f"{published.LABEL} published no evaluation returns{_no_evaluation_note(runset)}"
        f"{_missing_note(runset)}",
        xlabel="global step (environment steps)",
        ylabel="evaluation return",
        steps_on_x=True,
    )
    return figure


# ---- the rliable-style figures of the aggregate statistics -------------------------------------

AGGREGATE_STATISTICS = ("IQM", "mean")
PROFILE_POINTS = 400
SCORE_MEANING = f"0 = random policy, 1 = CleanRL {published.LABEL} after 1M steps"


@dataclass(frozen=True)
class FigureOptions:
    """`report plots`' flags: the return curves' smoothing, and the aggregate figures'
    statistics (as the aggregate table's, so that both show the same numbers)."""

    smoothing_episodes: int = 10
    last_episodes: int = definitions.DEFAULT_LAST_EPISODES
    bootstrap_resamples: int = definitions.DEFAULT_BOOTSTRAP_RESAMPLES
    bootstrap_seed: int = definitions.DEFAULT_BOOTSTRAP_SEED
    allow_missing: bool = False


def has_normalised_scores(runset: RunSet) -> bool:
    """Whether some selected task has the anchors a normalised score needs."""
    return any(
        env_id in published.PR424 and env_id in published.RANDOM_RETURNS
        for env_id in runset.selection.env_ids
    )


def _variant_scores(
    runset: RunSet, options: FigureOptions
) -> tuple[list[str], dict[str, list[np.ndarray]], str]:
    """The scored tasks, each variant's per-task scores (variants without any left out), and a
    title line naming what is left out."""
    tasks, scores = aggregate.normalised_scores(
        runset, last_episodes=options.last_episodes, allow_missing=options.allow_missing
    )
    by_variant = {
        variant: [scores[variant, env_id] for env_id in tasks if scores[variant, env_id].size]
        for variant in runset.selection.variants
    }
    left_out = [env_id for env_id in runset.selection.env_ids if env_id not in tasks]
    note = f"\nLeft out (no published {published.LABEL} return): {', '.join(left_out)}"
    note = note if left_out else ""
    empty = [variant for variant, by_task in by_variant.items() if not by_task]
    note += f"\nNo usable run: {', '.join(empty)}" if empty else ""
    return tasks, {v: by_task for v, by_task in by_variant.items() if by_task}, note


def _tasks_text(tasks: Sequence[str]) -> str:
    return f"{len(tasks)} task" + ("" if len(tasks) == 1 else "s")


def _runs_text(by_variant: dict[str, list[np.ndarray]]) -> str:
    counts = sorted({sum(task.size for task in by_task) for by_task in by_variant.values()})
    return "/".join(map(str, counts)) + (" run" if counts == [1] else " runs")


def aggregate_intervals(runset: RunSet, *, options: FigureOptions) -> Figure:
    """IQM and mean normalised score per variant: the point estimate (a black tick) and its 95%
    stratified bootstrap CI (a bar, gid "interval:{statistic}:{variant}"), as sac_aggregate.md."""
    tasks, by_variant, note = _variant_scores(runset, options)
    variants = list(by_variant)
    colours = _colours(runset.selection.variants)
    figure, grid = plt.subplots(1, 2, figsize=(9.2, 2.6 + 0.45 * len(variants)), squeeze=False)
    axes = list(grid.flat)
    bootstrap = aggregate.Bootstrap(options.bootstrap_resamples, options.bootstrap_seed)
    for row, variant in enumerate(variants):
        estimates = aggregate.aggregate_estimates(by_variant[variant], variant, bootstrap)
        for axis, name in zip(axes, AGGREGATE_STATISTICS, strict=True):
            estimate, low, high = estimates[name]
            has_interval = not math.isnan(low)
            if has_interval:
                (bar,) = axis.plot(
                    [low, high], [row, row], color=colours[variant], linewidth=9, alpha=0.6,
                    solid_capstyle="butt", label=variant,
                )  # fmt: skip
                bar.set_gid(f"interval:{name}:{variant}")
            (tick,) = axis.plot(
                [estimate], [row], marker="|", markersize=18, markeredgewidth=2,
                color="black" if has_interval else colours[variant], linestyle="none",
                label="_nolegend_" if has_interval else variant,
            )  # fmt: skip
            tick.set_gid(f"estimate:{name}:{variant}")
    intervals = any(not all(task.size == 1 for task in by_task) for by_task in by_variant.values())
    estimate_text = (
        "point estimate (black tick) and\n95% CI (bar; stratified bootstrap over runs within "
        "each task, as sac_aggregate.md; none with one run per task)"
        if intervals
        else "point estimate (tick;\none run per task: no interval)"
    )
    for axis, name in zip(axes, AGGREGATE_STATISTICS, strict=True):
        axis.set_title(name, loc="left", fontsize=10, y=1.0)  # as _grid's, by hand
        axis.set_ylim(len(variants) - 0.4, -0.6)  # the first variant on top
        axis.grid(axis="x", alpha=0.3)
        axis.margins(x=0.15)
    axes[0].set_yticks(range(len(variants)), variants)
    axes[1].set_yticks(range(len(variants)), [""] * len(variants))  # the same rows, named once
    _finish(
        figure,
        axes,
        title=f"Normalised score across {_tasks_text(tasks)} ({', '.join(tasks)}), "
        f"{_runs_text(by_variant)} per variant: {estimate_text}\n{SCORE_MEANING}{note}",
        xlabel="normalised score",
        ylabel="",
    )
    return figure


def performance_profile(runset: RunSet, *, options: FigureOptions) -> Figure:
    """The fraction of runs scoring above each normalised score τ, per variant (averaged over
    tasks), with its pointwise 95% stratified bootstrap CI as a band; line gid
    "profile:{variant}"; dotted reference lines at 0 (random) and 1 (pr-424)."""
    tasks, by_variant, note = _variant_scores(runset, options)
    colours = _colours(runset.selection.variants)
    every = np.concatenate([np.concatenate(by_task) for by_task in by_variant.values()] or [[]])
    low = min(0.0, float(every.min(initial=0.0)))
    high = max(1.0, float(every.max(initial=1.0)))
    pad = 0.03 * (high - low)
    taus = np.linspace(low - pad, high + pad, PROFILE_POINTS)
    figure, axis = plt.subplots(figsize=(7.2, 5.0))
    for reference in (0.0, 1.0):
        line = axis.axvline(reference, color="grey", linestyle=":", linewidth=1)
        line.set_gid(f"ref:{reference:g}")
    for variant, by_task in by_variant.items():
        (line,) = axis.plot(
            taus, stats.performance_profile(by_task, taus), color=colours[variant], label=variant
        )
        line.set_gid(f"profile:{variant}")
        if all(task.size == 1 for task in by_task):
            continue  # resampling one run per task gives back the same runs: no band
        band_low, band_high = stats.performance_profile_ci(
            by_task,
            taus,
            resamples=options.bootstrap_resamples,
            rng=stats.seeded_rng(seed=options.bootstrap_seed, label=f"profile/{variant}"),
        )
        axis.fill_between(taus, band_low, band_high, color=colours[variant], alpha=0.18, lw=0)
    axis.set_ylim(-0.03, 1.03)
    axis.set_xlim(taus[0], taus[-1])
    axis.grid(alpha=0.3)
    _finish(
        figure,
        [axis],
        title=f"Performance profile over {_tasks_text(tasks)} ({', '.join(tasks)}), "
        f"{_runs_text(by_variant)} per variant:\nthe fraction of runs scoring above τ (each "
        "task weighs the same), band: pointwise 95% CI (stratified bootstrap; none with one "
        f"run per task);\ndotted: 0 = random, 1 = {published.LABEL}{note}",
        xlabel=f"τ, normalised score ({SCORE_MEANING})",
        ylabel="fraction of runs with score > τ",
    )
    return figure


# ---- the figures by name ---------------------------------------------------------------------

Draw = Callable[[RunSet, FigureOptions], Figure]


def _returns_figure(runset: RunSet, options: FigureOptions) -> Figure:
    return returns_vs_steps(runset, smoothing_episodes=options.smoothing_episodes)


def _time_figure(runset: RunSet, options: FigureOptions) -> Figure:
    return returns_vs_time(runset, smoothing_episodes=options.smoothing_episodes)


def _sps_figure(runset: RunSet, options: FigureOptions) -> Figure:
    del options  # throughput is drawn unsmoothed
    return sps_vs_steps(runset)


def _evaluation_figure(runset: RunSet, options: FigureOptions) -> Figure:
    del options  # each point is already a mean over an evaluation's episodes
    return evaluation_returns(runset)


def _intervals_figure(runset: RunSet, options: FigureOptions) -> Figure:
    return aggregate_intervals(runset, options=options)


def _profile_figure(runset: RunSet, options: FigureOptions) -> Figure:
    return performance_profile(runset, options=options)


# `report plots` writes each as {name}.png and {name}.svg; workflow/rules/common.smk's
# PLOT_CAPTIONS lists the same names.
FIGURES: dict[str, Draw] = {
    "sac": _returns_figure,
    "sac-time": _time_figure,
    "sac-sps": _sps_figure,
    "sac-eval": _evaluation_figure,
    "sac-aggregate": _intervals_figure,
    "sac-profile": _profile_figure,
}
# Figures that show something only some runs log: drawn only when some run has it.
HAS_DATA: dict[str, Callable[[RunSet], bool]] = {
    "sac-eval": has_evaluations,
    "sac-aggregate": has_normalised_scores,
    "sac-profile": has_normalised_scores,
}


def figures_with_data(runset: RunSet) -> list[str]:
    """The FIGURES that have something to draw for these runs, in FIGURES' order."""
    return [name for name in FIGURES if HAS_DATA.get(name, lambda _: True)(runset)]
