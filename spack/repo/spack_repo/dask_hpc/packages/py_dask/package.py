# dask-hpc's overlay of Spack's builtin py-dask: adds the release dask-hpc pins.
# Everything else (variants, dependencies, sources) is inherited from builtin.

from spack_repo.builtin.packages.py_dask.package import PyDask as BuiltinPyDask

from spack.package import *


class PyDask(BuiltinPyDask):
    """Dask with the release dask-hpc is pinned to (not yet in builtin)."""

    version("2026.8.0", sha256="8a94c37b5de6d869343340dc26c3c3acca7ec48a3abdabe00ea3abb1125884d5")

    with default_args(type=("build", "run")):
        # dask[distributed] 2026.8.0 requires exactly distributed 2026.8.0
        depends_on("py-distributed@2026.8.0", when="@2026.8.0 +distributed")
        depends_on("py-pyyaml@5.4.1:", when="@2026.8.0")
