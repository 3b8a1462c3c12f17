"""The README's elastic-cluster snippet runs as written, on the test Slurm, from a fresh Python
(as a login node's notebook would), and leaves no job behind."""

from __future__ import annotations

import re
import sys

import pytest
from support import REPO

pytestmark = pytest.mark.slurm


def readme_snippet() -> str:
    section = (REPO / "README.md").read_text().split("\n## Elastic clusters\n", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_snippet_runs_and_leaves_no_job(run_cmd, shell_env, elastic_slurm) -> None:
    code = readme_snippet()
    assert "HPCCluster(" in code and "scale(jobs=2)" in code
    code += (
        "client.wait_for_workers(4, timeout=180)\n"
        "print('SUM', client.submit(sum, [1, 2]).result(), cluster.dashboard_link[:4])\n"
        "cluster.close()\n"
    )
    result = run_cmd([sys.executable, "-c", code], env=shell_env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUM 3 http" in result.stdout, result.stdout + result.stderr
    assert elastic_slurm.jobs() == []
