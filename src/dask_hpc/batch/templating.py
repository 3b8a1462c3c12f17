"""The one template syntax of our data files: ``@{name}`` (shell's ``$`` and ``@`` stay as is)."""

from __future__ import annotations

import string


class Template(string.Template):
    """``string.Template`` that only knows ``@{name}`` placeholders."""

    delimiter = "@"
    pattern = r"@(?:(?P<escaped>(?!))|(?P<named>(?!))|\{(?P<braced>[a-z_]+)\}|(?P<invalid>(?!)))"
