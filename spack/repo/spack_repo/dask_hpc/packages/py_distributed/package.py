# dask-hpc's overlay of Spack's builtin py-distributed: adds the release dask-hpc pins.
# Everything else (dependencies, sources) is inherited from builtin.

from spack.package import *
from spack_repo.builtin.packages.py_distributed.package import (
    PyDistributed as BuiltinPyDistributed,
)


class PyDistributed(BuiltinPyDistributed):
    """Distributed with the release dask-hpc is pinned to (not yet in builtin)."""

    version("2026.7.1", sha256="f7c48ab6961734874521574d75898466703bce93f22f0cff5872c7e4ac6425d4")

    with default_args(type=("build", "run")):
        # distributed 2026.7.1's own requirements that builtin states only for 2026.3.0
        depends_on("py-tblib@1.6:3.1,3.2.2:", when="@2026.7.1")
        depends_on("py-toolz@0.12.0:", when="@2026.7.1")
