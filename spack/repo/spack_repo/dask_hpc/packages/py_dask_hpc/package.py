# Recipe for dask-hpc itself. The image build installs it from the source tree it
# was built from (``develop:`` in the environments), so no archive is fetched.

from spack.package import *
from spack_repo.builtin.build_systems.python import PythonPackage


class PyDaskHpc(PythonPackage):
    """GPU-enabled Dask clusters on supercomputers under any HPC launcher."""

    license("BSD-3-Clause")

    # Keep in step with pyproject.toml (tests/spack checks it).
    version("0.1.0")

    variant("jupyter", default=False, description="Install JupyterLab for notebooks")

    depends_on("python@3.10:", type=("build", "run"))
    depends_on("py-setuptools@68:", type="build")

    with default_args(type=("build", "run")):
        depends_on("py-dask@2026.7.1 +distributed")
        depends_on("py-distributed@2026.7.1")
        depends_on("py-bokeh@3.1:3.9")
        depends_on("py-cryptography@41:")
        depends_on("py-psutil@5.9:")
        depends_on("py-pyyaml@6:")
        depends_on("py-jupyterlab@4:", when="+jupyter")
