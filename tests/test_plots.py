"""Figures render headless (Agg) with one line per variant in every panel."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from synthetic_runs import GOLDEN_SEEDS, GOLDEN_VARIANTS, golden_run, write_extracted

from sacbench import plots, reference
from sacbench.tables import RunSet, Selection, load_runs

# Four tasks: the 3-column grid needs a second row with two empty slots removed.
ENV_IDS = ("Hopper-v4", "HalfCheetah-v4", "Walker2d-v4", "MyTask-v0")


@pytest.fixture(scope="module")
def runset(tmp_path_factory: pytest.TempPathFactory) -> RunSet:
    root = tmp_path_factory.mktemp("plots")
    for variant in GOLDEN_VARIANTS:
        for env_id in ENV_IDS:
            for seed in GOLDEN_SEEDS:
                run = golden_run(variant, "Hopper-v4", seed)
                run = type(run)(**{**run.__dict__, "env_id": env_id})
                write_extracted(root / "extracted", root / "runs", run, variant=variant)
    selection = Selection(variants=GOLDEN_VARIANTS, env_ids=ENV_IDS, seeds=GOLDEN_SEEDS)
    return load_runs(extracted_dir=root / "extracted", selection=selection, allow_missing=False)


def _lines(axis: plt.Axes, prefix: str) -> dict[str, list]:
    found: dict[str, list] = {}
    for line in axis.get_lines():
        gid = line.get_gid() or ""
        if gid.startswith(prefix):
            found.setdefault(gid.split(":", 1)[1], []).append(line)
    return found


def test_backend_is_agg() -> None:
    assert matplotlib.get_backend().lower() == "agg"


@pytest.mark.parametrize(
    ("make", "prefix"),
    [
        (lambda rs: plots.returns_vs_steps(rs, smoothing_episodes=10), "return:"),
        (lambda rs: plots.returns_vs_time(rs, smoothing_episodes=10), "time:"),
        (plots.sps_vs_steps, "sps:"),
        (plots.sps_vs_steps, "steady_sps:"),
    ],
)
def test_one_line_per_variant_and_panel(runset: RunSet, make, prefix: str) -> None:
    figure = make(runset)
    try:
        axes = figure.axes
        assert [axis.get_title() for axis in axes] == list(ENV_IDS)
        for axis in axes:
            lines = _lines(axis, prefix)
            assert sorted(lines) == sorted(GOLDEN_VARIANTS)
            assert all(len(found) == 1 for found in lines.values())
        figure.canvas.draw()  # renders without error
    finally:
        plt.close(figure)


def test_return_curves_are_the_seed_mean_and_carry_the_reference(runset: RunSet) -> None:
    figure = plots.returns_vs_steps(runset, smoothing_episodes=1)
    try:
        hopper = figure.axes[0]
        (line,) = _lines(hopper, "return:")["fast"]
        x, y = line.get_data()
        # Unsmoothed, the first grid point is the first episode: mean over seeds of 100 + 10 s.
        first = [golden_run("fast", "Hopper-v4", seed).episode_return(0) for seed in GOLDEN_SEEDS]
        assert x[0] == 149 and y[0] == pytest.approx(np.mean(first))
        (ref,) = _lines(hopper, "reference:")["pr-424"]
        assert ref.get_ydata()[0] == reference.PR424["Hopper-v4"].return_mean
        # Runs of 2,000 steps keep their own y range; the label points at the off-scale line.
        assert hopper.get_ylim()[1] < reference.PR424["Hopper-v4"].return_mean
        assert any("pr-424 final" in text.get_text() for text in hopper.texts)
        # A task outside pr-424 gets no reference line.
        assert not _lines(figure.axes[3], "reference:")
        assert "no smoothing" in figure.get_suptitle()
    finally:
        plt.close(figure)


def test_smoothing_is_stated_on_the_figure(runset: RunSet) -> None:
    figure = plots.returns_vs_steps(runset, smoothing_episodes=10)
    try:
        assert "trailing mean over its last 10 episodes" in figure.get_suptitle()
    finally:
        plt.close(figure)


def test_time_axis_is_minutes_of_the_training_job(runset: RunSet) -> None:
    figure = plots.returns_vs_time(runset, smoothing_episodes=1)
    try:
        (line,) = _lines(figure.axes[0], "time:")["reference"]
        runs = [golden_run("reference", "Hopper-v4", seed) for seed in GOLDEN_SEEDS]
        last_episode = runs[0].episode_end_steps()[-1]
        latest_common = min(run.elapsed_seconds(last_episode) for run in runs) / 60.0
        assert line.get_xdata()[-1] == pytest.approx(latest_common, rel=1e-3)
    finally:
        plt.close(figure)


def test_missing_runs_are_named_on_the_figure(tmp_path: Path) -> None:
    run = golden_run("fast", "Hopper-v4", 1)
    write_extracted(tmp_path / "extracted", tmp_path / "runs", run, variant="fast")
    selection = Selection(variants=("fast",), env_ids=("Hopper-v4",), seeds=(1, 2))
    runset = load_runs(
        extracted_dir=tmp_path / "extracted", selection=selection, allow_missing=True
    )
    figure = plots.sps_vs_steps(runset)
    try:
        assert "fast/Hopper-v4/seed 2" in figure.get_suptitle()
        assert sorted(_lines(figure.axes[0], "sps:")) == ["fast"]
    finally:
        plt.close(figure)
