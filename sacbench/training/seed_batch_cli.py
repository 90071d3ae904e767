"""The seed-batch trainer's command line, `python -m sacbench.train_seeds` (sacbench/train_seeds.py
runs this)."""

from __future__ import annotations

import sys

import tyro

from sacbench.training.errors import RunDirError
from sacbench.training.seed_batch import SeedBatchArgs, train_seed_batch

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
