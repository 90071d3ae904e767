"""Statistics: hand-computed answers and invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sacbench.results import stats


def rng(label: str = "test") -> np.random.Generator:
    return stats.seeded_rng(seed=0, label=label)


def test_mean_std_is_population_std() -> None:
    mean, std = stats.mean_std([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert std == pytest.approx(math.sqrt(2.0 / 3.0))


@pytest.mark.parametrize("bad", [[], [1.0, math.nan], [[1.0, 2.0]]])
def test_mean_std_rejects_empty_or_non_finite(bad: list) -> None:
    with pytest.raises(ValueError, match="values"):
        stats.mean_std(bad)


def test_interquartile_mean_trims_a_quarter_at_each_end() -> None:
    assert stats.interquartile_mean(np.arange(1.0, 9.0)) == 4.5  # mean of 3, 4, 5, 6
    assert stats.interquartile_mean(np.array([0.0, 1.0, 2.0, 3.0, 100.0])) == 2.0  # drops 0, 100
    assert stats.interquartile_mean(np.array([1.0, 2.0, 9.0])) == 4.0  # n < 4: plain mean
    rows = stats.interquartile_mean(np.array([[1.0, 2.0, 3.0, 4.0], [4.0, 4.0, 4.0, 40.0]]))
    np.testing.assert_allclose(rows, [2.5, 4.0])


def test_mean_of_task_means_weighs_tasks_equally() -> None:
    assert stats.mean_of_task_means([np.zeros(3), np.ones(1)]) == 0.5


def test_bootstrap_ci_brackets_the_mean_and_is_reproducible() -> None:
    values = [1.0, 4.0, 2.0, 8.0, 5.0]
    low, high = stats.bootstrap_mean_ci(values, resamples=2000, rng=rng())
    assert min(values) <= low < np.mean(values) < high <= max(values)
    assert (low, high) == stats.bootstrap_mean_ci(values, resamples=2000, rng=rng())
    assert (low, high) != stats.bootstrap_mean_ci(values, resamples=2000, rng=rng("other"))


def test_bootstrap_ci_of_identical_values_collapses() -> None:
    assert stats.bootstrap_mean_ci([3.5, 3.5, 3.5], resamples=2000, rng=rng()) == (3.5, 3.5)
    assert stats.bootstrap_mean_ci([7.0], resamples=2000, rng=rng()) == (7.0, 7.0)


@pytest.mark.parametrize("resamples", [0, -5, 2.5, True])
def test_resamples_must_be_a_positive_integer(resamples: object) -> None:
    with pytest.raises(ValueError, match="resamples"):
        stats.bootstrap_mean_ci([1.0, 2.0], resamples=resamples, rng=rng())  # type: ignore[arg-type]


def test_probability_of_improvement_by_hand() -> None:
    # Task 1: pairs (1>0 yes, 1>3 no, 2>0 yes, 2>3 no) = 0.5; task 2: tie = 0.5; task 3: 1.
    x = [np.array([1.0, 2.0]), np.array([5.0]), np.array([9.0])]
    y = [np.array([0.0, 3.0]), np.array([5.0]), np.array([1.0, 2.0])]
    assert stats.probability_of_improvement(x, y) == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    assert stats.probability_of_improvement(y, x) == pytest.approx(1 - (0.5 + 0.5 + 1.0) / 3)


def test_probability_of_improvement_needs_the_same_tasks() -> None:
    with pytest.raises(ValueError, match="same tasks"):
        stats.probability_of_improvement([np.ones(2)], [np.ones(2), np.ones(2)])


def test_stratified_bootstrap_resamples_within_tasks() -> None:
    # One run per task: every resample is the original, so the CI is the point estimate.
    tasks = [np.array([0.2]), np.array([0.8]), np.array([0.5])]
    for point, statistic in (
        (stats.pooled_iqm, stats.iqm_statistic),
        (stats.mean_of_task_means, stats.mean_statistic),
    ):
        low, high = stats.stratified_bootstrap_ci(
            tasks, statistic=statistic, resamples=2000, rng=rng()
        )
        assert low == pytest.approx(point(tasks)) and high == pytest.approx(point(tasks))


def test_stratified_bootstrap_ci_brackets_the_estimates() -> None:
    generator = np.random.default_rng(1)
    tasks = [generator.normal(loc, 0.1, size=5) for loc in (0.2, 0.5, 0.9)]
    for point, statistic in (
        (stats.pooled_iqm, stats.iqm_statistic),
        (stats.mean_of_task_means, stats.mean_statistic),
    ):
        low, high = stats.stratified_bootstrap_ci(
            tasks, statistic=statistic, resamples=2000, rng=rng()
        )
        assert low < point(tasks) < high
    x = [task + 0.05 for task in tasks]
    estimate = stats.probability_of_improvement(x, tasks)
    low, high = stats.probability_of_improvement_ci(x, tasks, resamples=2000, rng=rng())
    assert estimate > 0.5 and low <= estimate <= high <= 1.0


def test_seeded_rng_streams_depend_on_label_and_seed() -> None:
    draw = stats.seeded_rng(seed=0, label="a").integers(0, 1 << 30, size=4)
    assert (draw == stats.seeded_rng(seed=0, label="a").integers(0, 1 << 30, size=4)).all()
    assert not (draw == stats.seeded_rng(seed=1, label="a").integers(0, 1 << 30, size=4)).all()
    assert not (draw == stats.seeded_rng(seed=0, label="b").integers(0, 1 << 30, size=4)).all()


# ---- performance profiles ---------------------------------------------------------------------


def test_performance_profile_is_the_mean_over_tasks_of_the_fraction_above_each_score() -> None:
    tasks = [np.array([0.0, 0.5, 1.0]), np.array([2.0])]
    profile = stats.performance_profile(tasks, [-1.0, 0.0, 0.25, 1.0, 2.0])
    # tau 0.25: 2 of 3 runs of the first task and its one run of the second; scores equal to
    # tau are not above it.
    np.testing.assert_allclose(profile, [1.0, (2 / 3 + 1) / 2, (2 / 3 + 1) / 2, 0.5, 0.0])


def test_performance_profile_ci_brackets_the_profile() -> None:
    tasks = [np.array([0.1, 0.4, 0.9, 0.3]), np.array([0.2, 0.8, 0.6])]
    taus = np.linspace(-0.1, 1.0, 50)
    profile = stats.performance_profile(tasks, taus)
    low, high = stats.performance_profile_ci(
        tasks, taus, resamples=2000, rng=np.random.default_rng(3)
    )
    assert low.shape == high.shape == profile.shape
    assert np.all(low <= profile + 1e-12) and np.all(profile <= high + 1e-12)
    assert np.all(np.diff(profile) <= 0) and profile[0] == 1.0 and profile[-1] == 0.0
    assert np.any(high - low > 0.2)  # four and three runs leave wide bands
    again = stats.performance_profile_ci(tasks, taus, resamples=2000, rng=np.random.default_rng(3))
    np.testing.assert_array_equal(again[0], low)
