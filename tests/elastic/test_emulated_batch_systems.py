"""The EMULATED PBS Pro and LSF commands (tests/harness/batch_emulation.py) over the test
Slurm: the output formats and job environments the elastic cluster relies on."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from harness.batch_emulation import BIN

pytestmark = pytest.mark.slurm

PROBE = """\
echo "PBS_JOBID=${PBS_JOBID:-} LSB_JOBID=${LSB_JOBID:-} NODEFILE=${PBS_NODEFILE:-}"
echo "slurm-vars=$(env | grep -c '^SLURM_' || true) cwd=$(pwd)"
echo "mpiexec=$(command -v mpiexec || true) jsrun=$(command -v jsrun || true)"
"""


def test_pbs_qsub_qstat_qdel_emulated(run_cmd, emulator_env, tmp_path: Path, wait_for) -> None:
    out = tmp_path / "job.out"
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n#PBS -N probe\n#PBS -l select=2\n#PBS -l walltime=00:05:00\n"
        f"#PBS -q debug\n#PBS -o {out}\n#PBS -j oe\n{PROBE}"
    )
    sub = run_cmd(["qsub", str(script)], env=emulator_env, cwd=tmp_path)
    sub.check()
    jobid = sub.stdout.strip()
    assert re.fullmatch(r"\d+\.pbs01", jobid), sub.stdout

    def state() -> dict:
        done = run_cmd(["qstat", "-x", "-f", "-F", "json", jobid], env=emulator_env).check()
        return json.loads(done.stdout)["Jobs"][jobid]

    final = wait_for(lambda: state() if state()["job_state"] == "F" else None, 60,
                     what="the job to finish")
    assert final["Exit_status"] == 0 and final["queue"] == "debug"
    text = out.read_text()
    assert f"PBS_JOBID={jobid}" in text and "slurm-vars=0" in text, text
    assert f"mpiexec={BIN / 'pals' / 'mpiexec'}" in text and f"cwd={Path.home()}" in text
    nodefile = re.search(r"NODEFILE=(\S+)", text).group(1)
    assert len(Path(nodefile).read_text().split()) == 2
    gone = run_cmd(["qstat", jobid], env=emulator_env)  # finished: only with -x
    assert gone.returncode == 35 and "Job has finished" in gone.stderr
    unknown = run_cmd(["qstat", "-x", "-F", "json", "99999.pbs01"], env=emulator_env)
    assert unknown.returncode == 153 and "qstat: Unknown Job Id 99999.pbs01" in unknown.stderr
    refused = run_cmd(["qsub", "-l", "walltime=10:00:00", "-q", "debug", str(script)],
                      env=emulator_env, cwd=tmp_path)
    assert refused.returncode == 188
    assert refused.stderr.strip() == "qsub: Job violates queue and/or server resource limits"
    assert run_cmd(["qsub", "-q", "nope", str(script)], env=emulator_env).returncode == 170

    script.write_text(script.read_text().replace("echo", "sleep 60; echo", 1))
    second = run_cmd(["qsub", str(script)], env=emulator_env, cwd=tmp_path).check().stdout.strip()
    run_cmd(["qdel", second], env=emulator_env).check()
    wait_for(lambda: state_of(run_cmd, emulator_env, second) == "F", 30, what="qdel")
    assert run_cmd(["qdel", "99999.pbs01"], env=emulator_env).returncode == 153


def state_of(run_cmd, env, jobid: str) -> str:
    done = run_cmd(["qstat", "-x", "-f", "-F", "json", jobid], env=env).check()
    return json.loads(done.stdout)["Jobs"][jobid]["job_state"]


def test_lsf_bsub_bjobs_bkill_emulated(run_cmd, emulator_env, tmp_path: Path, wait_for) -> None:
    out = tmp_path / "job.%J.out"
    text = (
        "#!/bin/bash\n#BSUB -J probe\n#BSUB -nnodes 2\n#BSUB -W 0:05\n#BSUB -q batch\n"
        f"#BSUB -o {out}\n{PROBE}"
    )
    sub = run_cmd(["bsub"], env=emulator_env, input=text, cwd=tmp_path)
    sub.check()
    match = re.fullmatch(r"Job <(\d+)> is submitted to queue <batch>\.", sub.stdout.strip())
    assert match, sub.stdout
    jobid = match.group(1)

    def stat() -> str:
        done = run_cmd(["bjobs", "-noheader", "-o", "jobid stat", jobid], env=emulator_env).check()
        return done.stdout.split()[1]

    wait_for(lambda: stat() == "DONE", 60, what="the job to finish")
    log = Path(str(out).replace("%J", jobid)).read_text()
    assert f"LSB_JOBID={jobid}" in log and "slurm-vars=0" in log, log
    assert f"jsrun={BIN / 'lsf' / 'jsrun'}" in log and f"cwd={tmp_path}" in log
    unknown = run_cmd(["bjobs", "-noheader", "-o", "jobid stat", "99999"], env=emulator_env)
    assert unknown.returncode == 255 and "Job <99999> is not found" in unknown.stderr
    refused = run_cmd(["bsub"], env=emulator_env, input=text.replace("-W 0:05", "-W 10:00"))
    assert refused.returncode == 255 and "Job not submitted." in refused.stderr

    again = run_cmd(["bsub"], env=emulator_env, input=text.replace("echo", "sleep 60; echo"),
                    cwd=tmp_path).check()
    second = re.search(r"<(\d+)>", again.stdout).group(1)
    kill = run_cmd(["bkill", second], env=emulator_env).check()
    assert kill.stdout.strip() == f"Job <{second}> is being terminated"
    wait_for(lambda: run_cmd(["bjobs", "-noheader", "-o", "jobid stat", second],
                             env=emulator_env).stdout.split()[1] == "EXIT", 30, what="bkill")
