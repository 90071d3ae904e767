"""`python -m sacbench.status`: see sacbench.pipeline.status."""

import sys

from sacbench.pipeline.status import main

if __name__ == "__main__":
    sys.exit(main())
