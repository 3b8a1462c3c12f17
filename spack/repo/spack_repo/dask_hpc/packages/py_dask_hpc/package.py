# Recipe for dask-hpc itself. The image build installs it from the source tree it
# was built from (``develop:`` in the environments), so no archive is fetched.

from spack.package import *
from spack_repo.builtin.build_systems.python import PythonPackage


class PyDaskHpc(PythonPackage):
    """GPU-enabled Dask clusters on supercomputers under any HPC launcher."""

    license("BSD-3-Clause")

    # The image build develops this package from its source tree at the version git gives it
    # (``spack develop py-dask-hpc@=VERSION``, VERSION from setuptools-scm); this one is only
    # the first release's number, for a build from an archive.
    version("0.1.0")

    variant("jupyter", default=False, description="Install JupyterLab for notebooks")

    depends_on("python@3.10:", type=("build", "run"))  # pyproject's requires-python
    depends_on("py-setuptools@68:", type="build")
    depends_on("py-setuptools-scm@8:", type="build")

    # pyproject.toml's supported range (tests/spack checks it); spack/common.yaml pins one
    # release inside it for the images.
    with default_args(type=("build", "run")):
        depends_on("py-dask@2026.7.1:2026.8 +distributed")
        depends_on("py-distributed@2026.7.1:2026.8")
        # the floors leave out every release with a known advisory (deploy/advisories.yaml);
        # tornado 6.6 needs Python 3.11 (pyproject.toml's 3.10 line has no Spack counterpart)
        depends_on("py-bokeh@3.8.2:3.9")
        depends_on("py-tornado@6.6:")
        depends_on("py-cryptography@50:")
        depends_on("py-psutil@5.9:")
        depends_on("py-pyyaml@6:")
        depends_on("py-jupyterlab@4.6.4:", when="+jupyter")
        depends_on("py-jupyter-server@2.21.0:", when="+jupyter")
        depends_on("py-jupyter-server-proxy@4.2.0:", when="+jupyter")

    def setup_build_environment(self, env):
        # The source tree is copied without .git: setuptools-scm takes the version from here,
        # which is the one git gave the develop spec.
        env.set("SETUPTOOLS_SCM_PRETEND_VERSION_FOR_DASK_HPC", str(self.spec.version))
