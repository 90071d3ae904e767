"""`python -m sacbench.evaluate RUN_DIR`: see sacbench.training.evaluate_cli."""

import sys

from sacbench.training.evaluate_cli import main

if __name__ == "__main__":
    sys.exit(main())
