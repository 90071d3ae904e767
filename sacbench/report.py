"""`python -m sacbench.report`: see sacbench.results.cli."""

import gc
import sys

from sacbench.results.cli import main

if __name__ == "__main__":
    exit_status = main()
    gc.freeze()  # no collection sweep at shutdown: docs/performance.md, "Process starts and exits"
    sys.exit(exit_status)
