"""Batch systems as data: job scripts (``invoke job``, ``HPCCluster``) and the commands that
submit, read back and cancel jobs.

May import: ``errors``, ``config``, ``guard``, ``planning``.
"""
