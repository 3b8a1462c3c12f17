# dask-hpc's overlay of Spack's builtin py-distributed: adds the release dask-hpc pins.
# Everything else (dependencies, sources) is inherited from builtin.

from spack_repo.builtin.packages.py_distributed.package import (
    PyDistributed as BuiltinPyDistributed,
)

from spack.package import *


class PyDistributed(BuiltinPyDistributed):
    """Distributed with the release dask-hpc is pinned to (not yet in builtin)."""

    version("2026.8.0", sha256="6f55008ecacf96ba945309fc12e680544764995e27bd63cc5e109afb97d7044d")

    with default_args(type=("build", "run")):
        # distributed 2026.8.0's own requirements that builtin states only for 2026.3.0
        depends_on("py-tblib@1.6:3.1,3.2.2:", when="@2026.8.0")
        depends_on("py-toolz@0.12.0:", when="@2026.8.0")
