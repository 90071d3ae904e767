"""The results CLI the pipeline calls: extract a run, then render tables and plots.

    python -m sacbench.report extract   --run-dir DIR --output OUT.csv
    python -m sacbench.report runtimes  --extracted-dir D --variants V.. --env-ids E.. --seeds S..
                                        --md OUT.md --csv OUT.csv [--allow-missing]
    python -m sacbench.report returns   ... --md OUT.md --csv OUT.csv [--last-episodes 100]
                                        [--bootstrap-resamples 2000] [--bootstrap-seed 0]
    python -m sacbench.report plots     ... --out-dir DIR      (sac, sac-time, sac-sps: .png, .svg)
    python -m sacbench.report aggregate ... --md OUT.md --csv OUT.csv [--bootstrap-resamples 2000]

Every command computes all of its outputs in memory first and then writes each through a
temporary file and a rename, so a failure never leaves a partial table over a good one.
Definitions and units: docs/results.md.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sacbench.atomic import write_atomically
from sacbench.events import READERS, EventLogError, Reader, event_files, read_run_scalars
from sacbench.results import stats
from sacbench.results.tables import (
    ResultsInputError,
    RunSet,
    Selection,
    aggregate_table,
    load_runs,
    returns_table,
    runtimes_table,
)


class ReportError(ValueError):
    """Bad arguments or inputs of a report command."""


# ---- writing -------------------------------------------------------------------------------------


def write_all(outputs: dict[Path, str | bytes]) -> None:
    """Write every output (each atomically) only after all of them were computed."""
    for path, content in outputs.items():
        write_atomically(path, content)


# ---- extract -------------------------------------------------------------------------------------


def _read_json_object(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ReportError(f"{path} not found")
    try:
        content = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ReportError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(content, dict):
        raise ReportError(f"{path}: expected a JSON object")
    return content


def run_summary(run_dir: Path) -> dict[str, Any]:
    """metadata.json merged with complete.json (whose keys must not clash with metadata's)."""
    metadata = _read_json_object(run_dir / "metadata.json")
    complete = _read_json_object(run_dir / "complete.json")
    for key, kind in (("global_step", int), ("elapsed_seconds", int | float)):
        value = complete.get(key)
        if isinstance(value, bool) or not isinstance(value, kind):
            raise ReportError(f"{run_dir / 'complete.json'}: {key} missing or not a number")
    clashes = sorted(set(metadata) & set(complete))
    if clashes:
        raise ReportError(
            f"{run_dir}: metadata.json and complete.json both define {', '.join(clashes)}"
        )
    return {**metadata, **complete}


def extract_run(*, run_dir: Path | str, output_csv: Path | str, reader: Reader = "records") -> None:
    """Write OUT.csv (tag, step, wall_time, value) and OUT.json (the run summary)."""
    run_dir, output_csv = Path(run_dir), Path(output_csv)
    if output_csv.suffix != ".csv":
        raise ReportError(f"--output must end in .csv, got {output_csv}")
    if not run_dir.is_dir():
        raise ReportError(f"run dir {run_dir} does not exist")
    summary = run_summary(run_dir)
    scalars = read_run_scalars(run_dir, reader=reader)
    summary["extraction"] = {
        "run_dir": str(run_dir),
        "event_files": [path.name for path in event_files(run_dir)],
        "scalar_points": len(scalars),
        "reader": reader,
    }
    csv_buffer = io.StringIO()
    # Each float as its shortest repr, which reads back as the very same double.
    scalars.to_csv(csv_buffer, index=False, lineterminator="\n")
    write_all(
        {
            output_csv: csv_buffer.getvalue(),
            output_csv.with_suffix(".json"): json.dumps(summary, indent=2) + "\n",
        }
    )


# ---- tables and plots ----------------------------------------------------------------------------


def _runset(options: argparse.Namespace) -> RunSet:
    selection = Selection(
        variants=tuple(options.variants),
        env_ids=tuple(options.env_ids),
        seeds=tuple(options.seeds),
    )
    return load_runs(
        extracted_dir=options.extracted_dir,
        selection=selection,
        allow_missing=options.allow_missing,
    )


def _check_suffix(path: Path, suffix: str, flag: str) -> None:
    if path.suffix != suffix:
        raise ReportError(f"{flag} must end in {suffix}, got {path}")


def _check_resamples(options: argparse.Namespace) -> None:
    if options.bootstrap_resamples < stats.MIN_RESAMPLES:
        raise ReportError(
            f"--bootstrap-resamples must be at least {stats.MIN_RESAMPLES}, "
            f"got {options.bootstrap_resamples}"
        )


def command_runtimes(options: argparse.Namespace) -> None:
    _check_suffix(options.md, ".md", "--md")
    _check_suffix(options.csv, ".csv", "--csv")
    table = runtimes_table(_runset(options), allow_missing=options.allow_missing)
    write_all({options.md: table.markdown, options.csv: table.csv})


def command_returns(options: argparse.Namespace) -> None:
    _check_suffix(options.md, ".md", "--md")
    _check_suffix(options.csv, ".csv", "--csv")
    _check_resamples(options)
    if options.last_episodes < 1:
        raise ReportError(f"--last-episodes must be positive, got {options.last_episodes}")
    table = returns_table(
        _runset(options),
        last_episodes=options.last_episodes,
        bootstrap_resamples=options.bootstrap_resamples,
        bootstrap_seed=options.bootstrap_seed,
        allow_missing=options.allow_missing,
    )
    write_all({options.md: table.markdown, options.csv: table.csv})


def command_aggregate(options: argparse.Namespace) -> None:
    _check_suffix(options.md, ".md", "--md")
    _check_suffix(options.csv, ".csv", "--csv")
    _check_resamples(options)
    table = aggregate_table(
        _runset(options),
        last_episodes=options.last_episodes,
        bootstrap_resamples=options.bootstrap_resamples,
        bootstrap_seed=options.bootstrap_seed,
        allow_missing=options.allow_missing,
    )
    write_all({options.md: table.markdown, options.csv: table.csv})


def command_plots(options: argparse.Namespace) -> None:
    import matplotlib
    import matplotlib.pyplot as plt

    from sacbench.results import plots

    # Fixed SVG element ids and no creation date: reruns give byte-identical files.
    matplotlib.rcParams["svg.hashsalt"] = "sacbench"

    if options.smoothing_episodes < 1:
        raise ReportError(f"--smoothing-episodes must be >= 1, got {options.smoothing_episodes}")
    runset = _runset(options)
    figures = {
        "sac": plots.returns_vs_steps(runset, smoothing_episodes=options.smoothing_episodes),
        "sac-time": plots.returns_vs_time(runset, smoothing_episodes=options.smoothing_episodes),
        "sac-sps": plots.sps_vs_steps(runset),
    }
    outputs: dict[Path, str | bytes] = {}
    for name, figure in figures.items():
        for extension in ("png", "svg"):
            buffer = io.BytesIO()
            figure.savefig(
                buffer, format=extension, dpi=120, bbox_inches="tight", metadata={"Date": None}
            )
            outputs[options.out_dir / f"{name}.{extension}"] = buffer.getvalue()
        plt.close(figure)
    write_all(outputs)


# ---- command line --------------------------------------------------------------------------------


def _selection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--extracted-dir", type=Path, required=True)
    parser.add_argument("--variants", nargs="+", required=True)
    parser.add_argument("--env-ids", nargs="+", required=True)
    parser.add_argument("--seeds", nargs="+", type=int, required=True)
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="report missing or broken runs as n/a with a footnote instead of failing",
    )


def _bootstrap_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-resamples", type=int, default=stats.MIN_RESAMPLES)
    parser.add_argument("--bootstrap-seed", type=int, default=0)
    parser.add_argument(
        "--last-episodes",
        type=int,
        default=100,
        help="episodes per run averaged into its return (fewer if the run has fewer)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sacbench.report", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    extract = commands.add_parser("extract", help="event files of one run -> OUT.csv + OUT.json")
    extract.add_argument("--run-dir", type=Path, required=True)
    extract.add_argument("--output", type=Path, required=True)
    extract.add_argument("--reader", choices=READERS, default="records")

    runtimes = commands.add_parser("runtimes", help="results/sac_runtimes.{md,csv}")
    _selection_arguments(runtimes)
    runtimes.add_argument("--md", type=Path, required=True)
    runtimes.add_argument("--csv", type=Path, required=True)

    returns = commands.add_parser("returns", help="results/sac.{md,csv}")
    _selection_arguments(returns)
    _bootstrap_arguments(returns)
    returns.add_argument("--md", type=Path, required=True)
    returns.add_argument("--csv", type=Path, required=True)

    aggregate = commands.add_parser("aggregate", help="results/sac_aggregate.{md,csv}")
    _selection_arguments(aggregate)
    _bootstrap_arguments(aggregate)
    aggregate.add_argument("--md", type=Path, required=True)
    aggregate.add_argument("--csv", type=Path, required=True)

    plot = commands.add_parser("plots", help="results/plots/sac{,-time,-sps}.{png,svg}")
    _selection_arguments(plot)
    plot.add_argument("--out-dir", type=Path, required=True)
    plot.add_argument(
        "--smoothing-episodes",
        type=int,
        default=10,
        help="trailing mean over this many episodes per seed in the return plots (1: none)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    try:
        if options.command == "extract":
            extract_run(run_dir=options.run_dir, output_csv=options.output, reader=options.reader)
        else:
            {
                "runtimes": command_runtimes,
                "returns": command_returns,
                "aggregate": command_aggregate,
                "plots": command_plots,
            }[options.command](options)
    except (ReportError, ResultsInputError, EventLogError, ValueError) as error:
        print(f"sacbench.report {options.command}: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
