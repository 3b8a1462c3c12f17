"""Templates of the build tooling, in the runtime's one syntax: ``@{name}``."""

from __future__ import annotations

from importlib import resources

from dask_hpc.batch.templating import Template


def template(name: str) -> Template:
    """The template file ``templates/NAME`` of this package."""
    return Template(resources.files(__package__).joinpath("templates", name).read_text())
