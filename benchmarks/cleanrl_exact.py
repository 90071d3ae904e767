"""Does `--cleanrl-exact` compute what CleanRL's own script computes, step for step?

For each task, runs CleanRL's cleanrl/sac_continuous_action.py (a checkout of vwxyzjn/cleanrl at
fe8d8a03, with its own interpreter: Gymnasium 0.29, mujoco 2.3.3, NumPy 1) and sacbench's
reference path with --cleanrl-exact, with the same seed and arguments, one torch thread each,
then compares their losses/* scalars and episodic returns at every logged step. It prints, per
tag, the largest relative difference while the runs are equal and the step where they separate:
the first logged step where a tag's relative difference |a - b| / max(|a|, |b|) exceeds the
tolerance (float32 rounding: 1e-5), or where one run logged a point the other did not.

    python -m benchmarks.cleanrl_exact --cleanrl-checkout /work/cleanrl \\
        --cleanrl-python /work/cleanrl-venv/bin/python --env-ids HalfCheetah-v4 Hopper-v4 \\
        --total-timesteps 3000 --learning-starts 1000 --plot docs/figures/cleanrl-exact.png

docs/cleanrl-exact.md shows the result.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sacbench.events import read_run_scalars
from sacbench.tags import LENGTH_TAG, RETURN_TAG

TOLERANCE = 1e-5  # float32 rounding, with room for a few roundings
SCRIPT = Path("cleanrl") / "sac_continuous_action.py"
COMPARED_TAGS: tuple[str, ...] = (
    RETURN_TAG,
    LENGTH_TAG,
    "losses/qf1_values",
    "losses/qf2_values",
    "losses/qf1_loss",
    "losses/qf2_loss",
    "losses/qf_loss",
    "losses/actor_loss",
    "losses/alpha",
    "losses/alpha_loss",
)


@dataclass(frozen=True)
class TagComparison:
    tag: str
    points: int  # logged steps the two runs share
    max_equal_difference: float  # the largest relative difference before the separation
    separation_step: int | None  # the first step where they differ beyond the tolerance


@dataclass(frozen=True)
class Comparison:
    tags: list[TagComparison]
    differences: pd.DataFrame  # tag, step, relative_difference (inf: a point only one run has)

    @property
    def separation_step(self) -> int | None:
        steps = [tag.separation_step for tag in self.tags if tag.separation_step is not None]
        return min(steps) if steps else None


def relative_differences(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """|a - b| / max(|a|, |b|), 0 where both are 0."""
    scale = np.maximum(np.abs(first), np.abs(second))
    difference = np.abs(first - second)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(scale == 0, 0.0, difference / scale)


def compare_scalars(
    cleanrl: pd.DataFrame,
    sacbench: pd.DataFrame,
    *,
    tags: Sequence[str] = COMPARED_TAGS,
    tolerance: float = TOLERANCE,
) -> Comparison:
    """Compare two runs' scalar tables (sacbench.events' format) tag by tag, step by step."""
    rows: list[pd.DataFrame] = []
    results: list[TagComparison] = []
    for tag in tags:
        ours = sacbench[sacbench.tag == tag].set_index("step")["value"]
        theirs = cleanrl[cleanrl.tag == tag].set_index("step")["value"]
        if ours.empty and theirs.empty:
            raise ValueError(f"neither run logged {tag}: nothing to compare")
        steps = ours.index.union(theirs.index)
        both = ours.index.intersection(theirs.index)
        differences = pd.Series(math.inf, index=steps)
        differences[both] = relative_differences(theirs[both].to_numpy(), ours[both].to_numpy())
        beyond = differences[differences > tolerance]
        separation = int(beyond.index[0]) if len(beyond) else None
        before = differences if separation is None else differences[differences.index < separation]
        results.append(
            TagComparison(
                tag=tag,
                points=len(both),
                max_equal_difference=float(before.max()) if len(before) else 0.0,
                separation_step=separation,
            )
        )
        rows.append(
            pd.DataFrame(
                {"tag": tag, "step": steps.astype(int), "relative_difference": differences.values}
            )
        )
    return Comparison(tags=results, differences=pd.concat(rows, ignore_index=True))


def report_lines(env_id: str, comparison: Comparison, *, learning_starts: int) -> list[str]:
    lines = [f"{env_id}:", f"  {'tag':24} {'points':>6} {'max rel. diff':>14}  separates at"]
    for tag in comparison.tags:
        where = "-" if tag.separation_step is None else f"step {tag.separation_step}"
        lines.append(f"  {tag.tag:24} {tag.points:6d} {tag.max_equal_difference:14.3g}  {where}")
    separation = comparison.separation_step
    steps = comparison.differences.step
    if separation is None:
        lines.append(f"  equal at every logged step, through step {int(steps.max())}")
        return lines
    equal_steps = steps[steps < separation]
    if equal_steps.empty:
        lines.append(f"  the runs differ from the first logged step, {separation}, on")
        return lines
    last_equal = int(equal_steps.max())
    updates = max(0, last_equal - learning_starts)
    lines.append(
        f"  equal at every logged step through step {last_equal} ({updates} updates); "
        f"the runs separate at step {separation}"
    )
    return lines


def run_both(
    env_id: str,
    *,
    out_dir: Path,
    cleanrl_checkout: Path,
    cleanrl_python: str,
    seed: int,
    total_timesteps: int,
    learning_starts: int,
    reuse: bool = False,
) -> tuple[Path, Path]:
    """Run the script and sacbench side by side; their run dirs (the script's: its runs/*).
    With `reuse`, finished runs of an earlier call in `out_dir` are compared again."""
    cleanrl_dir, sacbench_dir = out_dir / env_id / "cleanrl", out_dir / env_id / "sacbench"
    if reuse and (sacbench_dir / "complete.json").is_file():
        return _script_run(cleanrl_dir), sacbench_dir
    for directory in (cleanrl_dir, sacbench_dir):
        if directory.exists():
            raise FileExistsError(f"{directory} exists: give a fresh --out-dir")
    cleanrl_dir.mkdir(parents=True)
    shared = [f"--env-id={env_id}", f"--seed={seed}", f"--total-timesteps={total_timesteps}"]
    shared.append(f"--learning-starts={learning_starts}")
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    script = [cleanrl_python, str(cleanrl_checkout / SCRIPT), *shared, "--no-cuda"]
    ours = [sys.executable, "-m", "sacbench.train", *shared, "--update-path=reference"]
    ours += ["--cleanrl-exact", "--threads=1", "--eval-episodes=0", "--checkpoint-interval=0"]
    ours += [f"--run-dir={sacbench_dir}", "--device=cpu"]
    with (
        open(out_dir / env_id / "cleanrl.log", "w") as cleanrl_log,
        open(out_dir / env_id / "sacbench.log", "w") as sacbench_log,
    ):
        processes = [
            subprocess.Popen(
                script,
                cwd=cleanrl_dir,
                env={**environment, "PYTHONPATH": str(cleanrl_checkout)},
                stdout=cleanrl_log,
                stderr=subprocess.STDOUT,
            ),
            subprocess.Popen(ours, env=environment, stdout=sacbench_log, stderr=subprocess.STDOUT),
        ]
        codes = [process.wait() for process in processes]
    for name, code in zip(("cleanrl.log", "sacbench.log"), codes, strict=True):
        if code != 0:
            raise RuntimeError(f"{env_id}: exit status {code}, see {out_dir / env_id / name}")
    return _script_run(cleanrl_dir), sacbench_dir


def _script_run(cleanrl_dir: Path) -> Path:
    runs = sorted((cleanrl_dir / "runs").iterdir()) if (cleanrl_dir / "runs").is_dir() else []
    if len(runs) != 1:
        raise RuntimeError(f"{cleanrl_dir / 'runs'} holds {len(runs)} runs, expected one")
    return runs[0]


def plot(comparisons: dict[str, Comparison], path: Path, *, learning_starts: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    floor = 1e-12  # where a bit-equal point (difference 0) is drawn on the log axis
    figure, axes = plt.subplots(
        1, len(comparisons), figsize=(6.5 * len(comparisons), 4.2), squeeze=False
    )
    for axis, (env_id, comparison) in zip(axes[0], comparisons.items(), strict=True):
        # The largest over the tags at each logged step: one curve per step kind (losses, returns).
        frame = comparison.differences.replace(math.inf, 1.0)
        losses = frame[frame.tag.str.startswith("losses/")].groupby("step").relative_difference
        returns = frame[frame.tag == RETURN_TAG].set_index("step").relative_difference
        for series, label, marker in (
            (losses.max(), "losses/* (largest over the 8 tags)", "."),
            (returns, "charts/episodic_return", "o"),
        ):
            axis.plot(
                series.index, series.clip(lower=floor), marker, ms=3, label=label, linestyle="-"
            )
        axis.axhline(TOLERANCE, color="red", linewidth=1, label=f"tolerance {TOLERANCE:g}")
        axis.axvline(learning_starts, color="grey", linewidth=1, linestyle=":")
        separation = comparison.separation_step
        if separation is not None:
            axis.axvline(separation, color="black", linewidth=1, linestyle="--")
        axis.set_yscale("log")
        axis.set_ylim(floor / 3, 3)
        axis.set_xlabel("global step (dotted: learning_starts; dashed: separation)")
        axis.set_ylabel(f"relative difference (0 drawn at {floor:g})")
        axis.set_title(f"{env_id}: sacbench --cleanrl-exact vs CleanRL's script")
        axis.legend(fontsize=8, loc="upper left")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_differences(comparisons: dict[str, Comparison], path: Path) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["env_id", "tag", "step", "relative_difference"])
        for env_id, comparison in comparisons.items():
            for row in comparison.differences.itertuples(index=False):
                writer.writerow([env_id, row.tag, row.step, f"{row.relative_difference:.6g}"])


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cleanrl-checkout", type=Path, required=True, help="vwxyzjn/cleanrl")
    parser.add_argument("--cleanrl-python", required=True, help="the script's interpreter")
    parser.add_argument("--env-ids", nargs="+", default=["HalfCheetah-v4", "Hopper-v4"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--total-timesteps", type=int, default=3000)
    parser.add_argument("--learning-starts", type=int, default=1000)
    parser.add_argument("--out-dir", type=Path, default=Path("cleanrl-exact-runs"))
    parser.add_argument("--plot", type=Path, help="write the figure here (PNG)")
    parser.add_argument(
        "--reuse", action="store_true", help="compare the finished runs in --out-dir again"
    )
    args = parser.parse_args(argv)
    if not (args.cleanrl_checkout / SCRIPT).is_file():
        parser.error(f"--cleanrl-checkout {args.cleanrl_checkout}: no {SCRIPT} in it")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    comparisons: dict[str, Comparison] = {}
    for env_id in args.env_ids:
        cleanrl_run, sacbench_run = run_both(
            env_id,
            out_dir=args.out_dir,
            cleanrl_checkout=args.cleanrl_checkout,
            cleanrl_python=args.cleanrl_python,
            seed=args.seed,
            total_timesteps=args.total_timesteps,
            learning_starts=args.learning_starts,
            reuse=args.reuse,
        )
        comparison = compare_scalars(read_run_scalars(cleanrl_run), read_run_scalars(sacbench_run))
        comparisons[env_id] = comparison
        print("\n".join(report_lines(env_id, comparison, learning_starts=args.learning_starts)))
    write_differences(comparisons, args.out_dir / "relative_differences.csv")
    if args.plot is not None:
        plot(comparisons, args.plot, learning_starts=args.learning_starts)
        print(f"figure: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
