# dask-hpc's overlay of Spack's builtin py-cryptography: adds the release without a known
# advisory (deploy/advisories.yaml; builtin stops at 46.0.7, inside CVE-2026-69247's range).
# Everything else is inherited from builtin.

from spack.package import *
from spack_repo.builtin.packages.py_cryptography.package import (
    PyCryptography as BuiltinPyCryptography,
)


class PyCryptography(BuiltinPyCryptography):
    """cryptography at a release outside every advisory of deploy/advisories.yaml."""

    version("50.0.2", sha256="7b46165bb56eb4704e2eaaf86f3c940d19154535d9b0ca7d6d590b04060e00d5")

    # cryptography 50.0.2's pyproject.toml (build-system.requires) and Cargo.toml rust-version
    depends_on("py-maturin@1.14.1:1", when="@50:", type="build")
    depends_on("py-cffi@2:", when="@50:", type=("build", "run"))
    depends_on("rust@1.83:", when="@50:", type="build")
