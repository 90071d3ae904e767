"""Golden tests: tables rendered from fixed synthetic runs equal the stored markdown.

Regenerate the stored files after an intended change with
``SACBENCH_UPDATE_GOLDEN=1 python -m pytest tests/test_tables.py`` and review the diff.
"""

from __future__ import annotations

import io
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from synthetic_runs import (
    GOLDEN_ENV_IDS,
    GOLDEN_SEEDS,
    GOLDEN_VARIANTS,
    SyntheticRun,
    golden_run,
    write_extracted,
    write_golden_set,
)
from tensorboard.backend.event_processing import event_accumulator

from sacbench import published
from sacbench.results import definitions
from sacbench.results.aggregate import aggregate_table
from sacbench.results.metrics import (
    projected_minutes,
    steady_sps,
    steady_windows,
    wall_clock_minutes,
)
from sacbench.results.provenance_table import _update_of
from sacbench.results.render import (
    MINUTES,
    SECONDS,
    DurationUnit,
    duration_text,
    duration_unit,
)
from sacbench.results.returns import returns_table
from sacbench.results.runs import ResultsInputError, Run, RunKey, RunSet, Selection, load_runs
from sacbench.results.runtimes import runtimes_table

GOLDEN_DIR = Path(__file__).parent / "golden"
DOCS_RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results.md"
SELECTION = Selection(variants=GOLDEN_VARIANTS, env_ids=GOLDEN_ENV_IDS, seeds=GOLDEN_SEEDS)


@pytest.fixture(scope="module")
def golden_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("golden")
    write_golden_set(root)
    return root


@pytest.fixture(scope="module")
def runset(golden_root: Path) -> RunSet:
    return load_runs(
        extracted_dir=golden_root / "extracted", selection=SELECTION, allow_missing=False
    )


def assert_golden(name: str, text: str) -> None:
    path = GOLDEN_DIR / name
    if os.environ.get("SACBENCH_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.is_file(), f"{path} missing; run with SACBENCH_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text()


def test_runtimes_golden(runset: RunSet) -> None:
    table = runtimes_table(runset, allow_missing=False)
    assert_golden("sac_runtimes.md", table.markdown)
    assert_golden("sac_runtimes.csv", table.csv)


def test_returns_golden(runset: RunSet) -> None:
    table = returns_table(
        runset, last_episodes=100, bootstrap_resamples=2000, bootstrap_seed=0, allow_missing=False
    )
    assert_golden("sac.md", table.markdown)
    assert_golden("sac.csv", table.csv)


def test_aggregate_golden(runset: RunSet) -> None:
    table = aggregate_table(
        runset, last_episodes=100, bootstrap_resamples=2000, bootstrap_seed=0, allow_missing=False
    )
    assert_golden("sac_aggregate.md", table.markdown)
    assert_golden("sac_aggregate.csv", table.csv)


# ---- the definitions in docs/results.md ------------------------------------------------


def test_docs_results_definitions_are_current() -> None:
    block = definitions.docs_block(DOCS_RESULTS.read_text(encoding="utf-8"), path=DOCS_RESULTS)
    assert block == definitions.definitions_markdown(), (
        f"the generated definitions in {DOCS_RESULTS} differ from what "
        f"sacbench/results/definitions.py renders; regenerate them with "
        f"`{definitions.DOCS_COMMAND}`"
    )


def _printed_definitions(markdown: str) -> list[str]:
    block = markdown.split("**Definitions and units**\n\n", 1)[1].split("\n\n", 1)[0]
    return block.splitlines()


def test_the_generated_definitions_are_what_the_tables_print(runset: RunSet) -> None:
    """The docs block holds each table's list as the table prints it with the report's default
    flags; only the aggregate's anchors depend on the tasks (the block's are pr-424's six)."""
    flags = {
        "last_episodes": definitions.DEFAULT_LAST_EPISODES,
        "bootstrap_resamples": definitions.DEFAULT_BOOTSTRAP_RESAMPLES,
        "bootstrap_seed": definitions.DEFAULT_BOOTSTRAP_SEED,
        "allow_missing": False,
    }
    block = definitions.definitions_markdown().splitlines()
    runtimes = _printed_definitions(runtimes_table(runset, allow_missing=False).markdown)
    returns = _printed_definitions(returns_table(runset, **flags).markdown)
    aggregate = _printed_definitions(aggregate_table(runset, **flags).markdown)
    assert len(runtimes) > 5 and len(returns) > 3 and len(aggregate) == 3
    for line in runtimes + returns + aggregate[1:]:
        assert line in block
    normalised = aggregate[0].split(" Anchors (random / ")[0]
    assert [line for line in block if line.startswith(normalised)]


def test_definitions_write_replaces_only_the_block(tmp_path: Path, capsys) -> None:
    path = tmp_path / "results.md"
    before, after = "# Title\n\nProse before.\n\n", "\nProse after.\n"
    path.write_text(f"{before}{definitions.DOCS_BEGIN}\nstale\n{definitions.DOCS_END}{after}")
    assert definitions.main(["--write", str(path)]) == 0
    written = path.read_text()
    assert written == (
        f"{before}{definitions.DOCS_BEGIN}{definitions.definitions_markdown()}"
        f"{definitions.DOCS_END}{after}"
    )
    assert definitions.main([]) == 0
    assert capsys.readouterr().out == definitions.definitions_markdown()


@pytest.mark.parametrize(
    "text",
    ["no markers\n", f"{definitions.DOCS_END}\n{definitions.DOCS_BEGIN}\n"],
    ids=["missing", "reversed"],
)
def test_definitions_write_without_a_block_is_an_error_naming_the_file(
    tmp_path: Path, capsys, text: str
) -> None:
    path = tmp_path / "results.md"
    path.write_text(text)
    with pytest.raises(SystemExit) as exit_info:
        definitions.main(["--write", str(path)])
    assert exit_info.value.code == 1
    assert str(path) in capsys.readouterr().err
    assert path.read_text() == text


def _raw_scalars(run_dir: Path, tag: str) -> list[float]:
    """Values of ``tag`` straight from the event files with TensorBoard's accumulator."""
    values: dict[int, float] = {}
    for path in sorted(run_dir.glob("*tfevents*")):
        accumulator = event_accumulator.EventAccumulator(
            str(path), size_guidance={event_accumulator.SCALARS: 0}
        )
        accumulator.Reload()
        if tag in accumulator.Tags()["scalars"]:
            values.update({event.step: event.value for event in accumulator.Scalars(tag)})
    return [values[step] for step in sorted(values)]


def _row(markdown: str, section: str, env_id: str) -> list[str]:
    block = markdown.split(section, 1)[1]
    line = next(line for line in block.splitlines() if line.startswith(f"| {env_id} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_a_return_cell_recomputed_from_raw_events(runset: RunSet, golden_root: Path) -> None:
    per_seed = []
    for seed in GOLDEN_SEEDS:
        returns = _raw_scalars(
            golden_root / "runs" / "baseline" / "HalfCheetah-v4" / str(seed),
            "charts/episodic_return",
        )
        per_seed.append(np.mean(returns[-100:]))
    expected = f"{np.mean(per_seed):,.2f} ± {np.std(per_seed):,.2f}"
    markdown = returns_table(
        runset, last_episodes=100, bootstrap_resamples=2000, bootstrap_seed=0, allow_missing=False
    ).markdown
    row = _row(markdown, "## Training return", "HalfCheetah-v4")
    # The headline: env, then one cell per variant, then pr-424.
    assert row[2].split(" [")[0] == expected
    assert _interval_row(markdown, "HalfCheetah-v4", "baseline")[2] == "3"
    pr424 = published.PR424["HalfCheetah-v4"]
    assert row[3] == f"{pr424.return_mean:,.2f} ± {pr424.return_std:,.2f}"


def _interval_row(markdown: str, env_id: str, variant: str) -> list[str]:
    """sac.md's intervals row of a task and variant: env, variant, n, CI, eval n, eval CI."""
    block = markdown.split("## 95% confidence intervals", 1)[1]
    prefix = f"| {env_id} | `{variant}` |"
    line = next(line for line in block.splitlines() if line.startswith(prefix))
    return [cell.strip() for cell in line.strip("|").split("|")]


def _raw_points(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    """Every (step, value) of ``tag`` in the event files, repeated steps included."""
    points = []
    for path in sorted(run_dir.glob("*tfevents*")):
        accumulator = event_accumulator.EventAccumulator(
            str(path), size_guidance={event_accumulator.SCALARS: 0}, purge_orphaned_data=False
        )
        accumulator.Reload()
        if tag in accumulator.Tags()["scalars"]:
            points += [(event.step, event.value) for event in accumulator.Scalars(tag)]
    return points


def test_a_final_eval_cell_recomputed_from_raw_events(runset: RunSet, golden_root: Path) -> None:
    per_seed = []
    for seed in GOLDEN_SEEDS:
        run_dir = golden_root / "runs" / "fast" / "Hopper-v4" / str(seed)
        points = _raw_points(run_dir, "eval/episodic_return")
        final = [value for step, value in points if step == 2000]
        assert len(final) == 10 and len(points) == 40  # at steps 500, 1000, 1500 and 2000
        per_seed.append(np.mean(final))
    markdown = returns_table(
        runset, last_episodes=100, bootstrap_resamples=2000, bootstrap_seed=0, allow_missing=False
    ).markdown
    row = _row(markdown, "## Final evaluation return", "Hopper-v4")
    assert row[1] == f"{np.mean(per_seed):,.2f} ± {np.std(per_seed):,.2f}"
    interval = _interval_row(markdown, "Hopper-v4", "fast")
    assert interval[4] == "3"
    low, high = (float(text) for text in interval[5].strip("[]").split(", "))
    assert low <= np.mean(per_seed) <= high and low >= min(per_seed) and high <= max(per_seed)


def test_sps_cells_recomputed_from_raw_events(runset: RunSet, golden_root: Path) -> None:
    final, steady = [], []
    for seed in GOLDEN_SEEDS:
        run_dir = golden_root / "runs" / "fast" / "Hopper-v4" / str(seed)
        final.append(_raw_scalars(run_dir, "charts/SPS")[-1])
        steady.append(200.0 + seed)  # the synthetic runs train at 200 + seed steps/s
    markdown = runtimes_table(runset, allow_missing=False).markdown
    assert _row(markdown, "## CleanRL SPS", "Hopper-v4")[1] == (
        f"{np.mean(final):,.1f} ± {np.std(final):,.1f}"
    )
    assert _row(markdown, "## Steady training SPS", "Hopper-v4")[1] == (
        f"{np.mean(steady):,.1f} ± {np.std(steady):,.1f}"
    )


def test_steady_sps_excludes_warm_up_and_weighs_windows_by_steps(tmp_path: Path) -> None:
    # A one-off cost in the first training window (as compilation) must not lower steady SPS.
    run = SyntheticRun(seed=2, first_update_seconds=5.0)
    loaded = _load_one(tmp_path, run)
    first_window = loaded.series("charts/steady_SPS")["value"].iloc[0]
    assert first_window < 0.5 * (run.training_sps + run.seed)
    assert steady_sps(loaded) == pytest.approx(run.training_sps + run.seed)


def test_openrlbenchmark_minutes_average_the_last_tenth_of_seed_means(runset: RunSet) -> None:
    runs = [golden_run("baseline", "Hopper-v4", seed) for seed in GOLDEN_SEEDS]
    steps = [*runs[0].log_steps(), runs[0].total_timesteps - 1]
    by_step = [
        np.mean([float(np.float32(run.elapsed_seconds(step))) for run in runs]) for step in steps
    ]
    tail = max(1, len(by_step) // 10)
    expected = np.mean(by_step[-tail:]) / 60.0
    csv = runtimes_table(runset, allow_missing=False).csv
    line = next(line for line in csv.splitlines() if line.startswith("Hopper-v4,baseline,"))
    header = csv.splitlines()[0].split(",")
    assert float(line.split(",")[header.index("openrlbenchmark_minutes")]) == pytest.approx(
        expected, rel=1e-12
    )


# ---- projected minutes per 1M steps and durations ----------------------------------------------


def _load_one(root: Path, run: SyntheticRun, variant: str = "fast") -> Run:
    """Write ``run`` with the real writer, extract it and load it back."""
    write_extracted(root / "extracted", root / "runs", run, variant=variant)
    selection = Selection(variants=(variant,), env_ids=(run.env_id,), seeds=(run.seed,))
    runset = load_runs(extracted_dir=root / "extracted", selection=selection, allow_missing=False)
    return runset.runs[next(iter(runset.runs))]


def _million(**changes: object) -> SyntheticRun:
    """A 1M-step run with CleanRL's learning_starts and a 20 s one-off cost when training starts;
    no losses and long episodes keep it quick to write."""
    fields = dict(
        total_timesteps=1_000_000,
        learning_starts=5_000,
        episode_length=1_000,
        first_update_seconds=20.0,
        write_losses=False,
    )
    return SyntheticRun(**{**fields, **changes})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def million_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _load_one(tmp_path_factory.mktemp("million"), _million())


def test_projection_of_a_1m_step_run_is_its_measured_minutes(million_run: Run) -> None:
    # The sanity check: with nothing left to project, the projection is the measurement.
    assert steady_windows(million_run).start_step > 5_000  # warm-up measured, not projected
    assert projected_minutes(million_run) == pytest.approx(
        wall_clock_minutes(million_run), rel=1e-6
    )


def test_short_runs_project_the_1m_step_run(tmp_path: Path, million_run: Run) -> None:
    measured = wall_clock_minutes(million_run)
    steady = _million().training_sps + _million().seed
    # Same learning_starts, 20,000 steps: the start-up, random phase and one-off cost are
    # counted once, as measured, so the projection is the 1M-step run's time.
    short = _load_one(tmp_path / "20k", _million(total_timesteps=20_000))
    assert projected_minutes(short) == pytest.approx(measured, rel=1e-6)
    # A smoke run (2,000 steps, learning_starts 500) counts 4,500 cheap random-action steps of
    # the 1M-step run as training steps: high, by less than the stated bound.
    smoke = _load_one(tmp_path / "smoke", _million(total_timesteps=2_000, learning_starts=500))
    excess_seconds = (projected_minutes(smoke) - measured) * 60.0
    assert 0.0 < excess_seconds < (5_000 - 500) / steady
    # Unlike the wall-clock minutes of the same run, which are far from comparable.
    assert wall_clock_minutes(smoke) < 0.01 * measured


def test_projected_cells_recomputed_from_raw_events(runset: RunSet, golden_root: Path) -> None:
    projected = []
    for seed in GOLDEN_SEEDS:
        run_dir = golden_root / "runs" / "fast" / "Hopper-v4" / str(seed)
        steps = [*golden_run("fast", "Hopper-v4", seed).log_steps()]
        # Logged at 600..1900: the first 10% of that range ends at 730, so the counted windows
        # start at the log point 700.
        elapsed = dict(zip(steps, _raw_scalars(run_dir, "charts/elapsed_seconds"), strict=False))
        projected.append((elapsed[700] + (1_000_000 - 700) / (200.0 + seed)) / 60.0)
    markdown = runtimes_table(runset, allow_missing=False).markdown
    row = _row(markdown, "## Projected minutes per 1M steps", "Hopper-v4")
    assert row[1] == f"{np.mean(projected):,.2f} ± {np.std(projected):,.2f}"
    assert row[3] == f"{published.PR424['Hopper-v4'].runtime_minutes:,.3f}"


@pytest.mark.parametrize(
    ("minutes", "std", "unit", "text"),
    [
        (0.08, None, SECONDS, "4.8"),
        (0.18418, 0.0005, SECONDS, "11.1 ± 0.0"),
        (59.94 / 60.0, None, SECONDS, "59.9"),
        (1.0, 0.02, MINUTES, "1.00 ± 0.02"),
        (82.52876, 0.33335, MINUTES, "82.53 ± 0.33"),
        (1234.5, None, MINUTES, "1,234.50"),
        (0.5, 0.01, MINUTES, "0.50 ± 0.01"),  # under a minute in a column of minutes
    ],
)
def test_a_duration_is_shown_in_its_columns_unit(
    minutes: float, std: float | None, unit: DurationUnit, text: str
) -> None:
    assert duration_text(minutes, unit, std) == text


@pytest.mark.parametrize(
    ("column", "unit"),
    [
        ([0.08, 0.9999], SECONDS),
        ([0.08, 1.0], MINUTES),  # one run of a minute or more puts the whole column in minutes
        ([82.5, float("nan")], MINUTES),
        ([], MINUTES),
    ],
)
def test_a_column_of_durations_has_one_unit(column: list[float], unit: DurationUnit) -> None:
    assert duration_unit(column) == unit


# ---- missing and broken input --------------------------------------------------------------------


@pytest.fixture()
def damaged_root(golden_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The golden set with fast/Hopper-v4 seed 3 and all of baseline/Hopper-v4 missing, and
    baseline/HalfCheetah-v4 seed 1 replaced by a run that logged neither charts/SPS nor any
    episode. Returned as a relative path (the cwd is tmp_path), as the pipeline passes it, so
    the messages in the golden files do not depend on where the test runs."""
    monkeypatch.chdir(tmp_path)
    extracted = Path("extracted")
    shutil.copytree(golden_root / "extracted", extracted)
    (extracted / "fast" / "Hopper-v4" / "3.csv").unlink()
    shutil.rmtree(extracted / "baseline" / "Hopper-v4")
    broken = SyntheticRun(env_id="HalfCheetah-v4", seed=1, write_sps=False, write_episodes=False)
    write_extracted(extracted, Path("runs"), broken, variant="baseline")
    return extracted


def test_missing_seed_is_an_error_naming_the_file(damaged_root: Path) -> None:
    with pytest.raises(ResultsInputError, match=r"fast/Hopper-v4/seed 3: .*3\.csv not found"):
        load_runs(extracted_dir=damaged_root, selection=SELECTION, allow_missing=False)


def test_run_without_sps_or_episodes_is_an_error_naming_the_run(damaged_root: Path) -> None:
    selection = Selection(variants=("baseline",), env_ids=("HalfCheetah-v4",), seeds=GOLDEN_SEEDS)
    runset = load_runs(extracted_dir=damaged_root, selection=selection, allow_missing=False)
    with pytest.raises(ResultsInputError, match=r"baseline/HalfCheetah-v4/seed 1: no charts/SPS"):
        runtimes_table(runset, allow_missing=False)
    with pytest.raises(ResultsInputError, match=r"seed 1: no finished episode"):
        returns_table(
            runset,
            last_episodes=100,
            bootstrap_resamples=2000,
            bootstrap_seed=0,
            allow_missing=False,
        )


def test_allow_missing_renders_n_a_cells_with_footnotes(damaged_root: Path) -> None:
    runset = load_runs(extracted_dir=damaged_root, selection=SELECTION, allow_missing=True)
    runtimes = runtimes_table(runset, allow_missing=True)
    returns = returns_table(
        runset, last_episodes=100, bootstrap_resamples=2000, bootstrap_seed=0, allow_missing=True
    )
    aggregate = aggregate_table(
        runset, last_episodes=100, bootstrap_resamples=2000, bootstrap_seed=0, allow_missing=True
    )
    assert_golden("sac_runtimes_allow_missing.md", runtimes.markdown)
    assert_golden("sac_allow_missing.md", returns.markdown)
    assert "2 of 3 requested seeds" in runtimes.markdown
    assert "no charts/SPS values" in runtimes.markdown
    assert "no finished episode" in returns.markdown
    assert "no finished episode" in aggregate.markdown
    row = _row(runtimes.markdown, "## CleanRL SPS", "Hopper-v4")
    assert row[1].startswith("179.0 ± 0.0 [")  # two seeds, with footnote marks
    assert row[2].startswith("n/a [")  # no seed at all
    hopper = _row(returns.markdown, "## Training return", "Hopper-v4")
    hopper_eval = _row(returns.markdown, "## Final evaluation return", "Hopper-v4")
    assert hopper[2].startswith("n/a [") and hopper_eval[2].startswith("n/a [")  # baseline: none
    assert _interval_row(returns.markdown, "Hopper-v4", "baseline")[2:] == ["0", "n/a", "0", "n/a"]
    cheetah = _row(returns.markdown, "## Final evaluation return", "HalfCheetah-v4")
    assert cheetah[2].startswith("485.00 ± 5.00 [")  # seeds 2 and 3 only
    assert "baseline/HalfCheetah-v4: no final evaluation in seed 1" in returns.markdown


def _evaluation_runset(root: Path, runs: dict[str, list[SyntheticRun]]) -> RunSet:
    for variant, variant_runs in runs.items():
        for run in variant_runs:
            write_extracted(root / "extracted", root / "runs", run, variant=variant)
    selection = Selection(variants=tuple(runs), env_ids=("Hopper-v4",), seeds=(1, 2))
    return load_runs(extracted_dir=root / "extracted", selection=selection, allow_missing=False)


def test_runs_without_a_final_evaluation_show_a_dash_with_a_note(tmp_path: Path) -> None:
    runset = _evaluation_runset(
        tmp_path,
        {
            "evaluated": [SyntheticRun(seed=seed, eval_episodes=3) for seed in (1, 2)],
            # Evaluated during training only: that is no final evaluation either.
            "never": [SyntheticRun(seed=seed) for seed in (1, 2)],
        },
    )
    table = returns_table(
        runset, last_episodes=100, bootstrap_resamples=2000, bootstrap_seed=0, allow_missing=False
    )
    row = _row(table.markdown, "## Final evaluation return", "Hopper-v4")
    # seed s: 100 + 0.1 * 2000 + 10 s, episodes spread symmetrically around it
    assert row[1] == "315.00 ± 5.00"
    assert _interval_row(table.markdown, "Hopper-v4", "evaluated")[5] == "[310.00, 320.00]"
    assert (
        row[2].startswith("– [") and _interval_row(table.markdown, "Hopper-v4", "never")[5] == "–"
    )
    mark = row[2].split(" ")[1]
    assert f"- {mark} –: no final evaluation in these runs" in table.markdown
    csv = pd.read_csv(io.StringIO(table.csv)).set_index("variant")
    assert csv.loc["evaluated", ["eval_n_seeds", "eval_episodes_min"]].tolist() == [2, 3]
    assert csv.loc["never", "eval_n_seeds"] == 0 and np.isnan(csv.loc["never", "eval_return_mean"])


def test_a_final_evaluation_with_other_than_eval_episodes_is_an_error(tmp_path: Path) -> None:
    runs = [SyntheticRun(seed=seed, eval_episodes=3) for seed in (1, 2)]
    runs[1] = SyntheticRun(seed=2, eval_episodes=3, extra_args={"eval_episodes": 5})
    runset = _evaluation_runset(tmp_path, {"fast": runs})
    with pytest.raises(
        ResultsInputError,
        match=r"fast/Hopper-v4/seed 2: .*2\.csv holds 3 "
        r"eval/episodic_return values at the final step 2000.*eval_episodes=5",
    ):
        returns_table(
            runset, last_episodes=100, bootstrap_resamples=2000, bootstrap_seed=0,
            allow_missing=False,
        )  # fmt: skip


def test_mislabelled_summary_is_rejected(golden_root: Path, tmp_path: Path) -> None:
    extracted = tmp_path / "extracted"
    shutil.copytree(golden_root / "extracted", extracted)
    source = extracted / "fast" / "Hopper-v4" / "1.json"
    shutil.copy(source, extracted / "fast" / "Hopper-v4" / "2.json")
    with pytest.raises(ResultsInputError, match=r"2\.json: the run summary says .*seed=1"):
        load_runs(extracted_dir=extracted, selection=SELECTION, allow_missing=False)


def test_unreadable_csv_is_an_error_naming_it(golden_root: Path, tmp_path: Path) -> None:
    extracted = tmp_path / "extracted"
    shutil.copytree(golden_root / "extracted", extracted)
    bad = extracted / "baseline" / "Hopper-v4" / "2.csv"
    bad.write_text("step,value\n1,2\n")
    with pytest.raises(ResultsInputError, match=rf"{bad}: columns are"):
        load_runs(extracted_dir=extracted, selection=SELECTION, allow_missing=False)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("variants", (), "variants must not be empty"),
        ("seeds", (1, 1), "seeds lists 1 more than once"),
        ("variants", ("pr-424",), "reserved"),
    ],
)
def test_selection_rejects_bad_arguments(field: str, value: tuple, message: str) -> None:
    arguments = {"variants": ("fast",), "env_ids": ("Hopper-v4",), "seeds": (1,)}
    arguments[field] = value
    with pytest.raises(ValueError, match=message):
        Selection(**arguments)


# ---- tasks CleanRL's pr-424 benchmark did not run ------------------------------------------------

UNPUBLISHED = "Ant-v5"


@pytest.fixture(scope="module")
def with_unpublished(golden_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The golden set's HalfCheetah-v4 runs plus the same runs on Ant-v5 (real event files)."""
    root = tmp_path_factory.mktemp("unpublished")
    extracted = root / "extracted"
    shutil.copytree(golden_root / "extracted", extracted)
    for variant in GOLDEN_VARIANTS:
        for seed in GOLDEN_SEEDS:
            run = golden_run(variant, UNPUBLISHED, seed)
            write_extracted(extracted, root / "runs", run, variant=variant)
    return extracted


def _runset(extracted: Path, env_ids: tuple[str, ...]) -> RunSet:
    selection = Selection(variants=GOLDEN_VARIANTS, env_ids=env_ids, seeds=GOLDEN_SEEDS)
    return load_runs(extracted_dir=extracted, selection=selection, allow_missing=False)


def _note(markdown: str, mark: str) -> str:
    return next(line for line in markdown.splitlines() if line.startswith(f"- {mark} "))


def test_a_task_without_a_published_number_shows_a_dash_with_a_footnote(
    with_unpublished: Path,
) -> None:
    runset = _runset(with_unpublished, ("HalfCheetah-v4", UNPUBLISHED))
    returns = returns_table(
        runset, last_episodes=100, bootstrap_resamples=2000, bootstrap_seed=0, allow_missing=False
    )
    published_cell = _row(returns.markdown, "## Training return", UNPUBLISHED)[-1]
    assert published_cell.startswith("\u2013 [")
    note = _note(returns.markdown, published_cell.split(" ", 1)[1])
    assert "no published pr-424 number" in note and "left out of the normalised" in note
    assert (
        _row(returns.markdown, "## Training return", "HalfCheetah-v4")[-1] == "9,634.89 ± 1,423.73"
    )
    # Its own runs' returns are computed as for any task; the CSV has no pr-424 row for it.
    assert not _row(returns.markdown, "## Training return", UNPUBLISHED)[1].startswith("n/a")
    csv_rows = [line.split(",")[:2] for line in returns.csv.splitlines()[1:]]
    assert [UNPUBLISHED, "pr-424"] not in csv_rows and ["HalfCheetah-v4", "pr-424"] in csv_rows

    runtimes = runtimes_table(runset, allow_missing=False)
    cells = {
        _row(runtimes.markdown, section, UNPUBLISHED)[-1]
        for section in ("## CleanRL SPS", "## Projected minutes")
    }
    assert len(cells) == 1 and cells.pop().startswith("\u2013 [")
    mark = _row(runtimes.markdown, "## CleanRL SPS", UNPUBLISHED)[-1].split(" ")[1]
    assert "no published pr-424 number" in _note(runtimes.markdown, mark)


def test_the_aggregate_leaves_out_tasks_without_a_published_number(
    with_unpublished: Path,
) -> None:
    def aggregate(env_ids: tuple[str, ...]):
        return aggregate_table(
            _runset(with_unpublished, env_ids),
            last_episodes=100,
            bootstrap_resamples=2000,
            bootstrap_seed=0,
            allow_missing=False,
        )

    mixed = aggregate(("HalfCheetah-v4", UNPUBLISHED))
    published_only = aggregate(("HalfCheetah-v4",))
    # The same scores, statistics and intervals as without the task.
    assert mixed.csv == published_only.csv
    assert set(mixed.csv.splitlines()[1].split(",")[6:]) == {"1", "3"}  # n_tasks 1, n_runs 3
    header = next(line for line in mixed.markdown.splitlines() if line.startswith("| Variant"))
    mark = header.split("| tasks ")[1].split(" |")[0]
    note = _note(mixed.markdown, mark)
    assert f"Left out: {UNPUBLISHED}." in note and "published pr-424 return" in note
    assert "Left out" not in published_only.markdown

    # Nothing to score at all: the table still renders, every estimate n/a.
    none = aggregate((UNPUBLISHED,))
    assert "| `fast` | 0 | 0 | n/a | n/a |" in none.markdown
    assert "Anchors (random / pr-424): none" in none.markdown
    assert none.csv.splitlines()[1:] == []


# ---- one seed, one variant: no spread, no interval, no unused footnote ---------------------------


def test_one_seed_shows_values_without_std_or_interval(golden_root: Path) -> None:
    selection = Selection(variants=("fast",), env_ids=GOLDEN_ENV_IDS, seeds=(2,))
    runset = load_runs(
        extracted_dir=golden_root / "extracted", selection=selection, allow_missing=False
    )
    flags = {"last_episodes": 100, "bootstrap_resamples": 2000, "bootstrap_seed": 0}
    returns = returns_table(runset, allow_missing=False, **flags)
    runtimes = runtimes_table(runset, allow_missing=False)
    aggregate = aggregate_table(runset, allow_missing=False, **flags)
    for table in (returns, runtimes):
        results = table.markdown.split("**Definitions and units**")[0]
        assert "; seed 2)" in results and "over seeds" not in results
        sections = [line for line in results.splitlines() if line.startswith("## ")]
        for section in sections:
            for env_id in GOLDEN_ENV_IDS:
                assert "±" not in _row(results, section, env_id)[1], (section, env_id)
    row = _row(returns.markdown, "## Training return", "Hopper-v4")
    run_dir = golden_root / "runs" / "fast" / "Hopper-v4" / "2"
    expected = np.mean(_raw_scalars(run_dir, "charts/episodic_return")[-100:])
    assert row[1].split(" [")[0] == f"{expected:,.2f}"
    assert row[2] == "2,310.46 ± 342.82"  # pr-424's own std over its three seeds
    assert "## 95% confidence intervals" not in returns.markdown and "[C]" not in returns.markdown
    assert _row(runtimes.markdown, "## Wall-clock time", "Hopper-v4")[1] == "11.1"
    assert re.search(
        r"^\| `fast` \| 2 \| 2 \| \d\.\d{3} \| \d\.\d{3} \|$", aggregate.markdown, re.M
    )
    assert "IQM [E]" in aggregate.markdown and "[95% CI]" not in aggregate.markdown
    # One variant: no probability of improvement, so its footnote is not defined either.
    assert "## Probability of improvement" not in aggregate.markdown
    assert "[F]" not in aggregate.markdown
    csv = pd.read_csv(io.StringIO(returns.csv)).set_index("variant")
    assert np.isnan(csv.loc["fast", ["return_std", "ci95_low", "ci95_high"]].to_numpy(float)).all()
    # The provenance comes after the results, last.
    assert returns.markdown.index("## Provenance") > returns.markdown.index("**Notes**")


def test_the_update_row_names_each_sessions_update_once_in_order() -> None:
    """A run resumed on a node that could not build the fused update, and back: each update once,
    in the order its sessions ran, the fallback said; a run without records says nothing."""
    fused = {"path": "fast", "gradients": "fused", "float32_products_library": "onednn",
             "bf16_products": True}  # fmt: skip
    eager = {"path": "fast", "gradients": "handwritten", "float32_products_library": "aten",
             "bf16_products": False, "fused_update_unavailable": "no C++ compiler"}  # fmt: skip
    sessions = [{"update": fused}, {"update": eager}, {"update": fused}]

    def run(summary: dict) -> Run:
        return Run(RunKey("fast", "Hopper-v4", 1), Path("run.csv"), pd.DataFrame(), summary)

    assert _update_of(run({"sessions": sessions})) == (
        "fast, fused C++ (bf16 products, float32 products: onednn) then fast, eager hand-written "
        "(float32 products: aten; the fused update did not build)"
    )
    assert _update_of(run({"sessions": [{"exit_status": "completed"}]})) is None
    told_intel = {"path": "fast", "gradients": "fused", "float32_products_library": "aten",
                  "bf16_products": False, "mkl_kernels": "avx2"}  # fmt: skip
    assert _update_of(run({"sessions": [{"update": told_intel}]})) == (
        "fast, fused C++ (float32 products: aten, MKL's AVX2 kernels)"
    )
