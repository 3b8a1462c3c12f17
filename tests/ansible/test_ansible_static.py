"""Static checks of ansible/: ansible-lint (production profile), a syntax check, and the rule
that booleans and integers reach tasks only normalised (a string "false" is true in Jinja)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from ansible_support import ANSIBLE_DIR, CACHE, COLLECTIONS, REPO, SITE, ansible_env, require_setup

pytestmark = [pytest.mark.ansible, pytest.mark.timeout(300)]

ROLE = ANSIBLE_DIR / "roles/dask_hpc"


def test_ansible_lint_production_profile() -> None:
    """ansible-lint passes with the production profile."""
    require_setup()
    env = ansible_env(CACHE)
    env.pop("ANSIBLE_CONFIG")
    proc = subprocess.run(
        ["ansible-lint", "--nocolor", "--profile", "production", "--offline"],
        cwd=ANSIBLE_DIR,
        env={**env, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "Profile 'production' was required, and it passed" in output, output


def test_site_playbook_syntax_check() -> None:
    """ansible-playbook --syntax-check accepts site.yml with the example inventory."""
    require_setup()
    proc = subprocess.run(
        [
            "ansible-playbook",
            "--syntax-check",
            "-i",
            str(ANSIBLE_DIR / "inventory/example"),
            str(SITE),
        ],
        env=ansible_env(CACHE),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "playbook: " in proc.stdout


def test_defaults_match_the_argument_specs() -> None:
    """Every variable has a default and a declared type, and nothing else is declared."""
    spec = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    assert set(options) == set(defaults)
    assert all("type" in o and o.get("description") for o in options.values())


JINJA = re.compile(r"{{(.*?)}}|{%(.*?)%}", re.S)
BARE_EXPRESSIONS = ("when", "that", "changed_when", "failed_when", "until")


def expressions(node: object, key: str = "") -> list[str]:
    """The Jinja expressions in a parsed task file: conditionals whole, {{ }} and {% %} in the
    other strings (message text around them does not count)."""
    if isinstance(node, dict):
        return [e for k, v in node.items() for e in expressions(v, str(k))]
    if isinstance(node, list):
        return [e for v in node for e in expressions(v, key)]
    if isinstance(node, str):
        if key in BARE_EXPRESSIONS:
            return [node]
        return ["".join(m) for m in JINJA.findall(node)]
    return []


def test_booleans_and_integers_are_used_normalised() -> None:
    """A bool or int variable reaches tasks, templates and handlers only as its normalised
    _dask_hpc_* name from vars/main.yml (-e dask_hpc_wrapper=false is the string "false", which
    a conditional would take for true)."""
    options = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())["argument_specs"][
        "main"
    ]["options"]
    typed = sorted(name for name, o in options.items() if o["type"] in ("bool", "int"))
    normalised = (ROLE / "vars/main.yml").read_text()
    for name in typed:
        assert re.search(rf"^_{name}: ", normalised, re.M), f"no normalised _{name}"
    found = {}
    for path in [*ROLE.glob("tasks/*.yml"), *ROLE.glob("handlers/*.yml")]:
        found[path] = expressions(yaml.safe_load(path.read_text()))
    for path in ROLE.rglob("*.j2"):
        found[path] = ["".join(m) for m in JINJA.findall(path.read_text())]
    assert sum(len(e) for e in found.values()) > 100  # the parsing found the expressions
    used = [
        f"{path.relative_to(ROLE)}: {name} in {expr.strip()!r}"
        for path, exprs in found.items()
        for expr in exprs
        for name in typed
        if re.search(rf"(?<!\w){name}(?!\w)", expr)
    ]
    assert used == []


def test_wheel_build_is_cached_and_reproducible() -> None:
    """files/build_wheel.py (run by the role on the controller): a wheel from this checkout, the
    same file again without a rebuild, the same bytes from a second cache; a directory that is not
    a checkout is refused in one line."""
    script = ROLE / "files/build_wheel.py"
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:

        def build(cache: str, checkout: Path = REPO) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, str(script), str(checkout), f"{tmp}/{cache}"],
                capture_output=True, text=True, timeout=240, check=False,
            )  # fmt: skip

        first, again, other = build("a"), build("a"), build("b")
        for proc in (first, again, other):
            assert proc.returncode == 0, proc.stderr
        a, b, c = (json.loads(p.stdout) for p in (first, again, other))
        assert (a["built"], b["built"], c["built"]) == (True, False, True)
        assert a["wheel"] == b["wheel"] and Path(a["wheel"]).name.startswith("dask_hpc-")
        assert Path(a["wheel"]).read_bytes() == Path(c["wheel"]).read_bytes()
        refused = build("c", Path(tmp))
        assert refused.returncode == 1
        assert refused.stderr.count("\n") == 1 and "is not a dask-hpc checkout" in refused.stderr
