"""Every command the documentation shows is run, or dry-run where it cannot run here
(docs/*.md and containers/README.md; the README's commands are run by tests/test_docs.py and
tests/build/test_readme_install.py). How each program's commands are checked:
tests/doc_commands.py. A command whose program has no checker fails: add one."""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path

import pytest
from doc_checkers import CHECKERS
from doc_commands import REPO, env_prefix, page_commands, prepare, split_chain

sys.path.insert(0, str(REPO / "docs" / "_ext"))
from dask_hpc_docs import run_documented  # noqa: E402 - the docs build's own runner

PAGES = [*sorted((REPO / "docs").glob("*.md")), REPO / "containers" / "README.md"]


def check_page(page: Path, work: Path) -> list[str]:
    """Each command's line and how it was checked; an AssertionError names every failure."""
    run = prepare(work)
    done, failed = [], []
    for command in page_commands(page):
        shown = page.relative_to(REPO) if page.is_relative_to(REPO) else page.name
        where = f"{shown}:{command.line}: {command.text}"
        try:
            if command.built:
                output = run_documented(command.text, command.env)
                if command.file:
                    run.files[command.file] = output
                done.append(f"{where}: ran (the docs build runs it too)")
                continue
            for argv in split_chain(command.text):
                env, argv = env_prefix(argv)
                command.env = env
                checker = CHECKERS.get(argv[0])
                assert checker, f"no checker for {argv[0]!r} (tests/doc_checkers.py)"
                done.append(f"{where}: {checker(argv, command, run)}")
        except (AssertionError, RuntimeError) as error:
            failed.append(f"{where}\n    {error}")
    assert not failed, "\n".join(failed)
    return done


@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_command_of_the_page_runs_or_dry_runs(page: Path, tmp_path: Path) -> None:
    checked = check_page(page, tmp_path)
    print("\n".join(checked))  # -s shows how each command was checked


def test_the_launcher_lines_start_cluster_refuses_are_caught(tmp_path: Path) -> None:
    """The issue's lines: one rank with one CPU starting 8 workers, and GPU workers in a job
    that asked for no GPU, are refused by the dry run as start-cluster refuses them."""
    page = tmp_path / "page.md"
    page.write_text(
        "## NVIDIA DeepOps\n\n```bash\nsrun --ntasks-per-node=1 start-cluster gpu 8 -- python "
        "job.py\nsrun --ntasks-per-node=1 --cpus-per-task=64 start-cluster gpu 8 -- python "
        "job.py\nsbatch -N 2 --gres=gpu:8 --wrap 'srun -N 2 --ntasks-per-node 8 -c 8 "
        "start-cluster gpu 8 -- python job.py'\n```\n"
    )
    with pytest.raises(AssertionError) as error:
        check_page(page, tmp_path / "work")
    lines = [line.strip() for line in error.value.args[0].splitlines()]
    assert "the launcher gave this rank 1 CPU(s) (0) but it starts 8 workers" in lines[1]
    assert "no nvidia GPU was found" in lines[3] or "no GPU was found" in lines[3]
    # the third, with --gres and 8 CPUs per rank, plans
    assert [line.split(":")[1] for line in lines if line.startswith("page.md:")] == ["4", "5"]


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)


def settle(call: ast.Call) -> None:
    """An ``HPCCluster(...)`` of a page, dry: its settings checked and its job script rendered
    (what ``hpc-cluster script`` does), nothing submitted."""
    from dask_hpc import HPCCluster
    from dask_hpc.elastic.jobqueue_args import translate

    args = [ast.literal_eval(a) for a in call.args]
    kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
    bound = inspect.signature(HPCCluster.__init__).bind(None, *args, **kwargs).arguments
    bound.pop("self")
    jobqueue = bound.pop("jobqueue", {})
    for key in ("jobs", "name", "silence_logs", "asynchronous", "loop", "quiet"):
        bound.pop(key, None)
    probe = HPCCluster.__new__(HPCCluster)
    HPCCluster._settle(probe, **translate(jobqueue, bound), check_commands=False)
    probe.job_script()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_python_block_compiles_and_its_clusters_settle(page: Path, tmp_path) -> None:
    """Python on a page: it compiles, and each HPCCluster it makes is settled dry (a real one
    per pattern runs in tests/elastic: the quick start, pools, attach, jobqueue's calls)."""
    import dask.config

    for block in python_blocks(page):
        tree = ast.parse(block)
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Name) and n.func.id == "HPCCluster"]
        with dask.config.set({"hpc.scheduler-directory": str(tmp_path)}):
            for call in calls:
                settle(call)


def test_the_help_examples_run_or_dry_run(tmp_path: Path) -> None:
    """`start-cluster --help`'s examples (docs/cli.md shows them), as the pages' commands."""
    from dask_hpc.cli import EPILOG

    examples = EPILOG.split("examples:\n", 1)[1]
    page = tmp_path / "help.md"
    page.write_text(f"## start-cluster --help\n\n```bash\n{examples}```\n")
    checked = check_page(page, tmp_path / "work")
    assert len(checked) == 3 and all("planned under" in line for line in checked), checked
