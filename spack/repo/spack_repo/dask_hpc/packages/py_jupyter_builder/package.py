# jupyter-builder: JupyterLab's build tools (jlpm, the extension builder). jupyterlab 4.6.4
# requires it to build and to run (its pyproject.toml: jupyter-builder>=1.0.2; its
# jupyterlab/commands.py imports jupyter_builder). Not in builtin at the spack-packages commit
# of spack/pins.yaml. Requirements from jupyter_builder 1.3.0's pyproject.toml.

from spack.package import *
from spack_repo.builtin.build_systems.python import PythonPackage


class PyJupyterBuilder(PythonPackage):
    """JupyterLab build tools (jlpm and the extension builder)."""

    pypi = "jupyter_builder/jupyter_builder-1.3.0.tar.gz"

    license("Apache-2.0 AND BSD-2-Clause AND BSD-3-Clause AND ISC AND MIT")

    version("1.3.0", sha256="dc0a3cdc27be674f29de2b4aecfdd55190fffa65199846bbdf4ceaf31a56b7d1")

    depends_on("py-hatchling@1.21.1:", type="build")
    depends_on("py-hatch-nodejs-version@0.3.2:", type="build")

    with default_args(type=("build", "run")):
        depends_on("python@3.10:")
        depends_on("py-traitlets")
        depends_on("py-jupyter-core")
        depends_on("py-tomli", when="^python@:3.10")
