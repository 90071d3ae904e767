"""Statistics of the results tables: seed summaries, bootstrap CIs, IQM, probability of improvement.

Shapes: a ``sample`` is a 1-D array of per-run values (one per seed); ``scores_by_task`` is a list
with one 1-D array of per-run scores per task (tasks may hold different numbers of runs). Every
random draw comes from the ``numpy.random.Generator`` passed in, so results are reproducible.
The aggregate estimators follow Agarwal et al. (2021, "Deep RL at the edge of the statistical
precipice"): IQM with 25% trimmed from each end, percentile CIs from a stratified bootstrap that
resamples runs within each task.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence

import numpy as np

CI_LEVEL = 0.95
MIN_RESAMPLES = 2_000


def seeded_rng(*, seed: int, label: str) -> np.random.Generator:
    """A generator seeded by ``seed`` and ``label``: each table cell gets its own stream, so a
    cell's CI does not change when other variants or tasks are added."""
    return np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(label.encode())]))


def _check_resamples(resamples: int) -> None:
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples!r}")


def _as_sample(values: Sequence[float] | np.ndarray, *, name: str) -> np.ndarray:
    sample = np.asarray(values, dtype=np.float64)
    if sample.ndim != 1 or sample.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence, got shape {sample.shape}")
    if not np.all(np.isfinite(sample)):
        raise ValueError(f"{name} holds non-finite values: {sample.tolist()}")
    return sample


def mean_std(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and population standard deviation (ddof=0, as openrlbenchmark reports)."""
    sample = _as_sample(values, name="values")
    return float(sample.mean()), float(sample.std(ddof=0))


def _percentile_interval(estimates: np.ndarray) -> tuple[float, float]:
    tail = 100.0 * (1.0 - CI_LEVEL) / 2.0
    low, high = np.percentile(estimates, [tail, 100.0 - tail])
    return float(low), float(high)


def bootstrap_mean_ci(
    values: Sequence[float] | np.ndarray, *, resamples: int, rng: np.random.Generator
) -> tuple[float, float]:
    """Percentile 95% CI of the mean, resampling the values (seeds) with replacement.

    With one value the interval collapses to that value; with three seeds it is coarse (at most
    10 distinct resample means), which the tables say.
    """
    _check_resamples(resamples)
    sample = _as_sample(values, name="values")
    draws = rng.integers(0, sample.size, size=(resamples, sample.size))
    return _percentile_interval(sample[draws].mean(axis=1))


def interquartile_mean(scores: np.ndarray, axis: int = -1) -> np.ndarray | float:
    """Mean of the middle 50%: sort, drop floor(n/4) values at each end, average the rest
    (scipy.stats.trim_mean with proportiontocut=0.25)."""
    scores = np.asarray(scores, dtype=np.float64)
    count = scores.shape[axis]
    if count == 0:
        raise ValueError("interquartile_mean needs at least one score")
    cut = int(0.25 * count)
    ordered = np.sort(scores, axis=axis)
    kept = np.take(ordered, np.arange(cut, count - cut), axis=axis)
    result = kept.mean(axis=axis)
    return float(result) if np.ndim(result) == 0 else result


def mean_of_task_means(scores_by_task: Sequence[np.ndarray]) -> float:
    """Mean over tasks of each task's mean over runs: every task weighs the same."""
    tasks = _as_tasks(scores_by_task)
    return float(np.mean([task.mean() for task in tasks]))


def pooled_iqm(scores_by_task: Sequence[np.ndarray]) -> float:
    """IQM of all runs of all tasks pooled together (rliable's IQM over the runs x tasks matrix)."""
    tasks = _as_tasks(scores_by_task)
    return float(interquartile_mean(np.concatenate(tasks)))


def _as_tasks(scores_by_task: Sequence[np.ndarray]) -> list[np.ndarray]:
    if len(scores_by_task) == 0:
        raise ValueError("scores_by_task must hold at least one task")
    return [
        _as_sample(task, name=f"scores of task {index}")
        for index, task in enumerate(scores_by_task)
    ]


def _stratified_draws(
    tasks: list[np.ndarray], *, resamples: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Per task, a (resamples, runs) array of its runs drawn with replacement."""
    return [task[rng.integers(0, task.size, size=(resamples, task.size))] for task in tasks]


def stratified_bootstrap_ci(
    scores_by_task: Sequence[np.ndarray],
    *,
    statistic: Callable[[list[np.ndarray]], np.ndarray],
    resamples: int,
    rng: np.random.Generator,
) -> tuple[float, float]:
    """Percentile 95% CI of ``statistic`` under a bootstrap that resamples runs within each task.

    ``statistic`` maps the list of per-task (resamples, runs) arrays to one value per resample;
    use :func:`iqm_statistic` or :func:`mean_statistic`.
    """
    _check_resamples(resamples)
    tasks = _as_tasks(scores_by_task)
    estimates = statistic(_stratified_draws(tasks, resamples=resamples, rng=rng))
    return _percentile_interval(np.asarray(estimates))


def iqm_statistic(draws: list[np.ndarray]) -> np.ndarray:
    return np.asarray(interquartile_mean(np.concatenate(draws, axis=1), axis=1))


def mean_statistic(draws: list[np.ndarray]) -> np.ndarray:
    return np.mean([draw.mean(axis=1) for draw in draws], axis=0)


def _task_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) for one task, ties counting one half; works on (..., runs) arrays."""
    greater = (x[..., :, None] > y[..., None, :]).mean(axis=(-1, -2))
    ties = (x[..., :, None] == y[..., None, :]).mean(axis=(-1, -2))
    return greater + 0.5 * ties


def probability_of_improvement(
    x_by_task: Sequence[np.ndarray], y_by_task: Sequence[np.ndarray]
) -> float:
    """Mean over tasks of P(a run of X scores higher than a run of Y), ties counting one half."""
    xs, ys = _as_tasks(x_by_task), _as_tasks(y_by_task)
    if len(xs) != len(ys):
        raise ValueError(f"x has {len(xs)} tasks but y has {len(ys)}; compare on the same tasks")
    return float(np.mean([_task_improvement(x, y) for x, y in zip(xs, ys, strict=True)]))


def probability_of_improvement_ci(
    x_by_task: Sequence[np.ndarray],
    y_by_task: Sequence[np.ndarray],
    *,
    resamples: int,
    rng: np.random.Generator,
) -> tuple[float, float]:
    """Stratified bootstrap CI: X's and Y's runs are resampled independently within each task."""
    _check_resamples(resamples)
    xs, ys = _as_tasks(x_by_task), _as_tasks(y_by_task)
    if len(xs) != len(ys):
        raise ValueError(f"x has {len(xs)} tasks but y has {len(ys)}; compare on the same tasks")
    x_draws = _stratified_draws(xs, resamples=resamples, rng=rng)
    y_draws = _stratified_draws(ys, resamples=resamples, rng=rng)
    per_task = [_task_improvement(x, y) for x, y in zip(x_draws, y_draws, strict=True)]
    return _percentile_interval(np.mean(per_task, axis=0))


def performance_profile(
    scores_by_task: Sequence[np.ndarray], thresholds: Sequence[float] | np.ndarray
) -> np.ndarray:
    """The fraction of runs scoring above each threshold, per task, averaged over tasks (every
    task weighs the same, as in rliable's score distributions); one value per threshold."""
    tasks = _as_tasks(scores_by_task)
    taus = np.asarray(thresholds, dtype=np.float64)
    return np.mean([(task[:, None] > taus[None, :]).mean(axis=0) for task in tasks], axis=0)


def performance_profile_ci(
    scores_by_task: Sequence[np.ndarray],
    thresholds: Sequence[float] | np.ndarray,
    *,
    resamples: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise percentile 95% CIs of :func:`performance_profile` under the stratified bootstrap
    (runs resampled within each task): (low, high), one value per threshold each."""
    _check_resamples(resamples)
    tasks = _as_tasks(scores_by_task)
    taus = np.asarray(thresholds, dtype=np.float64)
    draws = _stratified_draws(tasks, resamples=resamples, rng=rng)
    # Per task: (resamples, runs, thresholds) -> the fraction above each threshold per resample.
    per_task = [(draw[:, :, None] > taus[None, None, :]).mean(axis=1) for draw in draws]
    profiles = np.mean(per_task, axis=0)
    tail = 100.0 * (1.0 - CI_LEVEL) / 2.0
    low, high = np.percentile(profiles, [tail, 100.0 - tail], axis=0)
    return low, high
