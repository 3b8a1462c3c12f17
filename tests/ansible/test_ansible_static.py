"""Static checks of ansible/: ansible-lint (production profile), a syntax check, and the rule
that booleans and integers reach tasks only normalised (a string "false" is true in Jinja)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from ansible_support import (
    ANSIBLE_DIR,
    CACHE,
    COLLECTIONS,
    CORES,
    DEEPOPS_CFG,
    REPO,
    SITE,
    ansible_env,
    require_setup,
)

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


def test_integers_are_never_compared_in_templates() -> None:
    """A normalised integer is text under ansible-core 2.17 and 2.18 ("{{ x | int }}" in a
    variable comes back as a string there): no expression compares one; the ranges are checked
    in filter_plugins/dask_hpc_checks.py."""
    options = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())["argument_specs"][
        "main"
    ]["options"]
    integers = [f"_{name}" for name, o in options.items() if o["type"] == "int"]
    texts = [(p, p.read_text()) for p in [*ROLE.rglob("*.yml"), *ROLE.rglob("*.j2")]]
    compared = [
        f"{path.relative_to(ROLE)}: {line.strip()}"
        for path, text in texts
        for line in text.splitlines()
        for name in integers
        if re.search(rf"(?<!\w){name}(?!\w)", line) and re.search(r"\s(<|>|<=|>=|\+|-)\s", line)
        and not line.lstrip().startswith("#")
    ]
    assert compared == []


def test_wheel_build_is_cached_and_reproducible() -> None:
    """files/build_wheel.py (run by the role on the controller): a wheel from this checkout, the
    same file again without a rebuild, the same bytes from a second cache, where three runs
    side by side build it once (the others wait for it); a directory that is not a checkout is
    refused in one line."""
    script = ROLE / "files/build_wheel.py"
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:

        def start(cache: str, checkout: Path = REPO) -> subprocess.Popen[str]:
            return subprocess.Popen(
                [sys.executable, str(script), str(checkout), f"{tmp}/{cache}"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip

        def result(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
            out, err = proc.communicate(timeout=240)
            return proc.returncode, out, err

        first = result(start("a"))
        again = result(start("a"))
        side_by_side = [result(p) for p in [start("b") for _ in range(3)]]
        for code, _, err in (first, again, *side_by_side):
            assert code == 0, err
        a, b = json.loads(first[1]), json.loads(again[1])
        others = [json.loads(out) for _, out, _ in side_by_side]
        assert (a["built"], b["built"]) == (True, False)
        assert sorted(o["built"] for o in others) == [False, False, True]
        assert a["wheel"] == b["wheel"] and Path(a["wheel"]).name.startswith("dask_hpc-")
        assert len({o["wheel"] for o in others}) == 1
        assert Path(a["wheel"]).read_bytes() == Path(others[0]["wheel"]).read_bytes()
        code, _, err = result(start("c", Path(tmp)))
        assert code == 1
        assert err.count("\n") == 1 and "is not a dask-hpc checkout" in err


# ansible/README.md's commands, as written: from this checkout, and from a DeepOps checkout.
README_CHECKOUT = "ansible-playbook -i ansible/inventory/example ansible/site.yml --list-hosts"
README_DEEPOPS = "ansible-playbook -l slurm-cluster /path/to/dask-hpc/ansible/site.yml --list-hosts"


@pytest.mark.parametrize("core", sorted(CORES))
@pytest.mark.parametrize("where", ["checkout", "deepops"])
def test_readme_commands_find_the_example_hosts_without_warnings(
    core: str, where: str, tmp_path: Path
) -> None:
    """The README's commands run as written (from this checkout with its ansible.cfg; from a
    DeepOps checkout with DeepOps' ansible.cfg and config/inventory, the example copied there)
    under DeepOps' ansible-core 2.17 and the newest: the example's three hosts, no warning (a
    *.ini inventory inside a directory, which 2.17 skips, printed "Unable to parse" and "no hosts
    matched" and exited 0; DeepOps' dashed group names warned without force_valid_group_names)."""
    require_setup()
    readme = (ANSIBLE_DIR / "README.md").read_text()
    command = README_CHECKOUT if where == "checkout" else README_DEEPOPS
    assert command in readme
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["HOME"] = str(tmp_path)  # no ~/.ansible.cfg
    if CORES[core] is not None:
        env["PATH"] = f"{CORES[core]}{os.pathsep}{env['PATH']}"
    cwd = REPO
    if where == "deepops":
        cwd = tmp_path / "deepops"
        (cwd / "config").mkdir(parents=True)
        settings = {k: v.format(workdir=tmp_path) for k, v in DEEPOPS_CFG.items()}
        (cwd / "ansible.cfg").write_text(
            "[defaults]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items())
        )
        shutil.copyfile(ANSIBLE_DIR / "inventory/example/hosts", cwd / "config/inventory")
        command = command.replace("/path/to/dask-hpc", str(REPO))
    proc = subprocess.run(
        shlex.split(command), cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    hosts = re.search(r"hosts \(3\):\n((?:\s+\S+\n){3})", proc.stdout)
    assert hosts and sorted(hosts.group(1).split()) == ["gpu01", "gpu02", "login01"], output
    assert "WARNING" not in output, output


def test_deepops_pin_is_ansible_core_2_17() -> None:
    """The second ansible-core the tests run is the one DeepOps' Ansible 10.7.0 brings."""
    require_setup()
    bindir = CORES["2.17"]
    assert bindir is not None
    version = subprocess.run(
        [str(bindir / "ansible-playbook"), "--version"], capture_output=True, text=True,
        check=True, timeout=60,
    ).stdout  # fmt: skip
    assert version.startswith("ansible-playbook [core 2.17."), version


def test_min_ansible_version_is_the_oldest_tested() -> None:
    """meta/main.yml's min_ansible_version names DeepOps' pin, the oldest ansible-core tested."""
    meta = yaml.safe_load((ROLE / "meta/main.yml").read_text())
    assert meta["galaxy_info"]["min_ansible_version"] == "2.17"
