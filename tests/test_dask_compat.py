"""Dask's own worker semantics on a start-cluster cluster, under every launcher.

What needs Dask's Nanny (restart, restart_workers, retire_workers, NannyPlugins,
run(nanny=True), a task that ends its worker's process) runs here on a real cluster under
local mode, Open MPI, MPICH, srun, Flux and the EMULATED PALS and jsrun launchers; the launcher's
exit status and the absence of leftovers (the autouse leak check) are asserted each time.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness.emulate import emulated_jsrun, emulated_pals
from harness.mpi import mpich, openmpi
from jobs.background import Background
from support import assert_tokens_left_out, start_cluster, without_upstream_noise

from dask_hpc.running.nannies import MAX_FAILED_STARTS

JOBS = Path(__file__).resolve().parent / "jobs"
DASK_OPS = JOBS / "dask_ops.py"
OPTS = ["--interface", "lo", "--dashboard-address", "127.0.0.1:0", "--death-timeout", "10"]


def dask_ops_result(stdout: str) -> dict:
    for line in stdout.splitlines():
        if line.startswith("DASKOPS "):
            return json.loads(line[len("DASKOPS ") :])
    raise AssertionError(f"no DASKOPS line in output:\n{stdout}")


@pytest.fixture(autouse=True)
def _no_background_left() -> Iterator[None]:
    yield
    Background.kill_all()


def launches(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Callable[[], tuple]]:
    """(argv prefix, WORKERS_PER_NODE, extra environment, worker names) per launcher."""

    def srun() -> tuple:
        slurm = request.getfixturevalue("slurm_cluster")
        prefix = ["srun", "-N", "2", "--ntasks-per-node", "1", "--kill-on-bad-exit=1"]
        return prefix, 1, slurm.env, ["0", "1"]

    def flux() -> tuple:
        instance = request.getfixturevalue("flux_instance")
        return ["flux", "run", "-N", "2", "--tasks-per-node", "1"], 1, instance.env, ["0", "1"]

    return {
        "local": lambda: ([], 2, {}, ["0-0", "0-1"]),
        "openmpi": lambda: (openmpi(2), 2, {}, ["0", "1"]),
        "mpich": lambda: (mpich(2), 2, {}, ["0", "1"]),
        "srun": srun,
        "flux": flux,
        "emulated-pals": lambda: (emulated_pals(tmp_path, nodes=2, ppn=1), 1, {}, ["0", "1"]),
        "emulated-jsrun": lambda: (emulated_jsrun(tmp_path, nodes=2, ppn=1), 1, {}, ["0", "1"]),
    }


@pytest.mark.parametrize(
    "launcher", ["local", "openmpi", "mpich", "srun", "flux", "emulated-pals", "emulated-jsrun"]
)
def test_nanny_operations_work_and_the_job_ends_cleanly(
    launcher: str, request: pytest.FixtureRequest, run_cmd, cluster_env, tmp_path: Path
) -> None:
    prefix, wpn, extra_env, names = launches(request, tmp_path)[launcher]()
    argv = [*prefix, *start_cluster(), "cpu", str(wpn), *OPTS, "--timeout", "120"]
    argv += ["--", sys.executable, str(DASK_OPS), "2"]
    result = run_cmd(argv, env={**cluster_env, **extra_env}, timeout=240)
    output = f"{result.stdout}\n{result.stderr}"
    assert result.returncode == 0, output
    out = dask_ops_result(result.stdout)
    assert out["workers"] == names
    assert out["after_restart"] == names, output[-8000:]  # client.restart(): every worker back
    assert out["after_restart_workers"] == names, output[-8000:]
    assert out["environ_plugin"] == ["yes"]  # a NannyPlugin reached every worker
    assert out["nanny_run"] == {"nannies": 2, "distinct_from_workers": True}
    assert out["exiting_task"] == "KilledWorker"  # os._exit in a task, as with `dask worker`
    assert out["after_exiting_task"] == names  # ...and every worker restarted
    assert out["worker_log_lines"] > 0  # logs at Dask's level reach get_worker_logs
    assert out["sum"] == 45
    assert out["retired"] == names[-1], output[-8000:]
    assert out["after_retire"] == names[:-1], output[-8000:]
    # The link COMMAND's client shows has no token, nor has the non-terminal output.
    assert re.fullmatch(r"http://127.0.0.1:\d+/status", out["dashboard_link"])
    assert_tokens_left_out(result.stderr, {"dashboard": out["dashboard_link"]})
    assert "lost the scheduler" not in result.stderr and "rank 0 is gone" not in result.stderr
    assert "was lost" not in result.stderr  # a rank whose workers were retired was not lost
    assert "restarting it" in result.stderr  # the exiting task's deaths, one line each


# Each crash round ends 4 worker processes (Dask's allowed-failures, 3, then KilledWorker)
# among the 2 workers: 2 * (MAX_FAILED_STARTS + 1) deaths in all take both workers past the
# crash-loop stop's count if spread evenly, and one of them however spread. (12 rounds: 38 CPU
# s for the seven launchers in a whole run; 3 rounds: 12.5 s, alone; 2026-11-30.)
CRASH_ROUNDS = -(-2 * (MAX_FAILED_STARTS + 1) // 4)
LAUNCHES_WITH_TWO_PER_HOST = [
    "local",
    "openmpi",
    "openmpi-2-per-rank",
    "mpich",
    "srun",
    "emulated-pals",
    "emulated-jsrun",
]


@pytest.mark.parametrize("launcher", LAUNCHES_WITH_TWO_PER_HOST)
def test_a_worker_killed_by_its_tasks_comes_back_every_time(
    launcher: str, request: pytest.FixtureRequest, run_cmd, cluster_env, tmp_path: Path
) -> None:
    """CRASH_ROUNDS tasks in a row end their workers' processes (each kills 4: Dask retries it
    on the restarted workers, the moment they register): every worker comes back each time, as
    with `dask worker`, past the crash-loop stop's count. The crash-loop stop is only for a
    worker that never reaches the scheduler, however fast its tasks kill it. The end, right
    after the last crash, is clean."""
    if launcher == "openmpi-2-per-rank":  # one rank, its nanny host holding 2 Nannies
        prefix, wpn, extra_env, names = openmpi(1), 2, {}, ["0-0", "0-1"]
    else:
        prefix, wpn, extra_env, names = launches(request, tmp_path)[launcher]()
    crash_rounds(
        [*prefix, *start_cluster(), "cpu", str(wpn)], names, run_cmd, {**cluster_env, **extra_env}
    )


def test_workers_killed_by_their_tasks_stay_once_the_death_timeout_has_passed(
    run_cmd, cluster_env
) -> None:
    """The crash rounds, then the cluster idles past the workers' death timeout (10 s): no
    restart left behind times out then (Dask's overlapping starts did, with an AssertionError
    traceback, and the Nanny could no longer close: the end took a minute), the workers stay
    and run a task, and the end is clean."""
    crashes = crash_rounds([*start_cluster(), "cpu", "2"], ["0-0", "0-1"], run_cmd, cluster_env, 12)
    assert crashes["after_idle"] == [3, ["0-0", "0-1"]]


def crash_rounds(
    argv: list[str], names: list[str], run_cmd, env: dict[str, str], idle: float = 0
) -> dict:
    """Run crash_tasks.py on the cluster ``argv`` starts; check every round and a clean end."""
    argv = [*argv, *OPTS, "--timeout", "120", "--", sys.executable]
    argv += [str(JOBS / "crash_tasks.py"), str(CRASH_ROUNDS), str(idle)]
    result = run_cmd(argv, env=env, timeout=240)
    output = f"{result.stdout}\n{result.stderr}"
    assert result.returncode == 0, output
    line = next(x for x in result.stdout.splitlines() if x.startswith("CRASHES "))
    crashes = json.loads(line[len("CRASHES ") :])
    assert crashes["workers"] == names
    assert crashes["rounds"] == [["KilledWorker", names]] * CRASH_ROUNDS, output
    assert result.stderr.count(": restarting it") >= 4 * CRASH_ROUNDS
    stderr = without_upstream_noise(result.stderr)
    for noise in ("not restarted", "Traceback", "were killed", "Timed out", "CancelledError"):
        assert noise not in stderr, output
    return crashes


def _preload_env(cluster_env: dict[str, str], module: str, tmp_path: Path) -> dict[str, str]:
    """Workers that import ``tests/jobs/<module>.py`` when they start (Dask's worker preload)."""
    return {
        **cluster_env,
        "DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([module]),
        "PYTHONPATH": os.pathsep.join([str(JOBS), cluster_env.get("PYTHONPATH", "")]),
        "CRASH_MARKER": str(tmp_path / "crash-marker"),
    }


@pytest.mark.parametrize("launcher", ["local", "mpich"])
def test_a_worker_restarting_when_the_cluster_ends_is_stopped_at_once(
    launcher: str, request: pytest.FixtureRequest, run_cmd, cluster_env, tmp_path: Path
) -> None:
    """COMMAND's last task kills a worker and COMMAND exits once that worker's restart has
    begun (a restart takes 30 s here): the cluster ends while the worker restarts, unknown to
    the scheduler. Its rank stops it: the restart never gets through (no wait for it), no
    death timeout runs out, no traceback."""
    prefix, wpn, extra_env, names = launches(request, tmp_path)[launcher]()
    env = {**_preload_env(cluster_env, "slow_restart", tmp_path), **extra_env}
    marker = Path(f"{env['CRASH_MARKER']}.{names[-1]}")
    job = (
        "from distributed import Client; import os, pathlib, time; c = Client(); "
        "w = [a for a, v in c.scheduler_info()['workers'].items() if v['name'] == "
        f"{names[-1]!r}][0]; "
        "c.submit(os._exit, 1, workers=[w], pure=False); "
        f"restarting = pathlib.Path({str(marker) + '.restarting'!r}); "
        "deadline = time.monotonic() + 60\n"
        "while not restarting.exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
    )
    argv = [*prefix, *start_cluster(), "cpu", str(wpn), *OPTS, "--", sys.executable, "-c", job]
    result = run_cmd(argv, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    stderr = without_upstream_noise(result.stderr)
    for noise in ("Traceback", "Timed out", "were killed", "did not stop"):
        assert noise not in stderr, result.stderr
    assert Path(f"{marker}.restarting").exists(), "the worker's restart never began"
    assert not Path(f"{marker}.restarted").exists(), "the cluster waited for the restart"


def test_a_worker_that_keeps_dying_at_start_is_given_up_with_one_line(
    cluster_env, tmp_path: Path
) -> None:
    """Its first start works; a task ends it; every restart dies before connecting."""
    env = _preload_env(cluster_env, "crash_on_restart", tmp_path)
    go = tmp_path / "go"
    job = (
        "from distributed import Client; import os, pathlib, time; c = Client(); "
        "w = [a for a, v in c.scheduler_info()['workers'].items() if v['name'] == '0-1'][0]; "
        "c.submit(os._exit, 1, workers=[w], allow_other_workers=False, pure=False)\n"
        f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.05)\n"
        "print('LEFT', sorted(v['name'] for v in c.scheduler_info()['workers'].values()), "
        "c.submit(sum, [1, 2]).result())"
    )
    argv = [*start_cluster(), "cpu", "2", *OPTS, "--", sys.executable, "-c", job]
    run = Background(argv, env, tmp_path)
    run.wait_text("5 times in a row: not restarted", timeout=120)
    go.touch()
    assert run.wait(60) == 0, run.output()
    assert "LEFT ['0-0'] 3" in run.stdout
    assert "worker 0-1 exited with status 3 before connecting, 5 times in a row" in run.stderr


def test_a_worker_that_cannot_start_stops_the_launch_at_once(
    run_cmd, cluster_env, tmp_path: Path
) -> None:
    env = _preload_env(cluster_env, "crash_always", tmp_path)
    result = run_cmd([*start_cluster(), "cpu", "2", *OPTS, "--", "true"], env=env, timeout=60)
    assert result.returncode == 3, result.stderr
    assert "worker 0-0 failed to start: its process exited with status 3" in result.stderr
    assert "error: this rank's workers failed to start" in result.stderr
    assert result.seconds < 30  # not --timeout (120 s)


def test_no_nanny_means_plain_workers_as_with_dask_worker(
    run_cmd, cluster_env, tmp_path: Path
) -> None:
    job = (
        "from distributed import Client; import os, signal, time; c = Client(); "
        "pids = c.run(os.getpid); print('NANNY', c.run(os.getpid, nanny=True)); "
        "w = sorted(pids)[0]\n"
        "try:\n    c.restart_workers([w]); print('RESTARTED')\n"
        "except Exception as e:\n    print('REFUSED', e)\n"
        "os.kill(pids[w], signal.SIGKILL)\n"
        "while len(c.scheduler_info()['workers']) > 1: time.sleep(0.1)\n"
        "print('LEFT', len(c.scheduler_info()['workers']))"
    )
    result = run_cmd(
        [*start_cluster(), "cpu", "2", "--no-nanny", *OPTS, "--", sys.executable, "-c", job],
        env=cluster_env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "NANNY {}" in result.stdout  # no Nannies to run on
    assert "REFUSED" in result.stdout and "nann" in result.stdout.lower()
    assert "LEFT 1" in result.stdout  # a dead --no-nanny worker stays dead
    assert "was killed by signal 9: its workers are gone" in result.stderr


def test_ctrl_c_with_stderr_to_a_pipe_whose_reader_is_gone(cluster_env) -> None:
    """`start-cluster ... 2>&1 | tee log` and Ctrl-C: tee dies first; still exit 130."""
    read, write = os.pipe()
    proc = subprocess.Popen(
        [*start_cluster(), "cpu", "1", *OPTS],
        stdout=write,
        stderr=write,
        env=cluster_env,
        start_new_session=True,  # like a terminal's foreground job
    )
    os.close(write)
    seen = b""
    try:
        while b"Dask cluster ready" not in seen:
            chunk = os.read(read, 65536)
            assert chunk, seen.decode()
            seen += chunk
    finally:
        os.close(read)  # tee is gone
    os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C reaches the whole job
    assert proc.wait(60) == 130


def test_dask_cuda_workers_as_dask_cuda_worker_builds_them(
    run_cmd, cluster_env, tmp_path: Path
) -> None:
    """dask-cuda's CUDAWorker, with dask-cuda's own switch for device-less tests (no GPU here)."""
    env = {**cluster_env, "CUDA_VISIBLE_DEVICES": "0,1"}
    job = (
        "from distributed import Client; import os, json; c = Client(); "
        "print('CUDA ' + json.dumps(c.run(lambda dask_worker: [dask_worker.name, "
        "os.environ['CUDA_VISIBLE_DEVICES'], os.environ.get('RAPIDS_NO_INITIALIZE'), "
        "dask_worker.state.total_resources, sorted(p.split('-')[0] for p in dask_worker.plugins)"
        "]), sort_keys=True)); print('NANNIES', len(c.run(os.getpid, nanny=True)))"
    )
    argv = [*start_cluster(), "gpu", "2", "--site", "polaris", "--resources", "ssdGB=200", *OPTS]
    result = run_cmd([*argv, "--", sys.executable, "-c", job], env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("CUDA "))
    views = sorted(json.loads(line[5:]).values())
    assert [v[:4] for v in views] == [
        ["0-0", "0,1", "True", {"GPU": 1.0, "ssdGB": 200.0}],  # dask-cuda's rotation
        ["0-1", "1,0", "True", {"GPU": 1.0, "ssdGB": 200.0}],
    ]
    assert all("CUDFSetup" in v[4] and "PreImport" in v[4] for v in views)
    assert "NANNIES 2" in result.stdout
    dry = run_cmd([*argv, "--dry-run", "--device-memory-limit", "0.5"], env=env, timeout=60)
    plan = json.loads(dry.stdout)
    worker = next(p for p in plan["processes"] if p["role"] == "worker")
    assert worker["argv"][:3] == ["dask", "cuda", "worker"]
    assert "--device-memory-limit" in worker["argv"] and "0.5" in worker["argv"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--no-nanny"], "dask-cuda workers always run under a Nanny"),
        (["--rmm-pool-size", "1GB"], "--rmm-pool-size needs RMM, which is not installed here"),
    ],
    ids=["no-nanny", "rmm-missing"],
)
def test_dask_cuda_options_refused_in_one_line(
    extra: list[str], message: str, run_cmd, cluster_env
) -> None:
    env = {**cluster_env, "CUDA_VISIBLE_DEVICES": "0"}
    result = run_cmd([*start_cluster(), "gpu", "1", "--site", "polaris", *extra], env=env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(f"start-cluster: error: {message}")
    assert "Traceback" not in result.stderr


def test_cuda_flags_on_cpu_workers_are_refused(run_cmd, cluster_env) -> None:
    result = run_cmd([*start_cluster(), "cpu", "1", "--enable-cudf-spill"], env=cluster_env)
    assert result.returncode == 2
    assert "--enable-cudf-spill is a dask-cuda option, for gpu workers on NVIDIA GPUs" in (
        result.stderr
    )


def test_the_launchers_cpu_binding_wins_over_dask_cudas_cpu_affinity() -> None:
    """A worker of a rank the launcher bound keeps those CPUs after dask-cuda's plugin ran."""
    from dask_cuda.plugins import CPUAffinity
    from distributed import Scheduler

    from dask_hpc.running.worker import BoundWorker, HpcWorker

    online = sorted(os.sched_getaffinity(0))
    if len(online) < 2:
        pytest.fail("needs 2 CPUs to tell two bindings apart")
    launcher_cpus = {online[0]}
    everything = set(online)

    async def affinity_after_start(worker_class: type) -> set[int]:
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address="127.0.0.1:0") as s:
            async with worker_class(
                s.address, nthreads=1, plugins={CPUAffinity(everything)}, dashboard=False
            ):
                return os.sched_getaffinity(0)

    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, launcher_cpus)
        assert asyncio.run(affinity_after_start(BoundWorker)) == launcher_cpus
        os.sched_setaffinity(0, launcher_cpus)
        assert asyncio.run(affinity_after_start(HpcWorker)) == everything  # dask-cuda's choice
    finally:
        os.sched_setaffinity(0, before)
