# dask-hpc's overlay of Spack's builtin py-jupyterlab: adds the release without a known
# advisory (deploy/advisories.yaml; builtin stops at 4.5.8). py-dask-hpc +jupyter needs it.
# Everything else is inherited from builtin.

from spack.package import *
from spack_repo.builtin.packages.py_jupyterlab.package import (
    PyJupyterlab as BuiltinPyJupyterlab,
)


class PyJupyterlab(BuiltinPyJupyterlab):
    """JupyterLab at a release outside every advisory of deploy/advisories.yaml."""

    version("4.6.4", sha256="404f49b081819378524886c9db66dba57a5565981eff885830df1baba3a17df5")

    with default_args(type=("build", "run")):
        # jupyterlab 4.6's pyproject.toml says jupyter-server>=2.19.0,<3; 2.21.0 is the floor
        # past the advisories (deploy/advisories.yaml)
        depends_on("py-jupyter-server@2.21:2", when="@4.6:")
        # 4.6.4's pyproject.toml (build-system.requires and dependencies; builtin's recipe, for
        # 4.5, has neither): jupyterlab/commands.py imports jupyter_builder, so without it
        # `jupyter lab` does not start
        depends_on("py-jupyter-builder@1.0.2:", when="@4.6:")
        depends_on("py-typing-extensions@4.4:", when="@4.6: ^python@:3.11")
