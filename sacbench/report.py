"""`python -m sacbench.report`: see sacbench.results.cli."""

import sys

from sacbench.results.cli import main

if __name__ == "__main__":
    sys.exit(main())
