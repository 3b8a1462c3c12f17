# dask-hpc's overlay of Spack's builtin py-maturin: adds the release py-cryptography 50 builds
# with (maturin>=1.14.1; builtin stops at 1.13.1). Everything else is inherited from builtin.

from spack.package import *
from spack_repo.builtin.packages.py_maturin.package import PyMaturin as BuiltinPyMaturin


class PyMaturin(BuiltinPyMaturin):
    """maturin with the release cryptography 50 requires to build."""

    version("1.14.1", sha256="9d6577a62cd08e0ceba7a0db06fb098e0c9b1b3429bad747a4f3a18215a1b3df")
