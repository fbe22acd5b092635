"""``python -m lakecompute``: the same as the ``lakecompute`` command."""

import sys

from lakecompute.cli import main

sys.exit(main())
