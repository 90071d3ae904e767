"""The trainer's command line, `python -m sacbench.train` (sacbench/train.py runs this)."""

from __future__ import annotations

import sys

import tyro

from sacbench.sac.args import Args, require_valid_args
from sacbench.training.errors import RunDirError, describe_error

# tyro's description: `--help` shows it, and it stays as it was when it was train.py's docstring.
DESCRIPTION = "Soft Actor-Critic for continuous actions, after CleanRL's sac_continuous_action.py."


def main(argv: list[str] | None = None) -> int:
    args = tyro.cli(Args, args=argv, prog="python -m sacbench.train", description=DESCRIPTION)
    try:
        # Values that can never train are refused before torch and the env libraries load
        # (about 1.5 s of a process's start).
        require_valid_args(args)
        from sacbench.training.loop import train

        return train(args)
    except (RunDirError, ValueError, RuntimeError, OSError) as error:
        print(f"sacbench.train: error: {describe_error(error)}", file=sys.stderr)
        return 2
