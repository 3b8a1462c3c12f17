"""Elastic Dask clusters that grow and shrink by batch jobs (``HPCCluster``, ``hpc-cluster``)."""

from .cluster import HPCCluster

__all__ = ["HPCCluster"]
