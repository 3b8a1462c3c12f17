# dask-hpc's overlay of Spack's builtin py-jupyter-server: adds the release without a known
# advisory (deploy/advisories.yaml; builtin stops at 2.17.0). Everything else is inherited.

from spack.package import *
from spack_repo.builtin.packages.py_jupyter_server.package import (
    PyJupyterServer as BuiltinPyJupyterServer,
)


class PyJupyterServer(BuiltinPyJupyterServer):
    """jupyter-server at a release outside every advisory of deploy/advisories.yaml."""

    version("2.21.1", sha256="a8960aa29263f6041283e97d4756b099fb49b767baab6371891ecb1bd40a63df")
