# dask-hpc's overlay of Spack's builtin py-tornado: adds the release without a known advisory
# (deploy/advisories.yaml; builtin stops at 6.5.7). Everything else is inherited from builtin.

from spack.package import *
from spack_repo.builtin.packages.py_tornado.package import PyTornado as BuiltinPyTornado


class PyTornado(BuiltinPyTornado):
    """Tornado at a release outside every advisory of deploy/advisories.yaml."""

    version("6.6.1", sha256="28e6311402af59c8b02e3fa0f5e7d8eb465b25081381803b127d97e6a4395d5a")

    with default_args(type=("build", "link", "run")):
        # tornado 6.6's setup.py: python_requires >= 3.11
        depends_on("python@3.11:", when="@6.6:")
