"""The scripts behind every number in the documentation (docs/performance.md, docs/scale.md,
docs/reliability.md); ``scale/`` is a package of its own, run as ``python -m benchmarks.scale``."""
