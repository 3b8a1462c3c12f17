"""``python3 -m dask_hpc.images verify --key KEY [--sha256 HEX] IMAGE``: the documented command
(docs/images.md) kept at its path; the code is :mod:`dask_hpc.guard.images`."""

from __future__ import annotations

import sys

from .guard.images import main

if __name__ == "__main__":
    sys.exit(main())
