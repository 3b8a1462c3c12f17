"""The declared Dask range admits no release with a known advisory (docs/install.md).

The advisories are deploy/advisories.yaml's entries for distributed (the one place of those
facts, tests/advisory_table.py reads it): both are in the dashboard's worker proxy
(``distributed/http/proxy.py``), which wrote text of the request into HTML. Every other range
is checked against the table by tests/test_advisories.py. Nothing is fetched.
"""

from __future__ import annotations

import pytest
from advisory_table import admits_affected, load_table
from dask_range import distributed_range
from packaging.specifiers import SpecifierSet

ADVISORIES = {e["id"]: e for e in load_table() if e["package"] == "distributed"}


def test_the_table_has_the_dashboard_proxy_advisories() -> None:
    assert {"CVE-2026-23528", "distributed worker-URL message"} <= set(ADVISORIES)


@pytest.mark.parametrize("advisory", sorted(ADVISORIES))
def test_no_release_with_a_known_advisory_is_in_the_range(advisory: str) -> None:
    declared = SpecifierSet(distributed_range())
    hit = admits_affected(declared, ADVISORIES[advisory]["affected"])
    assert hit is None, f"distributed{declared} admits {hit} ({advisory})"


def test_the_installed_dask_is_in_the_range() -> None:
    import dask
    import distributed

    declared = SpecifierSet(distributed_range())
    assert distributed.__version__ in declared and dask.__version__ in declared
