"""No range the repository declares admits a release with a known advisory.

The advisories are deploy/advisories.yaml (read by tests/advisory_table.py, which also finds
every declaration: pyproject.toml, constraints.txt, the PyPI files of spack/envs, the pins of
tests/setup, ansible/ and containers/, the Spack environments and recipes). Nothing is fetched.
"""

from __future__ import annotations

import datetime

import pytest
from advisory_table import (
    ROOT,
    TABLE,
    Declared,
    admits_affected,
    declared,
    excused,
    load_table,
    lower_bound,
    pins,
    spack_spec,
)
from packaging.specifiers import SpecifierSet

ENTRIES = load_table()
NAMES = {e["package"] for e in ENTRIES}
#: What the images' Spack stack builds of the table: spack/common.yaml must require each.
SPACK_STACK = ("tornado", "bokeh", "cryptography", "distributed")


def _problems(decls: list[Declared]) -> list[str]:
    problems = []
    for decl in decls:
        if lower_bound(decl.spec) is None:
            problems.append(f"{decl.where}: {decl.package} is unbounded below")
            continue
        for entry in (e for e in ENTRIES if e["package"] == decl.package):
            hit = admits_affected(decl.spec, entry["affected"])
            if hit is not None and not excused(entry, decl):
                problems.append(
                    f"{decl.where}: {decl.package}{decl.spec} admits {hit} ({entry['id']}, "
                    f"fixed in {entry['fixed']}; {TABLE.relative_to(ROOT)})"
                )
    return problems


def test_every_declared_range_excludes_every_advisory() -> None:
    decls = declared(NAMES)
    assert decls, "no declaration of a package of the table was found"
    problems = _problems(decls)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("package", sorted(n for n in NAMES if n not in {"python", "distributed"}))
def test_each_package_of_the_table_has_a_floor_in_pyproject(package: str) -> None:
    """What a dependency of ours brings and we expose (tornado: Dask's HTTP server; the
    jupyter extra's server) is declared by us, with its floor, not left to the dependency."""
    found = [d for d in declared({package}) if d.where.startswith("pyproject.toml")]
    assert found, f"pyproject.toml declares no {package} (floor: {TABLE.relative_to(ROOT)})"


@pytest.mark.parametrize("package", SPACK_STACK)
def test_spack_common_requires_the_stack_packages(package: str) -> None:
    found = [d for d in declared({package}) if d.where.startswith("spack/common.yaml")]
    assert found and all(lower_bound(d.spec) for d in found), (
        f"spack/common.yaml: no packages:py-{package}:require with a lower bound"
    )


def test_the_table_is_complete_and_dated() -> None:
    for entry in ENTRIES:
        assert isinstance(entry["read"], datetime.date), entry["id"]
        source = str(entry["source"])
        assert source.startswith("https://") or (ROOT / source).is_file(), entry["id"]
        if "excused" in entry:
            assert entry["excused"].get("why"), f"{entry['id']}: an excuse says why"


@pytest.mark.parametrize(
    ("spec", "affected", "admits"),
    [
        (">=6.5.10", ["<6.6"], True),
        (">=6.6", ["<6.6"], False),
        (">=3.1,<3.10", ["<3.8.2"], True),
        (">=3.8.2,<3.10", ["<3.8.2"], False),
        (">=41", [">=44.0.0,<50.0.0"], True),
        (">=41,<44", [">=44.0.0,<50.0.0"], False),
        (">=50", [">=44.0.0,<50.0.0"], False),
        (">4.1.2", ["<3.2.4", ">=4.0.0,<4.2.0"], True),
        ("==4.2.0", ["<3.2.4", ">=4.0.0,<4.2.0"], False),
        ("==26.10.*", ["<26.10.1"], True),
        ("<7", ["<6.6"], True),  # unbounded below
        ("", ["<6.6"], True),
    ],
)
def test_the_overlap_check(spec: str, affected: list[str], admits: bool) -> None:
    hit = admits_affected(SpecifierSet(spec), [SpecifierSet(a) for a in affected])
    assert (hit is not None) is admits


@pytest.mark.parametrize(
    ("spack", "pep440"),
    [
        ("@3.8.2:3.9", ">=3.8.2,<3.10"),
        ("@6.6:", ">=6.6"),
        ("@=6.6.1", "==6.6.1"),
        ("@2026.7.1", "==2026.7.1.*"),
        ("@:3.9", "<3.10"),
        ("", ""),
    ],
)
def test_spack_versions_read_as_pep440(spack: str, pep440: str) -> None:
    assert spack_spec(spack) == SpecifierSet(pep440)


def test_an_unbounded_or_affected_declaration_is_found(tmp_path) -> None:
    """The scan itself: a copy of the repository's layout with a bare and an affected pin."""
    (tmp_path / "tests" / "setup").mkdir(parents=True)
    (tmp_path / "tests" / "setup" / "x.sh").write_text(
        "pip install -q tornado 'bokeh==3.1.0'\nuv_install \"$venv/bin/python\" -q cryptography\n"
        "# uv_install PYTHON ARG...: PYTHON -m pip install tornado, in a comment\n"
    )
    (tmp_path / "ansible").mkdir()
    (tmp_path / "containers").mkdir()
    decls = pins({"tornado", "bokeh", "cryptography"}, tmp_path)
    problems = _problems(decls)
    assert any("tornado is unbounded below" in p for p in problems), problems
    assert any("bokeh==3.1.0 admits" in p for p in problems), problems
    assert any("x.sh:2: cryptography is unbounded below" in p for p in problems), problems
    assert not any("x.sh:3" in p for p in problems), problems  # a comment declares nothing
