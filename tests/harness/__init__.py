"""Test harness: real launchers (Slurm, Open MPI, MPICH) and emulated ones, plus leak checks."""
