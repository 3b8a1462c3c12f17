"""A pool's options are written once (``elastic.pool_options.PoolOptions``): HPCCluster's
keyword arguments spell them again as its public signature, and these keep the two the same."""

from __future__ import annotations

import inspect

import dask
import pytest

from dask_hpc import HPCCluster
from dask_hpc.elastic.configured import ConfiguredCluster
from dask_hpc.elastic.pool_options import PoolOptions
from dask_hpc.elastic.pools import make_pool
from dask_hpc.planning.sites import load_site


def test_every_pool_option_is_a_keyword_of_hpccluster_not_given_by_default() -> None:
    parameters = inspect.signature(HPCCluster.__init__).parameters
    for name in PoolOptions.names():
        assert name in parameters, f"HPCCluster has no {name}= (PoolOptions has)"
        assert parameters[name].default is None, name


def test_hpcclusters_other_keywords_are_settings_of_the_cluster() -> None:
    """What is not a pool's option is the cluster's: a keyword of _settle, or the facade's."""
    from dask_hpc.elastic.cluster import FACADE_ONLY

    settle = inspect.signature(ConfiguredCluster._settle).parameters
    for name in inspect.signature(HPCCluster.__init__).parameters:
        assert name in PoolOptions.names() or name in settle or name in FACADE_ONLY, name


def test_each_option_defaults_to_its_key_in_dasks_config() -> None:
    for name in PoolOptions.names():
        key = f"hpc.{PoolOptions.config_key(name)}"
        assert dask.config.get(key, default=KeyError) is not KeyError, key
    with dask.config.set({"hpc.cluster.walltime": "00:30:00", "hpc.cluster.queue": "debug"}):
        options = PoolOptions(queue="long").with_config()
        assert (options.walltime, options.queue) == ("00:30:00", "long")  # given wins
        pool = make_pool("cpu", "cpu", load_site("generic"), batch_system="slurm")
        assert (pool.walltime, pool.queue) == ("00:30:00", "debug")


def test_an_option_that_is_not_a_pools_is_a_type_error_naming_the_caller() -> None:
    with pytest.raises(TypeError, match="make_pool\\(\\) got an unexpected keyword argument 'x'"):
        make_pool("cpu", "cpu", load_site("generic"), x=1)
