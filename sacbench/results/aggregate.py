"""results/sac_aggregate.md and .csv: normalised scores across tasks, and the
probability of improvement between variants."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sacbench import published
from sacbench.results import stats
from sacbench.results.definitions import aggregate_definitions, left_out_of_aggregate_note
from sacbench.results.metrics import last_episodes_mean, normalized_score
from sacbench.results.provenance_table import heading_lines, provenance_section
from sacbench.results.render import (
    Notes,
    TableText,
    collect,
    csv_text,
    footnote_block,
    markdown_table,
    raise_problems,
)
from sacbench.results.runs import Run, RunSet, Selection

AGGREGATE_COLUMNS = [
    "statistic",
    "variant",
    "versus",
    "value",
    "ci95_low",
    "ci95_high",
    "n_tasks",
    "n_runs",
]
Scores = dict[tuple[str, str], np.ndarray]  # (variant, env_id) -> the seeds' normalised scores


@dataclass(frozen=True)
class Bootstrap:
    """The bootstrap's flags, passed together to the estimates."""

    resamples: int
    seed: int


def _anchored_tasks(selection: Selection, notes: Notes) -> tuple[list[str], str]:
    """The selected tasks with normalisation anchors, and the footnote mark naming the others
    ("" when none is left out): a task pr-424 did not run has no normalised score."""
    left_out = [
        env_id
        for env_id in selection.env_ids
        if env_id not in published.PR424 or env_id not in published.RANDOM_RETURNS
    ]
    tasks = [env_id for env_id in selection.env_ids if env_id not in left_out]
    mark = f" {notes.mark(left_out_of_aggregate_note(left_out))}" if left_out else ""
    return tasks, mark


def _normalised_scores(
    runset: RunSet, tasks: list[str], last_episodes: int, notes: Notes, problems: dict[str, str]
) -> Scores:
    def metric(run: Run) -> float:
        return normalized_score(run.key.env_id, last_episodes_mean(run, episodes=last_episodes)[0])

    scores: Scores = {}
    for variant in runset.selection.variants:
        for env_id in tasks:
            cell = collect(runset, variant, env_id, metric, notes, problems)
            scores[variant, env_id] = np.asarray(cell.values)
    return scores


def normalised_scores(
    runset: RunSet, *, last_episodes: int, allow_missing: bool
) -> tuple[list[str], Scores]:
    """The tasks with normalisation anchors and each (variant, task)'s runs' normalised scores,
    as the aggregate table computes them (for the figures drawn from the same numbers)."""
    notes = Notes()
    problems: dict[str, str] = {}
    tasks, _ = _anchored_tasks(runset.selection, notes)
    scores = _normalised_scores(runset, tasks, last_episodes, notes, problems)
    raise_problems(problems, allow_missing)
    return tasks, scores


def _one_run_per_task(by_task: Sequence[np.ndarray]) -> bool:
    """Resampling one run per task gives back the same runs: no interval."""
    return all(task.size == 1 for task in by_task)


def _estimate_text(estimate: float, low: float, high: float) -> str:
    """ "value [low, high]", or the value alone where there is no interval."""
    if math.isnan(low):
        return f"{estimate:.3f}"
    return f"{estimate:.3f} [{low:.3f}, {high:.3f}]"


def aggregate_estimates(
    by_task: list[np.ndarray], variant: str, bootstrap: Bootstrap
) -> dict[str, tuple[float, float, float]]:
    """IQM and mean of the variant's scores over tasks: {name: (estimate, CI low, CI high)}."""
    estimates = {}
    for name, point, statistic in (
        ("IQM", stats.pooled_iqm, stats.iqm_statistic),
        ("mean", stats.mean_of_task_means, stats.mean_statistic),
    ):
        if _one_run_per_task(by_task):
            estimates[name] = (point(by_task), math.nan, math.nan)
            continue
        low, high = stats.stratified_bootstrap_ci(
            by_task,
            statistic=statistic,
            resamples=bootstrap.resamples,
            rng=stats.seeded_rng(seed=bootstrap.seed, label=f"aggregate/{name}/{variant}"),
        )
        estimates[name] = (point(by_task), low, high)
    return estimates


def _score_rows(
    variants: Sequence[str], tasks: list[str], scores: Scores, bootstrap: Bootstrap, notes: Notes
) -> tuple[list[list[str]], list[dict[str, Any]]]:
    """A markdown row per variant (tasks, runs, IQM, mean) and a CSV row per statistic."""
    rows, csv_rows = [], []
    for variant in variants:
        present = [env_id for env_id in tasks if scores[variant, env_id].size]
        if len(present) < len(tasks):
            missing = ", ".join(env_id for env_id in tasks if env_id not in present)
            mark = " " + notes.mark(f"`{variant}` has no usable run for {missing}")
        else:
            mark = ""
        by_task = [scores[variant, env_id] for env_id in present]
        runs = sum(task.size for task in by_task)
        if not by_task:
            rows.append([f"`{variant}`{mark}", "0", "0", "n/a", "n/a"])
            continue
        texts = {}
        for name, (estimate, low, high) in aggregate_estimates(by_task, variant, bootstrap).items():
            texts[name] = _estimate_text(estimate, low, high)
            csv_rows.append(
                {
                    "statistic": name,
                    "variant": variant,
                    "versus": "",
                    "value": estimate,
                    "ci95_low": low,
                    "ci95_high": high,
                    "n_tasks": len(by_task),
                    "n_runs": runs,
                }
            )
        rows.append(
            [f"`{variant}`{mark}", str(len(by_task)), str(runs), texts["IQM"], texts["mean"]]
        )
    return rows, csv_rows


def _improvement_rows(
    variants: Sequence[str], tasks: list[str], scores: Scores, bootstrap: Bootstrap
) -> tuple[list[list[str]], list[dict[str, Any]]]:
    """P(X > Y) for every pair of variants, in selection order: markdown and CSV rows."""
    rows, csv_rows = [], []
    for index, x in enumerate(variants):
        for y in variants[index + 1 :]:
            shared = [e for e in tasks if scores[x, e].size and scores[y, e].size]
            if not shared:
                rows.append([f"`{x}`", f"`{y}`", "0", "n/a"])
                continue
            xs = [scores[x, e] for e in shared]
            ys = [scores[y, e] for e in shared]
            estimate = stats.probability_of_improvement(xs, ys)
            low, high = math.nan, math.nan
            if not (_one_run_per_task(xs) and _one_run_per_task(ys)):
                low, high = stats.probability_of_improvement_ci(
                    xs,
                    ys,
                    resamples=bootstrap.resamples,
                    rng=stats.seeded_rng(seed=bootstrap.seed, label=f"improvement/{x}/{y}"),
                )
            rows.append([f"`{x}`", f"`{y}`", str(len(shared)), _estimate_text(estimate, low, high)])
            csv_rows.append(
                {
                    "statistic": "probability_of_improvement",
                    "variant": x,
                    "versus": y,
                    "value": estimate,
                    "ci95_low": low,
                    "ci95_high": high,
                    "n_tasks": len(shared),
                    "n_runs": sum(a.size + b.size for a, b in zip(xs, ys, strict=True)),
                }
            )
    return rows, csv_rows


def aggregate_table(
    runset: RunSet,
    *,
    last_episodes: int,
    bootstrap_resamples: int,
    bootstrap_seed: int,
    allow_missing: bool,
) -> TableText:
    """results/sac_aggregate.md and .csv: IQM and mean normalised score across tasks with
    stratified bootstrap CIs, and the probability of improvement between variants."""
    if bootstrap_resamples < stats.MIN_RESAMPLES:
        raise ValueError(
            f"bootstrap_resamples must be at least {stats.MIN_RESAMPLES}, got {bootstrap_resamples}"
        )
    variants = runset.selection.variants
    notes = Notes()
    tasks, left_out_mark = _anchored_tasks(runset.selection, notes)
    problems: dict[str, str] = {}
    scores = _normalised_scores(runset, tasks, last_episodes, notes, problems)
    raise_problems(problems, allow_missing)
    bootstrap = Bootstrap(bootstrap_resamples, bootstrap_seed)
    rows, csv_rows = _score_rows(variants, tasks, scores, bootstrap, notes)
    interval = " [95% CI]" if len(runset.selection.seeds) > 1 else ""
    body = ["", "## Normalised score across tasks [D]", ""]
    header = ["Variant", f"tasks{left_out_mark}", "runs", f"IQM{interval} [E]"]
    body += markdown_table([*header, f"mean{interval} [E]"], rows, "lrrrr")
    if len(variants) >= 2:
        pair_rows, pair_csv_rows = _improvement_rows(variants, tasks, scores, bootstrap)
        csv_rows += pair_csv_rows
        body += ["", "## Probability of improvement [F]", ""]
        body += markdown_table(["X", "Y", "tasks", f"P(X > Y){interval}"], pair_rows, "llrr")
    lines = heading_lines(runset, title="SAC aggregate statistics", command="aggregate") + body
    definitions = aggregate_definitions(tasks, last_episodes, bootstrap_resamples, bootstrap_seed)
    lines += footnote_block(definitions, notes, body) + provenance_section(runset)
    frame = pd.DataFrame(csv_rows, columns=AGGREGATE_COLUMNS)
    return TableText(markdown="\n".join(lines) + "\n", csv=csv_text(frame))
