"""`python -m sacbench.run_command`: see sacbench.pipeline.external."""

import sys

from sacbench.pipeline.external import main

if __name__ == "__main__":
    sys.exit(main())
