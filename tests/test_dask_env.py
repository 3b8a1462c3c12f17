"""What the cluster hands to Dask in ``DASK_*`` variables, Dask reads back as written.

Dask reads each ``DASK_*`` value as a Python literal. A dashboard token or a directory name
with ``-1in`` in it made every ``import dask`` below the cluster (scheduler, workers, the job)
print ``SyntaxWarning: invalid decimal literal``: a CI run failed on the harness's own random
``TMPDIR`` name so. ``config.env_value`` is the one way a value goes into such a variable.
"""

from __future__ import annotations

import json
import re
import sys
import warnings
from pathlib import Path

import dask.config
from harness.procs import run_cmd
from support import start_cluster

from dask_hpc import config
from dask_hpc.batch.launch import status_from_rank0

MISREAD = (
    "http://127.0.0.1:8787/status?token=0inN3DlCRE76cblfaOpShxmX",  # a token's own characters
    "/tmp/dask-hpc-9if_a1b2c3/ca.pem",  # a mkdtemp name
    "123456",  # a number to Dask
    "True",
)

JOB = """
import json, os, dask.config
keys = ("scheduler-address", "distributed.dashboard.link", "distributed.comm.tls.ca-file")
read = {key: dask.config.get(key) for key in keys}
read["connect"] = os.environ.get("DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT")
print("READ " + json.dumps(read))
"""


def _read_by_dask(value: str) -> object:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return dask.config.interpret_value(value)


def test_plain_text_stays_as_it_is_and_what_dask_would_misread_is_quoted() -> None:
    for plain in ("tls://127.0.0.1:40123", "tcp://[::1]:8786", "/scratch/run_1/ca.pem"):
        assert config.env_value(plain) == plain
    for text in MISREAD:
        value = config.env_value(text)
        assert value != text
        assert _read_by_dask(value) == text


def test_the_exit_status_files_random_part_is_never_read_as_a_number() -> None:
    line = next(x for x in status_from_rank0("true").splitlines() if "mktemp" in x)
    template = line.split('mktemp "$PWD/')[1].split('"')[0]
    assert template.endswith("XXXXXX")
    for random_part in ("1inAbc", "9ifXYZ", "0or123", "123456"):
        path = "/home/u/run/" + template.replace("XXXXXX", random_part)
        assert config.env_value(path) == path, path


def test_a_cluster_in_directories_whose_names_dask_would_misread_reads_them_as_written(
    cluster_env: dict[str, str], tmp_path: Path
) -> None:
    # "-1in": a number followed by a keyword, in the TLS files', local directory's and job's paths
    odd = tmp_path / "run-1in"
    odd.mkdir(mode=0o700)
    (odd / "shared").mkdir(mode=0o700)
    argv = [*start_cluster(), "cpu", "1", "--local-directory", str(odd), "--timeout", "60"]
    argv += ["--scheduler-file", str(odd / "shared" / "job.json")]
    res = run_cmd([*argv, "--", sys.executable, "-c", JOB], timeout=90, env=cluster_env)
    assert res.returncode == 0, res
    assert "SyntaxWarning" not in res.stderr + res.stdout, res.stderr
    read = json.loads(next(x[5:] for x in res.stdout.splitlines() if x.startswith("READ ")))
    assert read["scheduler-address"].startswith("tls://127.0.0.1:")
    assert read["distributed.comm.tls.ca-file"].startswith(f"{odd}/shared/")
    # the cluster's connect timeout (planning.scaling), as its scheduler and workers have it
    assert re.fullmatch(r"\d+s", read["connect"] or ""), read
    # COMMAND's link has no token (its output is a file others may read), read as written
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/status", read["distributed.dashboard.link"])
