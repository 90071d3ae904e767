"""The trainer's command line, `python -m sacbench.train` (sacbench/train.py runs this)."""

from __future__ import annotations

import sys

import tyro

from sacbench.sac.args import Args, validate_args
from sacbench.training.errors import RunDirError, describe_error

# tyro's description: `--help` shows it, and it stays as it was when it was train.py's docstring.
DESCRIPTION = "Soft Actor-Critic for continuous actions, after CleanRL's sac_continuous_action.py."


def main(argv: list[str] | None = None) -> int:
    args = tyro.cli(Args, args=argv, prog="python -m sacbench.train", description=DESCRIPTION)
    # Arguments that can never train are refused before torch and the env libraries load (about
    # 1.5 s of a process's start); sacbench.training.loop checks them again for other callers.
    problems = validate_args(args)
    if problems:
        print(
            "sacbench.train: error: invalid arguments:\n  " + "\n  ".join(problems), file=sys.stderr
        )
        return 2
    from sacbench.training.loop import train

    try:
        return train(args)
    except (RunDirError, ValueError, RuntimeError, OSError) as error:
        print(f"sacbench.train: error: {describe_error(error)}", file=sys.stderr)
        return 2
