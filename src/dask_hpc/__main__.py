"""``python -m dask_hpc`` is ``start-cluster``."""

import sys

from .cli import main

sys.exit(main())
