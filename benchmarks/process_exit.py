"""What a command's exit costs: the pipeline's commands as they ship, against themselves with
`gc.freeze()` made a no-op.

sacbench's entry shims (`python -m sacbench.train`, `sacbench.report`, ...) call `gc.freeze()`
before they exit, and the workflow calls it once Snakemake has read it (workflow/rules/common.smk),
so that Python's shutdown does not sweep the hundreds of thousands of objects that torch, pandas,
matplotlib and Snakemake made at import for reference cycles. This runs each command both ways in
alternating rounds and prints the CPU seconds (user + system, the child's and its children's) of
each side, their medians and the ratio without / with. Both sides start through the same
`runpy` prelude, which also checks at exit that the shipped side froze and the other did not: a
command that no longer freezes stops the benchmark with an error.

    python -m benchmarks.process_exit                    # every command, 5 rounds
    python -m benchmarks.process_exit --commands snakemake-dry-run --rounds 3
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import cpu_kind

THIS_TREE = Path(__file__).resolve().parents[1]
ENV_ID = "Hopper-v4"
# Run as `python -c PRELUDE ARGS...`: MODULE's `__main__` with ARGS, as `python -m MODULE ARGS`
# runs it. With SACBENCH_BENCHMARK_NO_FREEZE set, gc.freeze does nothing; either way the process
# writes how many objects it had frozen when it exited (atexit runs after the shim's freeze).
PRELUDE = """
import atexit, gc, os, runpy, sys
record = os.environ["SACBENCH_BENCHMARK_FREEZE_RECORD"]
if os.environ.get("SACBENCH_BENCHMARK_NO_FREEZE"):
    gc.freeze = lambda: None
atexit.register(lambda: open(record, "w").write(str(gc.get_freeze_count())))
module = sys.argv.pop(1)
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""
SIDES = ("no freeze", "as shipped")


def trainer_arguments(run_dir: Path, *, total_timesteps: int) -> list[str]:
    return [
        *("--run-dir", str(run_dir), "--env-id", ENV_ID, "--threads", "1"),
        *("--total-timesteps", str(total_timesteps), "--learning-starts", "200"),
        *("--batch-size", "32", "--buffer-size", str(total_timesteps), "--eval-episodes", "1"),
    ]


def _commands(work: Path) -> dict[str, tuple[str, Callable[[int], list[str]]]]:
    """name -> (module, the arguments of round N). A tiny trainer run, then what the pipeline
    does with a run: extract it, render a table and the plots, and a Snakemake dry run over the
    smoke preset, as a user's `snakemake -n` reads the workflow."""
    run_dir, extracted = work / "runs" / ENV_ID / "1", work / "extracted"
    selection = ["--extracted-dir", str(extracted), "--variants", "base"]
    selection += ["--env-ids", ENV_ID, "--seeds", "1"]
    smoke = ["--configfile", str(THIS_TREE / "config" / "smoke.yaml")]
    return {
        "train": (
            "sacbench.train",
            lambda n: trainer_arguments(work / "trained" / str(n), total_timesteps=300),
        ),
        "report-extract": (
            "sacbench.report",
            lambda n: ["extract", "--run-dir", str(run_dir), "--output", f"{work}/extract/{n}.csv"],
        ),
        "report-runtimes": (
            "sacbench.report",
            lambda n: (
                ["runtimes", *selection, "--md", f"{work}/tables/{n}.md"]
                + ["--csv", f"{work}/tables/{n}.csv"]
            ),
        ),
        "report-plots": (
            "sacbench.report",
            lambda n: ["plots", *selection, "--out-dir", f"{work}/plots/{n}"],
        ),
        "snakemake-dry-run": (
            "snakemake",
            lambda n: (
                ["-s", str(THIS_TREE / "Snakefile"), "-d", f"{work}/workflow", "-n"]
                + ["--cores", "1", *smoke]
            ),
        ),
    }


COMMAND_NAMES = tuple(_commands(Path()))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", nargs="+", choices=COMMAND_NAMES, default=list(COMMAND_NAMES))
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args(argv)
    if options.rounds <= 0:
        parser.error(f"--rounds must be positive, got {options.rounds}")
    return options


def timed(module: str, arguments: list[str], *, freeze: bool, record: Path) -> float:
    """CPU seconds of one command, after checking that it froze exactly when it should."""
    environment = {**os.environ, "SACBENCH_BENCHMARK_FREEZE_RECORD": str(record),
                   "PYTHONWARNINGS": "ignore"}  # fmt: skip
    if not freeze:
        environment["SACBENCH_BENCHMARK_NO_FREEZE"] = "1"
    record.unlink(missing_ok=True)  # a child that exits without writing one must not pass
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE, module, *arguments],
        cwd=THIS_TREE, env=environment, capture_output=True, text=True,
    )  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = " ".join([module, *arguments])
    if done.returncode != 0:
        raise SystemExit(f"{command} failed:\n{done.stderr[-3000:]}")
    if not record.is_file():
        raise SystemExit(f"{command} exited without running its atexit hooks")
    frozen = int(record.read_text())
    if (frozen > 0) != freeze:
        raise SystemExit(
            f"{module} froze {frozen} objects at exit with gc.freeze "
            f"{'as shipped' if freeze else 'made a no-op'}: "
            + ("it no longer freezes" if freeze else "the no-op did not take")
        )
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def prepare(work: Path, commands: list[str]) -> None:
    """What the chosen commands read: for the report's, one run and its extraction (600 steps:
    past learning_starts long enough for the steady-SPS points a table needs); for the dry run, a
    workdir with the repository's config.yaml (the Snakefile's configfile)."""
    record = work / "prepared-freeze-count"
    if any(name.startswith("report-") for name in commands):
        run_dir = work / "runs" / ENV_ID / "1"
        output = work / "extracted" / "base" / ENV_ID / "1.csv"
        timed("sacbench.train", trainer_arguments(run_dir, total_timesteps=600), freeze=True,
              record=record)  # fmt: skip
        extract = ["extract", "--run-dir", str(run_dir), "--output", str(output)]
        timed("sacbench.report", extract, freeze=True, record=record)
    if "snakemake-dry-run" in commands:
        (work / "workflow").mkdir()
        shutil.copy(THIS_TREE / "config.yaml", work / "workflow" / "config.yaml")


def alternating_seconds(
    module: str, arguments: Callable[[int], list[str]], *, rounds: int, work: Path
) -> dict[str, list[float]]:
    """CPU seconds of each side in each round, the sides taking turns to go first."""
    seconds: dict[str, list[float]] = {side: [] for side in SIDES}
    for round_index in range(rounds):
        for side in SIDES if round_index % 2 == 0 else SIDES[::-1]:
            run = 2 * round_index + SIDES.index(side)
            freeze = side == "as shipped"
            seconds[side].append(
                timed(module, arguments(run), freeze=freeze, record=work / "freeze-count")
            )
    return seconds


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    print(f"CPU seconds per command, alternating rounds: {options.rounds}; ratio: no freeze / as "
          "shipped")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="process-exit-") as folder:
        work = Path(folder)
        prepare(work, options.commands)
        commands = _commands(work)
        for name in options.commands:
            module, arguments = commands[name]
            seconds = alternating_seconds(module, arguments, rounds=options.rounds, work=work)
            medians = {side: statistics.median(values) for side, values in seconds.items()}
            sides = "; ".join(
                f"{side} {medians[side]:.2f} s ({', '.join(f'{v:.2f}' for v in seconds[side])})"
                for side in SIDES
            )
            print(f"{name}: {sides}; ratio {medians['no freeze'] / medians['as shipped']:.2f}")
    print(cpu_kind())
    return 0


if __name__ == "__main__":
    sys.exit(main())
