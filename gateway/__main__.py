"""`python -m gateway ...` is the `hedgespec` console script."""

import sys

from gateway.cli.commands import main

sys.exit(main())
