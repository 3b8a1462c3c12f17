"""Secrets where another user reads: job output, the dashboard's answers, the cluster's files.

Before: the ready block printed the dashboard's and JupyterLab's links with their tokens, and
a batch job's output file is made with the submitter's umask (0644 under 022: measured below
on Slurm), so any user of the system read them; JupyterLab's token gave a terminal as the
owner. Now a link is printed whole only to a terminal (``links.py``); the tokens stay in the
owner-only scheduler file (``hpc-cluster links``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import sys
from pathlib import Path

import pytest
from harness.neighbour import Neighbour
from jobs.background import Background
from neighbour_support import QUIET, launch
from support import start_cluster

COPY = "import shutil, sys; shutil.copy(sys.argv[1], sys.argv[2])"


def tokens(scheduler_file_copy: Path) -> dict[str, str]:
    """Every secret of a scheduler file: the dashboard's, the roll call's, JupyterLab's."""
    ours = json.loads(scheduler_file_copy.read_text())["dask_hpc"]
    found = {"dashboard": ours["dashboard_token"], "roll call": ours["token"]}
    if ours.get("jupyter_link"):
        found["jupyterlab"] = re.search(r"token=(\w+)", ours["jupyter_link"]).group(1)
    return {name: value for name, value in found.items() if value}


def read_as_other(path: str) -> str:
    return Path(path).read_text(errors="replace")


def test_a_job_log_holds_no_token(
    launcher: str, request: pytest.FixtureRequest, run_cmd, neighbour: Neighbour,
    owner_env: dict[str, str], sticky: Path, tmp_path: Path,
) -> None:
    """start-cluster with its output in a file made under umask 022, as a batch job's is: the
    other user reads the file, and no token is in it."""
    slurm = request.getfixturevalue("slurm_cluster") if launcher == "srun" else None
    log, copy = sticky / "job.log", tmp_path / "scheduler-file-copy.json"
    scheduler_file = sticky / "job.json"
    jupyter = ["--jupyter"] if launcher == "local" else []
    argv = [*launch(launcher, slurm), *start_cluster(), "cpu", "1", *QUIET, *jupyter,
            "--scheduler-file", str(scheduler_file),
            "--", sys.executable, "-c", COPY, str(scheduler_file), str(copy)]
    wrapped = ["sh", "-c", 'umask 022; exec "$@" >"$0" 2>&1', str(log), *argv]
    env = {**owner_env, **(slurm.env if slurm else {})}
    result = run_cmd(wrapped, env=env, timeout=150)
    text = log.read_text()
    assert result.returncode == 0, text
    assert stat.S_IMODE(log.stat().st_mode) == 0o644
    assert "Dask cluster ready" in neighbour.run(read_as_other, str(log))  # it reads it all
    secrets = tokens(copy)
    assert {"dashboard", "roll call"} <= secrets.keys() or launcher == "local", secrets
    if jupyter:
        assert "jupyterlab" in secrets, secrets
    for name, secret in secrets.items():
        assert secret not in text, f"the {name} token is in the job's output"
    assert "hpc-cluster links" in text


@pytest.mark.slurm
def test_slurm_makes_output_files_with_the_umask_and_they_hold_no_token(
    slurm_cluster, neighbour: Neighbour, owner_env: dict[str, str], sticky: Path,
    tmp_path: Path,
) -> None:
    """What Slurm does with a job's output file (the measurement behind links.py): made with
    the submitter's umask, 0644 under 022, readable by every user; it holds no token."""
    copy = tmp_path / "copy.json"
    scheduler_file = sticky / "batch.json"
    script = "#!/bin/sh\n" + " ".join([
        "srun", *start_cluster(), "cpu", "1", *QUIET, "--scheduler-file", str(scheduler_file),
        "--", sys.executable, "-c", f"'{COPY}'", str(scheduler_file), str(copy)]) + "\n"
    env = {**owner_env, **slurm_cluster.env}
    old = os.umask(0o022)  # sbatch hands its umask to the job (SLURM_UMASK)
    try:
        job = slurm_cluster.sbatch(
            script, ["-N", "1", "-n", "1", "-o", str(sticky / "slurm-%j.out")], env=env
        )
    finally:
        os.umask(old)
    state, code = slurm_cluster.wait_job(job, timeout=120)
    out = sticky / f"slurm-{job}.out"
    text = neighbour.run(read_as_other, str(out))
    assert (state, code) == ("COMPLETED", 0), text
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    for name, secret in tokens(copy).items():
        assert secret not in text, f"the {name} token is in Slurm's output file"


def ask(port: int, request: bytes) -> str:
    """As the other user: one raw HTTP request to the owner's dashboard; its status line."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n", 1)[0].decode(errors="replace")


def look_around(directories: list[str]) -> dict[str, str]:
    """As the other user: list each of the owner's directories."""
    seen = {}
    for directory in directories:
        try:
            seen[directory] = str(os.listdir(directory))
        except PermissionError:
            seen[directory] = "refused"
    return seen


def test_the_dashboard_answers_every_method_without_a_traceback_and_files_stay_closed(
    neighbour: Neighbour, owner_env: dict[str, str], sticky: Path, tmp_path: Path
) -> None:
    """Before: ``curl -I`` put a traceback (tornado's ``HTTPOutputError``) in the owner's
    log."""
    scheduler_file = sticky / "c.json"
    argv = [*start_cluster(), "cpu", "1", *QUIET, "--scheduler-file", str(scheduler_file)]
    run = Background(argv, owner_env, tmp_path)
    try:
        run.wait_text("Dask cluster ready", 60)
        info = json.loads(scheduler_file.read_text())
        port = info["services"]["dashboard"]
        requests = [
            f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
            for method in ("HEAD", "GET", "OPTIONS", "DELETE", "PROPFIND")
            for path in ("/", "/status", "/json/identity.json")
        ]
        requests.append(b"HEAD /status?token=wrong HTTP/1.1\r\nHost: x\r\n\r\n")
        answers = [neighbour.run(ask, port, request) for request in requests]
        assert all(a.split()[1] == "403" for a in answers), answers
        local_dirs = [p for p in sticky.iterdir() if p.name.startswith("dask-hpc-")]
        assert local_dirs, "no private local directory in $TMPDIR"
        cluster_dir = scheduler_file.with_name("c.dask-hpc")
        seen = neighbour.run(look_around, [str(cluster_dir), *map(str, local_dirs)])
        assert set(seen.values()) == {"refused"}, seen
        run.signal(signal.SIGTERM)
        assert run.wait(60) == 128 + signal.SIGTERM, run.output()
    finally:
        Background.kill_all()
    assert "Traceback" not in run.stderr and "HTTPOutputError" not in run.stderr, run.stderr
