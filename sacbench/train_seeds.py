"""Several seeds of one SAC run trained together in one process (sacbench.training.seed_batch).

`python -m sacbench.train_seeds --seeds 1 2 3 --run-dir 'runs/sac/seed{seed}' [trainer flags]`:
the command line is sacbench.training.seed_batch_cli.
"""

import sys

from sacbench.training.seed_batch_cli import main

if __name__ == "__main__":
    sys.exit(main())
