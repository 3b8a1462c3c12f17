"""scheduler="job": the scheduler in a batch job of its own (login nodes that kill long
processes); TLS and the dashboard's token as with the scheduler in the user's process."""

from __future__ import annotations

import operator
import urllib.error
import urllib.request

import pytest
from distributed import Client
from distributed.security import Security

pytestmark = pytest.mark.slurm


def http_status(url: str) -> int:
    """The status of a GET as a browser makes it (the token's redirect sets a cookie)."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    try:
        with opener.open(url, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_scheduler_runs_in_a_job_of_its_own(make_cluster, elastic_slurm, wait_for) -> None:
    cluster = make_cluster("cpu", workers_per_node=1, walltime="00:10:00", scheduler="job")
    scheduler_job = cluster.scheduler_job.job_id
    assert elastic_slurm.job_state(scheduler_job)[0] == "RUNNING"
    assert cluster.scheduler is None and cluster.scheduler_address.startswith("tls://")
    with pytest.raises((OSError, TimeoutError)):  # another CA's certificate is refused
        Client(cluster.scheduler_address, security=Security.temporary(), timeout=3)
    link = cluster.dashboard_login
    assert "token=" in link and "token" not in cluster.dashboard_link  # the repr's has none
    assert http_status(link) == 200
    assert http_status(link.split("?")[0]) == 403

    cluster.scale(jobs=2)
    client = cluster.get_client()
    client.wait_for_workers(2, timeout=120)
    futures = client.map(operator.mul, range(100), range(100))
    assert sum(client.gather(futures)) == sum(i * i for i in range(100))
    cluster.scale(jobs=1)
    wait_for(lambda: len(client.scheduler_info()["workers"]) == 1, 60, what="1 worker left")
    assert sum(client.gather(futures)) == sum(i * i for i in range(100))
    client.close()
    cluster.close()
    assert elastic_slurm.wait_job(scheduler_job, 30) == ("COMPLETED", 0)
    assert elastic_slurm.jobs() == []


def test_the_dashboard_of_an_in_process_scheduler_asks_for_its_token(make_cluster) -> None:
    cluster = make_cluster("cpu", workers_per_node=1, walltime="00:10:00")
    link = cluster.dashboard_login
    assert link.startswith("http://127.0.0.1:") and "/status?token=" in link
    assert cluster.dashboard_link == link.split("?")[0]  # what the widget and repr show
    assert http_status(link) == 200
    assert http_status(link.split("?")[0]) == 403
