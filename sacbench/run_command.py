"""`python -m sacbench.run_command`: see sacbench.pipeline.external."""

import gc
import sys

from sacbench.pipeline.external import main

if __name__ == "__main__":
    exit_status = main()
    gc.freeze()  # no collection sweep at shutdown: docs/performance.md, "Process starts and exits"
    sys.exit(exit_status)
