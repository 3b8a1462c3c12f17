"""The batch-system table and the names, without a batch system: argv filled in, outputs read
back (the formats of squeue, qstat -F json and bjobs -o), walltimes, the pools' arithmetic."""

from __future__ import annotations

import json

import pytest

from dask_hpc.batch.commands import BatchSystem, detect
from dask_hpc.batch.script import format_walltime, system_table
from dask_hpc.elastic import naming
from dask_hpc.elastic.pools import make_pool
from dask_hpc.elastic.targets import pool_for
from dask_hpc.errors import UsageError
from dask_hpc.planning.sites import load_site


def test_slurm_commands_and_states() -> None:
    slurm = BatchSystem.named("slurm")
    assert slurm.submit_argv("/x/job.sh") == (["sbatch", "--parsable", "/x/job.sh"], False)
    assert slurm.job_id("1234\n") == "1234" and slurm.job_id("1234;cluster\n") == "1234"
    assert slurm.status_argv(["1", "2"])[-1] == "--jobs=1,2"
    assert slurm.cancel_argv(["1", "2"]) == ["scancel", "1", "2"]
    out = "  7 PENDING PartitionConfig\n  8 RUNNING None\n  9 COMPLETED None\n"
    states = slurm.parse_status(out, "", 0)
    assert states == {"7": ("PENDING", "PartitionConfig"), "8": ("RUNNING", "None"),
                      "9": ("COMPLETED", "None")}
    assert [slurm.category(s) for s, _ in states.values()] == ["queued", "running", "ended"]
    assert slurm.never_starts("PartitionConfig") and not slurm.never_starts("Resources")
    unknown = "slurm_load_jobs error: Invalid job id specified\n"
    assert slurm.parse_status("", unknown, 1) == {}  # none of them exists any more
    assert slurm.parse_status("", "slurm_load_jobs error: Socket timed out", 1) is None


def test_pbs_json_status_and_lsf_lines() -> None:
    pbs = BatchSystem.named("pbs")
    assert pbs.job_id("4242.pbs01\n") == "4242.pbs01"
    doc = {"pbs_version": "2022.1.5", "Jobs": {"4242.pbs01": {"job_state": "R"},
                                               "4243.pbs01": {"job_state": "F"}}}
    states = pbs.parse_status(json.dumps(doc), "qstat: Unknown Job Id 1.pbs01\n", 153)
    assert {k: v[0] for k, v in states.items()} == {"4242.pbs01": "R", "4243.pbs01": "F"}
    assert pbs.category("R") == "running" and pbs.category("F") == "ended"
    assert pbs.category("Q") == pbs.category("H") == "queued"
    lsf = BatchSystem.named("lsf")
    assert lsf.submit_argv("/x/job.sh") == (["bsub"], True)  # the script on stdin
    assert lsf.job_id("Job <77> is submitted to queue <batch>.\n") == "77"
    assert lsf.parse_status("77 RUN\n78 PEND\n", "Job <79> is not found\n", 255) == {
        "77": ("RUN", ""), "78": ("PEND", "")}
    assert lsf.category("DONE") == lsf.category("EXIT") == "ended"


def test_cobalt_has_scripts_but_no_elastic_commands() -> None:
    assert system_table("cobalt")["directive"] == "#COBALT {}"
    with pytest.raises(UsageError, match="cobalt has no submit/status/cancel"):
        BatchSystem.named("cobalt")


def test_batch_system_detected_from_the_commands_on_path() -> None:
    assert detect(lambda c: f"/usr/bin/{c}" if c in ("qsub", "qstat", "qdel") else None,
                  {}) == "pbs"
    assert detect(lambda c: f"/usr/bin/{c}", {}) == "slurm"  # the table's order
    assert detect(lambda c: None, {}) is None


def test_flux_is_detected_inside_a_flux_instance_only_and_before_slurm() -> None:
    """flux on PATH is not enough (this very machine has one beside Slurm); FLUX_URI says a
    Flux instance is there, and inside one (Flux in a Slurm allocation) its jobs go to Flux."""
    everything = lambda c: f"/usr/bin/{c}"  # noqa: E731
    inside = {"FLUX_URI": "local:///run/flux/local"}
    assert detect(everything, {}) == "slurm"
    assert detect(everything, inside) == "flux"
    assert detect(lambda c: "/usr/bin/flux" if c == "flux" else None, inside) == "flux"
    assert detect(lambda c: "/usr/bin/flux" if c == "flux" else None, {}) is None


def test_flux_commands_and_states() -> None:
    """flux batch, flux jobs and flux cancel as flux-core 0.88 answers them (measured)."""
    flux = BatchSystem.named("flux")
    assert flux.submit_argv("/x/job.sh") == (["flux", "batch", "/x/job.sh"], False)
    assert flux.job_id("f2UNheEj\n") == "f2UNheEj"
    assert flux.job_id("ƒ2UNheEj\n") is None  # never: its commands run with ASCII ids
    assert flux.command_env()["FLUX_F58_FORCE_ASCII"] == "1"
    assert flux.status_argv(["f2a", "f2b"]) == [
        "flux", "jobs", "--no-header", "--format={id.f58} {status} {exception.note}", "f2a",
        "f2b",
    ]
    assert flux.cancel_argv(["f2a"]) == ["flux", "cancel", "f2a"]
    out = ("f2UNheEj RUN \nf2UNheEk SCHED \nfZu34go COMPLETED \n"
           "f23f5cjH FAILED unsatisfiable request: need 5 node(s) with 1 cores each, only 3 "
           "eligible\n")
    states = flux.parse_status(out, "", 0)
    assert states == {
        "f2UNheEj": ("RUN", ""), "f2UNheEk": ("SCHED", ""), "fZu34go": ("COMPLETED", ""),
        "f23f5cjH": ("FAILED", "unsatisfiable request: need 5 node(s) with 1 cores each, "
                               "only 3 eligible"),
    }
    assert [flux.category(s) for s, _ in states.values()] == [
        "running", "queued", "ended", "ended"]
    assert flux.parse_status("", "JobID fAAAAAAA unknown\n", 1) == {}
    assert flux.parse_status("", "flux-jobs: ERROR: Unable to connect to Flux", 1) is None


def test_walltime_formats_round_up_to_whole_minutes() -> None:
    assert format_walltime(system_table("lsf")["walltime"], 90) == "0:02"
    assert format_walltime(system_table("lsf")["walltime"], 7200) == "2:00"
    assert format_walltime(system_table("pbs")["walltime"], 90) == "00:01:30"
    # Flux takes seconds: whole minutes as minutes, else seconds
    assert format_walltime(system_table("flux")["walltime"], 3600) == "60m"
    assert format_walltime(system_table("flux")["walltime"], 45) == "45s"


def test_names_carry_job_and_pool() -> None:
    job = naming.job_name("dh12ab34", "gpu", 12)
    assert naming.job_of(f"{job}-3") == naming.job_of(f"{job}-3-1") == job
    assert naming.job_of("dh12ab34-gpu-1-3") != job and naming.pool_of(f"{job}-0") == "gpu"
    assert naming.job_of("0") is None and naming.job_of("join-123-0-1") is None


def test_pool_lifetime_and_replacement_lead() -> None:
    pool = make_pool("cpu", "cpu", load_site("generic"), workers_per_node=2, walltime="01:00:00")
    duration, stagger = pool.lifetime()
    assert (duration, stagger) == (3000.0, 150.0)  # a sixth of an hour kept, +- a quarter of it
    assert pool.retire_lead() == 95.0  # no job connected yet: 60 s assumed, half again, + 5
    pool.latencies.extend([4.0, 8.0])
    assert pool.retire_lead() == 17.0
    assert pool.jobs_for_workers(3) == 2 and pool.workers_per_job == 2
    short = make_pool("cpu", "cpu", load_site("generic"), walltime="00:01:00")
    assert short.lifetime() == (40.0, 5.0)


def test_waiting_tasks_go_to_the_pool_with_their_resources() -> None:
    pools = {"cpu": {"resources": {}}, "gpu": {"resources": {"GPU": 1}}}
    assert pool_for({"GPU": 1}, pools) == "gpu"
    assert pool_for(None, pools) == "cpu" and pool_for({}, pools) == "cpu"
    assert pool_for({"GPU": 2}, pools) is None  # no pool's workers have two
    assert pool_for(None, {"gpu": {"resources": {"GPU": 1}}}) == "gpu"
