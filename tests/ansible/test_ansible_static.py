"""Static checks of ansible/: ansible-lint (production profile) and a syntax check."""

from __future__ import annotations

import subprocess

import pytest
from ansible_support import ANSIBLE_DIR, CACHE, COLLECTIONS, SITE, ansible_env, require_setup

pytestmark = [pytest.mark.ansible, pytest.mark.timeout(300)]


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
