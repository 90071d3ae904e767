"""The definitions-and-units texts of the tables, kept in one place.

docs/results.md carries them too, as a block generated from this module with the report's
defaults; `python -m sacbench.results.definitions` prints that block and `--write
docs/results.md` replaces it in place (tests/test_tables.py fails while the two differ).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from sacbench import published
from sacbench.atomic import write_atomically
from sacbench.results import stats
from sacbench.tags import ELAPSED_TAG, EVAL_RETURN_TAG, RETURN_TAG, SPS_TAG, STEADY_SPS_TAG

# The defaults of `python -m sacbench.report`'s statistics flags (cli.py reads them here), and so
# the values docs/results.md's generated definitions are rendered with.
DEFAULT_LAST_EPISODES = 100
DEFAULT_BOOTSTRAP_RESAMPLES = stats.MIN_RESAMPLES
DEFAULT_BOOTSTRAP_SEED = 0

# The markers around the generated block in docs/results.md.
DOCS_BEGIN = "<!-- BEGIN definitions (python -m sacbench.results.definitions) -->"
DOCS_END = "<!-- END definitions -->"
DOCS_COMMAND = "python -m sacbench.results.definitions --write docs/results.md"

# The published columns' cell for a task CleanRL's pr-424 benchmark did not run (an en dash).
UNPUBLISHED_CELL = "\u2013"


def unpublished_note() -> str:
    """The footnote of UNPUBLISHED_CELL, the same in every table."""
    return (
        f"{UNPUBLISHED_CELL}: no published {published.LABEL} number for this task; CleanRL's "
        f"{published.LABEL} benchmark ran only {', '.join(published.PR424)}. Such tasks are "
        "left out of the normalised aggregate (sac_aggregate.md)."
    )


def left_out_of_aggregate_note(env_ids: Sequence[str]) -> str:
    """The footnote of sac_aggregate.md naming the tasks it cannot score."""
    return (
        f"Left out: {', '.join(env_ids)}. A normalised score needs a published "
        f"{published.LABEL} return, and {published.LABEL} ran only {', '.join(published.PR424)}."
    )


# Footnotes of runtime cells whose runs lack one of sacbench's two extra tags: runs of an
# external command such as CleanRL's script (docs/contracts.md), which log CleanRL's tags only.
STEADY_SPS_FROM_WALL_TIMES = (
    f"No {STEADY_SPS_TAG} in this run's events (an external command's, e.g. CleanRL's "
    f"script): each window's steady SPS is the steps between two consecutive {SPS_TAG} points "
    "over the difference of their event wall times (everything the script does between two log "
    "points included), combined over the windows as for sacbench's runs."
)
ELAPSED_FROM_WALL_TIMES = (
    f"No {ELAPSED_TAG} in this run's events (an external command's): the seconds at each "
    f"{SPS_TAG} point are its event wall time minus the command's start, as python -m "
    "sacbench.run_command recorded it (metadata.json's started_unix_time; without it, "
    "complete.json's finished_at - elapsed_seconds), interpreter start-up included."
)
COMMAND_WALL_CLOCK = (
    "An external command's run: complete.json's elapsed_seconds is the command's wall-clock "
    "from its start to its exit, as python -m sacbench.run_command measured it (interpreter "
    "start-up included; one attempt, as such runs do not resume)."
)


def runtime_definitions() -> list[str]:
    """The footnotes of sac_runtimes.md, in order."""
    return [
        f"**CleanRL SPS**: the run's last {SPS_TAG} value, CleanRL's definition "
        "int(global_step / seconds since start), a cumulative average that includes start-up and "
        "the learning_starts random-action steps; steps per second.",
        f"**Steady training SPS**: each {STEADY_SPS_TAG} point is the throughput over the steps "
        "since the previous log point (every 100 steps, training steps only); the points in the "
        "first 10% of the logged step range are left out as warm-up (always including the first "
        "one), and the rest combine as total steps / total seconds (a step-weighted harmonic "
        "mean); steps per second.",
        "**Wall-clock time**: complete.json's elapsed_seconds, the training job's own "
        "time summed over all its sessions (time between a stop and its resume not counted).",
        f"**openrlbenchmark-compatible time**: {ELAPSED_TAG} averaged over the seeds at "
        "each logged step, then the mean of the last max(1, floor(10%)) of those rows - how "
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
        "**Evaluation time is excluded**: the trainer's evaluations (every --eval-frequency "
        "steps, and the final one after the last step) are not training, and their time is "
        f"left out of {SPS_TAG}, {STEADY_SPS_TAG}, {ELAPSED_TAG} and complete.json's "
        "elapsed_seconds, so every figure in this table (SPS, steady SPS, wall-clock, "
        "openrlbenchmark-compatible and projected minutes) counts training time only.",
        "Durations: each section's heading names its one unit: seconds with 1 decimal when "
        "every duration in it is under a minute (as a smoke run's), else minutes with 2 "
        "decimals; a std is in the same unit as its mean.",
        "Mean ± std: over seeds, std with ddof=0 (population), as openrlbenchmark. With one "
        "seed a cell is that seed's value alone: one value has no spread.",
        f"[A] {published.LABEL}: CleanRL's published docs/benchmark/sac_runtimes.md. Its values "
        "are wall-clock MINUTES per 1,000,000-step run (openrlbenchmark's runtime, mean of 3 "
        "seeds), not steps per second. Software: " + published.PR424_SOFTWARE + ".",
        f"[B] Implied SPS = 1e6 / (minutes x 60) from the {published.LABEL} runtime. Because that "
        "runtime reads about 0.95x the final wall-clock, the runs' true average throughput was "
        "about 0.95x the implied figure. Compare it with CleanRL SPS only for runs of the same "
        "length: our runs' step count is in the provenance table.",
    ]


def returns_definitions(
    last_episodes: int, bootstrap_resamples: int, bootstrap_seed: int
) -> list[str]:
    """The footnotes of sac.md for these flags, in order."""
    return [
        f"**Return**: per run, the mean of its last {last_episodes} {RETURN_TAG} values "
        "(undiscounted training-episode returns, stochastic policy, as logged while training; "
        "a run with fewer finished episodes uses all it has, see the notes); then mean ± std "
        "over seeds with ddof=0 (population), as openrlbenchmark; with one seed, its value "
        "alone.",
        f"[G] **Final eval**: per run, the mean of the {EVAL_RETURN_TAG} values of its final "
        "evaluation, logged at the run's last step: after the last training step the trainer "
        "runs --eval-episodes episodes (default 10) of the deterministic policy (tanh of the "
        "actor's mean, scaled to the action bounds) on an env of its own, seeded apart from "
        "training, and logs each episode's undiscounted return; then mean ± std over seeds with "
        "ddof=0. Evaluations during training (--eval-frequency) are in the plots, not here. "
        f"CleanRL's SAC script does not evaluate, so {published.LABEL} has no such number; "
        "compare it with the training return. –: the runs have no final evaluation (see the "
        "notes).",
        f"[C] **95% CI**: percentile bootstrap of the mean over seeds, {bootstrap_resamples} "
        f"resamples of the seeds with replacement, seeded with ({bootstrap_seed}, env, variant; "
        "the final-eval CI with a stream of its own). With 3 seeds it can take at most 10 "
        "distinct values: read it as a rough range. **n**: the seeds the cell is over; a cell "
        "over one seed has no interval (–).",
        f"[A] {published.LABEL}: CleanRL's published docs/benchmark/sac.md, the same statistic "
        f"over seeds 1-3 after 1,000,000 steps. Software: {published.PR424_SOFTWARE}. "
        "Runs shorter than 1M steps are not comparable with it.",
    ]


def aggregate_definitions(
    tasks: Sequence[str], last_episodes: int, bootstrap_resamples: int, bootstrap_seed: int
) -> list[str]:
    """The footnotes of sac_aggregate.md for these tasks and flags, in order."""
    anchors = ", ".join(
        f"{env_id} {published.RANDOM_RETURNS[env_id]:g} / {published.PR424[env_id].return_mean:g}"
        for env_id in tasks
    )
    anchors = anchors or "none (no selected task has them)"
    return [
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
        f"within each task, seeded with ({bootstrap_seed}, statistic, variant)); a variant with "
        "one run per task has no interval.",
        "[F] **P(X > Y)**: for each task shared by X and Y, the probability that a run of X scores "
        "higher than a run of Y (all seed pairs, ties count 1/2), averaged over tasks; the CI "
        "resamples X's and Y's runs independently within each task (none with one run per task). "
        "0.5 = no difference.",
    ]


# ---- the generated block of docs/results.md --------------------------------------------------


def definitions_markdown() -> str:
    """Every table's definitions as the report prints them with its default flags, one section
    per table; the aggregate's anchors are those of the default tasks (pr-424's six)."""
    sections = {
        "Runtimes: `sac_runtimes.md`": runtime_definitions(),
        "Returns: `sac.md`": returns_definitions(
            DEFAULT_LAST_EPISODES, DEFAULT_BOOTSTRAP_RESAMPLES, DEFAULT_BOOTSTRAP_SEED
        ),
        "Aggregate statistics: `sac_aggregate.md`": aggregate_definitions(
            tuple(published.PR424),
            DEFAULT_LAST_EPISODES,
            DEFAULT_BOOTSTRAP_RESAMPLES,
            DEFAULT_BOOTSTRAP_SEED,
        ),
    }
    lines: list[str] = []
    for title, definitions in sections.items():
        lines += ["", f"### {title}", "", *(f"- {text}" for text in definitions)]
    return "\n".join(lines) + "\n"


def _block_bounds(text: str, *, path: Path) -> tuple[int, int]:
    """Where the generated block's content starts and ends in ``text`` (read from ``path``)."""
    if text.count(DOCS_BEGIN) != 1 or text.count(DOCS_END) != 1:
        raise ValueError(
            f"{path}: needs exactly one {DOCS_BEGIN!r} line and one {DOCS_END!r} line around "
            "the generated definitions"
        )
    start = text.index(DOCS_BEGIN) + len(DOCS_BEGIN)
    end = text.index(DOCS_END)
    if end < start:
        raise ValueError(f"{path}: {DOCS_END!r} comes before {DOCS_BEGIN!r}")
    return start, end


def docs_block(text: str, *, path: Path) -> str:
    """The content of the generated block in ``text``, the markdown file at ``path``."""
    start, end = _block_bounds(text, path=path)
    return text[start:end]


def with_current_block(text: str, *, path: Path) -> str:
    """``text`` with its generated block replaced by definitions_markdown(), all else kept."""
    start, end = _block_bounds(text, path=path)
    return text[:start] + definitions_markdown() + text[end:]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sacbench.results.definitions",
        description="Print the tables' definitions as markdown (the report's defaults), or "
        f"replace the block between {DOCS_BEGIN} and {DOCS_END} in a file.",
    )
    parser.add_argument(
        "--write",
        type=Path,
        metavar="MARKDOWN",
        help="replace the generated block in this file (docs/results.md) instead of printing",
    )
    options = parser.parse_args(argv)
    if options.write is None:
        print(definitions_markdown(), end="")
        return 0
    path = options.write
    try:
        updated = with_current_block(path.read_text(encoding="utf-8"), path=path)
    except (OSError, ValueError) as error:
        parser.exit(1, f"error: {error}\n")
    write_atomically(path, updated.encode("utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
