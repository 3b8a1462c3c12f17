"""--join: workers from another launch grow a running cluster (Summit's extra worker jobs)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from jobs.listed import names as listed_names
from support import start_cluster


def test_join_grows_a_running_cluster_and_ends_with_it(
    cluster_env, tmp_path: Path, wait_for
) -> None:
    sched = tmp_path / "grow.json"
    main = subprocess.Popen(
        [*start_cluster(), "cpu", "1", "--scheduler-file", str(sched)],
        env=cluster_env,
        stderr=subprocess.PIPE,
        text=True,
    )
    extra = None
    try:
        wait_for(lambda: sched.exists() or main.poll() is not None, 60, what="scheduler file")
        extra = subprocess.Popen(
            [*start_cluster(), "cpu", "2", "--join", str(sched)],
            env=cluster_env,
            stderr=subprocess.PIPE,
            text=True,
        )
        from dask_hpc import connect

        with connect(sched) as client:
            client.wait_for_workers(3, timeout=60)
            names = listed_names(client)
            assert names[0] == "0" and all(n.startswith("join-") for n in names[1:])
            assert client.submit(lambda: 41 + 1).result() == 42
            client.shutdown()
        _, err_extra = extra.communicate(timeout=60)
        _, err_main = main.communicate(timeout=60)
    finally:
        for proc in (p for p in (main, extra) if p is not None and p.poll() is None):
            proc.kill()
            proc.communicate()
    assert extra.returncode == 0, err_extra
    assert main.returncode == 0, err_main
    assert "Dask cluster ready" not in err_extra  # joiners never start a scheduler
