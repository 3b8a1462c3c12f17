"""``python -m benchmarks.scale``: the scale benchmark (``lifecycle``)."""

import sys

from .lifecycle import main

sys.exit(main())
