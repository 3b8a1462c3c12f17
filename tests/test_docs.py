"""The documentation: the site builds with no warnings, every link resolves, and every command
of the README's quick start runs, under the launcher it names (PALS and jsrun EMULATED over
real MPI launchers, as everywhere in this suite)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from harness.emulate import emulated_jsrun, emulated_pals
from support import REPO, start_cluster

from dask_hpc.cli import build_parser

PAGES = [
    REPO / "README.md",
    REPO / "CHANGELOG.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "containers" / "README.md",
    REPO / "ansible" / "README.md",
    REPO / "spack" / "README.md",
]
PI = re.compile(r"pi ~= 3\.1\d+ \(error [^)]*\) from \d+ samples on (\d+) worker\(s\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The HTML site, built as CI builds it: warnings are errors, references must resolve."""
    out = tmp_path_factory.mktemp("docs")
    argv = [sys.executable, "-m", "sphinx", "-c", "docs", "-W", "--keep-going", "-n"]
    argv += ["-b", "html", "-q", ".", str(out / "html")]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.strip() == "", done.stderr  # -q: only warnings (errors here) print
    return out / "html"


def test_the_site_builds_with_every_page(site: Path) -> None:
    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    for page in ("docs/index.html", "README.html", "CHANGELOG.html", "ansible/README.html"):
        assert page in pages, sorted(pages)
    for md in (REPO / "docs").glob("*.md"):
        assert f"docs/{md.stem}.html" in pages, md


def test_the_option_table_is_the_parsers(site: Path) -> None:
    """Generated from build_parser: every option of start-cluster, with its help text."""
    html = (site / "docs" / "cli.html").read_text()
    parser = build_parser()
    options = [s for a in parser._actions for s in a.option_strings if s not in ("-h", "--help")]
    assert len(options) > 15
    for option in options:
        assert f"<span class=\"pre\">{option}</span>" in html, option
    assert "seconds to wait for the scheduler and every worker" in html  # --timeout's help
    assert "hpc.death-timeout" in html  # the defaults table from hpc.yaml


def test_the_api_reference_comes_from_the_docstrings(site: Path) -> None:
    html = (site / "docs" / "api.html").read_text()
    assert 'id="dask_hpc.connect"' in html
    assert "No usable scheduler file at that path" in html  # from connect's docstring


def test_the_module_map_lists_every_module(site: Path) -> None:
    html = (site / "docs" / "architecture.html").read_text()
    src = REPO / "src" / "dask_hpc"
    for module in [*src.glob("*.py"), *src.glob("*/*.py")]:  # every subpackage's map too
        if not module.name.startswith("_") or module.name == "__init__.py":
            assert f"<span class=\"pre\">{module.name}</span>" in html, module.name


def relative_links(page: Path) -> list[str]:
    """The Markdown link targets of ``page`` that point into the repository."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # not inside code blocks
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_points_at_a_file(page: Path) -> None:
    """On GitHub as on the site (there Sphinx also checks the headings a link names)."""
    links = relative_links(page)
    missing = [t for t in links if not (page.parent / t.split("#")[0]).exists()]
    assert not missing, f"{page.relative_to(REPO)}: {missing}"


def quick_starts() -> dict[str, list[str]]:
    """The README's quick start: its commands (comments dropped) per ### heading."""
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    found = {}
    for title, body in re.findall(r"\n### ([^\n]+)\n(.*?)(?=\n### |\Z)", section, re.S):
        block = re.search(r"```bash\n(.*?)```", body, re.S)
        lines = block.group(1).splitlines() if block else []
        found[title] = [line for line in lines if line.strip() and not line.startswith("#")]
    return found


def test_the_quick_start_has_one_command_per_batch_system() -> None:
    assert {title: len(commands) for title, commands in quick_starts().items()} == {
        "Local (no batch system)": 1,
        "Slurm": 1,
        "Flux (El Capitan, Tuolumne)": 1,
        "PBS Pro with HPE PALS (Aurora, Polaris)": 1,
        "LSF with jsrun (Summit)": 1,
    }


def _option(argv: list[str], name: str) -> int:
    return int(argv[argv.index(name) + 1])


def _as_run_here(argv: list[str], tmp_path: Path) -> list[str]:
    """The README's command with its launcher as it runs here, and this test's Python."""
    at = argv.index("start-cluster")
    launcher, rest = argv[:at], argv[at + 1 :]
    rest = [sys.executable if word == "python" else word for word in rest]
    if launcher[:1] == ["mpiexec"]:  # PALS: mpiexec -n N --ppn P
        n, ppn = _option(launcher, "-n"), _option(launcher, "--ppn")
        launcher = emulated_pals(tmp_path, nodes=n // ppn, ppn=ppn)
    elif launcher[:1] == ["jsrun"]:  # jsrun -n N -a 1 -c C -r R (R resource sets per node)
        n, per_node = _option(launcher, "-n"), _option(launcher, "-r")
        assert _option(launcher, "-a") == 1
        launcher = emulated_jsrun(tmp_path, nodes=n // per_node, ppn=per_node)
    return [*launcher, *start_cluster(), *rest]


@pytest.mark.parametrize(
    "title, expected_workers",
    [
        ("Local (no batch system)", 2),
        ("Slurm", 4),
        ("Flux (El Capitan, Tuolumne)", 4),
        ("PBS Pro with HPE PALS (Aurora, Polaris)", 4),
        ("LSF with jsrun (Summit)", 4),
    ],
    ids=["local", "slurm", "flux", "pbs-pals-emulated", "lsf-jsrun-emulated"],
)
def test_readme_quick_start_runs(
    title: str,
    expected_workers: int,
    request: pytest.FixtureRequest,
    run_cmd,
    cluster_env,
    tmp_path: Path,
) -> None:
    (command,) = quick_starts()[title]
    env = dict(cluster_env)
    if command.startswith("srun "):
        env.update(request.getfixturevalue("slurm_cluster").env)
    if command.startswith("flux "):
        env.update(request.getfixturevalue("flux_instance").env)
    argv = _as_run_here(shlex.split(command), tmp_path)
    result = run_cmd(argv, env=env, cwd=REPO, timeout=180)
    assert result.returncode == 0, f"{shlex.join(argv)}\n{result.stdout}\n{result.stderr}"
    pi = PI.search(result.stdout)
    assert pi and int(pi.group(1)) == expected_workers, result.stdout
    assert f"Dask cluster ready: {expected_workers} cpu workers" in result.stderr


def test_readme_connect_snippet_runs(run_cmd, cluster_env, tmp_path: Path, wait_for) -> None:
    """The quick start's Python, with the scheduler file of a cluster started without COMMAND."""
    section = (REPO / "README.md").read_text().split("\n## Quick start\n", 1)[1].split("\n## ")[0]
    (snippet,) = re.findall(r"```python\n(.*?)```", section, re.S)
    (path,) = re.findall(r'connect\("([^"]+)"\)', snippet)
    sched = tmp_path / "scheduler.json"
    cluster = subprocess.Popen(
        [*start_cluster(), "cpu", "2", "--scheduler-file", str(sched)],
        env=cluster_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: sched.exists() or cluster.poll() is not None, 60, what="scheduler file")
        job = snippet.replace(path, str(sched))
        job += "print('SUM', client.submit(sum, [1, 2, 3]).result())\nclient.shutdown()\n"
        result = run_cmd([sys.executable, "-c", job], env=cluster_env, timeout=90)
        assert result.returncode == 0, result.stderr
        assert "SUM 6" in result.stdout
        _, err = cluster.communicate(timeout=60)
    finally:
        if cluster.poll() is None:
            cluster.kill()
            cluster.communicate()
    assert cluster.returncode == 0, err


def test_the_changelog_keeps_a_changelog() -> None:
    """Unreleased first, then releases newest first, each a tag's version; Keep a Changelog's
    section names only."""
    text = (REPO / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[([^\]]+)\](.*)$", text, re.M)
    assert releases and releases[0][0] == "Unreleased", releases
    versions = []
    for version, rest in releases[1:]:
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
        assert re.fullmatch(r" - \d{4}-\d{2}-\d{2}", rest), f"{version}{rest}: ' - YYYY-MM-DD'"
        versions.append(tuple(map(int, version.split("."))))
    assert versions == sorted(versions, reverse=True), versions
    kinds = set(re.findall(r"^### (.+)$", text, re.M))
    assert kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, kinds
