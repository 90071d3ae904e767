"""The trainer's command line, `python -m sacbench.train` (sacbench/train.py runs this)."""

from __future__ import annotations

import sys

import tyro

from sacbench.sac.args import Args
from sacbench.training.errors import RunDirError, describe_error
from sacbench.training.loop import train

# tyro's description: `--help` shows it, and it stays as it was when it was train.py's docstring.
DESCRIPTION = "Soft Actor-Critic for continuous actions, after CleanRL's sac_continuous_action.py."


def main(argv: list[str] | None = None) -> int:
    args = tyro.cli(Args, args=argv, prog="python -m sacbench.train", description=DESCRIPTION)
    try:
        return train(args)
    except (RunDirError, ValueError, RuntimeError, OSError) as error:
        print(f"sacbench.train: error: {describe_error(error)}", file=sys.stderr)
        return 2
