"""The seed-batch trainer's command line, `python -m sacbench.train_seeds` (sacbench/train_seeds.py
runs this)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import tyro

from sacbench.sac.args import Args
from sacbench.training.errors import RunDirError
from sacbench.training.seed_batch import train_seed_batch


@dataclass
class SeedBatchArgs(Args):
    """The trainer's arguments, with --seeds instead of --seed and {seed} in --run-dir."""

    seed: tyro.conf.Suppress[int] = 1  # each run's seed comes from --seeds
    seeds: tuple[int, ...] = (1, 2, 3)
    """the seeds trained together in this process, each into its own run dir (instead of --seed)"""
    run_dir: str = "runs/sac/seed{seed}"
    """each seed's run dir: {seed} stands for the seed; re-running resumes every seed there"""
    eval_episodes: int = 0
    """a seed batch runs no evaluation (0); evaluate its saved policies instead"""


SEED_BATCH_DESCRIPTION = (
    "Several seeds of one SAC run trained in one process, each step's updates of all seeds one "
    "batched computation; each seed keeps its own run dir, events, checkpoint and completion "
    "record, as if trained alone with python -m sacbench.train."
)


def main(argv: list[str] | None = None) -> int:
    """`python -m sacbench.train_seeds`: train_seed_batch from the command line."""
    words = sys.argv[1:] if argv is None else argv
    if any(word == "--seed" or word.startswith("--seed=") for word in words):
        print("sacbench.train_seeds: error: --seed: a seed batch takes --seeds", file=sys.stderr)
        return 2
    args = tyro.cli(
        SeedBatchArgs,
        args=words,
        prog="python -m sacbench.train_seeds",
        description=SEED_BATCH_DESCRIPTION,
    )
    try:
        return train_seed_batch(args, args.seeds)
    except (RunDirError, ValueError, RuntimeError) as error:
        print(f"sacbench.train_seeds: error: {error}", file=sys.stderr)
        return 2
