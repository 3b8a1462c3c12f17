"""The declared Dask range admits no release with a known advisory (docs/install.md).

Both advisories are in the dashboard's worker proxy (``distributed/http/proxy.py``), which
writes text of the request into HTML: read from each release's wheel, the releases that leave
one of the two messages unescaped are listed here. Nothing is fetched: a new advisory is one
more entry.
"""

from __future__ import annotations

import pytest
from dask_range import distributed_range
from packaging.specifiers import SpecifierSet

# The releases on PyPI with each advisory, from 2025.1.0 on.
EARLY = ["2025.1.0", "2025.2.0", "2025.3.0", "2025.3.1", "2025.4.0", "2025.4.1", "2025.5.0",
         "2025.5.1", "2025.7.0", "2025.9.0", "2025.9.1"]
ADVISORIES = {
    # CVE-2026-23528 (GHSA-c336-7962-wfj2): "Worker <...> does not exist" unescaped
    "CVE-2026-23528": EARLY,
    # the proxy without jupyter-server-proxy: "Try navigating to <a href=...>" unescaped
    "worker-URL message": [*EARLY, "2025.9.2", "2025.10.0", "2025.11.0", "2025.12.0",
                           "2026.1.0", "2026.1.1", "2026.1.2", "2026.3.0", "2026.6.0",
                           "2026.7.0"],
}


@pytest.mark.parametrize("advisory", sorted(ADVISORIES))
def test_no_release_with_a_known_advisory_is_in_the_range(advisory: str) -> None:
    declared = SpecifierSet(distributed_range())
    admitted = [v for v in ADVISORIES[advisory] if v in declared]
    assert not admitted, f"distributed{declared} admits {admitted} ({advisory})"


def test_the_installed_dask_is_in_the_range() -> None:
    import dask
    import distributed

    declared = SpecifierSet(distributed_range())
    assert distributed.__version__ in declared and dask.__version__ in declared
