"""Elastic Dask clusters that grow and shrink by batch jobs (``HPCCluster``, ``hpc-cluster``).

May import: ``errors``, ``config``, ``guard``, ``planning``, ``at_scale``, ``batch``, ``cli``
(start-cluster's parser checks the workers' options a pool's jobs pass to it).
"""

from .cluster import HPCCluster

__all__ = ["HPCCluster"]
