# dask-hpc's overlay of Spack's builtin py-dask: adds the release dask-hpc pins.
# Everything else (variants, dependencies, sources) is inherited from builtin.

from spack.package import *
from spack_repo.builtin.packages.py_dask.package import PyDask as BuiltinPyDask


class PyDask(BuiltinPyDask):
    """Dask with the release dask-hpc is pinned to (not yet in builtin)."""

    version("2026.7.1", sha256="5727484427665f051e86bf87d021a64d6411141cdc8a20bfe3c1ad2968cc06b7")

    with default_args(type=("build", "run")):
        # dask[distributed] 2026.7.1 requires distributed >=2026.7.1,<2026.7.2
        depends_on("py-distributed@2026.7.1", when="@2026.7.1 +distributed")
        depends_on("py-pyyaml@5.4.1:", when="@2026.7.1")
