"""The figures the README and the docs give for the test suite each come from one place: the
budget from `.ci/run`'s ``BUDGET``, the slow tests' times from ``tests/slow_tests.py``, the
pytest-xdist workers from ``pyproject.toml``. Any other figure of the suite's time or size
stands in docs/install.md's test-suite section as a dated measurement ("- measured
YYYY-MM-DD"), and the README repeats none (issue 47)."""

from __future__ import annotations

import re
import subprocess

import tomllib
from slow_tests import SLOW, SLOW_FIXTURES, SLOW_SECONDS
from support import REPO

PAGES = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "containers" / "README.md",
    REPO / "ansible" / "README.md",
    REPO / "spack" / "README.md",
]
INSTALL = REPO / "docs" / "install.md"
MINUTES = re.compile(r"(\d+)\s*(?:minutes?|min)\b")
SECONDS = re.compile(r"(\d+)\s*(?:seconds?|s)\b")
# A figure of the suite's time or size: minutes, or a count of tests.
FIGURE = re.compile(r"\b\d[\d,]*\s*(?:minutes?|min|tests?|passed)\b")
MEASURED = re.compile(r"^- measured \d{4}-\d\d-\d\d \(")
NUMBER = re.compile(r"\d[\d,.]*\d|\d")


def ci_budget() -> int:
    """`.ci/run`'s budget, in seconds (its default; ``DASK_HPC_CI_BUDGET`` overrides it)."""
    text = (REPO / ".ci" / "run").read_text()
    found = re.findall(r"^BUDGET=\$\{DASK_HPC_CI_BUDGET:-(\d+)\}$", text, re.M)
    assert len(found) == 1, ".ci/run: not one BUDGET=${DASK_HPC_CI_BUDGET:-SECONDS} line"
    return int(found[0])


def passages(text: str) -> list[str]:
    """A page's prose, code blocks left out: each sentence, and each list item whole, on one
    line."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    found = []
    for paragraph in re.split(r"\n\s*\n", text):
        for item in re.split(r"\n(?=- )", paragraph.strip()):
            line = " ".join(item.split())
            if item.startswith("- "):
                found.append(line)
            else:
                found += re.split(r"(?<=\.)\s+(?=[A-Z`])", line)
    return [p for p in found if p]


def about_the_budget(sentence: str) -> bool:
    if "`BUDGET`" in sentence or "DASK_HPC_CI_BUDGET" in sentence:
        return True
    ci = re.search(r"\bCI\b|\.ci/run", sentence)
    return bool(ci and re.search(r"\bbudget\b", sentence, re.I))


def suite_section() -> str:
    """docs/install.md's "The test suite", its subsections included."""
    text = INSTALL.read_text()
    return text.split("\n## The test suite\n", 1)[1].split("\n## ", 1)[0]


def slow_items() -> dict[str, str]:
    """The slow list's items in docs/install.md (what each names -> its text after the name),
    for each test and session fixture of tests/slow_tests.py."""
    items = {p for p in passages(suite_section()) if p.startswith("- ")}
    names = {test_id.split("::")[1]: f"- `{test_id.split('::')[1]}`: " for test_id in SLOW}
    names |= {f: f"- every test that uses `{f}` (tests/{where}/): " for where, f in SLOW_FIXTURES}
    found = {}
    for name, head in names.items():
        matching = [item[len(head) :] for item in items if item.startswith(head)]
        assert len(matching) == 1, f"docs/install.md: not one slow-list item {head!r}"
        found[name] = matching[0]
    return found


def test_every_budget_the_pages_give_is_ci_runs() -> None:
    budget = ci_budget()
    assert budget % 60 == 0, f".ci/run: BUDGET={budget} is not whole minutes"
    stated = []
    for page in PAGES:
        for sentence in filter(about_the_budget, passages(page.read_text())):
            where = f"{page.relative_to(REPO)}: {sentence}"
            minutes = [int(m) for m in MINUTES.findall(sentence)]
            seconds = [int(s) for s in SECONDS.findall(sentence)]
            assert all(m == budget // 60 for m in minutes), f"{where}\n  .ci/run: {budget} s"
            assert all(s == budget for s in seconds), f"{where}\n  .ci/run: {budget} s"
            stated += [(page, m) for m in minutes]
    assert (INSTALL, budget // 60) in stated, "docs/install.md does not state .ci/run's budget"


def test_the_readme_gives_no_figure_of_the_suite_and_links_to_the_one_place() -> None:
    text = (REPO / "README.md").read_text()
    intro = text.split("```\n\n", 1)[1].split("\n## ", 1)[0]
    assert not FIGURE.findall(intro), f"README.md's suite paragraph: {FIGURE.findall(intro)}"
    assert "(docs/install.md#the-test-suite)" in intro
    if "over a minute" in intro:
        assert SLOW_SECONDS == 60.0, "README.md: 'over a minute' is not tests/slow_tests.py's"


def test_the_suite_sections_figures_are_the_budget_dated_measurements_or_the_slow_list() -> None:
    slow = set(slow_items().values())
    undated = [
        p for p in passages(suite_section())
        if FIGURE.search(p) and not about_the_budget(p) and not MEASURED.match(p)
        and p.split(": ", 1)[-1] not in slow
    ]  # fmt: skip
    assert not undated, "docs/install.md, figures neither dated nor checked:\n" + "\n".join(undated)
    assert sum(bool(MEASURED.match(p)) for p in passages(suite_section())) >= 1
    if "over a minute" in suite_section():
        assert SLOW_SECONDS == 60.0, "docs/install.md: 'over a minute' is not slow_tests.py's"


def test_the_slow_lists_times_are_slow_tests_pys() -> None:
    reasons = {test_id.split("::")[1]: why for test_id, why in SLOW.items()}
    reasons |= {fixture: why for (_, fixture), why in SLOW_FIXTURES.items()}
    for name, text in slow_items().items():
        shown, source = NUMBER.findall(text), NUMBER.findall(reasons[name])
        assert shown == source, f"docs/install.md, {name}: {shown}; tests/slow_tests.py: {source}"


def test_the_pytest_xdist_workers_the_docs_give_are_pyprojects() -> None:
    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]
    workers = re.search(r"-n (\d+)", options["ini_options"]["addopts"])
    assert workers, "pyproject.toml: no -n N in pytest's addopts"
    stated = re.findall(r"runs in (\d+) pytest-xdist workers \(`-n (\d+)", suite_section())
    assert stated, "docs/install.md: no 'runs in N pytest-xdist workers (`-n N'"
    assert {n for pair in stated for n in pair} == {workers.group(1)}, (stated, workers.group(1))


def test_the_passages_are_cut_at_sentences_and_list_items() -> None:
    """The cutting the checks above rely on: a budget in one sentence does not vouch for a
    figure in the next, and a list item is one passage."""
    text = (
        "A run fails past its budget (`BUDGET`, 45 minutes). It took 31 min.\n\n- measured x,\n y"
    )
    assert passages(text) == [
        "A run fails past its budget (`BUDGET`, 45 minutes).",
        "It took 31 min.",
        "- measured x, y",
    ]
    assert [about_the_budget(p) for p in passages(text)] == [True, False, False]


def test_ci_run_prints_the_machines_speed_before_and_after() -> None:
    """`.ci/run` measures the machine before and after the run (its speed changes by as much as
    the suite's does), with Debian's Python both times; the probe prints its one line."""
    ci = (REPO / ".ci" / "run").read_text()
    probes = re.findall(r"^/usr/bin/python3 tests/harness/machine_speed\.py (\w+)", ci, re.M)
    assert probes == ["before", "after"], probes
    proc = subprocess.run(
        ["/usr/bin/python3", str(REPO / "tests/harness/machine_speed.py"), "here"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    line = re.fullmatch(
        r"machine speed \(here\): a 2,000,000-square Python loop (\d+\.\d{3}) CPU s, a Python "
        r"start (\d+\.\d) ms of CPU \(medians of 5\)\n",
        proc.stdout,
    )
    assert line is not None and proc.stderr == "", (proc.stdout, proc.stderr)
    assert float(line[1]) > 0 and float(line[2]) > 0, line.groups()
