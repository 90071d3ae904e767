"""Loading the extracted runs: what a table is asked for (Selection), each run's scalars and
summary (Run), and the input errors."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sacbench import published
from sacbench.events import SCALAR_COLUMNS


class ResultsInputError(ValueError):
    """Missing or unusable extracted runs; the message names every file or run at fault."""


class DamagedExtractionError(ResultsInputError):
    """An extracted file that is not what its extraction wrote (cut, edited, or written by an
    older sacbench without a record of it): never reported from, --allow-missing or not."""


class MetricError(ValueError):
    """A run that lacks what one metric needs; the message names the run and its file."""


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
        """The (step, wall_time, value) points of ``tag``, by step (an evaluation's episodes,
        which share a step, in the order they were logged); empty if never logged."""
        points = self.scalars[self.scalars["tag"] == tag]
        points = points[["step", "wall_time", "value"]].sort_values("step", kind="stable")
        return points.reset_index(drop=True)

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


def read_json_object(path: Path, *, what: str) -> dict[str, Any]:
    """A JSON file that must hold an object; errors name the file and what it should be."""
    if not path.is_file():
        raise ResultsInputError(f"{path} not found")
    try:
        content = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ResultsInputError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(content, dict):
        raise ResultsInputError(f"{path}: expected a JSON object ({what})")
    return content


# The extraction's format (results/extract.py); the pipeline's extract rule passes it as a
# param, so that Snakemake extracts again every run extracted in an older format.
EXTRACTION_FORMAT = 2


def rows_per_tag(scalars: pd.DataFrame) -> dict[str, int]:
    counts = scalars["tag"].value_counts().sort_index()
    return {str(tag): int(count) for tag, count in counts.items()}


def summary_digest(summary: dict[str, Any]) -> str:
    """SHA-256 of a run summary as JSON (keys sorted), without the digest itself."""
    extraction = {k: v for k, v in summary.get("extraction", {}).items() if k != "summary_sha256"}
    canonical = json.dumps({**summary, "extraction": extraction}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def check_extraction(
    csv_path: Path, json_path: Path, summary: dict[str, Any], scalars: pd.DataFrame
) -> None:
    """The CSV must be what its extraction wrote, as the summary records it: the rows of each
    tag, the number of points and the SHA-256 of the file; DamagedExtractionError otherwise."""
    again = "extract the run again (snakemake does it when the file is deleted)"
    record = summary.get("extraction")
    if not isinstance(record, dict) or not isinstance(record.get("csv_sha256"), str):
        raise DamagedExtractionError(
            f"{json_path} records no digest of {csv_path.name} (extracted by an older sacbench, "
            f"or edited): it cannot be checked; {again}"
        )
    if record.get("summary_sha256") != summary_digest(summary):
        raise DamagedExtractionError(
            f"{json_path} is not the summary its extraction wrote (its content no longer "
            f"matches the digest it records): it was edited after extraction; {again}"
        )
    found, recorded = rows_per_tag(scalars), record.get("rows_per_tag")
    if found != recorded or record.get("scalar_points") != len(scalars):
        differing = sorted(set(found) | set(recorded or {}))
        detail = ", ".join(
            f"{tag} {found.get(tag, 0)} of {(recorded or {}).get(tag, 0)}"
            for tag in differing
            if found.get(tag, 0) != (recorded or {}).get(tag, 0)
        )
        raise DamagedExtractionError(
            f"{csv_path} holds {len(scalars)} rows, but its extraction wrote "
            f"{record.get('scalar_points')} ({detail or 'rows per tag differ'}; see "
            f"{json_path.name}): it was cut or edited after extraction; {again}"
        )
    digest = hashlib.sha256(csv_path.read_bytes()).hexdigest()
    if digest != record["csv_sha256"]:
        raise DamagedExtractionError(
            f"{csv_path} is not the file its extraction wrote (its SHA-256 differs from the one "
            f"in {json_path.name}): it was edited after extraction; {again}"
        )


def _load_run(extracted_dir: Path, key: RunKey) -> Run:
    csv_path, json_path = extracted_paths(extracted_dir, key)
    for path in (csv_path, json_path):
        if not path.is_file():
            raise ResultsInputError(f"{key.label}: {path} not found")
    scalars = read_extracted_csv(csv_path)
    summary = read_json_object(json_path, what="the run summary")
    args = summary.get("args")
    recorded = (args.get("env_id"), args.get("seed")) if isinstance(args, dict) else None
    # A run without metadata.json records no args: nothing to contradict where it sits.
    if recorded is not None and recorded != (key.env_id, key.seed):
        raise ResultsInputError(
            f"{json_path}: the run summary says env_id={recorded[0]!r}, seed={recorded[1]!r}, "
            f"but the file sits at {key.env_id}/{key.seed}"
        )
    check_extraction(csv_path, json_path, summary, scalars)
    return Run(key=key, csv_path=csv_path, scalars=scalars, summary=summary)


def load_runs(*, extracted_dir: Path | str, selection: Selection, allow_missing: bool) -> RunSet:
    """Load every selected run; a missing or broken one is an error unless ``allow_missing``."""
    extracted_dir = Path(extracted_dir)
    if not extracted_dir.is_dir():
        raise ResultsInputError(f"extracted dir {extracted_dir} does not exist")
    runs: dict[RunKey, Run] = {}
    problems: dict[RunKey, str] = {}
    damaged: dict[RunKey, str] = {}
    for key in selection.run_keys():
        try:
            runs[key] = _load_run(extracted_dir, key)
        except DamagedExtractionError as error:
            damaged[key] = str(error)
        except ResultsInputError as error:
            problems[key] = str(error)
    if damaged:  # a damaged file is refused even with allow_missing: it is not a missing run
        lines = [f"{len(damaged)} extracted runs are damaged:"]
        raise DamagedExtractionError("\n".join([*lines, *(f"  - {m}" for m in damaged.values())]))
    if problems and not allow_missing:
        raise ResultsInputError(problem_report(problems, "missing or unreadable runs"))
    return RunSet(selection=selection, runs=runs, problems=problems)


def problem_report(problems: dict[Any, str], what: str) -> str:
    lines = [f"{len(problems)} {what} (pass --allow-missing to report them as n/a):"]
    lines += [f"  - {message}" for message in problems.values()]
    return "\n".join(lines)
