"""`python -m parbpe ...`: the same as the `parbpe` command (for a checkout on PYTHONPATH)."""

import sys

from .cli import console

sys.exit(console())
