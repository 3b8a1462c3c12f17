"""A private single-host Slurm cluster (Debian slurm-wlm 22.05) with several emulated nodes.

One ``slurmctld`` and one ``slurmd -N nodeK`` per emulated node, all on 127.0.0.1 with free
ports, ``auth/none`` + ``cred/none``, state in a private directory.  Jobs are polled through
``scontrol``/``squeue`` (never ``sbatch --wait``).

``gpus=N`` gives each node ``Gres=gpu:N`` (EMULATED GPUs: gres.conf names character devices
made in the private directory, copies of /dev/null; 22.05 refuses regular files): a job that
asks for them (``--gres=gpu:N``, ``--gpus-per-node``) gets ``CUDA_VISIBLE_DEVICES`` from
Slurm, one that does not gets none, as on a DeepOps cluster.

``plugstack`` (lines of a ``plugstack.conf``, e.g. Pyxis's ``required .../spank_pyxis.so``)
loads SPANK plugins in srun and slurmstepd; ``daemon_env`` adds to the daemons' environment
(what slurmstepd passes the plugins: Enroot's ``PATH`` and ``ENROOT_SYSCONF_PATH``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .procs import CmdResult, clean_daemon_env, pid_alive, run_cmd
from .waiting import WaitTimeout, free_ports, wait_for

TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)

SLURM_CONF_TEMPLATE = """\
ClusterName=dhpc{tag}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/backfill
# Job and step signalling as at a site, but short: SIGTERM, then SIGKILL after KillWait.
KillWait={kill_wait}
KillOnBadExit={kill_on_bad_exit}
UnkillableStepTimeout={unkillable_timeout}
MessageTimeout=10
SlurmctldTimeout=30
SlurmdTimeout={slurmd_timeout}
InactiveLimit=0
MinJobAge=3600
WaitTime=0
{extra}
{nodes}
PartitionName={partition} Nodes={node_list} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
{partitions}
"""


class SlurmError(RuntimeError):
    """A Slurm command or daemon failed."""


class SlurmCluster:
    """A throwaway Slurm cluster: ``nodes`` emulated nodes with ``cpus`` CPUs each.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.  ``env`` holds the
    environment (``SLURM_CONF``) that clients need; every command run through this object adds
    it on top of the ``env`` it is given (default: ``os.environ``).
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        nodes: int = 2,
        cpus: int = 8,
        partition: str = "debug",
        kill_wait: int = 5,
        kill_on_bad_exit: int = 0,
        unkillable_timeout: int = 20,
        extra_conf: str = "",
        partitions: Mapping[str, str] | None = None,
        slurmd_timeout: int = 30,
        gpus: int = 0,
        memory_mb: int = 1024,
        features: str = "",
        plugstack: str = "",
        daemon_env: Mapping[str, str] | None = None,
    ) -> None:
        self.root = Path(workdir).resolve()
        self.gpus = gpus
        self.features = features  # the nodes' Features (a site's --constraint=gpu, -C nvme)
        self.memory_mb = memory_mb  # RealMemory: what --mem may ask (memory is not consumed)
        self.nodes = [f"node{i + 1}" for i in range(nodes)]
        self.cpus = cpus
        self.partition = partition
        self.kill_wait = kill_wait
        self.kill_on_bad_exit = kill_on_bad_exit
        self.unkillable_timeout = unkillable_timeout
        self.slurmd_timeout = slurmd_timeout  # a node silent this long is DOWN (node failure)
        self.extra_conf = extra_conf
        self.plugstack = plugstack
        self.daemon_env = dict(daemon_env or {})
        self.partitions = dict(partitions or {})  # more partitions: name -> their options
        self.conf_path = self.root / "slurm.conf"
        self.env: dict[str, str] = {"SLURM_CONF": str(self.conf_path)}
        self.started = False
        self._daemon_pids: list[int] = []
        self.startup_seconds: float | None = None
        self.shutdown_seconds: float | None = None

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _write_conf(self) -> None:
        for sub in ("state", "spool", "run", "log", "jobs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for node in self.nodes:
            (self.root / "spool" / node).mkdir(exist_ok=True)
        ports = free_ports(1 + len(self.nodes))
        ctld_port, node_ports = ports[0], ports[1:]
        gres = f" Gres=gpu:{self.gpus}" if self.gpus else ""
        gres += f" Features={self.features}" if self.features else ""
        node_lines = "\n".join(
            f"NodeName={n} NodeHostname={n} NodeAddr=127.0.0.1 Port={p} CPUs={self.cpus} "
            f"Boards=1 SocketsPerBoard=1 CoresPerSocket={self.cpus} ThreadsPerCore=1 "
            f"RealMemory={self.memory_mb}{gres} State=UNKNOWN"
            for n, p in zip(self.nodes, node_ports, strict=True)
        )
        extra = self.extra_conf
        if self.plugstack:  # SPANK plugins, for srun and slurmstepd alike
            (self.root / "plugstack.conf").write_text(self.plugstack.rstrip("\n") + "\n")
            extra = f"PlugStackConfig={self.root / 'plugstack.conf'}\n{extra}"
        if self.gpus:
            extra = f"GresTypes=gpu\n{extra}"
            self._write_gres_conf()
        text = SLURM_CONF_TEMPLATE.format(
            tag=os.getpid(),
            ctld_port=ctld_port,
            slurmd_port=node_ports[0],
            root=self.root,
            kill_wait=self.kill_wait,
            kill_on_bad_exit=self.kill_on_bad_exit,
            unkillable_timeout=self.unkillable_timeout,
            slurmd_timeout=self.slurmd_timeout,
            extra=extra,
            nodes=node_lines,
            partition=self.partition,
            node_list=",".join(self.nodes),
            partitions="\n".join(
                f"PartitionName={name} Nodes={','.join(self.nodes)} State=UP OverSubscribe=YES "
                f"{options}"
                for name, options in self.partitions.items()
            ),
        )
        self.conf_path.write_text(text)

    def _write_gres_conf(self) -> None:
        """gres.conf beside slurm.conf: each node's GPUs as character devices (1, 3)."""
        devices = self.root / "dev"
        devices.mkdir(exist_ok=True)
        for i in range(self.gpus):
            node = devices / f"nvidia{i}"
            if not node.exists():
                os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        files = f"{devices}/nvidia[0-{self.gpus - 1}]" if self.gpus > 1 else f"{devices}/nvidia0"
        (self.root / "gres.conf").write_text(f"AutoDetect=off\nName=gpu File={files}\n")

    def _daemon_env(self) -> dict[str, str]:
        env = clean_daemon_env(os.environ)
        env.update(self.env)
        env.update(self.daemon_env)
        return env

    def start(self, timeout: float = 30.0) -> None:
        """Write the config, start the daemons and wait until every node is idle."""
        for prog in ("slurmctld", "slurmd", "srun", "sbatch", "sinfo", "squeue", "scontrol"):
            if shutil.which(prog) is None:
                raise SlurmError(f"{prog} not found: run tests/setup/install.sh")
        t0 = time.monotonic()
        self._write_conf()
        env = self._daemon_env()
        self.started = True
        try:
            self._spawn(["slurmctld", "-c", "-i", "-f", str(self.conf_path)], env, "slurmctld")
            for node in self.nodes:
                self._spawn(["slurmd", "-N", node, "-f", str(self.conf_path)], env, node)
            self._wait_pidfiles(timeout)
            wait_for(self._all_idle, timeout, what=f"Slurm nodes {self.nodes} idle")
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0

    def _spawn(self, argv: list[str], env: Mapping[str, str], name: str) -> None:
        # The daemons fork into the background; their pids come from the pid files.
        log = self.root / "log" / f"{name}.stderr"
        with open(log, "ab") as err:
            proc = subprocess.run(
                argv,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                timeout=30,
                start_new_session=True,
            )
        if proc.returncode != 0:
            raise SlurmError(f"{' '.join(argv)} exited {proc.returncode}: {log.read_text()}")

    def _pidfiles(self) -> list[Path]:
        run = self.root / "run"
        return [run / "slurmctld.pid"] + [run / f"slurmd-{n}.pid" for n in self.nodes]

    def _wait_pidfiles(self, timeout: float) -> None:
        def read_all() -> list[int] | None:
            pids = []
            for f in self._pidfiles():
                try:
                    pids.append(int(f.read_text().strip()))
                except (OSError, ValueError):
                    return None
            return pids

        self._daemon_pids = wait_for(read_all, timeout, what="Slurm pid files")

    def _all_idle(self) -> bool:
        res = self.run(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"], timeout=10)
        return res.returncode == 0 and set(res.stdout.split()) >= set(self.nodes)

    def daemon_pids(self) -> list[int]:
        """Pids of slurmctld and the slurmd daemons (read from their pid files)."""
        return list(self._daemon_pids)

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel all jobs, TERM the daemons and wait until they are gone; raise if not."""
        if not self.started:
            return
        t0 = time.monotonic()
        try:
            if self._daemon_pids and pid_alive(self._daemon_pids[0]):
                for part in (self.partition, *self.partitions):
                    self.run(["scancel", "--full", "--partition", part], timeout=10)
                try:
                    wait_for(
                        lambda: not self.jobs(),
                        min(timeout, 2 * self.kill_wait + 10),
                        what="Slurm jobs to end",
                    )
                except WaitTimeout:
                    pass  # Stopping slurmd below ends its steps anyway.
        finally:
            pids = self._daemon_pids or self._read_pids_best_effort()
            # slurmd first (it signals its steps), then slurmctld.
            for pid in pids[1:] + pids[:1]:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            try:
                wait_for(
                    lambda: not any(pid_alive(p) for p in pids),
                    timeout,
                    what="Slurm daemons to exit",
                )
            except WaitTimeout:
                for pid in pids:
                    if pid_alive(pid):
                        os.kill(pid, signal.SIGKILL)
                raise SlurmError(f"Slurm daemons still alive after {timeout} s: {pids}") from None
            finally:
                self.started = False
                self.shutdown_seconds = time.monotonic() - t0

    def stop_and_remove(self, timeout: float = 30.0) -> None:
        """``stop``, then remove ``root`` (a temporary directory of the cluster's own); when a
        daemon survives, ``stop`` raises and ``root`` stays, with the daemons' logs."""
        self.stop(timeout)
        shutil.rmtree(self.root, ignore_errors=True)

    def _read_pids_best_effort(self) -> list[int]:
        pids = []
        for f in self._pidfiles():
            try:
                pids.append(int(f.read_text().strip()))
            except (OSError, ValueError):
                pass
        return pids

    # ---------------------------------------------------------------- commands
    def command_env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """``env`` (default ``os.environ``) plus ``SLURM_CONF``."""
        out = dict(os.environ if env is None else env)
        out.update(self.env)
        return out

    def run(
        self,
        argv: Sequence[str],
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        input: str | None = None,
    ) -> CmdResult:
        """Run any Slurm client command (argv[0] e.g. ``squeue``) against this cluster."""
        return run_cmd(argv, timeout=timeout, env=self.command_env(env), cwd=cwd, input=input)

    def srun(
        self,
        args: Sequence[str],
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> CmdResult:
        """Run ``srun ARGS`` and wait for it (hard timeout kills its process group)."""
        return self.run(["srun", *args], timeout=timeout, env=env, cwd=cwd)

    def sbatch(
        self,
        script_text: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> str:
        """Submit ``script_text`` (a ``#!`` script) and return the job id.

        Output goes to ``<workdir>/jobs/<jobid>.out`` (stdout and stderr) unless ``args`` says
        otherwise; read it with :meth:`job_output`.
        """
        out = self.root / "jobs" / "%j.out"
        argv = ["sbatch", "--parsable", f"--output={out}", *args]
        res = self.run(argv, timeout=30, env=env, cwd=cwd or self.root / "jobs", input=script_text)
        if res.returncode != 0:
            raise SlurmError(f"sbatch failed ({res.returncode}): {res.stderr}")
        return res.stdout.strip().split(";")[0]

    def job_info(self, job_id: str) -> dict[str, str]:
        """``scontrol show job -o`` as a dict (empty if Slurm no longer knows the job)."""
        res = self.run(["scontrol", "show", "job", "-o", str(job_id)], timeout=10)
        if res.returncode != 0:
            return {}
        info: dict[str, str] = {}
        for m in re.finditer(r"(\S+?)=(\S*)", res.stdout):
            info.setdefault(m.group(1), m.group(2))
        return info

    def job_state(self, job_id: str) -> tuple[str, int | None]:
        """(state, exit code) of a job; exit code is None until it ends, 128+N if killed by N."""
        info = self.job_info(job_id)
        state = info.get("JobState", "UNKNOWN")
        if state not in TERMINAL_STATES:
            return state, None
        code, _, sig = info.get("ExitCode", "0:0").partition(":")
        return state, (128 + int(sig) if sig and int(sig) else int(code))

    def wait_job(
        self, job_id: str, timeout: float = 60.0, states: frozenset[str] = TERMINAL_STATES
    ) -> tuple[str, int | None]:
        """Poll until the job reaches one of ``states`` (default: any end state)."""
        result: list[tuple[str, int | None]] = []

        def reached() -> bool:
            result[:] = [self.job_state(job_id)]
            return result[0][0] in states

        try:
            wait_for(reached, timeout, interval=0.1, what=f"job {job_id} in {sorted(states)}")
        except WaitTimeout as e:
            info = self.job_info(job_id)  # why it waits (Reason=), the nodes' states, the log
            nodes = self.run(["sinfo", "-h", "-N", "-o", "%N %T %E"], timeout=10).stdout
            raise WaitTimeout(
                f"{e}; last state {result[0] if result else None}, reason "
                f"{info.get('Reason')}; nodes: {nodes.strip()!r}; slurmctld: "
                f"{self.log()[-1500:]}"
            ) from None
        return result[0]

    def wait_running(self, job_id: str, timeout: float = 30.0) -> str:
        """Wait until the job is RUNNING (or already ended); return the state."""
        return self.wait_job(job_id, timeout, states=TERMINAL_STATES | {"RUNNING"})[0]

    def job_output(self, job_id: str) -> str:
        """The text of the job's output file (from :meth:`sbatch`)."""
        return (self.root / "jobs" / f"{job_id}.out").read_text(errors="replace")

    def scancel(self, job_id: str, signal_name: str | None = None, full: bool = False) -> None:
        """``scancel`` a job (default: SIGTERM to the steps, SIGKILL after KillWait)."""
        argv = ["scancel"]
        if signal_name:
            argv.append(f"--signal={signal_name}")
        if full:
            argv.append("--full")
        res = self.run([*argv, str(job_id)], timeout=15)
        if res.returncode != 0:
            raise SlurmError(f"scancel {job_id} failed: {res.stderr}")

    def jobs(self) -> list[tuple[str, str, str]]:
        """(job id, state, name) of every job ``squeue`` still lists."""
        res = self.run(["squeue", "-h", "-o", "%i %T %j"], timeout=10)
        if res.returncode != 0:
            raise SlurmError(f"squeue failed: {res.stderr}")
        return [tuple(line.split(None, 2)) for line in res.stdout.splitlines() if line.strip()]

    def cancel_all(self, timeout: float | None = None) -> None:
        """Cancel every job and wait until ``squeue`` lists none."""
        for part in (self.partition, *self.partitions):
            self.run(["scancel", "--partition", part], timeout=15)
        wait_for(
            lambda: not self.jobs(),
            timeout or 2 * self.kill_wait + 15,
            what="all Slurm jobs to end",
        )

    def log(self, name: str = "slurmctld") -> str:
        """A daemon's log (``slurmctld`` or a node name)."""
        fname = "slurmctld.log" if name == "slurmctld" else f"slurmd-{name}.log"
        path = self.root / "log" / fname
        return path.read_text(errors="replace") if path.exists() else ""
