"""Figures render headless (Agg) with one line per variant in every panel, every legend entry is
drawn, and no text covers a curve or another text, for smoke-sized and long runs."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text
from synthetic_runs import (
    GOLDEN_SEEDS,
    GOLDEN_VARIANTS,
    SyntheticRun,
    golden_run,
    write_extracted,
)

from sacbench import published
from sacbench.results import plots
from sacbench.results.aggregate import aggregate_table
from sacbench.results.runs import RunSet, Selection, load_runs

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


def _runset(root: Path, runs: list[SyntheticRun], variants: tuple[str, ...]) -> RunSet:
    for variant in variants:
        for run in runs:
            write_extracted(root / "extracted", root / "runs", run, variant=variant)
    selection = Selection(
        variants=variants,
        env_ids=tuple(dict.fromkeys(run.env_id for run in runs)),
        seeds=tuple(sorted({run.seed for run in runs})),
    )
    return load_runs(extracted_dir=root / "extracted", selection=selection, allow_missing=False)


@pytest.fixture(scope="module")
def inrange_runset(tmp_path_factory: pytest.TempPathFactory) -> RunSet:
    """Smoke-sized runs whose returns reach pr-424's for two tasks (not for Hopper); each
    evaluated once, at the end, as the smoke preset does."""
    bases = {"InvertedPendulum-v4": 860.0, "Pusher-v4": -70.0, "Hopper-v4": 100.0}
    runs = [
        SyntheticRun(env_id=env_id, seed=seed, base_return=base, eval_episodes=3)
        for env_id, base in bases.items()
        for seed in GOLDEN_SEEDS
    ]
    return _runset(tmp_path_factory.mktemp("inrange"), runs, GOLDEN_VARIANTS)


@pytest.fixture(scope="module")
def smoke_preset_runset(tmp_path_factory: pytest.TempPathFactory) -> RunSet:
    """The smoke preset's shape (config/smoke.yaml): 1,400 steps, learning from step 1,000, so
    the SPS figure's steps after the warm-up span only a few hundred."""
    runs = [
        SyntheticRun(env_id=env_id, seed=1, total_timesteps=1_400, learning_starts=1_000,
                     episode_length=100, eval_episodes=3)
        for env_id in ("HalfCheetah-v4", "Walker2d-v4", "Hopper-v4", "InvertedPendulum-v4")
    ]  # fmt: skip
    return _runset(tmp_path_factory.mktemp("smoke-preset"), runs, ("fast",))


@pytest.fixture(scope="module")
def long_runset(tmp_path_factory: pytest.TempPathFactory) -> RunSet:
    """Half of pr-424's 1M steps, two seeds: long curves, returns well below pr-424's."""
    runs = [
        SyntheticRun(
            seed=seed,
            total_timesteps=500_000,
            learning_starts=5_000,
            episode_length=1_000,
            return_slope=1.0,
            write_losses=False,
            eval_frequency=50_000,
            eval_episodes=5,
            eval_slope=0.002,
        )
        for seed in (1, 2)
    ]
    return _runset(tmp_path_factory.mktemp("long"), runs, ("fast",))


def _lines(axis: plt.Axes, prefix: str) -> dict[str, list]:
    found: dict[str, list] = {}
    for line in axis.get_lines():
        gid = line.get_gid() or ""
        if gid.startswith(prefix):
            found.setdefault(gid.split(":", 1)[1], []).append(line)
    return found


def _legend_labels(figure: Figure) -> list[str]:
    return [text.get_text() for legend in figure.legends for text in legend.get_texts()]


def _curve_lines(axis: plt.Axes) -> list[Line2D]:
    return [line for line in axis.get_lines() if not (line.get_gid() or "").startswith("ref")]


def _drawn_labels(figure: Figure) -> set[str]:
    """Labels of the lines that show inside their axes: some vertex within the view limits."""
    drawn = set()
    for axis in figure.axes:
        box = axis.get_window_extent()
        for line in axis.get_lines():
            points = line.get_transform().transform(line.get_xydata())
            if line.get_visible() and any(box.contains(x, y) for x, y in points):
                drawn.add(line.get_label())
    return drawn


def _data_points(axis: plt.Axes) -> np.ndarray:
    """Display coordinates of everything plotted in ``axis``: each line densely sampled along
    its segments, and the outline of each band; only what lies inside the axes (the rest is
    clipped away when drawn)."""
    parts = [np.empty((0, 2))]
    for line in axis.get_lines():
        points = line.get_transform().transform(line.get_xydata())
        if len(points) > 1:
            fractions = np.linspace(0.0, 1.0, 25)[:, None, None]
            points = (points[:-1] + fractions * (points[1:] - points[:-1])).reshape(-1, 2)
        parts.append(points)
    for collection in axis.collections:
        for path in collection.get_paths():
            parts.append(collection.get_transform().transform(path.vertices))
    points = np.concatenate(parts)
    box = axis.get_window_extent()
    inside = (
        (points[:, 0] >= box.x0)
        & (points[:, 0] <= box.x1)
        & (points[:, 1] >= box.y0)
        & (points[:, 1] <= box.y1)
    )
    return points[inside]


def _shown_tick_labels(axis: plt.Axes) -> list[Text]:
    """Tick labels of the ticks inside the view limits: matplotlib keeps, but does not draw,
    labels for ticks just outside them."""
    shown = []
    for ticks, labels, limits in (
        (axis.get_xticks(), axis.get_xticklabels(), axis.get_xlim()),
        (axis.get_yticks(), axis.get_yticklabels(), axis.get_ylim()),
    ):
        low, high = sorted(limits)
        slack = 1e-9 * (high - low)
        shown += [
            label
            for tick, label in zip(ticks, labels, strict=True)
            if low - slack <= tick <= high + slack
        ]
    return shown


def _texts(figure: Figure) -> list[Text]:
    """Every text the figure draws: titles, labels, tick labels, annotations, legend."""
    texts = [*figure.texts]  # the suptitle is one of them
    texts += [text for legend in figure.legends for text in legend.get_texts()]
    for axis in figure.axes:
        texts += [axis.title, axis._left_title, axis._right_title, *axis.texts]
        texts += [axis.xaxis.label, axis.yaxis.label, *_shown_tick_labels(axis)]
    return [text for text in texts if text.get_visible() and text.get_text().strip()]


LAYOUT_OPTIONS = plots.FigureOptions(bootstrap_resamples=200)
FIGURES: list[tuple[str, Callable[[RunSet], Figure]]] = [
    ("sac", lambda rs: plots.returns_vs_steps(rs, smoothing_episodes=10)),
    ("sac-time", lambda rs: plots.returns_vs_time(rs, smoothing_episodes=10)),
    ("sac-sps", plots.sps_vs_steps),
    ("sac-eval", plots.evaluation_returns),
    # Layout only: fewer bootstrap resamples than the report's 2,000 draw the same shapes faster.
    ("sac-aggregate", lambda rs: plots.aggregate_intervals(rs, options=LAYOUT_OPTIONS)),
    ("sac-profile", lambda rs: plots.performance_profile(rs, options=LAYOUT_OPTIONS)),
]
# The least space between two texts of a figure, at the default 100 dpi.
TEXT_GAP_PIXELS = 3
RUNSETS = ["runset", "inrange_runset", "long_runset", "smoke_preset_runset"]


@pytest.mark.parametrize("runset_name", RUNSETS)
@pytest.mark.parametrize(("name", "make"), FIGURES, ids=[name for name, _ in FIGURES])
def test_every_legend_entry_is_drawn_in_some_panel(
    request: pytest.FixtureRequest, runset_name: str, name: str, make: Callable[[RunSet], Figure]
) -> None:
    figure = make(request.getfixturevalue(runset_name))
    try:
        figure.canvas.draw()
        labels = _legend_labels(figure)
        assert labels and len(labels) == len(set(labels))
        assert set(labels) <= _drawn_labels(figure), f"{name}: legend entries not drawn"
    finally:
        plt.close(figure)


@pytest.mark.parametrize("runset_name", RUNSETS)
@pytest.mark.parametrize(("name", "make"), FIGURES, ids=[name for name, _ in FIGURES])
def test_no_text_covers_data_or_other_text(
    request: pytest.FixtureRequest, runset_name: str, name: str, make: Callable[[RunSet], Figure]
) -> None:
    figure = make(request.getfixturevalue(runset_name))
    try:
        figure.canvas.draw()
        renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
        texts = _texts(figure)
        boxes = [text.get_window_extent(renderer) for text in texts]
        points = np.concatenate([_data_points(axis) for axis in figure.axes])
        assert len(points) > 0
        for text, box in zip(texts, boxes, strict=True):
            covered = (
                (points[:, 0] > box.x0)
                & (points[:, 0] < box.x1)
                & (points[:, 1] > box.y0)
                & (points[:, 1] < box.y1)
            )
            assert not covered.any(), f"{name}: {text.get_text()!r} covers plotted data"
        # Texts must not touch either: neighbouring tick labels that meet read as one number.
        padded = [box.padded(TEXT_GAP_PIXELS / 2) for box in boxes]
        for i, first in enumerate(padded):
            for j in range(i + 1, len(padded)):
                assert not first.overlaps(padded[j]), (
                    f"{name}: {texts[i].get_text()!r} overlaps {texts[j].get_text()!r}"
                )
    finally:
        plt.close(figure)


def test_titles_meet_no_number_written_above_the_axis(tmp_path: Path) -> None:
    """Returns of about 1,000,000 that vary by less than one: matplotlib's default writes an
    offset ("+1.00001e6") above the y axis, where the panel's title is placed by hand. The tick
    labels say the plain numbers instead, and nothing is written above the axis."""
    runs = [SyntheticRun(base_return=1_000_000.0, return_slope=0.01)]
    figure = plots.returns_vs_steps(_runset(tmp_path, runs, ("fast",)), smoothing_episodes=1)
    try:
        figure.canvas.draw()
        (axis,) = figure.axes
        assert axis.yaxis.offsetText.get_text() == ""
        y_labels = axis.get_yticklabels()
        shown = [label.get_text() for label in _shown_tick_labels(axis) if label in y_labels]
        assert shown and all(1_000_000 <= float(text) < 1_000_100 for text in shown), shown
    finally:
        plt.close(figure)


def test_plots_choose_agg_whatever_backend_the_environment_names() -> None:
    # The module selects Agg itself rather than relying on the environment (in this process
    # the test setup may already have chosen Agg). Headless, matplotlib itself replaces an
    # interactive backend by Agg, so the environment names a non-interactive one, which it keeps.
    environment = {name: value for name, value in os.environ.items() if name != "DISPLAY"}
    environment["MPLBACKEND"] = "pdf"
    code = "import matplotlib, sacbench.results.plots; print(matplotlib.get_backend())"
    done = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().lower() == "agg"


@pytest.mark.parametrize(
    ("make", "prefix"),
    [
        (lambda rs: plots.returns_vs_steps(rs, smoothing_episodes=10), "return:"),
        (lambda rs: plots.returns_vs_time(rs, smoothing_episodes=10), "time:"),
        (plots.sps_vs_steps, "sps:"),
        (plots.sps_vs_steps, "steady_sps:"),
        (plots.evaluation_returns, "eval:"),
    ],
)
def test_one_line_per_variant_and_panel(runset: RunSet, make, prefix: str) -> None:
    figure = make(runset)
    try:
        axes = figure.axes
        assert [axis.get_title(loc="left") for axis in axes] == list(ENV_IDS)
        for axis in axes:
            lines = _lines(axis, prefix)
            assert sorted(lines) == sorted(GOLDEN_VARIANTS)
            assert all(len(found) == 1 for found in lines.values())
        figure.canvas.draw()  # renders without error
    finally:
        plt.close(figure)


def test_return_curves_are_the_seed_mean_and_name_the_published_return(runset: RunSet) -> None:
    figure = plots.returns_vs_steps(runset, smoothing_episodes=1)
    try:
        hopper = figure.axes[0]
        (line,) = _lines(hopper, "return:")["fast"]
        x, y = line.get_data()
        # Unsmoothed, the first grid point is the first episode: mean over seeds of 100 + 10 s.
        first = [golden_run("fast", "Hopper-v4", seed).episode_return(0) for seed in GOLDEN_SEEDS]
        assert x[0] == 149 and y[0] == pytest.approx(np.mean(first))
        # Runs of 2,000 steps keep their own y range; the off-scale value is in the title, and
        # no line is drawn (nor put in the legend) outside the axes.
        assert hopper.get_ylim()[1] < published.PR424["Hopper-v4"].return_mean
        assert not _lines(hopper, "published:")
        assert hopper.get_title(loc="right") == "pr-424: 2,310.46 (above ↑)"
        assert plots.PUBLISHED_LINE_LABEL not in _legend_labels(figure)
        # A task outside pr-424 gets neither.
        assert not _lines(figure.axes[3], "published:")
        assert figure.axes[3].get_title(loc="right") == ""
        assert "no smoothing" in figure.get_suptitle()
    finally:
        plt.close(figure)


def test_published_return_inside_a_short_runs_range_is_drawn_without_widening_it(
    inrange_runset: RunSet,
) -> None:
    figure = plots.returns_vs_steps(inrange_runset, smoothing_episodes=1)
    try:
        pendulum, pusher, hopper = figure.axes
        for axis, env_id in ((pendulum, "InvertedPendulum-v4"), (pusher, "Pusher-v4")):
            value = published.PR424[env_id].return_mean
            (line,) = _lines(axis, "published:")["pr-424"]
            assert line.get_ydata()[0] == value
            assert axis.get_title(loc="right").endswith("(dashed)")
            # The limits are those of the curves and bands: the line did not stretch them.
            data = np.concatenate(
                [line.get_ydata() for line in _curve_lines(axis)]
                + [path.vertices[:, 1] for band in axis.collections for path in band.get_paths()]
            )
            low, high = axis.get_ylim()
            assert low > data.min() - 0.1 * np.ptp(data)
            assert high < data.max() + 0.1 * np.ptp(data)
        assert not _lines(hopper, "published:")
        assert plots.PUBLISHED_LINE_LABEL in _legend_labels(figure)
    finally:
        plt.close(figure)


def test_published_return_is_always_drawn_for_long_runs(long_runset: RunSet) -> None:
    figure = plots.returns_vs_steps(long_runset, smoothing_episodes=10)
    try:
        (axis,) = figure.axes
        value = published.PR424["Hopper-v4"].return_mean
        assert _lines(axis, "published:")
        low, high = axis.get_ylim()
        assert low < value < high  # far above the curves, but these runs are comparable
        assert axis.get_title(loc="right") == "pr-424: 2,310.46 (dashed)"
        assert axis.xaxis.get_major_formatter()(500_000, 0) == "500k"
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
        (line,) = _lines(figure.axes[0], "time:")["baseline"]
        runs = [golden_run("baseline", "Hopper-v4", seed) for seed in GOLDEN_SEEDS]
        last_episode = runs[0].episode_end_steps()[-1]
        latest_common = min(run.elapsed_seconds(last_episode) for run in runs) / 60.0
        assert line.get_xdata()[-1] == pytest.approx(latest_common, rel=1e-3)
    finally:
        plt.close(figure)


EXAMPLE_1M = Path(__file__).parents[1] / "results" / "examples" / "halfcheetah-1m" / "extracted"


def _after_warmup(points: pd.DataFrame) -> np.ndarray:
    """A series' values after the first 10% of its logged step range, as steady SPS counts."""
    steps = points["step"].to_numpy(np.float64)
    return points["value"].to_numpy(np.float64)[steps > steps[0] + 0.1 * (steps[-1] - steps[0])]


def test_the_sps_axis_shows_training_throughput_not_the_random_phase() -> None:
    """The committed 1M-step runs (real events, extracted by the pipeline): CleanRL SPS starts
    near 6,000 over the random-action steps and trains at about 200; the axis shows the 200."""
    selection = Selection(variants=("sac_continuous_action",), env_ids=("HalfCheetah-v4",),
                          seeds=(1, 2, 3))  # fmt: skip
    runset = load_runs(extracted_dir=EXAMPLE_1M, selection=selection, allow_missing=False)
    figure = plots.sps_vs_steps(runset)
    try:
        (axis,) = figure.axes
        bottom, top = axis.get_ylim()
        runs = list(runset.runs.values())
        trained = np.concatenate([_after_warmup(run.series("charts/steady_SPS")) for run in runs])
        cumulative = np.concatenate([_after_warmup(run.series("charts/SPS")) for run in runs])
        assert bottom == 0
        assert max(trained.max(), cumulative.max()) <= top < 1.5 * trained.max()
        (mean_line,) = _lines(axis, "sps:")["sac_continuous_action"]
        assert mean_line.get_ydata().max() > 10 * top  # the start-up, drawn but cut off
        assert "start-up values above it are cut off" in figure.get_suptitle()
    finally:
        plt.close(figure)


def test_the_sps_axis_keeps_every_value_when_none_stands_out(tmp_path: Path) -> None:
    """Without a random-action phase CleanRL SPS only rises: nothing is cut off or said to be."""
    runset = _runset(tmp_path, [SyntheticRun(learning_starts=0)], ("fast",))
    figure = plots.sps_vs_steps(runset)
    try:
        (axis,) = figure.axes
        (run,) = runset.runs.values()
        highest = max(run.series(tag)["value"].max() for tag in ("charts/SPS", "charts/steady_SPS"))
        assert axis.get_ylim()[1] >= highest
        assert "cut off" not in figure.get_suptitle()
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


def test_evaluation_curves_are_the_seed_mean_of_each_evaluations_mean(runset: RunSet) -> None:
    figure = plots.evaluation_returns(runset)
    try:
        (line,) = _lines(figure.axes[0], "eval:")["baseline"]
        x, y = line.get_data()
        runs = [golden_run("baseline", "Hopper-v4", seed) for seed in GOLDEN_SEEDS]
        # Evaluations at 500, 1000, 1500 and 2000 steps; 10 episodes around the run's mean.
        assert (x[0], x[-1]) == (500, 2000)
        for step, value in ((x[0], y[0]), (x[-1], y[-1])):
            means = [np.mean([run.eval_return(step, k) for k in range(10)]) for run in runs]
            assert value == pytest.approx(np.mean(means))
        assert "published no evaluation returns" in figure.get_suptitle()
        assert not _lines(figure.axes[0], "published:")
    finally:
        plt.close(figure)


def test_a_final_evaluation_alone_is_a_point_with_its_spread(inrange_runset: RunSet) -> None:
    figure = plots.evaluation_returns(inrange_runset)
    try:
        axis = figure.axes[2]  # Hopper-v4: seeds 1-3 at 100 + 0.1 * 2000 + 10 s
        (line,) = _lines(axis, "eval:")["fast"]
        assert line.get_xdata().tolist() == [2000] and line.get_marker() == "o"
        assert line.get_ydata()[0] == pytest.approx(320.0)
        bars = [c for c in axis.collections if isinstance(c, LineCollection)]
        spans = sorted(float(np.ptp(bar.get_segments()[0][:, 1])) for bar in bars)
        # One bar per variant, each ± the std over seeds
        assert spans == pytest.approx([2 * np.std([310.0, 320.0, 330.0])] * 2)
    finally:
        plt.close(figure)


def test_the_evaluation_figure_needs_runs_that_evaluated(tmp_path: Path) -> None:
    runset = _runset(tmp_path / "none", [SyntheticRun(seed=1)], ("fast",))
    # Hopper-v4 has normalisation anchors, so the aggregate figures are drawn.
    assert plots.figures_with_data(runset) == [
        "sac", "sac-time", "sac-sps", "sac-aggregate", "sac-profile"
    ]  # fmt: skip
    with pytest.raises(ValueError, match="no run logged eval/episodic_return"):
        plots.evaluation_returns(runset)
    ant = _runset(tmp_path / "ant", [SyntheticRun(seed=1, env_id="Ant-v5")], ("fast",))
    assert plots.figures_with_data(ant) == ["sac", "sac-time", "sac-sps"]  # nothing to normalise
    mixed = _runset(
        tmp_path / "mixed", [SyntheticRun(seed=1, eval_episodes=2), SyntheticRun(seed=2)], ("a",)
    )
    assert plots.figures_with_data(mixed) == list(plots.FIGURES)
    figure = plots.evaluation_returns(mixed)
    try:
        assert "No evaluation logged (not drawn): a/Hopper-v4/seed 2" in figure.get_suptitle()
    finally:
        plt.close(figure)


# ---- the rliable-style figures of the aggregate statistics ---------------------------------------


def test_the_aggregate_figure_draws_the_tables_estimates_and_intervals(runset: RunSet) -> None:
    table = aggregate_table(
        runset, last_episodes=100, bootstrap_resamples=2000, bootstrap_seed=0, allow_missing=False
    )
    rows = pd.read_csv(io.StringIO(table.csv))
    figure = plots.aggregate_intervals(runset, options=plots.FigureOptions())
    try:
        lines = {line.get_gid(): line for axis in figure.axes for line in axis.get_lines()}
        for row in rows[rows.statistic != "probability_of_improvement"].itertuples():
            bar = lines[f"interval:{row.statistic}:{row.variant}"]
            assert list(bar.get_xdata()) == [row.ci95_low, row.ci95_high]
            (estimate,) = lines[f"estimate:{row.statistic}:{row.variant}"].get_xdata()
            assert estimate == row.value and row.ci95_low <= estimate <= row.ci95_high
        assert "Left out (no published pr-424 return): MyTask-v0" in figure.texts[0].get_text()
    finally:
        plt.close(figure)


def test_the_performance_profile_falls_from_all_runs_to_none(runset: RunSet) -> None:
    figure = plots.performance_profile(runset, options=plots.FigureOptions())
    try:
        (axis,) = figure.axes
        for variant in GOLDEN_VARIANTS:
            (line,) = _lines(axis, "profile:")[variant]
            taus, fractions = line.get_xdata(), line.get_ydata()
            assert fractions[0] == 1.0 and fractions[-1] == 0.0
            assert np.all(np.diff(fractions) <= 0)
            # 3 tasks x 3 seeds: every value a mean over tasks of thirds
            assert np.allclose(fractions * 9, np.round(fractions * 9))
            assert taus[0] < 0.0 and taus[-1] > 1.0  # random and pr-424 both on the axis
        assert len(axis.collections) == len(GOLDEN_VARIANTS)  # one CI band per variant
    finally:
        plt.close(figure)
