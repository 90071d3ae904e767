"""Learning sanity: does the trainer learn InvertedPendulum-v4 as CleanRL's SAC does?

Trains a task (InvertedPendulum-v4 unless --env says otherwise) with the default
hyperparameters (learning_starts 5,000) for each seed and update path with the real trainer
(`python -m sacbench.train`, one thread), then reads charts/episodic_return back from the run's
event files and reports the first step at which an episode returned --solved-return (1,000,
InvertedPendulum-v4's maximum) and the mean return in coarse step bins. CleanRL's SAC reaches
such episodes well before 25k steps; the fast path's eager hand-written update ("fast", with
--no-fused-update) and its --precision bf16 variant ("fast-bf16"), its fused update (the
trainer's default on a CPU: "fast-fused") and that with bf16 products ("fast-fused-bf16"),
must behave alike.

    python -m benchmarks.learning_sanity                                # fast path, seeds 1 and 2
    python -m benchmarks.learning_sanity --paths fast reference --out runs/sanity
    python -m benchmarks.learning_sanity --paths fast fast-bf16 --seeds 1 2 3 4
    python -m benchmarks.learning_sanity --env Hopper-v4 --paths fast fast-bf16 \
        --total-timesteps 50000 --bin 5000 --solved-return 1000

Runs already finished in --out are read, not trained again (the trainer refuses to retrain a
finished run dir), so the script can be re-run to print the table.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from tabulate import tabulate

from sacbench.events import read_run_scalars
from sacbench.training.envs import EnvError, env_spaces

# The trainer's flags of each path.
PATH_FLAGS = {
    "fast": ("--update-path", "fast", "--no-fused-update"),
    "reference": ("--update-path", "reference"),
    "fast-bf16": ("--update-path", "fast", "--no-fused-update", "--precision", "bf16"),
    "fast-fused": ("--update-path", "fast", "--fused-update"),
    "fast-fused-bf16": ("--update-path", "fast", "--fused-update", "--precision", "bf16"),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--paths", nargs="+", default=["fast"], choices=list(PATH_FLAGS))
    parser.add_argument("--env", default="InvertedPendulum-v4", help="the task to learn")
    parser.add_argument(
        "--solved-return",
        type=float,
        default=1000.0,
        help="report the first step of an episode that returned at least this much",
    )
    parser.add_argument("--total-timesteps", type=int, default=25_000)
    parser.add_argument("--bin", type=int, default=2_500, help="width of the return bins (steps)")
    parser.add_argument("--out", type=Path, default=Path("runs/learning_sanity"))
    args = parser.parse_args(argv)
    if args.total_timesteps <= 5_000:
        parser.error(
            f"--total-timesteps must exceed learning_starts 5000, got {args.total_timesteps}"
        )
    if args.bin <= 0:
        parser.error(f"--bin must be positive, got {args.bin}")
    try:
        env_spaces(args.env)
    except EnvError as error:
        parser.error(f"--env: {error}")
    return args


def train(run_dir: Path, *, env_id: str, seed: int, path: str, total_timesteps: int) -> float:
    """Train one run (or find it finished); return the wall seconds spent here."""
    command = [
        sys.executable,
        "-m",
        "sacbench.train",
        "--env-id",
        env_id,
        "--seed",
        str(seed),
        "--total-timesteps",
        str(total_timesteps),
        *PATH_FLAGS[path],
        "--threads",
        "1",
        "--run-dir",
        str(run_dir),
    ]
    started = time.time()
    log = run_dir.with_suffix(".log")
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as handle:
        result = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        raise SystemExit(f"training {run_dir} failed with status {result.returncode}; see {log}")
    return time.time() - started


def summarise(
    returns: pd.DataFrame, *, bin_width: int, total: int, solved_return: float
) -> dict[str, object]:
    solved = returns[returns["value"] >= solved_return]
    summary: dict[str, object] = {
        "episodes": len(returns),
        f"first step with return {solved_return:g}": (
            int(solved["step"].min()) if len(solved) else "never"
        ),
    }
    for start in range(0, total, bin_width):
        in_bin = returns[(returns["step"] >= start) & (returns["step"] < start + bin_width)]
        label = f"{start / 1000:g}k-{(start + bin_width) / 1000:g}k"
        summary[label] = f"{in_bin['value'].mean():.0f}" if len(in_bin) else "-"
    return summary


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    rows = []
    for path in options.paths:
        for seed in options.seeds:
            run_dir = options.out / options.env / path / str(seed)
            seconds = train(
                run_dir,
                env_id=options.env,
                seed=seed,
                path=path,
                total_timesteps=options.total_timesteps,
            )
            scalars = read_run_scalars(run_dir)
            returns = scalars[scalars["tag"] == "charts/episodic_return"]
            rows.append(
                {
                    "path": path,
                    "seed": seed,
                    **summarise(
                        returns,
                        bin_width=options.bin,
                        total=options.total_timesteps,
                        solved_return=options.solved_return,
                    ),
                    "wall s (this call)": f"{seconds:.0f}",
                }
            )
            print(f"done: {path} seed {seed} in {seconds:.0f} s", flush=True)
    print(f"\n{options.env}, default hyperparameters, mean episodic return per step bin:")
    print(tabulate(rows, headers="keys", tablefmt="github"))
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
