# dask-hpc's overlay of Spack's builtin py-jupyter-server: adds the release without a known
# advisory (deploy/advisories.yaml; builtin stops at 2.17.0). Everything else is inherited.

from spack.package import *
from spack_repo.builtin.packages.py_jupyter_server.package import (
    PyJupyterServer as BuiltinPyJupyterServer,
)


class PyJupyterServer(BuiltinPyJupyterServer):
    """jupyter-server at a release outside every advisory of deploy/advisories.yaml."""

    version("2.20.0", sha256="b5778ba337d8015a3dc2b80803ecdd5ac18d3797fddf61a50ea5fb472b4ebe14")
