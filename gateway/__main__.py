"""`python -m gateway ...` is the `hedgespec` console script."""

import sys

from gateway.cli import main

sys.exit(main())
