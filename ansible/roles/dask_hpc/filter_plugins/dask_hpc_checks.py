"""The dask_hpc role's type checks: what argument_specs accepts but would go wrong.

argument_specs checks that a value can be converted to its declared type but hands the role the
value as given: a YAML number for a mode (3770 is applied as mode 07272), a string for a list
(iterated letter by letter), a list for a string, null. Each problem is one sentence naming the
variable and the fix.

Numbers are compared here, in Python, and never in the role's templates: ansible-core before 2.19
turns every templated variable into text unless it looks like a list, a dict or a boolean, so
``_dask_hpc_nofile: "{{ dask_hpc_nofile | int }}"`` is the string "65536" under ansible-core 2.17
(DeepOps' pin) and ``0 < _dask_hpc_deepops_port`` raised "'<' not supported between instances of
'int' and 'str'" (and "900000" < "1048576" would have compared as text).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

OCTAL_MODE = re.compile(r"^0?[0-7]{3,4}$")
# The integers' ranges: name -> (lowest, highest or None, what the value is).
NUMBERS: dict[str, tuple[int, int | None, str]] = {
    "dask_hpc_deepops_port": (1, 65535, "a port"),
    "dask_hpc_nofile": (1, None, "a limit on open files"),
    "dask_hpc_nofile_hard": (1, None, "a limit on open files"),
    "dask_hpc_somaxconn": (1, None, "a listen backlog"),
    "dask_hpc_max_user_namespaces": (0, None, "a number of user namespaces"),
    "dask_hpc_group_gid": (1, 4294967294, "a group id"),
}


def _show(value: Any) -> str:
    return json.dumps(value, default=str)


def _kind(value: Any) -> str:
    """A YAML reader's name for the value's type (Ansible wraps lists and dicts in its own)."""
    for kind, name in ((bool, "boolean"), (int, "number"), (float, "number"), (str, "string")):
        if isinstance(value, kind):
            return name
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def _mode_problem(name: str, value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str):
        example = str(value) if isinstance(value, int) and not isinstance(value, bool) else "0750"
        why = ""
        if example != "0750":
            why = f": YAML read {value} as a number, which Ansible would apply as mode {value:04o}"
        return f'{name} must be a quoted string of octal digits such as "{example}"{why}.'
    if not OCTAL_MODE.match(value):
        return f'{name} {_show(value)} is not an octal mode: write it like "3770".'
    if int(value, 8) & 0o002:
        return (
            f'{name} "{value}" would make the directory writable by everyone: remove the write '
            f'bit for others (e.g. "{value[:-1]}{int(value[-1]) & 5}").'
        )
    return None


def type_problems(
    values: Mapping[str, Any], spec: Mapping[str, Mapping[str, Any]], nullable: list[str]
) -> list[str]:
    """One sentence per variable whose value would be misread by the role."""
    problems = []
    for name, option in spec.items():
        value, kind = values.get(name), option.get("type", "str")
        if value is None:
            if name not in nullable:
                problems.append(f"{name} is null: give it a value, or leave it out (the default).")
        elif name.endswith("_mode"):
            problem = _mode_problem(name, value)
            if problem:
                problems.append(problem)
        elif kind in ("str", "path") and not isinstance(value, str):
            problems.append(
                f"{name} must be a string (quote it in YAML), not the {_kind(value)} "
                f"{_show(value)}."
            )
        elif kind == "list" and not isinstance(value, (list, tuple)):
            example = _show({name: [value if isinstance(value, str) else "..."]})
            problems.append(
                f"{name} must be a list, e.g. -e '{example}', not the {_kind(value)} "
                f"{_show(value)}."
            )
        elif kind == "list" and not all(isinstance(v, str) for v in value):
            problems.append(f"{name} must be a list of strings (quote each), not {_show(value)}.")
        elif kind == "dict" and not isinstance(value, Mapping):
            problems.append(
                f'{name} must be a mapping, e.g. {{"net.core.netdev_max_backlog": 4096}}, '
                f"not {_show(value)}."
            )
    return problems + number_problems(values)


def _number(value: Any) -> int | None:
    """The integer argument_specs accepted (an int, or a string such as "65536"), else None."""
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def number_problems(values: Mapping[str, Any]) -> list[str]:
    """One sentence per integer outside its range, and a hard limit below the soft one."""
    problems = []
    numbers = {name: _number(values.get(name)) for name in NUMBERS}
    for name, (low, high, what) in NUMBERS.items():
        n = numbers[name]
        if n is None or (low <= n and (high is None or n <= high)):
            continue
        allowed = f"use {low}-{high}" if high is not None else f"use {low} or more"
        problems.append(f"{name} {n} is not {what}: {allowed}.")
    soft, hard = numbers["dask_hpc_nofile"], numbers["dask_hpc_nofile_hard"]
    if soft is not None and hard is not None and hard < soft:
        problems.append(
            f"dask_hpc_nofile_hard ({hard}) is below dask_hpc_nofile ({soft}): raise "
            "dask_hpc_nofile_hard or lower dask_hpc_nofile."
        )
    return problems


class FilterModule:
    """Ansible filter plugin: dask_hpc_type_problems."""

    def filters(self) -> dict[str, Any]:
        return {"dask_hpc_type_problems": type_problems}
