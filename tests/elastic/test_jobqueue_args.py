"""dask-jobqueue's arguments on HPCCluster: the five ``SLURMCluster(...)`` calls of
dask-jobqueue's own documentation, as ``HPCCluster(...)`` with the same arguments, run on the
test Slurm (its partitions are named as the calls name them); every other dask-jobqueue
argument means what it means there or is refused in one line naming ours."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from distributed.system import MEMORY_LIMIT

from dask_hpc import HPCCluster
from dask_hpc.batch.script import render
from dask_hpc.elastic.jobqueue_args import REFUSED, scale_workers, translate
from dask_hpc.elastic.pools import make_pool
from dask_hpc.errors import UsageError
from dask_hpc.planning.sites import load_site

# dask-jobqueue's docs: index.rst, clusters-example-deployments.rst (3), SLURMCluster's
# docstring. Each: (the call's arguments, workers per job, threads and memory each).
DOCUMENTED = {
    "index": ({}, 1, None, None),
    "woodshole": (
        dict(cores=8, processes=4, memory="16GB", account="woodshole", walltime="01:00:00",
             queue="normal"),
        4, 2, 4_000_000_000,
    ),
    "savio-lowprio": (
        dict(cores=24, processes=6, memory="16GB", account="co_laika", queue="savio2_bigmem",
             job_script_prologue=['export LANG="en_US.utf8"', 'export LANGUAGE="en_US.utf8"',
                                  'export LC_ALL="en_US.utf8"'],
             job_extra_directives=['--qos="savio_lowprio"']),
        6, 4, 16_000_000_000 // 6,
    ),
    "resources": (
        dict(memory="8g", processes=1, cores=2, worker_extra_args=["--resources ssdGB=200,GPU=2"]),
        1, 2, 8_000_000_000,
    ),
    "docstring": (dict(queue="regular", account="myaccount", cores=24, memory="500 GB"),
                  6, 4, 500_000_000_000 // 6),
}


@pytest.mark.slurm
@pytest.mark.timeout(300)
@pytest.mark.parametrize("call", sorted(DOCUMENTED))
def test_a_documented_slurmcluster_call_runs_as_hpccluster(call: str, make_cluster) -> None:
    kwargs, per_job, threads, memory = DOCUMENTED[call]
    cluster = make_cluster(**{"walltime": "00:10:00", **kwargs})
    script = cluster.job_script()
    assert f"#SBATCH --ntasks-per-node={per_job}\n" in script, script
    if threads:
        assert f"#SBATCH --cpus-per-task={threads}\n" in script
        assert f"#SBATCH --mem={-(-memory * per_job // 2**20)}M\n" in script
    for line in kwargs.get("job_script_prologue", []) + kwargs.get("job_extra_directives", []):
        assert line in script
    if "queue" in kwargs:
        assert f"#SBATCH --partition={kwargs['queue']}\n" in script
    if call == "index":
        cluster.adapt(minimum=1, maximum=10)  # as the page does
    else:
        cluster.scale(jobs=1)
    client = cluster.get_client()
    client.wait_for_workers(per_job, timeout=180)
    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    if threads:
        assert {w["nthreads"] for w in workers} == {threads}
        # as asked, within what this machine has (Dask caps a worker's limit there)
        assert {w["memory_limit"] for w in workers} == {min(memory, MEMORY_LIMIT)}
    if call == "resources":
        assert [w["resources"] for w in workers] == [{"ssdGB": 200.0, "GPU": 2.0}]
    assert client.submit(sum, range(10)).result() == 45
    client.close()


def test_the_table_translates_jobqueue_arguments() -> None:
    ours = translate(
        {"cores": 8, "processes": 4, "memory": "16GB", "job_extra_directives": ["-C a100"],
         "job_script_prologue": ["module load x"], "worker_extra_args": ["--resources GPU=1"],
         "local_directory": "/tmp/w", "death_timeout": 30, "nanny": False},
        {"walltime": "01:00:00", "worker_args": None},
    )
    assert ours == {
        "walltime": "01:00:00",
        "workers_per_node": 4,
        "cpus_per_worker": 2,
        "memory_per_worker": 4_000_000_000,
        "job_directives": ["-C a100"],
        "job_setup": ["module load x"],
        "worker_args": ["--resources", "GPU=1", "--local-directory", "/tmp/w",
                        "--death-timeout", "30", "--no-nanny"],
    }
    assert translate({"cores": 24}, {})["workers_per_node"] == 6  # jobqueue's default split
    assert translate({"cores": 4, "processes": 2}, {"workers_per_node": 2})["cpus_per_worker"] == 2


@pytest.mark.parametrize(
    "jobqueue, ours, says",
    [
        ({"cores": 4, "processes": 3}, {}, "cores=4 is not a whole number of CPUs for each of 3"),
        ({"processes": 2}, {"workers_per_node": 4}, "processes= and workers_per_node= disagree"),
        ({"cores": 0}, {}, "cores must be a whole number of at least 1, not 0"),
        ({"memory": "lots"}, {}, "memory='lots' is not a memory size"),
        ({"cores": 4}, {"cpus_per_worker": 1, "workers_per_node": 2},
         "cores= and cpus_per_worker= disagree"),
        ({"cores": 4}, {"nodes_per_job": 2}, "describe one-node jobs"),
        ({"cores_per_job": 4}, {}, "HPCCluster() got an unexpected argument 'cores_per_job'"),
    ],
)
def test_jobqueue_arguments_that_do_not_fit_are_one_line(jobqueue, ours, says) -> None:
    with pytest.raises(UsageError) as error:
        translate(jobqueue, ours)
    assert says in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_each_refused_argument_names_ours(name: str) -> None:
    with pytest.raises(UsageError) as error:
        translate({name: 1}, {})
    assert str(error.value) == f"HPCCluster has no {name}= (dask-jobqueue's); use {REFUSED[name]}"


def test_hpccluster_refuses_before_anything_starts(elastic_env) -> None:
    with pytest.raises(UsageError, match="has no job_extra= .*use job_directives"):
        HPCCluster("cpu", job_extra=["-C a100"])
    with pytest.raises(UsageError, match="cores=4 is not a whole number of CPUs for each of 3"):
        HPCCluster("cpu", cores=4, memory="8GB", processes=3)
    assert not list(elastic_env.glob("dask-hpc-*"))  # no cluster directory was made


def test_scale_by_memory_and_cores_as_jobqueue() -> None:
    assert scale_workers(None, "16GB", None, 2, "4GB") == 4
    assert scale_workers(None, None, 9, 2, None) == 5  # rounded up
    assert scale_workers(None, "10GB", 3, 2, "4GB") == 3  # enough of both
    assert scale_workers(5, None, None, 2, None) == 5
    with pytest.raises(UsageError, match=re.escape("scale(memory=) needs the workers' memory")):
        scale_workers(None, "16GB", None, 2, None)
    with pytest.raises(UsageError, match="scale by one of n, jobs, memory and cores"):
        scale_workers(3, "16GB", None, 2, "4GB")


# ---------------------------------------------------------------- issue 35
JOBQUEUE_WALLTIME_RECIPE = ["--lifetime", "55m", "--lifetime-stagger", "4m"]  # its docs' own


def test_jobqueues_walltime_recipe_is_our_walltime_recycling(tmp_path: Path) -> None:
    """dask-jobqueue's ``worker_extra_args=["--lifetime", "55m", "--lifetime-stagger", "4m"]``
    (start-cluster takes no --lifetime: every job failed at start): the workers retire as it
    says, through the cluster's own recycling (Dask's lifetime set in the job, replacements
    queued before), and nothing of it reaches start-cluster."""
    ours = translate({"worker_extra_args": JOBQUEUE_WALLTIME_RECIPE}, {"walltime": "01:00:00"})
    pool = make_pool("cpu", "cpu", load_site("generic"), batch_system="slurm",
                     walltime="01:00:00", worker_args=ours["worker_args"])
    assert pool.worker_args == () and pool.lifetime() == (3300.0, 240.0)
    assert pool.lifetime_margin == 300.0
    text = render(pool.request(load_site("generic"), "slurm", "dh1-cpu-1", tmp_path / "s.json",
                               tmp_path / "log", binds=()))
    assert "export DASK_DISTRIBUTED__WORKER__LIFETIME__DURATION=3300s\n" in text
    assert "export DASK_DISTRIBUTED__WORKER__LIFETIME__STAGGER=240s\n" in text
    assert "--lifetime" not in text


@pytest.mark.parametrize(
    "worker_args, says",
    [
        (["--lifetime", "59m", "--lifetime-stagger", "4m"],
         "worker_args --lifetime 59m --lifetime-stagger 4m: workers would retire after the "
         "walltime 01:00:00 ends their job; give a lifetime plus stagger under the walltime"),
        (["--lifetime-stagger", "4m"], "worker_args --lifetime-stagger without --lifetime"),
        (["--lifetime", "soon"], "worker_args --lifetime 'soon' is not a duration; e.g. 55m"),
        (["--lifetime-restart"], "worker_args --lifetime-restart: the cluster replaces"),
        (["--lifetimes", "3"], "worker_args: unrecognized arguments: --lifetimes 3; they are "
         "start-cluster's options (start-cluster --help)"),
        (["--nthreads", "two"], "worker_args: argument --nthreads: 'two' is not a positive"),
    ],
)
def test_worker_args_start_cluster_would_refuse_are_refused_up_front(worker_args, says) -> None:
    with pytest.raises(UsageError) as error:
        make_pool("cpu", "cpu", load_site("generic"), batch_system="slurm",
                  walltime="01:00:00", worker_args=worker_args)
    assert str(error.value).startswith(says) and "\n" not in str(error.value)


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_jobqueues_lifetime_and_tmpdir_local_directory_run_on_slurm(
    make_cluster, elastic_env: Path, tmp_path: Path
) -> None:
    """Both as dask-jobqueue's docs write them: the lifetime recipe runs (before: the job
    exited at once, "unrecognized arguments"), and ``local_directory='$TMPDIR'`` (single-quoted
    in its PBS examples) is the job's TMPDIR, not a directory named $TMPDIR."""
    node_tmp = tmp_path / "node-tmp"
    node_tmp.mkdir()
    cluster = make_cluster(
        "cpu", walltime="00:10:00", local_directory="$TMPDIR",
        worker_extra_args=["--lifetime", "9m", "--lifetime-stagger", "30s"],
        job_script_prologue=[f"export TMPDIR={node_tmp}"],
    )
    assert "--local-directory '$TMPDIR'" in cluster.job_script()  # expanded by each rank
    cluster.scale(jobs=1)
    client = cluster.get_client()
    client.wait_for_workers(1, timeout=180)
    dirs = client.run(lambda dask_worker: dask_worker.local_directory)
    assert all(d.startswith(f"{node_tmp}/dask-hpc-") for d in dirs.values()), dirs
    import dask

    lifetimes = client.run(lambda: dask.config.get("distributed.worker.lifetime.duration"))
    assert set(lifetimes.values()) == {"540s"}, lifetimes
    client.close()
    assert not [p for p in (*tmp_path.rglob("*"), *elastic_env.rglob("*"), *Path.cwd().glob("*"))
                if p.name == "$TMPDIR"]
