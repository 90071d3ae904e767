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
from sacbench.results.provenance_table import provenance_lines
from sacbench.results.render import (
    Cell,
    Notes,
    TableText,
    collect,
    csv_text,
    fixed,
    footnote_block,
    markdown_table,
    raise_problems,
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


def _returns_header(selection: Selection) -> list[str]:
    header = ["Environment"]
    for variant in selection.variants:
        header += [f"`{variant}` return", f"`{variant}` 95% CI [C]", f"`{variant}` n"]
        header += [f"`{variant}` final eval [G]", f"`{variant}` eval 95% CI [C]"]
    return [*header, f"{published.LABEL} return [A]"]


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


def _variant_columns(
    cell: Cell, marks: list[str], options: ReturnsOptions, env_id: str, variant: str
) -> tuple[list[str], float, float, float, float]:
    """The variant's three markdown cells (return, CI, n) and its mean, std and CI bounds."""
    if not cell.values:
        return [" ".join(["n/a", *marks]), "n/a", "0"], math.nan, math.nan, math.nan, math.nan
    texts, (mean, std, low, high) = _mean_and_ci(
        cell.values, marks, options, label=f"returns/{env_id}/{variant}"
    )
    return [*texts, str(len(cell.values))], mean, std, low, high


def _mean_and_ci(
    values: list[float], marks: list[str], options: ReturnsOptions, *, label: str
) -> tuple[list[str], tuple[float, float, float, float]]:
    """The "mean ± std [marks]" and "[low, high]" cells over seeds, and (mean, std, low, high);
    `label` seeds the bootstrap apart from every other cell's."""
    low, high = stats.bootstrap_mean_ci(
        values,
        resamples=options.bootstrap_resamples,
        rng=stats.seeded_rng(seed=options.bootstrap_seed, label=label),
    )
    mean, std = stats.mean_std(values)
    texts = [
        " ".join([f"{fixed(mean, 2)} ± {fixed(std, 2)}", *marks]),
        f"[{fixed(low, 2)}, {fixed(high, 2)}]",
    ]
    return texts, (mean, std, low, high)


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


def _evaluation_columns(
    cell: EvaluationCell, options: ReturnsOptions, env_id: str, variant: str, marks: list[str]
) -> tuple[list[str], dict[str, Any]]:
    """The variant's two evaluation cells (return, CI) and its CSV fields."""
    if not cell.values:
        empty = "–" if cell.without else "n/a"
        texts = [" ".join([empty, *marks]), empty]
        return texts, {"eval_n_seeds": 0, "eval_episodes_min": math.nan}
    texts, (mean, std, low, high) = _mean_and_ci(
        cell.values, marks, options, label=f"eval/{env_id}/{variant}"
    )
    fields = {
        "eval_n_seeds": len(cell.values),
        "eval_return_mean": mean,
        "eval_return_std": std,
        "eval_ci95_low": low,
        "eval_ci95_high": high,
        "eval_episodes_min": min(cell.episodes),
    }
    return texts, fields


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


def _variant_entry(
    runset: RunSet, cells: ReturnCells, options: ReturnsOptions, notes: Notes, key: tuple[str, str]
) -> tuple[list[str], dict[str, Any]]:
    """One variant's five markdown cells in a task's row, and its CSV row."""
    env_id, variant = key
    selection = runset.selection
    cell = cells.training[key]
    marks = _short_seed_marks(
        cell, cells.used, variant, env_id, selection.seeds, options.last_episodes, notes
    )
    texts, mean, std, low, high = _variant_columns(cell, marks, options, env_id, variant)
    evaluation = cells.evaluation[key]
    eval_marks = _evaluation_marks(evaluation, variant, env_id, len(selection.seeds), notes)
    eval_texts, eval_fields = _evaluation_columns(evaluation, options, env_id, variant, eval_marks)
    used = [
        count for run_key, count in cells.used.items() if (run_key.env_id, run_key.variant) == key
    ]
    csv_row = {
        "env_id": env_id,
        "variant": variant,
        "n_seeds": len(cell.values),
        "seeds_requested": len(selection.seeds),
        "steps": common_steps(runset.runs_of(variant, env_id)),
        "return_mean": mean,
        "return_std": std,
        "ci95_low": low,
        "ci95_high": high,
        "episodes_requested": options.last_episodes,
        "episodes_used_min": min(used, default=math.nan),
        **eval_fields,
    }
    return texts + eval_texts, csv_row


def _returns_rows(
    runset: RunSet, cells: ReturnCells, options: ReturnsOptions, notes: Notes
) -> tuple[list[list[str]], list[dict[str, Any]]]:
    """The markdown rows (one per task) and the CSV rows (per task and variant, then pr-424)."""
    rows, csv_rows = [], []
    for env_id in runset.selection.env_ids:
        row = [env_id]
        for variant in runset.selection.variants:
            texts, csv_row = _variant_entry(runset, cells, options, notes, (env_id, variant))
            row += texts
            csv_rows.append(csv_row)
        text, published_row = _published_returns(env_id, notes)
        row.append(text)
        csv_rows += [published_row] if published_row else []
        rows.append(row)
    return rows, csv_rows


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
    rows, csv_rows = _returns_rows(runset, cells, options, notes)
    align = "l" + "rrrrr" * len(selection.variants) + "r"
    lines = provenance_lines(runset, title="SAC episodic returns", command="returns")
    lines += [
        "",
        f"## Training return (mean of each run's last {last_episodes} episodes) and final "
        "evaluation return, mean ± std over seeds",
        "",
    ]
    lines += markdown_table(_returns_header(selection), rows, align)
    definitions = returns_definitions(last_episodes, bootstrap_resamples, bootstrap_seed)
    lines += footnote_block(definitions, notes)
    frame = pd.DataFrame(csv_rows, columns=RETURNS_COLUMNS)
    return TableText(markdown="\n".join(lines) + "\n", csv=csv_text(frame))
