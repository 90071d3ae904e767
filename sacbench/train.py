"""Soft Actor-Critic for continuous actions, after CleanRL's sac_continuous_action.py.

`python -m sacbench.train`: the command line is sacbench.training.cli, the loop
sacbench.training.loop, and the SAC mathematics sacbench.sac (start at sacbench/sac/algorithm.py).
"""

import gc
import sys

from sacbench.training.cli import main

if __name__ == "__main__":
    exit_status = main()
    gc.freeze()  # no collection sweep at shutdown: docs/performance.md, "Process starts and exits"
    sys.exit(exit_status)
