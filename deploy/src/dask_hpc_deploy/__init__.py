"""dask-hpc's build tooling: Apptainer definitions, image builds, Spack checks.

Not part of the runtime package (``dask_hpc``), which ranks import: this one works on the
repository (``containers/<site>.yaml`` build data, ``spack/`` environments) and is installed
from ``deploy/`` for ``invoke`` (tasks.py) and the tests. Batch scripts live in the runtime
(``dask_hpc.batch``): a login node's install renders them too.
"""
