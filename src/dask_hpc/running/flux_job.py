"""Under Flux: a lost node other than rank 0's does not end the job.

Flux ends a job when it loses the job shell of any of its nodes (every shell is "critical"),
whatever ``-o exit-timeout`` says: measured on flux-core 0.88, a broker killed under a
``flux run -o exit-timeout=none`` job raised ``node failure on vm (rank 2)``, severity 0, and
every rank was terminated. Flux's job-exec service lets a job's owner name its critical nodes
(``job-exec.critical-ranks``, the request Flux's own nested instances send at start); rank 0
names its own node, where the scheduler and COMMAND run: losing any other is then a non-fatal
exception (severity 2), and Dask recomputes what the node held. With ``--abort-on-node-loss``
nothing is sent (Flux's default stays).

The request goes through ``flux python``: Flux's bindings are built for the Python that Flux
was built with, which need not be this one, and ``flux`` sets up their path for its child
only; the working directory is off that Python's ``sys.path`` (``import_path``'s rule). Where
``flux`` is not on PATH (a rank inside a container without it) it cannot be sent, and rank 0
says so.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping

from ..errors import say

# Flux's own t/t2400-job-exec-test.t sends it the same way. ``python -c`` puts the working
# directory (the job's, often one its group can write) first on sys.path: it is dropped before
# anything is imported, as import_path.BOOTSTRAP does (a flux.py planted there never runs).
_REQUEST = (
    'import sys; getattr(sys.flags, "safe_path", 0) or sys.path.pop(0); '
    "import flux; from flux.job import JobID; "
    "flux.Flux().rpc('job-exec.critical-ranks', "
    "{'id': JobID(sys.argv[1]), 'ranks': sys.argv[2]}).get()"
)
TIMEOUT = 30.0


def keep_on_node_loss(env: Mapping[str, str], node: int | None) -> subprocess.Popen[bytes] | None:
    """Start the request that makes ``node`` (rank 0's) this job's only critical one; None
    (with a warning) where it cannot be sent."""
    job = env.get("FLUX_JOB_ID")
    flux = shutil.which("flux", path=env.get("PATH"))
    if not job:
        return None
    if flux is None:
        say(
            "warning: flux is not on PATH here (a container?): a lost node ends this Flux job; "
            "run start-cluster where flux is on PATH to keep the job when a node is lost"
        )
        return None
    return subprocess.Popen(
        [flux, "python", "-c", _REQUEST, job, str(node or 0)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def finish(request: subprocess.Popen[bytes] | None) -> None:
    """Wait for the request (started with the cluster, done long before it is ready); a
    warning if Flux refused it."""
    if request is None:
        return
    try:
        _, err = request.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        request.kill()
        request.communicate()
        say(f"warning: Flux did not answer within {TIMEOUT:g} s: a lost node ends this job")
        return
    if request.returncode:
        lines = err.decode(errors="replace").strip().splitlines()
        said = lines[-1] if lines else f"exit status {request.returncode}"
        say(f"warning: Flux refused to keep this job on node loss ({said}): a lost node ends it")
