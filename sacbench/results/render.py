"""Text rendering shared by the tables: markdown and CSV, mean ± std and durations, cells
collected over seeds, notes and footnotes."""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd
from tabulate import DataRow, TableFormat, tabulate

from sacbench.results import stats
from sacbench.results.runs import (
    MetricError,
    ResultsInputError,
    Run,
    RunKey,
    RunSet,
    Selection,
    problem_report,
)

# Durations shorter than this many minutes are shown in seconds (0.08 min reads worse than 4.8 s).
SECONDS_BELOW_MINUTES = 1.0


class Notes:
    """Numbered footnotes; the same text gets the same number."""

    def __init__(self) -> None:
        self._texts: list[str] = []

    def mark(self, text: str) -> str:
        if text not in self._texts:
            self._texts.append(text)
        return f"[{self._texts.index(text) + 1}]"

    def lines(self) -> list[str]:
        return [f"[{number}] {text}" for number, text in enumerate(self._texts, start=1)]

    def __bool__(self) -> bool:
        return bool(self._texts)


def _pipe_format(align: str) -> TableFormat:
    """tabulate's "pipe" format pads every cell to its column's width; the tables' cells are
    written unpadded, one row per line, so that they diff line by line between runs."""
    rule = "| " + " | ".join("---" if letter == "l" else "---:" for letter in align) + " |"
    row = DataRow("| ", " | ", " |")
    return TableFormat(
        lineabove=None,
        linebelowheader=lambda *_: rule,
        linebetweenrows=None,
        linebelow=None,
        headerrow=row,
        datarow=row,
        padding=0,
        with_header_hide=None,
    )


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
    """A pipe table; ``align`` has one letter per column, l or r."""
    if len(align) != len(header) or any(len(row) != len(header) for row in rows):
        raise ValueError("every row and the alignment must have one entry per header column")
    text = tabulate(
        [list(row) for row in rows],
        headers=list(header),
        tablefmt=_pipe_format(align),
        stralign=None,
        numalign=None,
        disable_numparse=True,
    )
    return text.split("\n")


def fixed(value: float, digits: int) -> str:
    text = f"{value:,.{digits}f}"
    return "0" + text[2:] if text.startswith("-0") and float(text.replace(",", "")) == 0 else text


def mean_std_text(values: Sequence[float], digits: int) -> str:
    """Mean ± std over seeds; one seed has no spread, so its cell is the value alone."""
    mean, std = stats.mean_std(values)
    return (
        fixed(mean, digits) if len(values) == 1 else f"{fixed(mean, digits)} ± {fixed(std, digits)}"
    )


@dataclass(frozen=True)
class DurationUnit:
    """The unit of a table column of durations: its name, how many per minute, its decimals."""

    name: str
    per_minute: float
    digits: int


MINUTES = DurationUnit("minutes", 1.0, 2)
SECONDS = DurationUnit("seconds", 60.0, 1)


def duration_unit(minutes: Sequence[float]) -> DurationUnit:
    """One unit for a whole column: seconds when every duration in it is under a minute (a smoke
    run's 0.08 min reads as 4.8 s), else minutes."""
    shown = [abs(value) for value in minutes if math.isfinite(value)]
    return SECONDS if shown and max(shown) < SECONDS_BELOW_MINUTES else MINUTES


def duration_text(minutes: float, unit: DurationUnit, std_minutes: float | None = None) -> str:
    """A duration given in minutes, in ``unit`` (named in the column's heading, not the cell);
    a std is shown in the same unit as its mean."""
    text = fixed(minutes * unit.per_minute, unit.digits)
    if std_minutes is not None:
        text += f" ± {fixed(std_minutes * unit.per_minute, unit.digits)}"
    return text


def mean_std_duration(values: Sequence[float], unit: DurationUnit) -> str:
    mean, std = stats.mean_std(values)
    return duration_text(mean, unit, None if len(values) == 1 else std)


def spread(values: Sequence[float]) -> float:
    """The std over seeds for the CSVs: NaN (an empty field) for one seed, which has none."""
    return stats.mean_std(values)[1] if len(values) > 1 else math.nan


def csv_text(frame: pd.DataFrame) -> str:
    frame = frame.copy()
    for column in (
        "n_seeds",
        "seeds_requested",
        "steps",
        "episodes_requested",
        "episodes_used_min",
        "eval_n_seeds",
        "eval_episodes_min",
        "n_tasks",
        "n_runs",
    ):
        if column in frame:
            frame[column] = frame[column].astype("Int64")
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False, lineterminator="\n")
    return buffer.getvalue()


@dataclass
class Cell:
    """The per-seed values of one (env, variant) cell and the footnote marks it carries."""

    values: list[float] = field(default_factory=list)
    marks: list[str] = field(default_factory=list)

    def text(self, render: Callable[[list[float]], str]) -> str:
        body = render(self.values) if self.values else "n/a"
        return " ".join([body, *self.marks])


def collect(
    runset: RunSet,
    variant: str,
    env_id: str,
    metric: Callable[[Run], float],
    notes: Notes,
    problems: dict[str, str],
) -> Cell:
    """Per-seed values of ``metric``; a seed that is missing or lacks the data gets a footnote
    (or, later, an error when the user did not allow missing runs)."""
    cell = Cell()
    for seed in runset.selection.seeds:
        key = RunKey(variant, env_id, seed)
        if key in runset.problems:
            reason = runset.problems[key]
        else:
            try:
                cell.values.append(metric(runset.runs[key]))
                continue
            except MetricError as error:
                reason = str(error)
                problems[reason] = reason
        cell.marks.append(notes.mark(f"left out: {reason}"))
    cell.marks.extend(mixed_lengths_marks(runset, variant, env_id, notes))
    if cell.values and len(cell.values) < len(runset.selection.seeds):
        cell.marks.append(
            notes.mark(
                f"{variant}/{env_id}: {len(cell.values)} of {len(runset.selection.seeds)} "
                "requested seeds"
            )
        )
    return cell


def mixed_lengths_marks(runset: RunSet, variant: str, env_id: str, notes: Notes) -> list[str]:
    """A footnote for a cell whose runs trained different numbers of steps (its value mixes
    them), naming each seed's; none when they agree."""
    lengths: dict[int, object] = {}
    for run in runset.runs_of(variant, env_id):
        steps = run.summary_value("args", "total_timesteps")
        lengths[run.key.seed] = steps if steps is not None else run.summary_value("global_step")
    if len(set(map(repr, lengths.values()))) < 2:
        return []
    each = ", ".join(
        f"seed {seed} {steps:,}" if isinstance(steps, int) else f"seed {seed} {steps}"
        for seed, steps in sorted(lengths.items())
    )
    return [notes.mark(f"{variant}/{env_id}: runs of different lengths mixed ({each} steps)")]


def raise_problems(problems: dict[str, str], allow_missing: bool) -> None:
    if problems and not allow_missing:
        raise ResultsInputError(problem_report(problems, "runs lack data a table needs"))


@dataclass(frozen=True)
class TableText:
    markdown: str
    csv: str


def used_definitions(definitions: Sequence[str], body: Sequence[str]) -> list[str]:
    """The definitions the table uses: one that starts with a mark such as "[F]" only when
    that mark appears in ``body`` (the table's lines); unmarked ones always."""
    text = "\n".join(body)
    return [
        definition
        for definition in definitions
        if not (mark := re.match(r"\[[A-Z]\]", definition)) or mark.group() in text
    ]


def footnote_block(definitions: Sequence[str], notes: Notes, body: Sequence[str]) -> list[str]:
    """The definitions ``body`` uses, then the numbered notes."""
    lines = ["", "**Definitions and units**", ""]
    lines += [f"- {text}" for text in used_definitions(definitions, body)]
    if notes:
        lines += ["", "**Notes**", ""]
        lines += [f"- {text}" for text in notes.lines()]
    return lines


def over_seeds(selection: Selection) -> str:
    """How a heading says what a cell summarises: "mean ± std over seeds", or the one seed."""
    if len(selection.seeds) == 1:
        return f"seed {selection.seeds[0]}"
    return "mean ± std over seeds"


def env_section(
    selection: Selection,
    heading: str,
    cell_text: Callable[[str, str], str],
    published_column: tuple[str, Callable[[str], str]] | None = None,
) -> list[str]:
    """A "## heading" and a table with a row per task, a column per variant, and optionally a
    published column (its header and a cell per task)."""
    header = ["Environment", *(f"`{variant}`" for variant in selection.variants)]
    header += [published_column[0]] if published_column else []
    rows = [
        [env_id, *(cell_text(env_id, variant) for variant in selection.variants)]
        + ([published_column[1](env_id)] if published_column else [])
        for env_id in selection.env_ids
    ]
    return ["", f"## {heading}", "", *markdown_table(header, rows, "l" + "r" * (len(header) - 1))]
