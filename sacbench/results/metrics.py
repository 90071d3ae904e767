"""Per-run metrics computed from a run's scalars: throughput, wall-clock, projections, returns."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sacbench import published
from sacbench.results.runs import MetricError, Run
from sacbench.tags import ELAPSED_TAG, EVAL_RETURN_TAG, RETURN_TAG, SPS_TAG, STEADY_SPS_TAG

# openrlbenchmark (via expt's AGGREGATE_MEAN_LAST(0.1)) averages this fraction of the last rows.
OPENRLBENCHMARK_TAIL = 0.1


# Steady SPS leaves out the log points of the first 10% of the logged step range (warm-up).
STEADY_WARMUP_FRACTION = 0.1


# Projected runtimes are for a run as long as each of CleanRL's published ones.
PROJECTION_STEPS = published.PR424_STEPS


def _nonempty_series(run: Run, tag: str) -> pd.DataFrame:
    points = run.series(tag)
    if points.empty:
        raise MetricError(f"{run.key.label}: no {tag} values in {run.csv_path}")
    return points


def final_sps(run: Run) -> float:
    """CleanRL's SPS: the last logged charts/SPS (cumulative steps / elapsed seconds)."""
    return float(_nonempty_series(run, SPS_TAG)["value"].iloc[-1])


@dataclass(frozen=True)
class SteadyWindows:
    """The steady charts/steady_SPS windows of a run: their throughput and where they begin."""

    sps: float
    """total steps / total seconds of the windows (a step-weighted harmonic mean)"""
    start_step: int
    """the logged step at which the first counted window begins (the end of the warm-up)"""


def steady_windows(run: Run) -> SteadyWindows:
    """Training throughput without warm-up, and the step where the warm-up ends.

    Each charts/steady_SPS point covers the steps since the previous log point. Points in the
    first 10% of the logged step range (and always the first point, whose window may hold a
    session's first, slow updates) are left out; the rest combine as sum(steps) / sum(steps /
    SPS), a step-weighted harmonic mean.
    """
    points = _nonempty_series(run, STEADY_SPS_TAG)
    if len(points) < 2:
        raise MetricError(
            f"{run.key.label}: steady SPS needs at least 2 {STEADY_SPS_TAG} points, "
            f"{run.csv_path} has {len(points)}"
        )
    steps = points["step"].to_numpy(dtype=np.float64)
    values = points["value"].to_numpy(dtype=np.float64)
    if np.any(values <= 0) or not np.all(np.isfinite(values)):
        raise MetricError(f"{run.key.label}: non-positive {STEADY_SPS_TAG} in {run.csv_path}")
    windows = np.diff(steps)
    cutoff = steps[0] + STEADY_WARMUP_FRACTION * (steps[-1] - steps[0])
    kept = steps[1:] > cutoff
    first = int(np.argmax(kept))  # kept windows are the contiguous tail of the windows
    return SteadyWindows(
        sps=float(windows[kept].sum() / (windows[kept] / values[1:][kept]).sum()),
        start_step=int(steps[first]),
    )


def steady_sps(run: Run) -> float:
    """Training throughput without warm-up (see :func:`steady_windows`); steps per second."""
    return steady_windows(run).sps


def projected_minutes(run: Run, *, steps: int = PROJECTION_STEPS) -> float:
    """Minutes a ``steps``-step run of the same configuration would take on the same machine.

    The run's measured charts/elapsed_seconds up to the step where its steady windows begin
    (start-up, the random-action phase and the training warm-up, with any one-off cost such as
    compilation, all as measured), plus the remaining steps at its steady training SPS. Warm-up
    is counted once, as measured, rather than extrapolated: it does not grow with the run length.
    """
    steady = steady_windows(run)
    elapsed = _nonempty_series(run, ELAPSED_TAG)
    known_steps = elapsed["step"].to_numpy(dtype=np.float64)
    known_seconds = elapsed["value"].to_numpy(dtype=np.float64)
    if steady.start_step < known_steps[0]:
        raise MetricError(
            f"{run.key.label}: no {ELAPSED_TAG} at or before step {steady.start_step} "
            f"in {run.csv_path}"
        )
    if steady.start_step >= steps:
        # A run much longer than ``steps`` measured the whole of it already.
        return float(np.interp(steps, known_steps, known_seconds)) / 60.0
    # The trainer logs both tags at the same steps, so this looks the value up exactly.
    fixed = float(np.interp(steady.start_step, known_steps, known_seconds))
    return (fixed + (steps - steady.start_step) / steady.sps) / 60.0


def wall_clock_minutes(run: Run) -> float:
    """complete.json's elapsed_seconds / 60: the training job's own time, resumes summed."""
    elapsed = run.summary.get("elapsed_seconds")
    if isinstance(elapsed, bool) or not isinstance(elapsed, int | float) or not elapsed > 0:
        raise MetricError(
            f"{run.key.label}: {run.csv_path.with_suffix('.json')} has no positive "
            f"elapsed_seconds (from complete.json), got {elapsed!r}"
        )
    return float(elapsed) / 60.0


def last_episodes_mean(run: Run, *, episodes: int) -> tuple[float, int]:
    """Mean of the run's last ``episodes`` episodic returns (fewer if it has fewer), and how
    many it used."""
    returns = run.series(RETURN_TAG)["value"]
    if returns.empty:
        raise MetricError(f"{run.key.label}: no finished episode ({RETURN_TAG}) in {run.csv_path}")
    tail = returns.iloc[-episodes:]
    return float(tail.mean()), len(tail)


@dataclass(frozen=True)
class FinalEvaluation:
    """A run's final evaluation: the mean of its episodes' returns, and how many there were."""

    mean_return: float
    episodes: int


def final_evaluation(run: Run) -> FinalEvaluation | None:
    """The eval/episodic_return values logged at the run's last step (complete.json's
    global_step), where the trainer's final evaluation logs them; None when the run has none
    (trained with --eval-episodes 0, or by a trainer without evaluation)."""
    final_step = run.summary.get("global_step")
    if isinstance(final_step, bool) or not isinstance(final_step, int):
        raise MetricError(
            f"{run.key.label}: {run.csv_path.with_suffix('.json')} has no integer global_step "
            f"(from complete.json), got {final_step!r}"
        )
    points = run.series(EVAL_RETURN_TAG)
    final = points[points["step"] == final_step]["value"]
    if final.empty:
        return None
    expected = run.summary_value("args", "eval_episodes")
    if isinstance(expected, int) and not isinstance(expected, bool) and len(final) != expected:
        raise MetricError(
            f"{run.key.label}: {run.csv_path} holds {len(final)} {EVAL_RETURN_TAG} values at the "
            f"final step {final_step}, but the run was trained with eval_episodes={expected}"
        )
    return FinalEvaluation(mean_return=float(final.mean()), episodes=len(final))


def openrlbenchmark_minutes(runs: Sequence[Run]) -> float:
    """openrlbenchmark's runtime in minutes: charts/elapsed_seconds averaged over seeds at each
    step, then the mean of the last max(1, floor(10% of those rows)) rows, / 60."""
    series = [_nonempty_series(run, ELAPSED_TAG)[["step", "value"]] for run in runs]
    by_step = pd.concat(series).groupby("step")["value"].mean().sort_index()
    tail = max(1, int(len(by_step) * OPENRLBENCHMARK_TAIL))
    return float(by_step.iloc[-tail:].mean()) / 60.0


def common_steps(runs: Sequence[Run]) -> float:
    steps = {run.summary_value("args", "total_timesteps") for run in runs}
    steps.discard(None)
    return float(steps.pop()) if len(steps) == 1 else math.nan


def normalized_score(env_id: str, episodic_return: float) -> float:
    """(return - random) / (pr-424 - random): 0 = uniform-random policy, 1 = CleanRL pr-424."""
    random_return, pr424_return = published.normalization_anchors(env_id)
    return (episodic_return - random_return) / (pr424_return - random_return)
