"""The scale benchmarks: the real rank 0 against thousands of simulated ranks (docs/scale.md,
docs/reliability.md). Run from the repository's root:

    PYTHONPATH=src python -m benchmarks.scale ...          start, idle, compute, stop (lifecycle)
    PYTHONPATH=src python -m benchmarks.scale.stop ...     stopped by COMMAND's exit or SIGTERM
    PYTHONPATH=src python -m benchmarks.scale.faults ...   ranks killed, stuck or hung

The parts they share: ``launch`` (rank 0 and the simulators' processes), ``sim`` (the simulated
ranks), ``probe`` (the scheduler's preload, loaded by its path), ``common`` (options, the run,
tables); each benchmark's COMMAND (``job``, ``faults_job``, ``stop _job``) and tables
(``lifecycle_report``, ``faults_report``). Nothing is imported here: the processes a run starts
import only the modules they run.
"""
