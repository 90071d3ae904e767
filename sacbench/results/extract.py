"""`report extract`: one run dir's event files and JSON records -> OUT.csv + OUT.json."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pandas as pd

from sacbench.atomic import write_atomically
from sacbench.events import Reader, read_run_scalars, run_event_files
from sacbench.results.runs import (
    EXTRACTION_FORMAT,
    ResultsInputError,
    read_json_object,
    rows_per_tag,
    summary_digest,
)
from sacbench.tags import EVAL_RETURN_TAG


def run_summary(run_dir: Path) -> dict[str, Any]:
    """metadata.json merged with complete.json (whose keys must not clash with metadata's).

    A run without metadata.json (an external command's whose record was lost, a run dir made
    by hand) still has a summary: complete.json's, and the tables say "not recorded" for the
    rest.
    """
    metadata: dict[str, Any] = {}
    if (run_dir / "metadata.json").exists():
        metadata = read_json_object(run_dir / "metadata.json", what="the run's metadata")
    complete = read_json_object(run_dir / "complete.json", what="the completion record")
    for key, kind in (("global_step", int), ("elapsed_seconds", int | float)):
        value = complete.get(key)
        if isinstance(value, bool) or not isinstance(value, kind):
            raise ResultsInputError(f"{run_dir / 'complete.json'}: {key} missing or not a number")
    clashes = sorted(set(metadata) & set(complete))
    if clashes:
        raise ResultsInputError(
            f"{run_dir}: metadata.json and complete.json both define {', '.join(clashes)}"
        )
    return {**metadata, **complete}


def evaluation_summary(scalars: pd.DataFrame) -> list[dict[str, Any]]:
    """One entry per evaluation the run logged: the step, its episodes and their mean return."""
    points = scalars[scalars["tag"] == EVAL_RETURN_TAG]
    return [
        {"step": int(step), "episodes": len(group), "mean_return": float(group["value"].mean())}
        for step, group in points.groupby("step", sort=True)
    ]


def extract_run(*, run_dir: Path | str, output_csv: Path | str, reader: Reader = "records") -> None:
    """Write OUT.csv (tag, step, wall_time, value) and OUT.json (the run summary)."""
    run_dir, output_csv = Path(run_dir), Path(output_csv)
    if output_csv.suffix != ".csv":
        raise ResultsInputError(f"--output must end in .csv, got {output_csv}")
    if not run_dir.is_dir():
        raise ResultsInputError(f"run dir {run_dir} does not exist")
    summary = run_summary(run_dir)
    scalars = read_run_scalars(run_dir, reader=reader)
    csv_buffer = io.StringIO()
    # Each float as its shortest repr, which reads back as the very same double.
    scalars.to_csv(csv_buffer, index=False, lineterminator="\n")
    csv_text = csv_buffer.getvalue()
    summary["extraction"] = {
        "run_dir": str(run_dir),
        "event_files": [str(path.relative_to(run_dir)) for path in run_event_files(run_dir)],
        "scalar_points": len(scalars),
        "reader": reader,
        "evaluations": evaluation_summary(scalars),
        # What the CSV holds, for every report to check it against (runs.check_extraction).
        "format": EXTRACTION_FORMAT,
        "rows_per_tag": rows_per_tag(scalars),
        "csv_sha256": hashlib.sha256(csv_text.encode()).hexdigest(),
    }
    summary["extraction"]["summary_sha256"] = summary_digest(summary)
    # Both computed before either is written, so a failure leaves no half-written pair.
    write_atomically(output_csv, csv_text)
    write_atomically(output_csv.with_suffix(".json"), json.dumps(summary, indent=2) + "\n")
