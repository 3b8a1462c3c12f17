"""A REAL Flux instance on this host: ``flux start --test-size=N``, N brokers as N nodes.

The brokers are flux-core's own (tests/setup/flux.sh installs it, or any ``flux`` on PATH),
started with Flux's test options: the instance kept when a broker other than the first dies
(``--test-exit-mode=leader``: a lost node), its run directory ours, and optionally a resource
set in Flux's own format with EMULATED GPUs (``gpus=G``: R names G GPU ids per node and
``noverify`` lets Flux use them; Flux's job shell then sets ``CUDA_VISIBLE_DEVICES`` from them
as on a GPU node; nothing else is emulated) or cores (``cores=C``: C per node, more than this
host has where a benchmark needs them; binding to a core that is not there fails, so such jobs
run with ``-o cpu-affinity=off``). Every broker is this host (``hostname`` is the
same on all).

The instance's first broker runs ``cat`` as its initial program, fed by a pipe this object
holds: closing it ends the instance (Flux cancels what still runs, the brokers exit). Like the
Slurm daemons, the brokers carry no test tag; the jobs' processes do (``flux run`` and
``flux batch`` pass the submitter's environment), so the leak check sees them, and
:meth:`active_jobs` is checked after every test (``harness.plugin.watch_flux``). :meth:`stop`
fails when a process of the instance outlives it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from .procs import CmdResult, clean_daemon_env, kill_tree, run_cmd
from .waiting import WaitTimeout, wait_for

CACHE = Path(os.environ.get("DASK_HPC_TEST_CACHE", "/var/tmp/dask-hpc-tests"))
BUILT = CACHE / "flux-core-0.88.0" / "bin" / "flux"  # where tests/setup/flux.sh builds it


def flux_command() -> str:
    """The ``flux`` on PATH, else the one tests/setup/flux.sh built (if it and the directories
    above it up to the cache are this user's alone: the cache is in /var/tmp); fails loudly
    if none."""
    found = shutil.which("flux")
    if found:
        return found
    assert BUILT.exists(), (
        f"flux is not installed (not on PATH, not at {BUILT}): run tests/setup/flux.sh"
    )
    for path in (CACHE, *reversed(BUILT.relative_to(CACHE).parents[:-1]), BUILT):
        path = path if path.is_absolute() else CACHE / path
        info = path.lstat()
        assert not path.is_symlink() and info.st_uid == os.getuid() and not info.st_mode & 0o022, (
            f"{path} is not yours alone (another user may change it): remove it and run "
            "tests/setup/flux.sh"
        )
    return str(BUILT)


def _ids(count: int) -> str:
    """Flux's idset of 0..count-1 (``0``, ``0-3``)."""
    return "0" if count == 1 else f"0-{count - 1}"


class FluxInstance:
    """``flux start --test-size=size`` under ``base``; ``env`` addresses it (FLUX_URI, PATH)."""

    def __init__(
        self,
        base: Path | None = None,
        size: int = 3,
        *,
        gpus: int = 0,
        cores: int | None = None,
    ) -> None:
        self.base = Path(base or tempfile.mkdtemp(prefix="dask-hpc-flux-"))
        self.size = size
        self.gpus = gpus
        self.cores = cores
        self.flux = flux_command()
        self.proc: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}

    @property
    def bin_dir(self) -> str:
        return str(Path(self.flux).parent)

    def _config(self) -> list[str]:
        """``-c DIR`` with a resource set of EMULATED GPUs, or of more cores than this host has
        (a benchmark's 16 ranks on one node), when asked for."""
        if not self.gpus and not self.cores:
            return []
        cores = self.cores or max(1, os.cpu_count() or 1)
        gpus = ["-g", _ids(self.gpus)] if self.gpus else []
        encoded = subprocess.run(
            [self.flux, "R", "encode", "-r", _ids(self.size), "-c", _ids(cores), *gpus],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout
        conf = self.base / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "R.json").write_text(encoded)
        (conf / "resource.toml").write_text(
            f'[resource]\npath = "{conf / "R.json"}"\nnoverify = true\n'
        )
        return ["-c", str(conf)]

    def start(self, timeout: float = 180) -> FluxInstance:
        uri_file = self.base / "uri"
        rundir = self.base / "run"
        rundir.mkdir(parents=True, exist_ok=True)
        argv = [
            self.flux, "start", f"--test-size={self.size}", "--test-exit-mode=leader",
            f"--test-rundir={rundir}", *self._config(),
            "sh", "-c", f'printf %s "$FLUX_URI" >{uri_file}.new && mv {uri_file}.new {uri_file}'
            " && exec cat >/dev/null",
        ]
        env = clean_daemon_env(os.environ)
        env = {k: v for k, v in env.items() if not k.startswith("FLUX_")}
        self.log = open(self.base / "flux-start.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )
        try:
            wait_for(lambda: uri_file.exists() or self.proc.poll() is not None, timeout,
                     what="the Flux instance's URI")
        except WaitTimeout:
            self.stop()
            raise
        if self.proc.poll() is not None:
            raise RuntimeError(f"flux start failed:\n{self.output()}")
        self.env = {
            "FLUX_URI": uri_file.read_text(),
            "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '')}",
        }
        return self

    def output(self) -> str:
        return (self.base / "flux-start.log").read_text(errors="replace")

    def command(
        self, argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 60
    ) -> CmdResult:
        """A ``flux`` subcommand against this instance (``argv`` without ``flux``)."""
        full = {**(env or os.environ), **self.env}
        return run_cmd([self.flux, *argv], timeout=timeout, env=full)

    def jobs(self, ids: Sequence[str] = ()) -> list[dict]:
        """Every job this instance knows (or those named), from ``flux jobs --json``."""
        args = ["jobs", "--json", *ids] if ids else ["jobs", "--json", "-a"]
        result = self.command(args).check()
        data = json.loads(result.stdout or "{}")
        return data["jobs"] if "jobs" in data else [data] if data else []  # one id: the job

    def active_jobs(self) -> list[str]:
        """Ids of the jobs not yet inactive, from ``flux job list -s active``: asked after every
        test, so Flux's C command, not ``flux jobs`` (Python: 0.08 s of CPU a call, 0.15 s once
        the instance has run 300 jobs, against 0.004 s; 2026-12-01)."""
        listed = self.command(["job", "list", "-s", "active"]).check().stdout.splitlines()
        return [str(json.loads(line)["id"]) for line in listed if line.strip()]

    def job(self, job_id: str) -> dict:
        (info,) = self.jobs([job_id])
        return info

    def wait_job(self, job_id: str, timeout: float) -> dict:
        """The job once it is inactive (its ``result`` and ``returncode``)."""
        return wait_for(lambda: (j := self.job(job_id))["state"] == "INACTIVE" and j, timeout,
                        what=f"Flux job {job_id} to end")

    def cancel_all(self) -> None:
        self.command(["cancel", "--all"])
        wait_for(lambda: not self.active_jobs(), 60, what="the cancelled jobs to end")

    def broker_pids(self) -> dict[int, int]:
        """Broker rank -> pid (each broker gets its rank as PMI_RANK from flux start)."""
        assert self.proc is not None
        brokers = {}
        for child in psutil.Process(self.proc.pid).children():
            try:
                rank = child.environ().get("PMI_RANK")
            except psutil.Error:
                continue
            if rank is not None:
                brokers[int(rank)] = child.pid
        return brokers

    def kill_node(self, rank: int) -> list[int]:
        """SIGKILL broker ``rank`` and everything it started (job shells, tasks and theirs), as
        a node's death ends them; the pids killed."""
        return kill_tree(self.broker_pids()[rank])

    def _members(self) -> list[psutil.Process]:
        """Processes of the instance's session (flux start's, brokers', shells')."""
        assert self.proc is not None
        members = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if os.getsid(proc.pid) == self.proc.pid:
                    members.append(proc)
            except (OSError, psutil.Error):
                continue
        return members

    def stop(self, timeout: float = 60) -> None:
        """End the instance (close its initial program's input) and see every process of it
        gone; raises if one had to be killed."""
        if self.proc is None:
            return
        left: list[str] = []
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            left.append(f"flux start {self.proc.pid}")
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        try:
            wait_for(lambda: not self._members(), 15, what="the instance's processes to exit")
        except WaitTimeout:
            for proc in self._members():
                left.append(f"{proc.pid} {' '.join(proc.cmdline())}")
                proc.kill()
        self.log.close()
        self.proc = None
        shutil.rmtree(self.base, ignore_errors=True)
        if left:
            raise RuntimeError(f"Flux instance processes left (killed now): {left}")

    def __enter__(self) -> FluxInstance:
        # Started already (``with FluxInstance().start()``): a second ``flux start`` on the
        # same directory would take over the URI file, and the first instance's brokers live
        # on unwatched (tried: its "No service matching job-ingest.submit" for the first job)
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
