"""results/sac.md and .csv: final training returns and final-evaluation returns per env and
variant."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from sacbench import published
from sacbench.results import stats
from sacbench.results.definitions import UNPUBLISHED_CELL, returns_definitions, unpublished_note
from sacbench.results.metrics import common_steps, final_evaluation, last_episodes_mean
from sacbench.results.provenance_table import heading_lines, provenance_section
from sacbench.results.render import (
    Cell,
    Notes,
    TableText,
    collect,
    csv_text,
    fixed,
    footnote_block,
    markdown_table,
    mean_std_text,
    mixed_lengths_marks,
    over_seeds,
    raise_problems,
    spread,
)
from sacbench.results.runs import MetricError, Run, RunKey, RunSet, Selection

RETURNS_COLUMNS = [
    "env_id",
    "variant",
    "n_seeds",
    "seeds_requested",
    "steps",
    "return_mean",
    "return_std",
    "ci95_low",
    "ci95_high",
    "episodes_requested",
    "episodes_used_min",
    "eval_n_seeds",
    "eval_return_mean",
    "eval_return_std",
    "eval_ci95_low",
    "eval_ci95_high",
    "eval_episodes_min",
]

# The interval cell of a statistic over one seed, which has none.
NO_INTERVAL = "\u2013"

# The note of a "–" evaluation cell: runs that exist but never ran a final evaluation.
NO_EVALUATION_NOTE = (
    "–: no final evaluation in these runs (trained with --eval-episodes 0, or by a sacbench "
    "without evaluation)"
)


@dataclass(frozen=True)
class ReturnsOptions:
    """The returns table's flags, passed together to the per-cell helpers."""

    last_episodes: int
    bootstrap_resamples: int
    bootstrap_seed: int


@dataclass
class EvaluationCell:
    """One (env, variant)'s final evaluations, per seed: mean returns and episode counts, the
    seeds whose run has none, and why runs were left out (missing, or inconsistent data)."""

    values: list[float] = field(default_factory=list)
    episodes: list[int] = field(default_factory=list)
    without: list[int] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


def _evaluation_cell(
    runset: RunSet, variant: str, env_id: str, problems: dict[str, str]
) -> EvaluationCell:
    cell = EvaluationCell()
    for seed in runset.selection.seeds:
        key = RunKey(variant, env_id, seed)
        if key in runset.problems:
            cell.left_out.append(runset.problems[key])
            continue
        try:
            final = final_evaluation(runset.runs[key])
        except MetricError as error:
            problems[str(error)] = str(error)
            cell.left_out.append(str(error))
            continue
        if final is None:
            cell.without.append(seed)
        else:
            cell.values.append(final.mean_return)
            cell.episodes.append(final.episodes)
    return cell


def _returns_cells(
    runset: RunSet, last_episodes: int, notes: Notes, problems: dict[str, str]
) -> tuple[dict[tuple[str, str], Cell], dict[RunKey, int]]:
    """Each (env, variant)'s per-seed returns, and how many episodes each run's mean used."""
    used: dict[RunKey, int] = {}

    def metric(run: Run) -> float:
        mean, count = last_episodes_mean(run, episodes=last_episodes)
        used[run.key] = count
        return mean

    cells = {
        (env_id, variant): collect(runset, variant, env_id, metric, notes, problems)
        for env_id in runset.selection.env_ids
        for variant in runset.selection.variants
    }
    return cells, used


def _short_seed_marks(
    cell: Cell,
    used: dict[RunKey, int],
    variant: str,
    env_id: str,
    seeds: Sequence[int],
    last_episodes: int,
    notes: Notes,
) -> list[str]:
    """The cell's marks, plus one naming the seeds with fewer finished episodes than asked for."""
    short = [
        (seed, used[RunKey(variant, env_id, seed)])
        for seed in seeds
        if used.get(RunKey(variant, env_id, seed), last_episodes) < last_episodes
    ]
    marks = list(cell.marks)
    if short:
        counts = ", ".join(f"seed {seed}: {count}" for seed, count in short)
        marks.append(
            notes.mark(
                f"{variant}/{env_id}: fewer than {last_episodes} finished episodes, the "
                f"mean uses all there are ({counts})"
            )
        )
    return marks


@dataclass(frozen=True)
class Summary:
    """One cell's statistics over seeds: its markdown texts and its CSV numbers (NaN where a
    statistic does not exist: no seed, or no spread and no interval from one seed)."""

    text: str
    interval: str
    n: int
    mean: float = math.nan
    std: float = math.nan
    low: float = math.nan
    high: float = math.nan


def _summary(
    values: list[float], marks: list[str], options: ReturnsOptions, *, label: str, empty: str
) -> Summary:
    """The "mean ± std [marks]" and "[low, high]" texts over seeds, and the numbers behind
    them; `label` seeds the bootstrap apart from every other cell's. One seed: the value alone
    and no interval. No seed: ``empty`` ("n/a" or "–") in both."""
    if not values:
        return Summary(" ".join([empty, *marks]), empty, 0)
    mean = stats.mean_std(values)[0]
    if len(values) == 1:
        return Summary(" ".join([fixed(mean, 2), *marks]), NO_INTERVAL, 1, mean)
    low, high = stats.bootstrap_mean_ci(
        values,
        resamples=options.bootstrap_resamples,
        rng=stats.seeded_rng(seed=options.bootstrap_seed, label=label),
    )
    return Summary(
        " ".join([mean_std_text(values, 2), *marks]),
        f"[{fixed(low, 2)}, {fixed(high, 2)}]",
        len(values),
        mean,
        spread(values),
        low,
        high,
    )


def _evaluation_marks(cell: EvaluationCell, variant: str, env_id: str, seeds: int, notes: Notes):
    """The evaluation cell's marks: runs left out, and seeds without a final evaluation."""
    marks = [notes.mark(f"left out: {reason}") for reason in cell.left_out]
    if cell.values and cell.without:
        named = ", ".join(f"seed {seed}" for seed in cell.without)
        marks.append(
            notes.mark(
                f"{variant}/{env_id}: no final evaluation in {named}; the cell is over the "
                "other seeds"
            )
        )
    elif cell.values and len(cell.values) < seeds:
        marks.append(
            notes.mark(f"{variant}/{env_id}: {len(cell.values)} of {seeds} requested seeds")
        )
    elif not cell.values and cell.without:
        marks.append(notes.mark(NO_EVALUATION_NOTE))
    return marks


def _evaluation_summary(
    cell: EvaluationCell, options: ReturnsOptions, env_id: str, variant: str, marks: list[str]
) -> tuple[Summary, dict[str, Any]]:
    """The variant's final-evaluation summary and its CSV fields."""
    summary = _summary(
        cell.values,
        marks,
        options,
        label=f"eval/{env_id}/{variant}",
        empty=UNPUBLISHED_CELL if cell.without else "n/a",
    )
    fields = {
        "eval_n_seeds": summary.n,
        "eval_return_mean": summary.mean,
        "eval_return_std": summary.std,
        "eval_ci95_low": summary.low,
        "eval_ci95_high": summary.high,
        "eval_episodes_min": min(cell.episodes, default=math.nan),
    }
    return summary, fields


def _published_returns(env_id: str, notes: Notes) -> tuple[str, dict[str, Any] | None]:
    """The pr-424 column's cell for a task, and its CSV row (None outside the benchmark)."""
    pr424 = published.PR424.get(env_id)
    if pr424 is None:
        return f"{UNPUBLISHED_CELL} {notes.mark(unpublished_note())}", None
    row = {
        "env_id": env_id,
        "variant": published.LABEL,
        "n_seeds": len(published.PR424_SEEDS),
        "seeds_requested": len(published.PR424_SEEDS),
        "steps": published.PR424_STEPS,
        "return_mean": pr424.return_mean,
        "return_std": pr424.return_std,
        "episodes_requested": 100,
    }
    return f"{fixed(pr424.return_mean, 2)} ± {fixed(pr424.return_std, 2)}", row


@dataclass(frozen=True)
class ReturnCells:
    """Every (env, variant)'s per-seed values: training returns, how many episodes each run's
    mean used, and final evaluations."""

    training: dict[tuple[str, str], Cell]
    used: dict[RunKey, int]
    evaluation: dict[tuple[str, str], EvaluationCell]


@dataclass(frozen=True)
class VariantEntry:
    """A variant's cells for one task: training return and final evaluation."""

    training: Summary
    evaluation: Summary


def _variant_entry(
    runset: RunSet, cells: ReturnCells, options: ReturnsOptions, notes: Notes, key: tuple[str, str]
) -> tuple[VariantEntry, dict[str, Any]]:
    """One variant's summaries in a task's row, and its CSV row."""
    env_id, variant = key
    selection = runset.selection
    cell = cells.training[key]
    marks = _short_seed_marks(
        cell, cells.used, variant, env_id, selection.seeds, options.last_episodes, notes
    )
    training = _summary(
        cell.values, marks, options, label=f"returns/{env_id}/{variant}", empty="n/a"
    )
    evaluation = cells.evaluation[key]
    eval_marks = _evaluation_marks(evaluation, variant, env_id, len(selection.seeds), notes)
    if evaluation.values:
        eval_marks += mixed_lengths_marks(runset, variant, env_id, notes)
    eval_summary, eval_fields = _evaluation_summary(
        evaluation, options, env_id, variant, eval_marks
    )
    used = [
        count for run_key, count in cells.used.items() if (run_key.env_id, run_key.variant) == key
    ]
    csv_row = {
        "env_id": env_id,
        "variant": variant,
        "n_seeds": training.n,
        "seeds_requested": len(selection.seeds),
        "steps": common_steps(runset.runs_of(variant, env_id)),
        "return_mean": training.mean,
        "return_std": training.std,
        "ci95_low": training.low,
        "ci95_high": training.high,
        "episodes_requested": options.last_episodes,
        "episodes_used_min": min(used, default=math.nan),
        **eval_fields,
    }
    return VariantEntry(training, eval_summary), csv_row


@dataclass
class ReturnRows:
    """The markdown rows of sac.md's three sections, and the CSV rows."""

    headline: list[list[str]] = field(default_factory=list)
    evaluation: list[list[str]] = field(default_factory=list)
    intervals: list[list[str]] = field(default_factory=list)
    csv: list[dict[str, Any]] = field(default_factory=list)


def _returns_rows(
    runset: RunSet, cells: ReturnCells, options: ReturnsOptions, notes: Notes
) -> ReturnRows:
    """A row per task in the headline and evaluation tables, a row per task and variant in the
    intervals table; CSV rows per task and variant, then pr-424."""
    rows = ReturnRows()
    for env_id in runset.selection.env_ids:
        headline, evaluation = [env_id], [env_id]
        for variant in runset.selection.variants:
            entry, csv_row = _variant_entry(runset, cells, options, notes, (env_id, variant))
            headline.append(entry.training.text)
            evaluation.append(entry.evaluation.text)
            rows.intervals.append(
                [
                    env_id,
                    f"`{variant}`",
                    str(entry.training.n),
                    entry.training.interval,
                    str(entry.evaluation.n),
                    entry.evaluation.interval,
                ]
            )
            rows.csv.append(csv_row)
        text, published_row = _published_returns(env_id, notes)
        headline.append(text)
        rows.csv += [published_row] if published_row else []
        rows.headline.append(headline)
        rows.evaluation.append(evaluation)
    return rows


def _returns_body(selection: Selection, rows: ReturnRows, last_episodes: int) -> list[str]:
    """The headline table (training return beside pr-424), the final evaluations, and, with
    more than one seed, the intervals and seed counts."""
    variants = [f"`{variant}`" for variant in selection.variants]
    seeds = over_seeds(selection)
    lines = [
        "",
        f"## Training return (mean of each run's last {last_episodes} episodes; {seeds})",
        "",
    ]
    header = ["Environment", *variants, f"{published.LABEL} [A]"]
    lines += markdown_table(header, rows.headline, "l" + "r" * (len(header) - 1))
    lines += ["", f"## Final evaluation return [G] ({seeds})", ""]
    header = ["Environment", *variants]
    lines += markdown_table(header, rows.evaluation, "l" + "r" * len(variants))
    if len(selection.seeds) > 1:
        lines += ["", "## 95% confidence intervals [C] and seeds per cell", ""]
        header = ["Environment", "Variant", "n", "return 95% CI", "eval n", "eval 95% CI"]
        lines += markdown_table(header, rows.intervals, "llrrrr")
    return lines


def returns_table(
    runset: RunSet,
    *,
    last_episodes: int,
    bootstrap_resamples: int,
    bootstrap_seed: int,
    allow_missing: bool,
) -> TableText:
    """results/sac.md and .csv: each run's mean of its last N episodic returns and the mean
    return of its final evaluation, each summarised over seeds per env and variant."""
    if last_episodes < 1:
        raise ValueError(f"last_episodes must be positive, got {last_episodes}")
    selection = runset.selection
    notes = Notes()
    problems: dict[str, str] = {}
    training, used = _returns_cells(runset, last_episodes, notes, problems)
    evaluation = {
        (env_id, variant): _evaluation_cell(runset, variant, env_id, problems)
        for env_id in selection.env_ids
        for variant in selection.variants
    }
    raise_problems(problems, allow_missing)
    options = ReturnsOptions(last_episodes, bootstrap_resamples, bootstrap_seed)
    cells = ReturnCells(training=training, used=used, evaluation=evaluation)
    rows = _returns_rows(runset, cells, options, notes)
    body = _returns_body(selection, rows, last_episodes)
    lines = heading_lines(runset, title="SAC episodic returns", command="returns") + body
    definitions = returns_definitions(last_episodes, bootstrap_resamples, bootstrap_seed)
    lines += footnote_block(definitions, notes, body) + provenance_section(runset)
    frame = pd.DataFrame(rows.csv, columns=RETURNS_COLUMNS)
    return TableText(markdown="\n".join(lines) + "\n", csv=csv_text(frame))
