"""`python -m sacbench.status`: see sacbench.pipeline.status."""

import gc
import sys

from sacbench.pipeline.status import main

if __name__ == "__main__":
    exit_status = main()
    gc.freeze()  # no collection sweep at shutdown: docs/performance.md, "Process starts and exits"
    sys.exit(exit_status)
