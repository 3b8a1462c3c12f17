"""EMULATED PBS Pro (qsub, qstat, qdel) and LSF (bsub, bjobs, bkill) over the test's real Slurm.

The commands in ``bin/pbs`` and ``bin/lsf`` run this file. A job is submitted to Slurm
(``sbatch``, which must reach a Slurm through ``SLURM_CONF``) and runs this file's
``run-job`` in the batch step, which gives the script the job environment of PBS Pro or LSF
(``emulate.pbs_job_env`` / ``lsf_job_env``, no ``SLURM_*``) and their launchers on PATH
(``bin/pals/mpiexec``, ``bin/lsf/jsrun``, which run ``emulate``'s PALS and jsrun over real MPICH
and Open MPI). What the cluster reads back is the real commands' output:

- ``qsub`` prints ``ID.SERVER``; ``#PBS`` lines before the first command (command line wins);
  no ``-V``: only ``PBS_O_*``, the login variables and ``-v`` ones reach the job; an unknown
  queue: ``qsub: Unknown queue`` (exit 170); a walltime over the queue's limit: ``qsub: Job
  violates queue and/or server resource limits`` (exit 188). Queues and limits come from
  ``DASK_HPC_EMU_PBS_QUEUES`` (``name=seconds,...``, the first the default).
- ``qstat [-x] [-f] [-F json] ID...``: the default table, ``-f`` and its JSON form, states
  Q H R E F; a finished job only with ``-x`` (else exit 35); an unknown one ``qstat: Unknown
  Job Id ID`` (exit 153); ``qdel ID...`` likewise.
- ``bsub < script``: ``#BSUB`` lines, the submitter's environment, ``Job <ID> is submitted to
  queue <Q>.``; an unknown queue or a ``-W`` over its RUNLIMIT (``DASK_HPC_EMU_LSF_QUEUES``,
  minutes): LSF's message and ``Job not submitted.`` (exit 255).
- ``bjobs [-noheader] [-o "jobid stat ..."] ID...``: PEND RUN DONE EXIT; ``Job <ID> is not
  found`` for one it does not know; ``bkill ID...``: ``Job <ID> is being terminated``.

Not reproduced: the schedulers themselves (Slurm decides when a job runs), accounting, job
arrays, interactive jobs, LSF's job report at the end of the output file, PBS's mail.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

HARNESS = Path(__file__).resolve().parent
sys.path.insert(0, str(HARNESS.parent))  # run as a script: harness importable

from harness.emulate import (  # noqa: E402
    aurora_hosts,
    lsf_job_env,
    pbs_job_env,
    summit_hosts,
)
from harness.job_launchers import jsrun, pals_mpiexec  # noqa: E402
from harness.procs import TEST_TMP_VAR  # noqa: E402

BIN = HARNESS / "bin"
PBS_SERVER = "pbs01"
LOGIN_VARS = ("HOME", "USER", "LOGNAME", "SHELL", "LANG", "TZ", "MAIL")
HARNESS_VARS = ("DASK_HPC_TEST_TAG", "DASK_HPC_EMU_SPOOL", TEST_TMP_VAR)  # the harness's own
SLURM_TO_PBS = {
    "PENDING": "Q", "CONFIGURING": "Q", "REQUEUED": "Q", "REQUEUE_HOLD": "H",
    "RUNNING": "R", "COMPLETING": "E", "SUSPENDED": "S", "STOPPED": "S",
}
SLURM_TO_LSF = {
    "PENDING": "PEND", "CONFIGURING": "PEND", "REQUEUED": "PEND", "REQUEUE_HOLD": "PSUSP",
    "RUNNING": "RUN", "COMPLETING": "RUN", "SUSPENDED": "USUSP", "STOPPED": "SSUSP",
    "COMPLETED": "DONE",
}


def fail(message: str, code: int) -> int:
    sys.stderr.write(message + "\n")
    return code


def spool() -> Path:
    path = Path(os.environ.get("DASK_HPC_EMU_SPOOL") or f"/tmp/dask-hpc-emu-{os.getuid()}")
    path.mkdir(parents=True, exist_ok=True)
    return path


def queues(var: str, default: str) -> dict[str, int]:
    """``name=limit,...`` from ``var``: each queue and its walltime limit."""
    out = {}
    for item in (os.environ.get(var) or default).split(","):
        name, _, limit = item.partition("=")
        out[name.strip()] = int(limit)
    return out


def slurm(argv: Sequence[str], input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), input=input, capture_output=True, text=True, timeout=60)


def directives(text: str, prefix: str) -> list[str]:
    """The options of the script's directive lines, up to its first command."""
    out: list[str] = []
    for line in text.splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith(prefix):
            out += shlex.split(stripped[len(prefix) :])
        elif stripped and not stripped.startswith("#"):
            break
    return out


def parse_options(args: Sequence[str], with_value: str, flags: str = "") -> tuple[dict, list]:
    """getopt-style: ``-X value`` for X in ``with_value``, ``-X`` for X in ``flags``; repeated
    options with a value collect in a list. Returns (options, the rest)."""
    opts: dict[str, list[str] | bool] = {}
    rest: list[str] = []
    items = list(args)
    while items:
        arg = items.pop(0)
        if re.fullmatch(r"-[A-Za-z_]+", arg) and arg[1:] in with_value.split():
            opts.setdefault(arg[1:], []).append(items.pop(0))  # type: ignore[union-attr]
        elif re.fullmatch(r"-[A-Za-z]", arg) and arg[1:] in flags:
            opts[arg[1:]] = True
        else:
            rest.append(arg)
    return opts, rest


def submit_to_slurm(
    *,
    kind: str,
    script: str,
    name: str,
    nodes: int,
    seconds: int,
    queue: str,
    output: str,
    error: str | None,
    keep_env: Mapping[str, str],
    cwd: str,
) -> str:
    """sbatch a step that runs ``script`` as a ``kind`` job would; the Slurm job id."""
    jobdir = spool() / f"{kind}-{time.time_ns()}"
    jobdir.mkdir()
    (jobdir / "script").write_text(script)
    (jobdir / "env.json").write_text(json.dumps(dict(keep_env)))
    meta = {"kind": kind, "name": name, "nodes": nodes, "queue": queue, "cwd": cwd}
    (jobdir / "meta.json").write_text(json.dumps(meta))
    run = [sys.executable, __file__, "run-job", str(jobdir)]
    wrapper = f"#!/bin/sh\nexec {shlex.join(run)}\n"
    argv = [
        "sbatch", "--parsable", f"--job-name={name}", f"--nodes={nodes}", "--ntasks-per-node=1",
        f"--time={-(-seconds // 60)}", f"--output={output}", f"--comment={kind}:{queue}",
        "--export=ALL",
    ]
    if error:
        argv.append(f"--error={error}")
    done = slurm(argv, input=wrapper)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip())
    return done.stdout.strip().split(";")[0]


# ---------------------------------------------------------------------- PBS Pro
def pbs_walltime(text: str) -> int:
    parts = [int(p) for p in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return parts[0] * 3600 + parts[1] * 60 + parts[2]


def qsub(args: Sequence[str]) -> int:
    opts, rest = parse_options(args, "A N q l o e j v W", "V")
    if not rest:
        return fail("usage: qsub [options] script", 2)
    path = Path(rest[0])
    text = path.read_text()
    from_script, _ = parse_options(directives(text, "#PBS"), "A N q l o e j v W", "V")
    merged = {**from_script, **opts}
    resources: dict[str, str] = {}
    for item in [*from_script.get("l", []), *opts.get("l", [])]:
        for part in item.split(","):
            key, _, value = part.partition("=")
            resources[key] = value
    known = queues("DASK_HPC_EMU_PBS_QUEUES", "debug=3600,prod=86400")
    queue = (merged.get("q") or [next(iter(known))])[-1]
    if queue not in known:
        return fail("qsub: Unknown queue", 170)
    seconds = pbs_walltime(resources.get("walltime", "01:00:00"))
    if seconds > known[queue]:
        return fail("qsub: Job violates queue and/or server resource limits", 188)
    nodes = int(resources.get("select", "1").split(":")[0])
    name = (merged.get("N") or [path.name])[-1]
    cwd = os.getcwd()
    env = {k: os.environ[k] for k in (*LOGIN_VARS, *HARNESS_VARS) if k in os.environ}
    env.update({f"PBS_O_{k}": os.environ[k] for k in ("HOME", "LANG", "LOGNAME", "PATH", "MAIL",
                                                      "SHELL", "TZ") if k in os.environ})
    env.update(PBS_O_WORKDIR=cwd, PBS_O_SYSTEM="Linux", PBS_O_QUEUE=queue)
    if merged.get("V"):
        env.update({k: v for k, v in os.environ.items() if not k.startswith("SLURM_")})
    for item in merged.get("v", []):
        for pair in item.split(","):
            key, eq, value = pair.partition("=")
            env[key] = value if eq else os.environ.get(key, "")
    join = (merged.get("j") or ["n"])[-1]
    output = (merged.get("o") or [f"{cwd}/{name}.o%j"])[-1]
    error = None if join == "oe" else (merged.get("e") or [f"{cwd}/{name}.e%j"])[-1]
    try:
        job = submit_to_slurm(
            kind="pbs", script=text, name=name, nodes=nodes, seconds=seconds, queue=queue,
            output=output, error=error, keep_env=env, cwd=cwd,
        )
    except RuntimeError as problem:
        return fail(f"qsub: {problem}", 1)
    print(f"{job}.{PBS_SERVER}")
    return 0


def slurm_jobs(ids: Sequence[str]) -> dict[str, dict[str, str]]:
    """Slurm's view of these job ids (those it knows)."""
    if not ids:
        return {}
    done = slurm(["squeue", "--noheader", "--states=all", "--format=%i|%T|%j|%k|%r|%M",
                  f"--jobs={','.join(ids)}"])
    out = {}
    for line in done.stdout.splitlines():
        jid, state, name, comment, reason, used = line.split("|")
        out[jid] = {"state": state, "name": name, "comment": comment, "reason": reason,
                    "used": used}
    return out


def exit_code(jid: str) -> int:
    done = slurm(["scontrol", "show", "job", "-o", jid])
    match = re.search(r"ExitCode=(\d+):(\d+)", done.stdout)
    if not match:
        return 0
    code, sig = int(match.group(1)), int(match.group(2))
    return 256 + sig if sig else code


def pbs_state(info: Mapping[str, str]) -> str:
    if info["state"] == "PENDING" and info["reason"].startswith("JobHeld"):
        return "H"
    return SLURM_TO_PBS.get(info["state"], "F")


def qstat(args: Sequence[str]) -> int:
    opts, ids = parse_options(args, "F", "xfw")
    known = slurm_jobs([i.split(".")[0] for i in ids])
    code, jobs = 0, {}
    for jid in ids:
        info = known.get(jid.split(".")[0])
        if info is None or not info["comment"].startswith("pbs:"):
            sys.stderr.write(f"qstat: Unknown Job Id {jid}\n")
            code = 153
            continue
        state = pbs_state(info)
        if state == "F" and not opts.get("x"):
            sys.stderr.write(
                f"qstat: {jid} Job has finished, use -x or -H to obtain historical job "
                "information\n"
            )
            code = code or 35
            continue
        attrs: dict[str, object] = {
            "Job_Name": info["name"],
            "Job_Owner": f"{os.environ.get('USER', 'root')}@login1",
            "job_state": state,
            "queue": info["comment"].split(":", 1)[1],
            "server": PBS_SERVER,
        }
        if state == "F":
            attrs["Exit_status"] = exit_code(jid.split(".")[0])
        if state == "Q":
            attrs["comment"] = f"Not Running: {info['reason']}"
        jobs[f"{jid.split('.')[0]}.{PBS_SERVER}"] = attrs
    if opts.get("F") == ["json"]:
        doc = {"timestamp": int(time.time()), "pbs_version": "2022.1.5", "pbs_server": PBS_SERVER}
        if jobs:
            doc["Jobs"] = jobs
        print(json.dumps(doc, indent=4))
    elif opts.get("f"):
        for jid, attrs in jobs.items():
            print(f"Job Id: {jid}")
            for key, value in attrs.items():
                print(f"    {key} = {value}")
            print()
    elif jobs:
        print(f"{'Job id':<17}{'Name':<17}{'User':<17}{'Time Use':<9}S Queue")
        print(f"{'-' * 16} {'-' * 16} {'-' * 16} {'-' * 8} - -----")
        for jid, attrs in jobs.items():
            print(f"{jid[:16]:<17}{str(attrs['Job_Name'])[:16]:<17}"
                  f"{os.environ.get('USER', 'root')[:16]:<17}{'0':>8} {attrs['job_state']} "
                  f"{attrs['queue']}")
    return code


def qdel(args: Sequence[str]) -> int:
    _, ids = parse_options(args, "W", "x")
    known = slurm_jobs([i.split(".")[0] for i in ids])
    code = 0
    for jid in ids:
        info = known.get(jid.split(".")[0])
        if info is None:
            code = fail(f"qdel: Unknown Job Id {jid}", 153)
        elif pbs_state(info) == "F":
            code = fail(f"qdel: Job has finished {jid}", 35)
        else:
            slurm(["scancel", jid.split(".")[0]])
    return code


# ---------------------------------------------------------------------- LSF
def bsub(args: Sequence[str]) -> int:
    if args:
        return fail("bsub: this emulator takes the job script on stdin (bsub < script)", 255)
    text = sys.stdin.read()
    opts, _ = parse_options(directives(text, "#BSUB"), "J nnodes W P q o e alloc_flags cwd")
    known = queues("DASK_HPC_EMU_LSF_QUEUES", "batch=120,debug=60")
    queue = (opts.get("q") or [next(iter(known))])[-1]
    if queue not in known:
        return fail(f"{queue}: No such queue. Job not submitted.", 255)
    hours, _, minutes = (opts.get("W") or ["60"])[-1].rpartition(":")
    limit = int(hours or 0) * 60 + int(minutes)
    if limit > known[queue]:
        return fail("RUNLIMIT: Cannot exceed queue's hard limit(s). Job not submitted.", 255)
    cwd = (opts.get("cwd") or [os.getcwd()])[-1]
    name = (opts.get("J") or ["NONAME"])[-1]
    output = (opts.get("o") or [f"{cwd}/{name}.%J.out"])[-1].replace("%J", "%j")
    error = (opts.get("e") or [None])[-1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    try:
        job = submit_to_slurm(
            kind="lsf", script=text, name=name, nodes=int((opts.get("nnodes") or ["1"])[-1]),
            seconds=limit * 60, queue=queue, output=output,
            error=error.replace("%J", "%j") if error else None, keep_env=env, cwd=cwd,
        )
    except RuntimeError as problem:
        return fail(f"{problem}. Job not submitted.", 255)
    print(f"Job <{job}> is submitted to queue <{queue}>.")
    return 0


def lsf_state(info: Mapping[str, str]) -> str:
    return SLURM_TO_LSF.get(info["state"], "EXIT")


def bjobs(args: Sequence[str]) -> int:
    opts, ids = parse_options(args, "o", "a")
    noheader = "-noheader" in ids
    ids = [i for i in ids if i != "-noheader"]
    fields = (opts.get("o") or ["jobid user stat queue job_name"])[-1].split()
    known = slurm_jobs(ids)
    rows = []
    code = 0
    for jid in ids:
        info = known.get(jid)
        if info is None or not info["comment"].startswith("lsf:"):
            sys.stderr.write(f"Job <{jid}> is not found\n")
            code = 255
            continue
        values = {
            "jobid": jid, "stat": lsf_state(info), "queue": info["comment"].split(":", 1)[1],
            "job_name": info["name"], "user": os.environ.get("USER", "root"),
        }
        rows.append([values.get(f, "-") for f in fields])
    if rows and not noheader:
        print(" ".join(f.upper() for f in fields))
    for row in rows:
        print(" ".join(row))
    return code if not rows else 0


def bkill(args: Sequence[str]) -> int:
    known = slurm_jobs(list(args))
    code = 0
    for jid in args:
        info = known.get(jid)
        if info is None:
            code = fail(f"Job <{jid}>: No matching job found", 255)
        elif lsf_state(info) in ("DONE", "EXIT"):
            code = fail(f"Job <{jid}>: Job has already finished", 255)
        else:
            slurm(["scancel", jid])
            print(f"Job <{jid}> is being terminated")
    return code


# ---------------------------------------------------------------------- in the job
def run_job(jobdir: str) -> int:
    """The batch step: the job environment of PBS Pro or LSF, then the script."""
    here = Path(jobdir)
    meta = json.loads((here / "meta.json").read_text())
    env = json.loads((here / "env.json").read_text())
    slurm_id = os.environ["SLURM_JOB_ID"]
    nodes = int(meta["nodes"])
    if meta["kind"] == "pbs":
        jobid = f"{slurm_id}.{PBS_SERVER}"
        env.update(pbs_job_env(here, aurora_hosts(nodes), jobid, 64, meta["queue"]))
        env.update(PBS_JOBNAME=meta["name"], PBS_O_WORKDIR=meta["cwd"], PBS_JOBDIR=env["HOME"],
                   PBS_O_HOST="login1")
        env["PATH"] = f"{BIN / 'pals'}:{BIN / 'site'}:/usr/local/bin:/usr/bin:/bin"
        os.chdir(env.get("HOME", "/"))  # PBS starts the script in the home directory
    else:
        env.update(lsf_job_env(here, summit_hosts(nodes), slurm_id, 42))
        env.update(LSB_JOBNAME=meta["name"], LSB_QUEUE=meta["queue"], LS_SUBCWD=meta["cwd"])
        env["PATH"] = f"{BIN / 'lsf'}:{BIN / 'site'}:{env.get('PATH', '/usr/bin:/bin')}"
        os.chdir(meta["cwd"])
    env["DASK_HPC_EMU_JOBDIR"] = str(here)
    env["TMPDIR"] = job_tmpdir(env, meta["kind"], slurm_id)
    env = {k: v for k, v in env.items() if not k.startswith("SLURM_")}
    script = here / "script"
    os.execve("/bin/bash", ["bash", str(script)], env)
    return 1


def job_tmpdir(env: dict[str, str], kind: str, jobid: str) -> str:
    """The job's own TMPDIR, made as PBS Pro (``pbs.<jobid>``) and LSF (``<jobid>.tmpdir``)
    make it, in the test's (removed with the test): Open MPI keeps its session directories
    there, as on those systems, and not beside another job's."""
    base = env.get(TEST_TMP_VAR) or tempfile.gettempdir()
    path = Path(base) / (f"pbs.{jobid}" if kind == "pbs" else f"{jobid}.tmpdir")
    path.mkdir(mode=0o700)
    return str(path)


COMMANDS = {
    "qsub": qsub, "qstat": qstat, "qdel": qdel, "bsub": bsub, "bjobs": bjobs, "bkill": bkill,
    "mpiexec": pals_mpiexec, "jsrun": jsrun,
}

if __name__ == "__main__":
    if sys.argv[1] == "run-job":
        sys.exit(run_job(sys.argv[2]))
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
