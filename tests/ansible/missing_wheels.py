"""List what a wheel directory lacks for a target Python (used by tests/setup/ansible.sh).

`pip download --python-version X` evaluates `python_full_version` markers for the running
interpreter, not for X: cryptography's `typing-extensions; python_full_version < "3.11"` is missed
for 3.10 when pip runs on 3.11. This reads every wheel's Requires-Dist, evaluates the markers for
the target, and prints the requirements no wheel in the directory satisfies by name.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename


def missing(dest: Path, version: str) -> set[str]:
    """Requirements (without extras' markers) that the wheels in dest need for CPython version."""
    env = default_environment()
    env.update(
        python_version=version,
        python_full_version=f"{version}.0",
        implementation_name="cpython",
        platform_python_implementation="CPython",
        sys_platform="linux",
        platform_system="Linux",
        platform_machine="x86_64",
        os_name="posix",
        extra="",
    )
    wheels = list(dest.glob("*.whl"))
    have = {canonicalize_name(parse_wheel_filename(w.name)[0]) for w in wheels}
    need: set[str] = set()
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            for line in z.read(meta).decode().splitlines():
                if not line.startswith("Requires-Dist:"):
                    continue
                req = Requirement(line.split(":", 1)[1].strip())
                if req.marker is None or "extra" in str(req.marker):
                    continue
                if req.marker.evaluate(env) and canonicalize_name(req.name) not in have:
                    need.add(f"{req.name}{req.specifier}")
    return need


if __name__ == "__main__":
    print(" ".join(sorted(missing(Path(sys.argv[1]), sys.argv[2]))))
