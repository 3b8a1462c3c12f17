"""The definition checker follows Apptainer's grammar: unit cases, and agreement with apptainer."""

from __future__ import annotations

from pathlib import Path

import pytest
from build_support import require_apptainer
from spython.main.parse.parsers import SingularityParser

from dask_hpc.deploy import defcheck

GOOD = """\
# A header comment that mentions bootstrap and from: must not confuse anything
Bootstrap: scratch
Stage: one

%arguments
    greeting=hello

%files
    {{ src }} /data/{{ greeting }}.txt

%labels
    org.example.x 1

%help
    Help text.

%runscript
    exec echo "$@"

Bootstrap: scratch
Stage: two

%files from one
    /data /data

%environment
    export A=1
"""

# (name, text, build args, the message our checker must give)
BAD = [
    ("misspelled section", GOOD.replace("%labels", "%lables"), {"src": "@"}, "invalid section"),
    ("percent line in a body", GOOD.replace("    Help text.", "    Help text.\n    %d done"),
     {"src": "@"}, "invalid section %d"),
    ("unknown header key", GOOD.replace("Stage: one", "Stage: one\nMaintainer: me"),
     {"src": "@"}, "invalid header keyword 'maintainer'"),
    ("header key without value", GOOD.replace("Stage: one", "Stage: one\nFrom"),
     {"src": "@"}, "has no value"),
    ("build arg without default", GOOD, {}, "{{ src }} has no --build-arg"),
    ("unused build arg", GOOD, {"src": "@", "extra": "1"}, "unused build args: extra"),
    ("files from a later stage", GOOD.replace("%files from one", "%files from three"),
     {"src": "@"}, "no earlier stage"),
    ("app section without a name", GOOD.replace("%environment", "%apprun"), {"src": "@"},
     "needs an app name"),
    ("unknown bootstrap agent", GOOD.replace("Bootstrap: scratch\nStage: two",
                                             "Bootstrap: podman\nStage: two"),
     {"src": "@"}, "invalid build source"),
    ("empty file", "# nothing\n", {}, "empty definition"),
]


def _good_args(tmp_path: Path) -> dict[str, str]:
    src = tmp_path / "in.txt"
    src.write_text("data\n")
    return {"src": str(src)}


def test_good_definition_passes(tmp_path: Path) -> None:
    defn = defcheck.parse(GOOD, _good_args(tmp_path))
    assert defn.ok, defn.problems
    assert [s.name for s in defn.stages] == ["one", "two"]
    assert defn.stages[1].section("files").args == "from one"


def test_app_sections_take_a_name() -> None:
    text = GOOD.replace("%environment", "%apprun tool")
    defn = defcheck.parse(text, {"src": "x"})
    assert defn.ok, defn.problems
    assert defn.stages[1].section("apprun").args == "tool"


@pytest.mark.parametrize("name,text,args,message", BAD, ids=[b[0] for b in BAD])
def test_bad_definition_is_rejected(name: str, text: str, args: dict, message: str) -> None:
    problems = defcheck.parse(text, args).problems
    assert any(message in str(p) for p in problems), problems


def test_debootstrap_needs_mirror_and_osversion() -> None:
    text = "Bootstrap: debootstrap\nOSVersion: bookworm\n\n%post\n    true\n"
    assert "needs a mirrorurl" in str(defcheck.parse(text).problems)


def test_line_numbers_point_at_the_problem() -> None:
    text = GOOD.replace("%labels", "%lables")
    (problem,) = defcheck.parse(text, {"src": "x"}).problems
    assert text.splitlines()[problem.line - 1] == "%lables"


def test_spython_cannot_be_the_check() -> None:
    """spython's parser takes a misspelled section as a comment: it would pass broken files."""
    broken = "Bootstrap: docker\nFrom: debian\n\n%psot\n    echo hi\n"
    SingularityParser(broken_file(broken))  # no error raised: the typo goes unnoticed
    assert "invalid section %psot" in str(defcheck.parse(broken).problems)


def broken_file(text: str) -> str:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".def", delete=False) as f:
        f.write(text)
    return f.name


def test_policy_catches_rank_variables_and_missing_sections() -> None:
    text = (Path(__file__).resolve().parents[2] / "containers" / "polaris.def").read_text()
    assert defcheck.check_text(text) == []
    bad = text.replace("export PYTHONNOUSERSITE=1",
                       "export CUDA_VISIBLE_DEVICES=0\n    export PMI_RANK=0")
    messages = " ".join(str(p) for p in defcheck.check_text(bad))
    assert "CUDA_VISIBLE_DEVICES" in messages and "PMI_RANK" in messages
    assert "PYTHONNOUSERSITE=1" in messages
    no_runscript = text.replace('exec start-cluster "$@"', "start-cluster")
    assert "%runscript must be" in str(defcheck.check_text(no_runscript))


@pytest.mark.apptainer
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "name,text,args,message",
    [("good", GOOD, None, ""), *[b for b in BAD if b[0] != "empty file"]],
    ids=["good", *[b[0] for b in BAD if b[0] != "empty file"]],
)
def test_apptainer_agrees(run_cmd, tmp_path: Path, name, text, args, message) -> None:
    """Real `apptainer build` accepts exactly what the checker accepts (scratch builds)."""
    require_apptainer()
    args = _good_args(tmp_path) if args is None or args.get("src") == "@" else args
    args = {**args, **({"extra": "1"} if "extra" in (message or "") else {})}
    ours = defcheck.parse(text, args).problems
    deffile = tmp_path / "t.def"
    deffile.write_text(text)
    argv = ["apptainer", "build", "--notest"]
    for key, value in args.items():
        argv += ["--build-arg", f"{key}={value}"]
    result = run_cmd([*argv, str(tmp_path / "t.sif"), str(deffile)], cwd=tmp_path, timeout=120)
    assert (result.returncode == 0) == (not ours), (
        f"checker: {ours}\napptainer rc={result.returncode}\n{result.stderr[-2000:]}"
    )
