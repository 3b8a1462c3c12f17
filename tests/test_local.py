"""Local mode (no launcher), the embedded default: real clusters on this machine."""

from __future__ import annotations

import getpass
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from support import assert_tokens_left_out, probe, probe_result, start_cluster


def test_script_mode_runs_command_once_every_worker_is_connected(
    run_cmd, cluster_env, tmp_path: Path
) -> None:
    result = run_cmd([*start_cluster(), "cpu", "3", "--", *probe()], env=cluster_env, timeout=90)
    assert result.returncode == 0, result.stderr
    out = probe_result(result.stdout)
    assert out["n_workers"] == 3  # all there before COMMAND started: no waiting in the job
    assert out["names"] == ["0-0", "0-1", "0-2"]
    assert out["sum_squares"] == sum(x * x for x in range(100))
    assert out["address"].startswith("tls://127.0.0.1:")
    assert out["env_address"] == out["address"]
    assert "workers 3/3 connected" in result.stderr
    assert "Dask cluster ready: 3 cpu workers on 1 node(s), TLS on" in result.stderr
    # 8787, or a free port when another cluster holds it. The link COMMAND sees has no token
    # (its output and a notebook are files others may read), nor has the ready block here.
    assert re.fullmatch(r"http://127.0.0.1:\d+/status", out["dashboard_link"])
    assert_tokens_left_out(result.stderr, {"dashboard": out["dashboard_link"]})
    # Local mode on the user's own machine (no ssh session, no batch job): no tunnel.
    assert "ssh -t" not in result.stderr and "tunnel" not in result.stderr
    # Workers and their HTTP routes listen on the scheduler's interface, never 0.0.0.0.
    assert all(a.startswith("tls://127.0.0.1:") for a in out["worker_addresses"])
    assert out["worker_http"] == ["127.0.0.1"] * 3
    cpus = len(os.sched_getaffinity(0))
    assert {w["nthreads"] for w in out["workers"].values()} == {max(1, cpus // 3)}
    # The job-scoped directory is gone with the cluster.
    assert list((tmp_path / "shared").iterdir()) == []


def test_over_ssh_the_ready_block_prints_the_tunnel_to_this_node(
    run_cmd, cluster_env
) -> None:
    env = {**cluster_env, "SSH_CONNECTION": "10.0.0.9 50022 10.0.0.1 22"}
    argv = [*start_cluster(), "cpu", "1", "--dashboard-address", "127.0.0.1:0", "--", "true"]
    result = run_cmd(argv, env=env, timeout=90)
    assert result.returncode == 0, result.stderr
    port = re.search(r"dashboard +http://127.0.0.1:(\d+)/", result.stderr).group(1)
    # No login path known (generic site): the tunnel goes to this node, no placeholder.
    node, user = socket.gethostname(), getpass.getuser()
    forward = f"-L 127.0.0.1:{port}:127.0.0.1:{port}"
    tunnel = f"ssh -t -o ExitOnForwardFailure=yes {forward} {user}@{node}\n"
    assert tunnel in result.stderr
    assert "LOGIN_NODE" not in result.stderr


def test_command_exit_status_is_the_exit_status(run_cmd, cluster_env) -> None:
    result = run_cmd([*start_cluster(), "cpu", "1", "--", *probe("7")], env=cluster_env, timeout=90)
    assert result.returncode == 7, result.stderr
    assert probe_result(result.stdout)["n_workers"] == 1
    assert "command exited with status 7: shutting down" in result.stderr


def test_no_tls_warns_and_uses_plain_tcp(run_cmd, cluster_env) -> None:
    result = run_cmd(
        [*start_cluster(), "cpu", "1", "--no-tls", "--", *probe()], env=cluster_env, timeout=90
    )
    assert result.returncode == 0, result.stderr
    assert probe_result(result.stdout)["address"].startswith("tcp://127.0.0.1:")
    assert "TLS is off: anyone who can reach the scheduler can run code as you" in result.stderr


def test_interactive_mode_ends_with_client_shutdown(cluster_env, tmp_path: Path, wait_for) -> None:
    sched = tmp_path / "interactive.json"
    proc = subprocess.Popen(
        [*start_cluster(), "cpu", "2", "--scheduler-file", str(sched)],
        env=cluster_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: sched.exists() or proc.poll() is not None, 60, what="scheduler file")
        import dask.config
        import distributed  # noqa: F401 - its configuration's defaults (the dashboard link's)

        from dask_hpc import connect

        template = dask.config.get("distributed.dashboard.link")
        client = connect(sched)
        client.wait_for_workers(2, timeout=60)
        assert client.submit(sum, [1, 2, 3]).result() == 6
        assert re.fullmatch(r"http://127.0.0.1:\d+/status", client.dashboard_link)
        # the process's setting is left as it was: another cluster here shows its own link
        assert dask.config.get("distributed.dashboard.link") == template
        client.shutdown()
        client.close()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "the scheduler was shut down" in err
    assert not sched.exists() and not (tmp_path / "interactive.dask-hpc").exists()


def test_sigterm_and_sigint_stop_an_interactive_cluster(
    cluster_env, tmp_path: Path, wait_for
) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        sched = tmp_path / f"sig{sig}.json"
        proc = subprocess.Popen(
            [*start_cluster(), "cpu", "2", "--scheduler-file", str(sched)],
            env=cluster_env,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(lambda s=sched: s.exists(), 60, what="scheduler file")
            from dask_hpc import connect

            with connect(sched) as client:
                client.wait_for_workers(2, timeout=60)
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 128 + sig, err
        assert f"received signal {sig}: shutting down" in err


def test_dry_run_prints_the_plan_and_starts_nothing(run_cmd, cluster_env) -> None:
    result = run_cmd(
        [*start_cluster(), "gpu", "6", "--site", "aurora", "--dry-run", "--", "python", "job.py"],
        env=cluster_env,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["launcher"] == "none" and plan["site"] == "aurora"
    assert plan["command"] == ["python", "job.py"]
    workers = [p for p in plan["processes"] if p["role"] == "worker"]
    assert [w["env"]["ZE_AFFINITY_MASK"] for w in workers] == [str(i) for i in range(6)]
    assert workers[0]["argv"][:2] == ["dask", "worker"]
    assert plan["processes"][0]["argv"][:2] == ["dask", "scheduler"]


def test_help_lists_dask_option_names(run_cmd, cluster_env) -> None:
    result = run_cmd([*start_cluster(), "--help"], env=cluster_env, timeout=30)
    assert result.returncode == 0
    for option in (
        "--interface",
        "--protocol",
        "--scheduler-port",
        "--dashboard-address",
        "--local-directory",
        "--death-timeout",
        "--nanny",
        "--no-nanny",
        "--join",
        "--dry-run",
        "--jupyter",
        "--no-tls",
        "--site",
        "--launcher",
        "--timeout",
    ):
        assert option in result.stdout


PRELOADED = """
import json, sys
from distributed import Client
mods = Client().run(lambda: "pandas" in sys.modules)
print("PRELOADED " + json.dumps(sorted(mods.values())))
"""


def test_dask_optional_packages_are_preloaded_only_where_workers_share_them(
    run_cmd, cluster_env
) -> None:
    """The forkserver imports pandas for 2+ workers (as Dask's does), not for a single one."""
    from distributed.versions import optional_packages

    from dask_hpc.running.nanny_host import SHARED_PRELOAD

    assert list(SHARED_PRELOAD) == optional_packages  # Dask's own list, kept by hand here
    seen = {}
    for workers in ("1", "2"):
        cmd = [*start_cluster(), "cpu", workers, "--", sys.executable, "-c", PRELOADED]
        result = run_cmd(cmd, env=cluster_env, timeout=90)
        assert result.returncode == 0, result.stderr
        line = next(x for x in result.stdout.splitlines() if x.startswith("PRELOADED "))
        seen[workers] = json.loads(line.removeprefix("PRELOADED "))
    assert seen == {"1": [False], "2": [True, True]}
