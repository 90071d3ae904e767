"""The results tables: runtimes, returns and aggregate statistics, as markdown and CSV text.

Everything here is computed from extracted runs ({extracted_dir}/{variant}/{env_id}/{seed}.csv
and .json, written by ``sacbench.report extract``); nothing is written to disk here. Every
definition and unit used in the tables is stated in their footnotes and in docs/results.md.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tabulate import DataRow, TableFormat, tabulate

from sacbench import published
from sacbench.events import SCALAR_COLUMNS
from sacbench.results import stats
from sacbench.tags import ELAPSED_TAG, RETURN_TAG, SPS_TAG, STEADY_SPS_TAG

# openrlbenchmark (via expt's AGGREGATE_MEAN_LAST(0.1)) averages this fraction of the last rows.
OPENRLBENCHMARK_TAIL = 0.1
# Steady SPS leaves out the log points of the first 10% of the logged step range (warm-up).
STEADY_WARMUP_FRACTION = 0.1
# Projected runtimes are for a run as long as each of CleanRL's published ones.
PROJECTION_STEPS = published.PR424_STEPS
# Durations shorter than this many minutes are shown in seconds (0.08 min reads worse than 4.8 s).
SECONDS_BELOW_MINUTES = 1.0


class ResultsInputError(ValueError):
    """Missing or unusable extracted runs; the message names every file or run at fault."""


class MetricError(ValueError):
    """A run that lacks what one metric needs; the message names the run and its file."""


# ---- loading -------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class RunKey:
    variant: str
    env_id: str
    seed: int

    @property
    def label(self) -> str:
        return f"{self.variant}/{self.env_id}/seed {self.seed}"


@dataclass(frozen=True)
class Selection:
    """The runs a table covers, as the pipeline configured them."""

    variants: tuple[str, ...]
    env_ids: tuple[str, ...]
    seeds: tuple[int, ...]

    def __post_init__(self) -> None:
        for name in ("variants", "env_ids", "seeds"):
            values = getattr(self, name)
            if len(values) == 0:
                raise ValueError(f"{name} must not be empty")
            duplicates = sorted({str(value) for value in values if values.count(value) > 1})
            if duplicates:
                raise ValueError(f"{name} lists {', '.join(duplicates)} more than once")
        for variant in self.variants:
            if not variant or "/" in variant or variant == published.LABEL:
                raise ValueError(f"variant name {variant!r} is empty, has '/' or is reserved")

    def run_keys(self) -> list[RunKey]:
        return [
            RunKey(variant, env_id, seed)
            for env_id in self.env_ids
            for variant in self.variants
            for seed in self.seeds
        ]


@dataclass(frozen=True)
class Run:
    key: RunKey
    csv_path: Path
    scalars: pd.DataFrame
    summary: dict[str, Any]

    def series(self, tag: str) -> pd.DataFrame:
        """The (step, wall_time, value) points of ``tag``, by step; empty if never logged."""
        points = self.scalars[self.scalars["tag"] == tag]
        return points[["step", "wall_time", "value"]].sort_values("step").reset_index(drop=True)

    def summary_value(self, *path: str) -> Any:
        """A nested value of the run summary, or None when it was not recorded."""
        node: Any = self.summary
        for part in path:
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node


@dataclass
class RunSet:
    selection: Selection
    runs: dict[RunKey, Run]
    problems: dict[RunKey, str]
    """Runs that are missing or unreadable (only with allow_missing), with the reason."""

    def runs_of(self, variant: str, env_id: str) -> list[Run]:
        return [
            self.runs[key]
            for key in (RunKey(variant, env_id, seed) for seed in self.selection.seeds)
            if key in self.runs
        ]


def extracted_paths(extracted_dir: Path, key: RunKey) -> tuple[Path, Path]:
    stem = Path(extracted_dir) / key.variant / key.env_id / str(key.seed)
    return stem.with_suffix(".csv"), stem.with_suffix(".json")


def read_extracted_csv(path: Path) -> pd.DataFrame:
    """An extracted scalar table; errors name the file.

    pandas 3 parses floats to the nearest double, so the shortest-repr floats that extraction
    writes come back bit for bit (tests/test_report_cli.py checks the round trip).
    """
    try:
        frame = pd.read_csv(
            path,
            dtype={"tag": str, "step": np.int64, "wall_time": np.float64, "value": np.float64},
            keep_default_na=False,
        )
    except FileNotFoundError:
        raise
    except (ValueError, pd.errors.ParserError) as error:
        raise ResultsInputError(f"{path}: not an extracted scalar table ({error})") from None
    if tuple(frame.columns) != SCALAR_COLUMNS:
        raise ResultsInputError(
            f"{path}: columns are {list(frame.columns)}, expected {list(SCALAR_COLUMNS)}"
        )
    frame["tag"] = frame["tag"].astype(object)  # as sacbench.events returns it
    return frame


def _load_run(extracted_dir: Path, key: RunKey) -> Run:
    csv_path, json_path = extracted_paths(extracted_dir, key)
    for path in (csv_path, json_path):
        if not path.is_file():
            raise ResultsInputError(f"{key.label}: {path} not found")
    scalars = read_extracted_csv(csv_path)
    try:
        summary = json.loads(json_path.read_text())
    except json.JSONDecodeError as error:
        raise ResultsInputError(f"{json_path}: not valid JSON ({error})") from None
    if not isinstance(summary, dict):
        raise ResultsInputError(f"{json_path}: expected a JSON object (the run summary)")
    args = summary.get("args") if isinstance(summary.get("args"), dict) else {}
    recorded = (args.get("env_id"), args.get("seed"))
    if recorded != (key.env_id, key.seed):
        raise ResultsInputError(
            f"{json_path}: the run summary says env_id={recorded[0]!r}, seed={recorded[1]!r}, "
            f"but the file sits at {key.env_id}/{key.seed}"
        )
    return Run(key=key, csv_path=csv_path, scalars=scalars, summary=summary)


def load_runs(*, extracted_dir: Path | str, selection: Selection, allow_missing: bool) -> RunSet:
    """Load every selected run; a missing or broken one is an error unless ``allow_missing``."""
    extracted_dir = Path(extracted_dir)
    if not extracted_dir.is_dir():
        raise ResultsInputError(f"extracted dir {extracted_dir} does not exist")
    runs: dict[RunKey, Run] = {}
    problems: dict[RunKey, str] = {}
    for key in selection.run_keys():
        try:
            runs[key] = _load_run(extracted_dir, key)
        except ResultsInputError as error:
            problems[key] = str(error)
    if problems and not allow_missing:
        raise ResultsInputError(_problem_report(problems, "missing or unreadable runs"))
    return RunSet(selection=selection, runs=runs, problems=problems)


def _problem_report(problems: dict[Any, str], what: str) -> str:
    lines = [f"{len(problems)} {what} (pass --allow-missing to report them as n/a):"]
    lines += [f"  - {message}" for message in problems.values()]
    return "\n".join(lines)


# ---- per-run metrics -----------------------------------------------------------------------------


def _nonempty_series(run: Run, tag: str) -> pd.DataFrame:
    points = run.series(tag)
    if points.empty:
        raise MetricError(f"{run.key.label}: no {tag} values in {run.csv_path}")
    return points


def final_sps(run: Run) -> float:
    """CleanRL's SPS: the last logged charts/SPS (cumulative steps / elapsed seconds)."""
    return float(_nonempty_series(run, SPS_TAG)["value"].iloc[-1])


@dataclass(frozen=True)
class SteadyWindows:
    """The steady charts/steady_SPS windows of a run: their throughput and where they begin."""

    sps: float
    """total steps / total seconds of the windows (a step-weighted harmonic mean)"""
    start_step: int
    """the logged step at which the first counted window begins (the end of the warm-up)"""


def steady_windows(run: Run) -> SteadyWindows:
    """Training throughput without warm-up, and the step where the warm-up ends.

    Each charts/steady_SPS point covers the steps since the previous log point. Points in the
    first 10% of the logged step range (and always the first point, whose window may hold a
    session's first, slow updates) are left out; the rest combine as sum(steps) / sum(steps /
    SPS), a step-weighted harmonic mean.
    """
    points = _nonempty_series(run, STEADY_SPS_TAG)
    if len(points) < 2:
        raise MetricError(
            f"{run.key.label}: steady SPS needs at least 2 {STEADY_SPS_TAG} points, "
            f"{run.csv_path} has {len(points)}"
        )
    steps = points["step"].to_numpy(dtype=np.float64)
    values = points["value"].to_numpy(dtype=np.float64)
    if np.any(values <= 0) or not np.all(np.isfinite(values)):
        raise MetricError(f"{run.key.label}: non-positive {STEADY_SPS_TAG} in {run.csv_path}")
    windows = np.diff(steps)
    cutoff = steps[0] + STEADY_WARMUP_FRACTION * (steps[-1] - steps[0])
    kept = steps[1:] > cutoff
    first = int(np.argmax(kept))  # kept windows are the contiguous tail of the windows
    return SteadyWindows(
        sps=float(windows[kept].sum() / (windows[kept] / values[1:][kept]).sum()),
        start_step=int(steps[first]),
    )


def steady_sps(run: Run) -> float:
    """Training throughput without warm-up (see :func:`steady_windows`); steps per second."""
    return steady_windows(run).sps


def projected_minutes(run: Run, *, steps: int = PROJECTION_STEPS) -> float:
    """Minutes a ``steps``-step run of the same configuration would take on the same machine.

    The run's measured charts/elapsed_seconds up to the step where its steady windows begin
    (start-up, the random-action phase and the training warm-up, with any one-off cost such as
    compilation, all as measured), plus the remaining steps at its steady training SPS. Warm-up
    is counted once, as measured, rather than extrapolated: it does not grow with the run length.
    """
    steady = steady_windows(run)
    elapsed = _nonempty_series(run, ELAPSED_TAG)
    known_steps = elapsed["step"].to_numpy(dtype=np.float64)
    known_seconds = elapsed["value"].to_numpy(dtype=np.float64)
    if steady.start_step < known_steps[0]:
        raise MetricError(
            f"{run.key.label}: no {ELAPSED_TAG} at or before step {steady.start_step} "
            f"in {run.csv_path}"
        )
    if steady.start_step >= steps:
        # A run much longer than ``steps`` measured the whole of it already.
        return float(np.interp(steps, known_steps, known_seconds)) / 60.0
    # The trainer logs both tags at the same steps, so this looks the value up exactly.
    fixed = float(np.interp(steady.start_step, known_steps, known_seconds))
    return (fixed + (steps - steady.start_step) / steady.sps) / 60.0


def wall_clock_minutes(run: Run) -> float:
    """complete.json's elapsed_seconds / 60: the training job's own time, resumes summed."""
    elapsed = run.summary.get("elapsed_seconds")
    if isinstance(elapsed, bool) or not isinstance(elapsed, int | float) or not elapsed > 0:
        raise MetricError(
            f"{run.key.label}: {run.csv_path.with_suffix('.json')} has no positive "
            f"elapsed_seconds (from complete.json), got {elapsed!r}"
        )
    return float(elapsed) / 60.0


def last_episodes_mean(run: Run, *, episodes: int) -> tuple[float, int]:
    """Mean of the run's last ``episodes`` episodic returns (fewer if it has fewer), and how
    many it used."""
    returns = run.series(RETURN_TAG)["value"]
    if returns.empty:
        raise MetricError(f"{run.key.label}: no finished episode ({RETURN_TAG}) in {run.csv_path}")
    tail = returns.iloc[-episodes:]
    return float(tail.mean()), len(tail)


def openrlbenchmark_minutes(runs: Sequence[Run]) -> float:
    """openrlbenchmark's runtime in minutes: charts/elapsed_seconds averaged over seeds at each
    step, then the mean of the last max(1, floor(10% of those rows)) rows, / 60."""
    series = [_nonempty_series(run, ELAPSED_TAG)[["step", "value"]] for run in runs]
    by_step = pd.concat(series).groupby("step")["value"].mean().sort_index()
    tail = max(1, int(len(by_step) * OPENRLBENCHMARK_TAIL))
    return float(by_step.iloc[-tail:].mean()) / 60.0


# ---- rendering helpers ---------------------------------------------------------------------------


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


def _fixed(value: float, digits: int) -> str:
    text = f"{value:,.{digits}f}"
    return "0" + text[2:] if text.startswith("-0") and float(text.replace(",", "")) == 0 else text


def _mean_std_text(values: Sequence[float], digits: int) -> str:
    mean, std = stats.mean_std(values)
    return f"{_fixed(mean, digits)} ± {_fixed(std, digits)}"


def duration_text(minutes: float, std_minutes: float | None = None) -> str:
    """A duration given in minutes, as the tables show it: minutes with 2 decimals, or, when it
    is under a minute, seconds with 1 decimal and an "s" (a smoke run's 0.08 min reads as 4.8 s).
    A std is shown in the same unit as its mean."""
    if abs(minutes) < SECONDS_BELOW_MINUTES:
        scale, digits, unit = 60.0, 1, " s"
    else:
        scale, digits, unit = 1.0, 2, ""
    text = _fixed(minutes * scale, digits)
    if std_minutes is not None:
        text += f" ± {_fixed(std_minutes * scale, digits)}"
    return text + unit


def _mean_std_duration(values: Sequence[float]) -> str:
    return duration_text(*stats.mean_std(values))


def _csv_text(frame: pd.DataFrame) -> str:
    frame = frame.copy()
    for column in (
        "n_seeds",
        "seeds_requested",
        "steps",
        "episodes_requested",
        "episodes_used_min",
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


def _collect(
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
    if cell.values and len(cell.values) < len(runset.selection.seeds):
        cell.marks.append(
            notes.mark(
                f"{variant}/{env_id}: {len(cell.values)} of {len(runset.selection.seeds)} "
                "requested seeds"
            )
        )
    return cell


def _raise_problems(problems: dict[str, str], allow_missing: bool) -> None:
    if problems and not allow_missing:
        raise ResultsInputError(_problem_report(problems, "runs lack data a table needs"))


# ---- provenance ----------------------------------------------------------------------------------


def _sacbench_text(run: Run) -> str | None:
    version = run.summary_value("sacbench", "version")
    if version is None:
        return None
    describe = run.summary_value("sacbench", "git_describe") or "git describe not recorded"
    commit = run.summary_value("sacbench", "git_commit")
    dirty = run.summary_value("sacbench", "git_dirty")
    parts = [describe]
    if commit:
        parts.append(f"commit {str(commit)[:12]}")
    if dirty is True:
        parts.append("uncommitted changes")
    return f"{version} ({', '.join(parts)})"


PROVENANCE: tuple[tuple[str, Callable[[Run], Any]], ...] = (
    ("sacbench", _sacbench_text),
    ("steps per run (total_timesteps)", lambda run: run.summary_value("args", "total_timesteps")),
    ("learning_starts", lambda run: run.summary_value("args", "learning_starts")),
    ("CPU model", lambda run: run.summary_value("host", "cpu_model")),
    ("GPU model", lambda run: run.summary_value("host", "gpu_model") or "none"),
    ("device", lambda run: run.summary_value("host", "device")),
    ("torch threads", lambda run: run.summary_value("host", "torch_threads")),
    ("python", lambda run: run.summary_value("versions", "python")),
    ("torch", lambda run: run.summary_value("versions", "torch")),
    ("gymnasium", lambda run: run.summary_value("versions", "gymnasium")),
    ("mujoco", lambda run: run.summary_value("versions", "mujoco")),
    ("numpy", lambda run: run.summary_value("versions", "numpy")),
    (
        "training sessions per run",
        lambda run: (
            len(run.summary["sessions"]) if isinstance(run.summary.get("sessions"), list) else None
        ),
    ),
)


def _value_text(runs: Sequence[Run], getter: Callable[[Run], Any]) -> str:
    groups: dict[str, list[str]] = {}
    for run in runs:
        value = getter(run)
        groups.setdefault("not recorded" if value is None else str(value), []).append(run.key.label)
    if len(groups) == 1:
        return next(iter(groups))
    parts = []
    for value, labels in groups.items():
        shown = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
        runs_word = "run" if len(labels) == 1 else "runs"
        parts.append(f"{value} ({len(labels)} {runs_word}: {shown})")
    return "**differs between runs:** " + "; ".join(parts)


def provenance_lines(runset: RunSet, *, title: str, command: str) -> list[str]:
    selection = runset.selection
    runs = [runset.runs[key] for key in sorted(runset.runs)]
    found = len(runs)
    variants = ", ".join(f"`{variant}`" for variant in selection.variants)
    lines = [
        f"# {title}",
        "",
        f"Generated by `python -m sacbench.report {command}` from {found} of "
        f"{len(selection.run_keys())} runs: variants {variants}"
        f"; tasks {', '.join(selection.env_ids)}; seeds {', '.join(map(str, selection.seeds))}.",
        "",
    ]
    rows = [[name, _value_text(runs, getter) if runs else "no runs"] for name, getter in PROVENANCE]
    lines += markdown_table(["Provenance", "Value (from the runs' metadata.json)"], rows, "ll")
    return lines


# ---- runtimes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableText:
    markdown: str
    csv: str


def _footnote_block(definitions: Sequence[str], notes: Notes) -> list[str]:
    lines = ["", "**Definitions and units**", ""]
    lines += [f"- {text}" for text in definitions]
    if notes:
        lines += ["", "**Notes**", ""]
        lines += [f"- {text}" for text in notes.lines()]
    return lines


RUNTIME_METRICS: dict[str, Callable[[Run], float]] = {
    "cleanrl_sps": final_sps,
    "steady_sps": steady_sps,
    "wall_clock_minutes": wall_clock_minutes,
    "projected_minutes_per_1m": projected_minutes,
}


def _runtime_cells(
    runset: RunSet, notes: Notes, problems: dict[str, str]
) -> tuple[dict[tuple[str, str, str], Cell], dict[tuple[str, str], float | None]]:
    """Per-seed values of every runtime metric, keyed (metric, env, variant), and the
    openrlbenchmark minutes (one number over seeds), keyed (env, variant)."""
    cells: dict[tuple[str, str, str], Cell] = {}
    orb_minutes: dict[tuple[str, str], float | None] = {}
    for env_id in runset.selection.env_ids:
        for variant in runset.selection.variants:
            for name, metric in RUNTIME_METRICS.items():
                cells[name, env_id, variant] = _collect(
                    runset, variant, env_id, metric, notes, problems
                )
            runs = runset.runs_of(variant, env_id)
            try:
                orb_minutes[env_id, variant] = openrlbenchmark_minutes(runs) if runs else None
            except MetricError as error:
                problems[str(error)] = str(error)
                orb_minutes[env_id, variant] = None
    return cells, orb_minutes


def _env_section(
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


def runtimes_table(runset: RunSet, *, allow_missing: bool) -> TableText:
    """results/sac_runtimes.md and .csv: throughput and wall-clock per env and variant."""
    selection = runset.selection
    notes = Notes()
    problems: dict[str, str] = {}
    cells, orb_minutes = _runtime_cells(runset, notes, problems)
    _raise_problems(problems, allow_missing)

    def orb_text(env_id: str, variant: str) -> str:
        value = orb_minutes[env_id, variant]
        if value is None:
            return "n/a " + notes.mark(
                f"{variant}/{env_id}: no seed with {ELAPSED_TAG}; see the notes above"
            )
        seeds = len(runset.runs_of(variant, env_id))
        mark = ""
        if seeds < len(selection.seeds):
            mark = " " + notes.mark(
                f"{variant}/{env_id}: {seeds} of {len(selection.seeds)} requested seeds"
            )
        return duration_text(value) + mark

    def published_text(env_id: str, render: Callable[[published.Pr424Result], str]) -> str:
        pr424 = published.PR424.get(env_id)
        if pr424 is None:
            return "n/a " + notes.mark(f"{env_id} is not part of the {published.LABEL} benchmark")
        return render(pr424)

    def metric_text(name: str, render: Callable[[list[float]], str]) -> Callable[[str, str], str]:
        return lambda env_id, variant: cells[name, env_id, variant].text(render)

    body = _env_section(
        selection,
        f"CleanRL SPS (final {SPS_TAG}; steps/s; mean ± std over seeds)",
        metric_text("cleanrl_sps", lambda values: _mean_std_text(values, 1)),
        (
            f"{published.LABEL} implied SPS [B]",
            lambda env_id: published_text(env_id, lambda pr424: _fixed(pr424.implied_sps, 1)),
        ),
    )
    body += _env_section(
        selection,
        "Steady training SPS (steps/s; mean ± std over seeds)",
        metric_text("steady_sps", lambda values: _mean_std_text(values, 1)),
    )
    body += _env_section(
        selection,
        "Wall-clock minutes per run (true, from complete.json; mean ± std over seeds)",
        metric_text("wall_clock_minutes", _mean_std_duration),
    )
    body += _env_section(
        selection,
        "openrlbenchmark-compatible minutes per run (CleanRL's runtime statistic, over each "
        "run's own steps)",
        orb_text,
    )
    body += _env_section(
        selection,
        "Projected minutes per 1M steps [P] (mean ± std over seeds)",
        metric_text("projected_minutes_per_1m", _mean_std_duration),
        (
            f"{published.LABEL} runtime, min per 1M steps [A]",
            lambda env_id: published_text(env_id, lambda pr424: _fixed(pr424.runtime_minutes, 3)),
        ),
    )
    lines = provenance_lines(runset, title="SAC throughput and wall-clock", command="runtimes")
    lines += body + _footnote_block(_runtime_definitions(), notes)
    frame = _runtimes_frame(runset, cells, orb_minutes)
    return TableText(markdown="\n".join(lines) + "\n", csv=_csv_text(frame))


def _runtime_definitions() -> list[str]:
    return [
        f"**CleanRL SPS**: the run's last {SPS_TAG} value, CleanRL's definition "
        "int(global_step / seconds since start), a cumulative average that includes start-up and "
        "the learning_starts random-action steps; steps per second.",
        f"**Steady training SPS**: each {STEADY_SPS_TAG} point is the throughput over the steps "
        "since the previous log point (every 100 steps, training steps only); the points in the "
        "first 10% of the logged step range are left out as warm-up (always including the first "
        "one), and the rest combine as total steps / total seconds (a step-weighted harmonic "
        "mean); steps per second.",
        "**Wall-clock minutes**: complete.json's elapsed_seconds / 60, the training job's own "
        "time summed over all its sessions (time between a stop and its resume not counted).",
        f"**openrlbenchmark-compatible minutes**: {ELAPSED_TAG} averaged over the seeds at "
        "each logged step, then the mean of the last max(1, floor(10%)) of those rows, / 60 - how "
        "openrlbenchmark turns W&B's _runtime into CleanRL's runtime table; it reads about 0.95x "
        "the final wall-clock. One number per cell, not a mean ± std. It is the statistic of the "
        f"{published.LABEL} runtime [A], but over each run's own steps: comparable with it only "
        "for 1,000,000-step runs.",
        f"[P] **Projected minutes per 1M steps**, per run: (T_w + (1,000,000 - s_w) / steady "
        "training SPS) / 60, with s_w the step where the run's steady SPS windows begin (the end "
        f"of its warm-up) and T_w its measured {ELAPSED_TAG} at s_w. Start-up, the "
        "random-action steps and the first training steps (with any one-off cost such as "
        "compilation) thus count once, as measured, and every later step at the run's steady "
        "rate. Assumed: the run's own configuration (batch size, threads, device) and machine; "
        "its own learning_starts (CleanRL's is 5,000; another value moves the projection by at "
        "most |5,000 - learning_starts| / steady SPS seconds); a constant training rate "
        "(replay-buffer growth, changes in episode length and checkpoint pauses are not "
        "modelled). For a 1,000,000-step run it is close to its wall-clock "
        f"minutes. It projects wall-clock time, and the {published.LABEL} runtime reads about "
        "0.95x the final wall-clock: equal speed shows as a projection of about "
        f"{published.LABEL} runtime / 0.95.",
        "Durations: minutes with 2 decimals; a duration under 1 minute is shown in seconds with "
        "1 decimal and an s (e.g. 4.8 s), its std in the same unit.",
        "Mean ± std: over seeds, std with ddof=0 (population), as openrlbenchmark.",
        f"[A] {published.LABEL}: CleanRL's published docs/benchmark/sac_runtimes.md. Its values "
        "are wall-clock MINUTES per 1,000,000-step run (openrlbenchmark's runtime, mean of 3 "
        "seeds), not steps per second. Software: " + published.PR424_SOFTWARE + ".",
        f"[B] Implied SPS = 1e6 / (minutes x 60) from the {published.LABEL} runtime. Because that "
        "runtime reads about 0.95x the final wall-clock, the runs' true average throughput was "
        "about 0.95x the implied figure. Compare it with CleanRL SPS only for runs of the same "
        "length: our runs' step count is in the provenance table.",
    ]


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
                mean, std = stats.mean_std(values) if values else (math.nan, math.nan)
                row[f"{name}_mean"], row[f"{name}_std"] = mean, std
            minutes = orb_minutes[env_id, variant]
            row["openrlbenchmark_minutes"] = math.nan if minutes is None else minutes
            row["steps"] = _common_steps(runset.runs_of(variant, env_id))
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


def _common_steps(runs: Sequence[Run]) -> float:
    steps = {run.summary_value("args", "total_timesteps") for run in runs}
    steps.discard(None)
    return float(steps.pop()) if len(steps) == 1 else math.nan


# ---- returns -------------------------------------------------------------------------------------


def returns_table(
    runset: RunSet,
    *,
    last_episodes: int,
    bootstrap_resamples: int,
    bootstrap_seed: int,
    allow_missing: bool,
) -> TableText:
    """results/sac.md and .csv: each run's mean of its last N episodic returns, summarised over
    seeds per env and variant."""
    if last_episodes < 1:
        raise ValueError(f"last_episodes must be positive, got {last_episodes}")
    selection = runset.selection
    notes = Notes()
    problems: dict[str, str] = {}
    used: dict[RunKey, int] = {}

    def metric(run: Run) -> float:
        mean, count = last_episodes_mean(run, episodes=last_episodes)
        used[run.key] = count
        return mean

    cells = {
        (env_id, variant): _collect(runset, variant, env_id, metric, notes, problems)
        for env_id in selection.env_ids
        for variant in selection.variants
    }
    _raise_problems(problems, allow_missing)

    header = ["Environment"]
    for variant in selection.variants:
        header += [f"`{variant}` return", f"`{variant}` 95% CI [C]", f"`{variant}` n"]
    header.append(f"{published.LABEL} return [A]")
    rows = []
    csv_rows = []
    for env_id in selection.env_ids:
        row = [env_id]
        for variant in selection.variants:
            cell = cells[env_id, variant]
            short = [
                (seed, used[RunKey(variant, env_id, seed)])
                for seed in selection.seeds
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
            if cell.values:
                low, high = stats.bootstrap_mean_ci(
                    cell.values,
                    resamples=bootstrap_resamples,
                    rng=stats.seeded_rng(seed=bootstrap_seed, label=f"returns/{env_id}/{variant}"),
                )
                mean, std = stats.mean_std(cell.values)
                row += [
                    " ".join([f"{_fixed(mean, 2)} ± {_fixed(std, 2)}", *marks]),
                    f"[{_fixed(low, 2)}, {_fixed(high, 2)}]",
                    str(len(cell.values)),
                ]
            else:
                mean = std = low = high = math.nan
                row += [" ".join(["n/a", *marks]), "n/a", "0"]
            csv_rows.append(
                {
                    "env_id": env_id,
                    "variant": variant,
                    "n_seeds": len(cell.values),
                    "seeds_requested": len(selection.seeds),
                    "steps": _common_steps(runset.runs_of(variant, env_id)),
                    "return_mean": mean,
                    "return_std": std,
                    "ci95_low": low,
                    "ci95_high": high,
                    "episodes_requested": last_episodes,
                    "episodes_used_min": min(
                        (used[k] for k in used if k.variant == variant and k.env_id == env_id),
                        default=math.nan,
                    ),
                }
            )
        pr424 = published.PR424.get(env_id)
        if pr424 is None:
            row.append(
                "n/a " + notes.mark(f"{env_id} is not part of the {published.LABEL} benchmark")
            )
        else:
            row.append(f"{_fixed(pr424.return_mean, 2)} ± {_fixed(pr424.return_std, 2)}")
            csv_rows.append(
                {
                    "env_id": env_id,
                    "variant": published.LABEL,
                    "n_seeds": len(published.PR424_SEEDS),
                    "seeds_requested": len(published.PR424_SEEDS),
                    "steps": published.PR424_STEPS,
                    "return_mean": pr424.return_mean,
                    "return_std": pr424.return_std,
                    "episodes_requested": 100,
                }
            )
        rows.append(row)
    align = "l" + "rrr" * len(selection.variants) + "r"
    lines = provenance_lines(runset, title="SAC episodic returns", command="returns")
    lines += [
        "",
        f"## Training return: mean of each run's last {last_episodes} episodes, "
        "mean ± std over seeds",
        "",
    ]
    lines += markdown_table(header, rows, align)
    definitions = [
        f"**Return**: per run, the mean of its last {last_episodes} {RETURN_TAG} values "
        "(undiscounted training-episode returns, stochastic policy, as logged while training; "
        "a run with fewer finished episodes uses all it has, see the notes); then mean ± std "
        "over seeds with ddof=0 (population), as openrlbenchmark.",
        "**n**: seeds that contribute to the cell.",
        f"[C] **95% CI**: percentile bootstrap of the mean over seeds, {bootstrap_resamples} "
        f"resamples of the seeds with replacement, seeded with ({bootstrap_seed}, env, variant). "
        "With 3 seeds it can take at most 10 distinct values: read it as a rough range.",
        f"[A] {published.LABEL}: CleanRL's published docs/benchmark/sac.md, the same statistic "
        f"over seeds 1-3 after 1,000,000 steps. Software: {published.PR424_SOFTWARE}. "
        "Runs shorter than 1M steps are not comparable with it.",
    ]
    lines += _footnote_block(definitions, notes)
    columns = [
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
    ]
    frame = pd.DataFrame(csv_rows, columns=columns)
    return TableText(markdown="\n".join(lines) + "\n", csv=_csv_text(frame))


# ---- aggregate -----------------------------------------------------------------------------------


def normalized_score(env_id: str, episodic_return: float) -> float:
    """(return - random) / (pr-424 - random): 0 = uniform-random policy, 1 = CleanRL pr-424."""
    random_return, pr424_return = published.normalization_anchors(env_id)
    return (episodic_return - random_return) / (pr424_return - random_return)


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
    selection = runset.selection
    notes = Notes()
    unknown = [env_id for env_id in selection.env_ids if env_id not in published.RANDOM_RETURNS]
    if unknown and not allow_missing:
        raise ResultsInputError(
            f"no normalisation anchors (pr-424 and random-policy returns) for {', '.join(unknown)};"
            " the aggregate statistics cover only the benchmark's tasks"
        )
    tasks = [env_id for env_id in selection.env_ids if env_id not in unknown]
    for env_id in unknown:
        notes.mark(f"{env_id} left out: no normalisation anchors")
    problems: dict[str, str] = {}

    def metric(run: Run) -> float:
        return normalized_score(run.key.env_id, last_episodes_mean(run, episodes=last_episodes)[0])

    scores: dict[tuple[str, str], np.ndarray] = {}
    for variant in selection.variants:
        for env_id in tasks:
            cell = _collect(runset, variant, env_id, metric, notes, problems)
            scores[variant, env_id] = np.asarray(cell.values)
    _raise_problems(problems, allow_missing)

    rows, csv_rows = [], []
    for variant in selection.variants:
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
        results = {}
        for name, point, statistic in (
            ("IQM", stats.pooled_iqm, stats.iqm_statistic),
            ("mean", stats.mean_of_task_means, stats.mean_statistic),
        ):
            estimate = point(by_task)
            low, high = stats.stratified_bootstrap_ci(
                by_task,
                statistic=statistic,
                resamples=bootstrap_resamples,
                rng=stats.seeded_rng(seed=bootstrap_seed, label=f"aggregate/{name}/{variant}"),
            )
            results[name] = f"{estimate:.3f} [{low:.3f}, {high:.3f}]"
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
            [f"`{variant}`{mark}", str(len(by_task)), str(runs), results["IQM"], results["mean"]]
        )
    lines = provenance_lines(runset, title="SAC aggregate statistics", command="aggregate")
    lines += ["", "## Normalised score across tasks [D]", ""]
    lines += markdown_table(
        [
            "Variant",
            "tasks",
            "runs",
            "IQM [95% CI] [E]",
            "mean [95% CI] [E]",
        ],
        rows,
        "lrrrr",
    )
    if len(selection.variants) >= 2:
        pair_rows = []
        for index, x in enumerate(selection.variants):
            for y in selection.variants[index + 1 :]:
                shared = [e for e in tasks if scores[x, e].size and scores[y, e].size]
                if not shared:
                    pair_rows.append([f"`{x}`", f"`{y}`", "0", "n/a"])
                    continue
                xs = [scores[x, e] for e in shared]
                ys = [scores[y, e] for e in shared]
                estimate = stats.probability_of_improvement(xs, ys)
                low, high = stats.probability_of_improvement_ci(
                    xs,
                    ys,
                    resamples=bootstrap_resamples,
                    rng=stats.seeded_rng(seed=bootstrap_seed, label=f"improvement/{x}/{y}"),
                )
                pair_rows.append(
                    [
                        f"`{x}`",
                        f"`{y}`",
                        str(len(shared)),
                        f"{estimate:.3f} [{low:.3f}, {high:.3f}]",
                    ]
                )
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
        lines += ["", "## Probability of improvement [F]", ""]
        lines += markdown_table(["X", "Y", "tasks", "P(X > Y) [95% CI]"], pair_rows, "llrr")
    anchors = ", ".join(
        f"{env_id} {published.RANDOM_RETURNS[env_id]:g} / {published.PR424[env_id].return_mean:g}"
        for env_id in tasks
    )
    definitions = [
        f"[D] **Normalised score** of a run = (R - R_random) / (R_{published.LABEL} - R_random), "
        f"where R is the mean of the run's last {last_episodes} episodic returns, R_random the "
        f"mean return of a uniform-random policy ({published.RANDOM_EPISODES} episodes, seed "
        f"{published.RANDOM_SEED}, measured with `python -m sacbench.published`) and "
        f"R_{published.LABEL} CleanRL's published final return: 0 = random, 1 = CleanRL pr-424 "
        f"after 1M steps. Anchors (random / {published.LABEL}): {anchors}.",
        "[E] **IQM**: mean of the middle 50% of all runs' normalised scores pooled over tasks "
        "(floor(n/4) dropped at each end; with 3 or fewer runs that is the plain mean). **mean**: "
        "mean over tasks of each task's mean over seeds. 95% CIs: percentile intervals of a "
        f"stratified bootstrap ({bootstrap_resamples} resamples, runs drawn with replacement "
        f"within each task, seeded with ({bootstrap_seed}, statistic, variant)).",
        "[F] **P(X > Y)**: for each task shared by X and Y, the probability that a run of X scores "
        "higher than a run of Y (all seed pairs, ties count 1/2), averaged over tasks; the CI "
        "resamples X's and Y's runs independently within each task. 0.5 = no difference.",
    ]
    lines += _footnote_block(definitions, notes)
    frame = pd.DataFrame(
        csv_rows,
        columns=[
            "statistic",
            "variant",
            "versus",
            "value",
            "ci95_low",
            "ci95_high",
            "n_tasks",
            "n_runs",
        ],
    )
    return TableText(markdown="\n".join(lines) + "\n", csv=_csv_text(frame))
