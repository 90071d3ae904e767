"""The results CLI the pipeline calls: extract a run, then render tables and plots.

    python -m sacbench.report extract   --run-dir DIR --output OUT.csv
    python -m sacbench.report runtimes  --extracted-dir D --variants V.. --env-ids E.. --seeds S..
                                        --md OUT.md --csv OUT.csv [--html OUT.html]
                                        [--allow-missing]
    python -m sacbench.report returns   ... --md OUT.md --csv OUT.csv [--last-episodes 100]
                                        [--bootstrap-resamples 2000] [--bootstrap-seed 0]
    python -m sacbench.report plots     ... --out-dir DIR [--figures NAME..] [--last-episodes 100]
                                        [--bootstrap-resamples 2000] [--bootstrap-seed 0]
                                        (sac, sac-time, sac-sps, sac-eval, sac-aggregate,
                                        sac-profile: .png, .svg)
    python -m sacbench.report aggregate ... --md OUT.md --csv OUT.csv [--bootstrap-resamples 2000]
    python -m sacbench.report video     --run-dir DIR --mp4 OUT.mp4 --html OUT.html

Every command computes all of its outputs in memory first and then writes each through a
temporary file and a rename, so a failure never leaves a partial table over a good one.
Definitions and units: docs/results.md.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sacbench import published
from sacbench.atomic import write_atomically
from sacbench.events import READERS, EventLogError
from sacbench.results import definitions, stats
from sacbench.results.aggregate import aggregate_table
from sacbench.results.extract import extract_run
from sacbench.results.html_tables import table_page
from sacbench.results.render import TableText
from sacbench.results.returns import returns_table
from sacbench.results.runs import ResultsInputError, RunSet, Selection, load_runs
from sacbench.results.runtimes import runtimes_table
from sacbench.results.videos import publish_video

# The names of sacbench.results.plots.FIGURES, which imports matplotlib only when plots are drawn.
FIGURE_NAMES = ("sac", "sac-time", "sac-sps", "sac-eval", "sac-aggregate", "sac-profile")


# Why `--figures NAME` has nothing to draw, for the figures that need more than runs.
NO_DATA = "none of the runs logged what it shows"
FIGURE_NEEDS = {
    name: f"no selected task has a published {published.LABEL} return to normalise by (the "
    f"aggregate's tasks: {', '.join(published.PR424)})"
    for name in ("sac-aggregate", "sac-profile")
}


class ReportError(ValueError):
    """Bad arguments or inputs of a report command."""


# ---- writing -------------------------------------------------------------------------------------


def write_all(outputs: dict[Path, str | bytes]) -> None:
    """Write every output (each atomically) only after all of them were computed."""
    for path, content in outputs.items():
        write_atomically(path, content)


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


def _check_statistics(options: argparse.Namespace) -> None:
    if options.bootstrap_resamples < stats.MIN_RESAMPLES:
        raise ReportError(
            f"--bootstrap-resamples must be at least {stats.MIN_RESAMPLES}, "
            f"got {options.bootstrap_resamples}"
        )
    # Checked for aggregate too: there, 0 used to average every episode (iloc[-0:]).
    if options.last_episodes < 1:
        raise ReportError(f"--last-episodes must be positive, got {options.last_episodes}")


def _runtimes(runset: RunSet, options: argparse.Namespace) -> TableText:
    return runtimes_table(runset, allow_missing=options.allow_missing)


def _statistics_table(
    table: Callable[..., TableText],
) -> Callable[[RunSet, argparse.Namespace], TableText]:
    """A renderer for a table that takes the --last-episodes and --bootstrap-* flags."""

    def render(runset: RunSet, options: argparse.Namespace) -> TableText:
        return table(
            runset,
            last_episodes=options.last_episodes,
            bootstrap_resamples=options.bootstrap_resamples,
            bootstrap_seed=options.bootstrap_seed,
            allow_missing=options.allow_missing,
        )

    return render


@dataclass(frozen=True)
class TableCommand:
    """One table subcommand: its --help, its renderer, and whether it takes the statistics
    flags (--last-episodes, --bootstrap-resamples, --bootstrap-seed)."""

    help: str
    render: Callable[[RunSet, argparse.Namespace], TableText]
    statistics: bool


# In the order of `--help`'s list of subcommands (after extract, before plots).
TABLE_COMMANDS: dict[str, TableCommand] = {
    "runtimes": TableCommand("results/sac_runtimes.{md,csv}", _runtimes, statistics=False),
    "returns": TableCommand("results/sac.{md,csv}", _statistics_table(returns_table), True),
    "aggregate": TableCommand(
        "results/sac_aggregate.{md,csv}", _statistics_table(aggregate_table), True
    ),
}


def command_table(name: str, options: argparse.Namespace) -> None:
    """Check the flags, render the table in memory, then write its .md and .csv (and, with
    --html, the page that shows it in the Snakemake report)."""
    command = TABLE_COMMANDS[name]
    _check_suffix(options.md, ".md", "--md")
    _check_suffix(options.csv, ".csv", "--csv")
    if options.html is not None:
        _check_suffix(options.html, ".html", "--html")
    if command.statistics:
        _check_statistics(options)
    table = command.render(_runset(options), options)
    outputs: dict[Path, str | bytes] = {options.md: table.markdown, options.csv: table.csv}
    if options.html is not None:
        outputs[options.html] = table_page(table.markdown)
    write_all(outputs)


def command_plots(options: argparse.Namespace) -> None:
    import matplotlib
    import matplotlib.pyplot as plt

    from sacbench.results import plots

    # Fixed SVG element ids and no creation date: reruns give byte-identical files.
    matplotlib.rcParams["svg.hashsalt"] = "sacbench"

    if options.smoothing_episodes < 1:
        raise ReportError(f"--smoothing-episodes must be >= 1, got {options.smoothing_episodes}")
    _check_statistics(options)
    runset = _runset(options)
    names = options.figures or plots.figures_with_data(runset)
    for name in names:
        if name in plots.HAS_DATA and not plots.HAS_DATA[name](runset):
            raise ReportError(f"--figures {name}: {FIGURE_NEEDS.get(name, NO_DATA)}")
    figure_options = plots.FigureOptions(
        smoothing_episodes=options.smoothing_episodes,
        last_episodes=options.last_episodes,
        bootstrap_resamples=options.bootstrap_resamples,
        bootstrap_seed=options.bootstrap_seed,
        allow_missing=options.allow_missing,
    )
    figures = {name: plots.FIGURES[name](runset, figure_options) for name in dict.fromkeys(names)}
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
    parser.add_argument(
        "--bootstrap-resamples", type=int, default=definitions.DEFAULT_BOOTSTRAP_RESAMPLES
    )
    parser.add_argument("--bootstrap-seed", type=int, default=definitions.DEFAULT_BOOTSTRAP_SEED)
    parser.add_argument(
        "--last-episodes",
        type=int,
        default=definitions.DEFAULT_LAST_EPISODES,
        help="episodes per run averaged into its return (fewer if the run has fewer)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sacbench.report", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    extract = commands.add_parser("extract", help="event files of one run -> OUT.csv + OUT.json")
    extract.add_argument("--run-dir", type=Path, required=True)
    extract.add_argument("--output", type=Path, required=True)
    extract.add_argument("--reader", choices=READERS, default="records")

    for name, command in TABLE_COMMANDS.items():
        table = commands.add_parser(name, help=command.help)
        _selection_arguments(table)
        if command.statistics:
            _bootstrap_arguments(table)
        table.add_argument("--md", type=Path, required=True)
        table.add_argument("--csv", type=Path, required=True)
        table.add_argument(
            "--html",
            type=Path,
            help="also write the table as an HTML page (the Snakemake report shows it inline)",
        )

    plot = commands.add_parser(
        "plots", help="results/plots/sac{,-time,-sps,-eval,-aggregate,-profile}.{png,svg}"
    )
    _selection_arguments(plot)
    _bootstrap_arguments(plot)  # the aggregate figures' statistics, as the aggregate table's
    plot.add_argument("--out-dir", type=Path, required=True)
    plot.add_argument(
        "--figures",
        nargs="+",
        choices=FIGURE_NAMES,
        help="the figures to draw (default: every one the runs have data for; sac-eval needs "
        "runs that evaluated, sac-aggregate and sac-profile a task pr-424 ran)",
    )
    plot.add_argument(
        "--smoothing-episodes",
        type=int,
        default=10,
        help="trailing mean over this many episodes per seed in the return plots (1: none)",
    )

    video = commands.add_parser(
        "video", help="a run's videos/final.mp4 -> OUT.mp4, and OUT.html that plays it"
    )
    video.add_argument("--run-dir", type=Path, required=True)
    video.add_argument("--mp4", type=Path, required=True)
    video.add_argument("--html", type=Path, required=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    try:
        if options.command == "extract":
            extract_run(run_dir=options.run_dir, output_csv=options.output, reader=options.reader)
        elif options.command == "plots":
            command_plots(options)
        elif options.command == "video":
            publish_video(run_dir=options.run_dir, mp4=options.mp4, page=options.html)
        else:
            command_table(options.command, options)
    except (ReportError, ResultsInputError, EventLogError, ValueError) as error:
        print(f"sacbench.report {options.command}: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
