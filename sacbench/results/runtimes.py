"""results/sac_runtimes.md and .csv: throughput and wall-clock per env and variant."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sacbench import published
from sacbench.results import stats
from sacbench.results.definitions import (
    COMMAND_WALL_CLOCK,
    ELAPSED_FROM_WALL_TIMES,
    STEADY_SPS_FROM_WALL_TIMES,
    UNPUBLISHED_CELL,
    runtime_definitions,
    unpublished_note,
)
from sacbench.results.metrics import (
    common_steps,
    final_sps,
    openrlbenchmark_minutes,
    projected_minutes,
    steady_sps,
    times_from_wall_clock,
    wall_clock_minutes,
)
from sacbench.results.provenance_table import heading_lines, provenance_section
from sacbench.results.render import (
    MINUTES,
    Cell,
    DurationUnit,
    Notes,
    TableText,
    collect,
    csv_text,
    duration_text,
    duration_unit,
    env_section,
    fixed,
    footnote_block,
    mean_std_duration,
    mean_std_text,
    over_seeds,
    raise_problems,
    spread,
)
from sacbench.results.runs import MetricError, Run, RunSet
from sacbench.tags import ELAPSED_TAG, SPS_TAG

RUNTIME_METRICS: dict[str, Callable[[Run], float]] = {
    "cleanrl_sps": final_sps,
    "steady_sps": steady_sps,
    "wall_clock_minutes": wall_clock_minutes,
    "projected_minutes_per_1m": projected_minutes,
}


def _lacks_steady_sps(run: Run) -> bool:
    return times_from_wall_clock(run)[0]


def _lacks_elapsed_seconds(run: Run) -> bool:
    return times_from_wall_clock(run)[1]


# What a metric (or "openrlbenchmark_minutes") computes differently for a run that lacks one of
# sacbench's extra tags (an external command's): (does the run, the footnote saying how).
FALLBACK_NOTES: dict[str, tuple[tuple[Callable[[Run], bool], str], ...]] = {
    "steady_sps": ((_lacks_steady_sps, STEADY_SPS_FROM_WALL_TIMES),),
    "wall_clock_minutes": ((_lacks_elapsed_seconds, COMMAND_WALL_CLOCK),),
    "projected_minutes_per_1m": (
        (_lacks_steady_sps, STEADY_SPS_FROM_WALL_TIMES),
        (_lacks_elapsed_seconds, ELAPSED_FROM_WALL_TIMES),
    ),
    "openrlbenchmark_minutes": ((_lacks_elapsed_seconds, ELAPSED_FROM_WALL_TIMES),),
}


def fallback_marks(name: str, runs: list[Run], notes: Notes) -> list[str]:
    """The footnote marks of a cell of metric `name` whose runs need a fallback."""
    return [
        notes.mark(text)
        for applies, text in FALLBACK_NOTES.get(name, ())
        if any(applies(run) for run in runs)
    ]


def _runtime_cells(
    runset: RunSet, notes: Notes, problems: dict[str, str]
) -> tuple[dict[tuple[str, str, str], Cell], dict[tuple[str, str], float | None]]:
    """Per-seed values of every runtime metric, keyed (metric, env, variant), and the
    openrlbenchmark minutes (one number over seeds), keyed (env, variant)."""
    cells: dict[tuple[str, str, str], Cell] = {}
    orb_minutes: dict[tuple[str, str], float | None] = {}
    for env_id in runset.selection.env_ids:
        for variant in runset.selection.variants:
            runs = runset.runs_of(variant, env_id)
            for name, metric in RUNTIME_METRICS.items():
                cell = collect(runset, variant, env_id, metric, notes, problems)
                cell.marks += fallback_marks(name, runs, notes)
                cells[name, env_id, variant] = cell
            try:
                orb_minutes[env_id, variant] = openrlbenchmark_minutes(runs) if runs else None
            except MetricError as error:
                problems[str(error)] = str(error)
                orb_minutes[env_id, variant] = None
    return cells, orb_minutes


@dataclass(frozen=True)
class RuntimeTables:
    """What every section's cells read: the per-seed cells, the openrlbenchmark minutes and the
    notes the cells add their marks to."""

    runset: RunSet
    cells: dict[tuple[str, str, str], Cell]
    orb_minutes: dict[tuple[str, str], float | None]
    notes: Notes

    def unit(self, name: str) -> DurationUnit:
        """The one unit of a section of durations, from every value it shows."""
        if name == "openrlbenchmark_minutes":
            return duration_unit(
                [value for value in self.orb_minutes.values() if value is not None]
            )
        values = [
            value
            for (metric, *_), cell in self.cells.items()
            if metric == name
            for value in cell.values
        ]
        return duration_unit(values)


# A section's cell: (tables, env_id, variant) -> text; a published column: (header, pr-424 -> text).
CellText = Callable[[RuntimeTables, str, str], str]
PublishedColumn = tuple[str, Callable[[published.Pr424Result], str]]


def _orb_text(tables: RuntimeTables, env_id: str, variant: str) -> str:
    value = tables.orb_minutes[env_id, variant]
    if value is None:
        return "n/a " + tables.notes.mark(
            f"{variant}/{env_id}: no seed with {ELAPSED_TAG}; see the notes above"
        )
    runs = tables.runset.runs_of(variant, env_id)
    requested = len(tables.runset.selection.seeds)
    marks = fallback_marks("openrlbenchmark_minutes", runs, tables.notes)
    if len(runs) < requested:
        marks.append(
            tables.notes.mark(f"{variant}/{env_id}: {len(runs)} of {requested} requested seeds")
        )
    return " ".join([duration_text(value, tables.unit("openrlbenchmark_minutes")), *marks])


def _metric_text(name: str, render: Callable[[list[float]], str]) -> CellText:
    return lambda tables, env_id, variant: tables.cells[name, env_id, variant].text(render)


def _duration_text(name: str) -> CellText:
    """Cells of a section of durations, all in the section's one unit."""

    def text(tables: RuntimeTables, env_id: str, variant: str) -> str:
        unit = tables.unit(name)
        return tables.cells[name, env_id, variant].text(
            lambda values: mean_std_duration(values, unit)
        )

    return text


def _published_text(
    tables: RuntimeTables, env_id: str, render: Callable[[published.Pr424Result], str]
) -> str:
    pr424 = published.PR424.get(env_id)
    if pr424 is None:
        return f"{UNPUBLISHED_CELL} {tables.notes.mark(unpublished_note())}"
    return render(pr424)


@dataclass(frozen=True)
class RuntimeSection:
    """A section of sac_runtimes.md: its heading (given the tables, for units and seeds), its
    cells, and the published column beside them, if any."""

    heading: Callable[[RuntimeTables], str]
    cell: CellText
    column: PublishedColumn | None = None


def _seeds(tables: RuntimeTables) -> str:
    return over_seeds(tables.runset.selection)


# The sections of sac_runtimes.md, in order. Each column holds one unit, named in the heading.
RUNTIME_SECTIONS: tuple[RuntimeSection, ...] = (
    RuntimeSection(
        lambda tables: f"CleanRL SPS (final {SPS_TAG}; steps/s; {_seeds(tables)})",
        _metric_text("cleanrl_sps", lambda values: mean_std_text(values, 1)),
        (f"{published.LABEL} implied SPS [B]", lambda pr424: fixed(pr424.implied_sps, 1)),
    ),
    RuntimeSection(
        lambda tables: f"Steady training SPS (steps/s; {_seeds(tables)})",
        _metric_text("steady_sps", lambda values: mean_std_text(values, 1)),
    ),
    RuntimeSection(
        lambda tables: (
            "Wall-clock time per run "
            f"({tables.unit('wall_clock_minutes').name}; from complete.json; {_seeds(tables)})"
        ),
        _duration_text("wall_clock_minutes"),
    ),
    RuntimeSection(
        lambda tables: (
            "openrlbenchmark-compatible time per run "
            f"({tables.unit('openrlbenchmark_minutes').name}; CleanRL's runtime statistic, over "
            "each run's own steps)"
        ),
        _orb_text,
    ),
    RuntimeSection(
        lambda tables: f"Projected minutes per 1M steps [P] ({_seeds(tables)})",
        _metric_text("projected_minutes_per_1m", lambda values: mean_std_duration(values, MINUTES)),
        (
            f"{published.LABEL} runtime, min per 1M steps [A]",
            lambda pr424: fixed(pr424.runtime_minutes, 3),
        ),
    ),
)


def _section(tables: RuntimeTables, section: RuntimeSection) -> list[str]:
    column = section.column

    def published_cell(env_id: str) -> str:
        assert column is not None
        return _published_text(tables, env_id, column[1])

    return env_section(
        tables.runset.selection,
        section.heading(tables),
        lambda env_id, variant: section.cell(tables, env_id, variant),
        (column[0], published_cell) if column else None,
    )


def runtimes_table(runset: RunSet, *, allow_missing: bool) -> TableText:
    """results/sac_runtimes.md and .csv: throughput and wall-clock per env and variant."""
    notes = Notes()
    problems: dict[str, str] = {}
    cells, orb_minutes = _runtime_cells(runset, notes, problems)
    raise_problems(problems, allow_missing)
    tables = RuntimeTables(runset, cells, orb_minutes, notes)
    body: list[str] = []
    for section in RUNTIME_SECTIONS:
        body += _section(tables, section)
    lines = heading_lines(runset, title="SAC throughput and wall-clock", command="runtimes")
    lines += body + footnote_block(runtime_definitions(), notes, body)
    lines += provenance_section(runset)
    frame = _runtimes_frame(runset, cells, orb_minutes)
    return TableText(markdown="\n".join(lines) + "\n", csv=csv_text(frame))


def _runtimes_frame(
    runset: RunSet,
    cells: dict[tuple[str, str, str], Cell],
    orb_minutes: dict[tuple[str, str], float | None],
) -> pd.DataFrame:
    """The CSV's rows: one per (task, variant), plus the published pr-424 row per task."""
    selection = runset.selection
    csv_rows = []
    for env_id in selection.env_ids:
        for variant in selection.variants:
            row: dict[str, Any] = {"env_id": env_id, "variant": variant}
            row["n_seeds"] = len(cells["cleanrl_sps", env_id, variant].values)
            row["seeds_requested"] = len(selection.seeds)
            for name in RUNTIME_METRICS:
                values = cells[name, env_id, variant].values
                mean = stats.mean_std(values)[0] if values else math.nan
                row[f"{name}_mean"], row[f"{name}_std"] = mean, spread(values)
            minutes = orb_minutes[env_id, variant]
            row["openrlbenchmark_minutes"] = math.nan if minutes is None else minutes
            row["steps"] = common_steps(runset.runs_of(variant, env_id))
            csv_rows.append(row)
        pr424 = published.PR424.get(env_id)
        if pr424 is not None:
            csv_rows.append(
                {
                    "env_id": env_id,
                    "variant": published.LABEL,
                    "n_seeds": len(published.PR424_SEEDS),
                    "seeds_requested": len(published.PR424_SEEDS),
                    "openrlbenchmark_minutes": pr424.runtime_minutes,
                    "implied_sps": pr424.implied_sps,
                    "steps": published.PR424_STEPS,
                }
            )
    # The projection's columns come last so that the older columns keep their positions.
    measured = [name for name in RUNTIME_METRICS if name != "projected_minutes_per_1m"]
    columns = [
        "env_id",
        "variant",
        "n_seeds",
        "seeds_requested",
        "steps",
        *(f"{name}_{part}" for name in measured for part in ("mean", "std")),
        "openrlbenchmark_minutes",
        "implied_sps",
        "projected_minutes_per_1m_mean",
        "projected_minutes_per_1m_std",
    ]
    frame = pd.DataFrame(csv_rows, columns=columns)
    ours = frame["variant"] != published.LABEL
    frame.loc[ours, "implied_sps"] = frame.loc[ours, "steps"] / (
        frame.loc[ours, "openrlbenchmark_minutes"] * 60.0
    )
    return frame
