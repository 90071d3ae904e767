"""`python -m sacbench.evaluate RUN_DIR`: see sacbench.training.evaluate_cli."""

import gc
import sys

from sacbench.training.evaluate_cli import main

if __name__ == "__main__":
    exit_status = main()
    gc.freeze()  # no collection sweep at shutdown: docs/performance.md, "Process starts and exits"
    sys.exit(exit_status)
