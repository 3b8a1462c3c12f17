"""Two image builds from one checkout at once: wheels-stack builds take turns (they share the
checkout's setuptools build/ and the target's work directory), Spack-stack builds do not wait.

Each build is a real process running dask_hpc_deploy.build.execute on the target's plan, with
its steps replaced by commands that wait on a FIFO, so which step runs when is seen, not timed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.waiting import wait_for

from dask_hpc_deploy.build import checkout_lock

BUILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from dask_hpc_deploy.build import BuildPlan, Step, execute
    from dask_hpc_deploy.targets import load_target

    site, name, repo = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    out = repo / f"{name}.sif"
    step = (
        f"echo {name}-start >> log; read line < fifo-{name}; "
        f"echo {name}-end >> log; echo image > {out}"
    )
    steps = [Step("the image", ["sh", "-c", step])]
    plan = BuildPlan(load_target(site), repo / "x.def", out, steps=steps)
    execute(plan, repo, echo=False)
    """
)


def start_build(repo: Path, site: str, name: str) -> subprocess.Popen[str]:
    """Build ``name`` of ``site``'s target from the checkout ``repo``; its stderr goes to
    repo/NAME.err."""
    os.mkfifo(repo / f"fifo-{name}")
    with (repo / f"{name}.err").open("w") as err:
        return subprocess.Popen(
            [sys.executable, "-c", BUILD, site, name, str(repo)],
            stdout=subprocess.DEVNULL, stderr=err, text=True, start_new_session=True,
        )  # fmt: skip


def wait_for_line(repo: Path, line: str, build: subprocess.Popen[str]) -> None:
    """Until the log has ``line`` (the step writes it before it reads its FIFO)."""
    log = repo / "log"

    def written() -> bool:
        assert build.poll() is None, f"the build exited ({build.returncode}) early"
        return log.exists() and line in log.read_text().split()

    wait_for(written, timeout=30, what=f"{line} in the build log")


def release(repo: Path, name: str) -> None:
    """Let the step of build ``name`` finish (its read of the FIFO returns)."""
    (repo / f"fifo-{name}").write_text("go\n")


def end(*builds: subprocess.Popen[str]) -> None:
    """Kill what is left of each build: its process group (the step's shell too)."""
    for build in builds:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)
        build.wait()


@contextlib.contextmanager
def two_builds(
    repo: Path, first_site: str, second_site: str
) -> Iterator[tuple[subprocess.Popen[str], subprocess.Popen[str]]]:
    """Build "a" of ``first_site`` running its step, then build "b" of ``second_site`` just
    started, from the checkout ``repo``; what is left of both is ended after."""
    builds = [start_build(repo, first_site, "a")]
    try:
        wait_for_line(repo, "a-start", builds[0])
        builds.append(start_build(repo, second_site, "b"))
        yield builds[0], builds[1]
    finally:
        end(*builds)


@pytest.mark.timeout(60)
def test_a_second_local_build_waits_for_the_first_and_says_so(tmp_path: Path) -> None:
    with two_builds(tmp_path, "local", "local") as (first, second):
        err, log = tmp_path / "b.err", tmp_path / "log"
        # The second either says it waits (then blocks on the lock) or runs its step.
        wait_for(lambda: err.read_text() or "b-start" in log.read_text(), 30, what="b's start")
        assert log.read_text().split() == ["a-start"], "the second build ran beside the first"
        waiting = err.read_text()
        assert waiting.startswith("waiting for another image build from this checkout"), waiting
        assert str(checkout_lock(tmp_path)) in waiting
        release(tmp_path, "a")
        assert first.wait(timeout=30) == 0, (tmp_path / "a.err").read_text()
        wait_for_line(tmp_path, "b-start", second)
        release(tmp_path, "b")
        assert second.wait(timeout=30) == 0
        assert log.read_text().split() == ["a-start", "a-end", "b-start", "b-end"]
        for name in ("a", "b"):
            assert (tmp_path / f"{name}.sif.sha256").read_text().endswith(f"  {name}.sif\n")


@pytest.mark.timeout(60)
def test_spack_stack_builds_run_side_by_side(tmp_path: Path) -> None:
    with two_builds(tmp_path, "aurora", "polaris") as (first, second):
        wait_for_line(tmp_path, "b-start", second)  # while the first still runs
        for name, build in (("a", first), ("b", second)):
            release(tmp_path, name)
            assert build.wait(timeout=30) == 0
            assert (tmp_path / f"{name}.err").read_text() == ""
        assert not checkout_lock(tmp_path).exists()
