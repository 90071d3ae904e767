"""The results figures: return vs step, return vs wall-clock, and SPS vs step.

One panel per task in a 3-column grid, one colour per variant, mean over seeds as a line and
± one (population) std over seeds as a band. The functions return matplotlib Figures and write
nothing; ``sacbench.report plots`` saves them. Each line carries its variant name as label and a
``gid`` of the form ``"{kind}:{variant}"`` so tests and readers can find it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # headless: the pipeline renders on compute nodes without a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from sacbench import reference  # noqa: E402
from sacbench.tables import (  # noqa: E402
    ELAPSED_TAG,
    REFERENCE_LABEL,
    RETURN_TAG,
    SPS_TAG,
    STEADY_SPS_TAG,
    Run,
    RunSet,
)

COLUMNS = 3
GRID_POINTS = 200
DEFAULT_SMOOTHING_EPISODES = 10


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
        axis.set_title(env_id)
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
    """Training-job seconds at ``steps``, interpolated in charts/elapsed_seconds from (0, 0)."""
    elapsed = run.series(ELAPSED_TAG)
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
        line.set_marker("o")
    axis.fill_between(
        grid[keep], (mean - std)[keep], (mean + std)[keep], color=colour, alpha=0.18, linewidth=0
    )


def _reference_line(axis: plt.Axes, env_id: str, *, max_step: float | None) -> None:
    """The pr-424 final return as a dashed line; for runs far shorter than 1M steps the axis keeps
    the data's range and a label points at the off-scale line instead of flattening the curves."""
    published = reference.PR424.get(env_id)
    if published is None:
        return
    has_data = bool(axis.lines)
    low, high = axis.get_ylim()
    line = axis.axhline(
        published.return_mean,
        color="0.35",
        linestyle="--",
        linewidth=1.0,
        label=f"{REFERENCE_LABEL} final return (1M steps)",
    )
    line.set_gid(f"reference:{REFERENCE_LABEL}")
    short_runs = max_step is not None and max_step < 0.5 * reference.PR424_STEPS
    if has_data and short_runs and not low <= published.return_mean <= high:
        axis.set_ylim(low, high)
        above = published.return_mean > high
        axis.annotate(
            f"{REFERENCE_LABEL} final: {published.return_mean:g} {'↑' if above else '↓'}",
            xy=(0.98, 0.96 if above else 0.04),
            xycoords="axes fraction",
            ha="right",
            va="top" if above else "bottom",
            fontsize=8,
            color="0.35",
        )


def _max_step(runset: RunSet, env_id: str) -> float | None:
    steps = [
        float(run.scalars["step"].max())
        for variant in runset.selection.variants
        for run in runset.runs_of(variant, env_id)
        if not run.scalars.empty
    ]
    return max(steps) if steps else None


def _missing_note(runset: RunSet) -> str:
    if not runset.problems:
        return ""
    labels = ", ".join(key.label for key in sorted(runset.problems))
    return f"\nLeft out (missing or unreadable): {labels}"


def _finish(figure: Figure, axes: list[plt.Axes], *, title: str, xlabel: str, ylabel: str) -> None:
    handles, labels = [], []
    for index, axis in enumerate(axes):
        axis.set_xlabel(xlabel, fontsize=9)
        if index % COLUMNS == 0:
            axis.set_ylabel(ylabel)
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    figure.suptitle(title, fontsize=9)
    legend_rows = math.ceil(len(labels) / 3)
    bottom = (0.3 + 0.25 * legend_rows) / figure.get_figheight()
    figure.tight_layout(rect=(0, bottom, 1, 1))
    figure.legend(handles, labels, loc="lower center", ncol=min(len(labels), 3), frameon=False)


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
        _reference_line(axis, env_id, max_step=_max_step(runset, env_id))
    _finish(
        figure,
        axes,
        title="Training episodic return vs global step: mean over seeds, band ± 1 std (ddof=0);\n"
        f"{_smoothing_text(smoothing_episodes)}{_missing_note(runset)}",
        xlabel="global step (environment steps)",
        ylabel="episodic return",
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
                curves.append((_elapsed_at(run, steps) / 60.0, values))
            _band(axis, curves, colour=colours[variant], label=variant, gid=f"time:{variant}")
        _reference_line(axis, env_id, max_step=_max_step(runset, env_id))
    _finish(
        figure,
        axes,
        title="Training episodic return vs wall-clock: mean over seeds, band ± 1 std (ddof=0);\n"
        f"{_smoothing_text(smoothing_episodes)}; time from charts/elapsed_seconds (resumes "
        f"summed, interpolated per episode){_missing_note(runset)}",
        xlabel="wall-clock minutes of the training job",
        ylabel="episodic return",
    )
    return figure


def sps_vs_steps(runset: RunSet) -> Figure:
    """sac-sps.png: CleanRL SPS (solid) and steady training SPS (dashed) vs global step."""
    figure, axes = _grid(runset)
    colours = _colours(runset.selection.variants)
    for axis, env_id in zip(axes, runset.selection.env_ids, strict=True):
        for variant in runset.selection.variants:
            runs = runset.runs_of(variant, env_id)
            for tag, style, kind, label in (
                (SPS_TAG, "-", "sps", f"{variant}: CleanRL SPS"),
                (STEADY_SPS_TAG, "--", "steady_sps", f"{variant}: steady SPS"),
            ):
                curves = [
                    (
                        run.series(tag)["step"].to_numpy(np.float64),
                        run.series(tag)["value"].to_numpy(np.float64),
                    )
                    for run in runs
                ]
                _band(
                    axis,
                    curves,
                    colour=colours[variant],
                    label=label,
                    gid=f"{kind}:{variant}",
                    linestyle=style,
                )
        axis.set_ylim(bottom=0)
    _finish(
        figure,
        axes,
        title="Throughput vs global step: CleanRL SPS (solid; cumulative since start) and steady "
        "SPS\n(dashed; per 100-step window): mean over seeds, band ± 1 std; no smoothing"
        f"{_missing_note(runset)}",
        xlabel="global step (environment steps)",
        ylabel="environment steps per second",
    )
    return figure
