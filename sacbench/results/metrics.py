"""Per-run metrics computed from a run's scalars: throughput, wall-clock, projections, returns."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sacbench import published
from sacbench.results.runs import MetricError, Run
from sacbench.tags import (
    ELAPSED_TAG,
    EVAL_RETURN_TAG,
    MIN_STEADY_SPS_POINTS,
    RETURN_TAG,
    SPS_TAG,
    STEADY_SPS_TAG,
)

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


def _start_unix_time(run: Run) -> float | None:
    """When an external command's run started: metadata.json's started_unix_time (written by
    python -m sacbench.run_command), else complete.json's finished_at - elapsed_seconds."""
    started = run.summary_value("started_unix_time")
    if isinstance(started, int | float) and not isinstance(started, bool):
        return float(started)
    finished, elapsed = run.summary_value("finished_at"), run.summary_value("elapsed_seconds")
    try:
        return dt.datetime.fromisoformat(finished).timestamp() - float(elapsed)
    except (TypeError, ValueError):
        return None


def logs_elapsed_seconds(run: Run) -> bool:
    """Whether the run logged sacbench's charts/elapsed_seconds (else: see elapsed_points)."""
    return not run.series(ELAPSED_TAG).empty


def logs_steady_sps(run: Run) -> bool:
    """Whether the run logged sacbench's charts/steady_SPS (else: see steady_sps_points)."""
    return not run.series(STEADY_SPS_TAG).empty


def times_from_wall_clock(run: Run) -> tuple[bool, bool]:
    """(steady SPS, elapsed seconds): which of the two the run's metrics take from its event wall
    times, for want of sacbench's tag (a run with no charts/SPS either has neither)."""
    if run.series(SPS_TAG).empty:
        return False, False
    return not logs_steady_sps(run), not logs_elapsed_seconds(run)


def elapsed_points(run: Run) -> pd.DataFrame:
    """(step, value): the run's seconds since its start at each log point.

    sacbench's trainer logs them as charts/elapsed_seconds. A run that does not (an external
    command's, such as CleanRL's script) gets them from the event wall times of its charts/SPS
    points, minus the time its command started (:func:`_start_unix_time`), and a last point from
    complete.json: the command's elapsed seconds at its last logged step.
    """
    if logs_elapsed_seconds(run):
        return run.series(ELAPSED_TAG)[["step", "value"]]
    points = run.series(SPS_TAG)
    if points.empty:
        raise MetricError(
            f"{run.key.label}: no {ELAPSED_TAG} or {SPS_TAG} values in {run.csv_path}"
        )
    start = _start_unix_time(run)
    if start is None:
        raise MetricError(
            f"{run.key.label}: no {ELAPSED_TAG} in {run.csv_path}, and its summary records no "
            "start time (metadata.json's started_unix_time, complete.json's finished_at)"
        )
    steps = points["step"].tolist()
    seconds = (points["wall_time"] - start).tolist()
    # complete.json's last logged step and elapsed seconds (the command's exit): the end point
    # that the trainer logs as its last charts/elapsed_seconds.
    last_step, elapsed = run.summary_value("global_step"), run.summary_value("elapsed_seconds")
    if isinstance(last_step, int) and isinstance(elapsed, int | float) and last_step > steps[-1]:
        steps.append(last_step)
        seconds.append(float(elapsed))
    return pd.DataFrame({"step": np.asarray(steps, np.int64), "value": np.asarray(seconds)})


def steady_sps_points(run: Run) -> pd.DataFrame:
    """(step, value): steps per second over the window since the previous log point.

    sacbench's trainer logs them as charts/steady_SPS. A run that does not (an external
    command's) gets them from its charts/SPS points: the steps between two consecutive points
    over the difference of their event wall times. The first point, which has no previous one,
    keeps its charts/SPS value (steady SPS never counts a run's first window).
    """
    if logs_steady_sps(run):
        return run.series(STEADY_SPS_TAG)[["step", "value"]]
    points = run.series(SPS_TAG)
    steps = points["step"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rates = np.diff(steps) / np.diff(points["wall_time"].to_numpy(np.float64))
    values = np.concatenate([points["value"].to_numpy(np.float64)[:1], rates])
    return pd.DataFrame({"step": points["step"], "value": values})


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


def warmup_end(steps: np.ndarray) -> float:
    """The logged step at which the warm-up ends: the first STEADY_WARMUP_FRACTION of the
    logged step range ``steps`` (ascending), which steady SPS leaves out."""
    return float(steps[0] + STEADY_WARMUP_FRACTION * (steps[-1] - steps[0]))


def steady_windows(run: Run) -> SteadyWindows:
    """Training throughput without warm-up, and the step where the warm-up ends.

    Each steady SPS point (:func:`steady_sps_points`) covers the steps since the previous log
    point. Points in the
    first 10% of the logged step range (and always the first point, whose window may hold a
    session's first, slow updates) are left out; the rest combine as sum(steps) / sum(steps /
    SPS), a step-weighted harmonic mean.
    """
    points = steady_sps_points(run)
    if points.empty:
        raise MetricError(f"{run.key.label}: no {STEADY_SPS_TAG} values in {run.csv_path}")
    source = STEADY_SPS_TAG if logs_steady_sps(run) else f"{SPS_TAG} (wall times)"
    if len(points) < MIN_STEADY_SPS_POINTS:
        raise MetricError(
            f"{run.key.label}: steady SPS needs at least {MIN_STEADY_SPS_POINTS} {source} points, "
            f"{run.csv_path} has {len(points)}"
        )
    steps = points["step"].to_numpy(dtype=np.float64)
    values = points["value"].to_numpy(dtype=np.float64)
    if np.any(values <= 0) or not np.all(np.isfinite(values)):
        raise MetricError(
            f"{run.key.label}: non-positive steady SPS from {source} in {run.csv_path}"
        )
    windows = np.diff(steps)
    kept = steps[1:] > warmup_end(steps)
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

    The run's measured elapsed seconds (:func:`elapsed_points`) up to the step where its steady
    windows begin (start-up, the random-action phase and the training warm-up, with any one-off
    cost such as compilation, all as measured), plus the remaining steps at its steady training
    SPS. Warm-up is counted once, as measured, rather than extrapolated: it does not grow with
    the run length.
    """
    steady = steady_windows(run)
    elapsed = elapsed_points(run)
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
    # Both series have points at the same steps (the trainer logs both tags together; the
    # wall-time fallbacks both use the charts/SPS points), so this looks the value up exactly.
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
    """openrlbenchmark's runtime in minutes: elapsed seconds (:func:`elapsed_points`) averaged
    over seeds at each step, then the mean of the last max(1, floor(10% of those rows)) rows,
    / 60."""
    series = [elapsed_points(run) for run in runs]
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
