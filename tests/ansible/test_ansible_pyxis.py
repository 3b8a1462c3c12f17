"""The role with Pyxis and Enroot (DeepOps today), rendered and run by its own tasks against
this machine: the runtime it decides from Slurm's plugin stack, the wrapper and DeepOps launch
script it writes, the squashfs it places (its sha256, the signature of that sha256 with the site
key, checked with openssl as jobs do) and the squashfs it refuses."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from ansible_support import CACHE, PlaybookRun, require_setup, run_playbook

from dask_hpc.guard import images

pytestmark = [pytest.mark.ansible, pytest.mark.timeout(300)]

HERE = Path(__file__).parent
# DeepOps' pyxis role: {{ slurm_config_dir }}/plugstack.conf.d/pyxis.conf naming the plugin.
PYXIS_LINE = "required /usr/local/lib/slurm/spank_pyxis.so\n"


@pytest.fixture()
def tmp(request: pytest.FixtureRequest) -> Path:
    """A scratch directory inside the test cache (removed afterwards)."""
    d = Path(tempfile.mkdtemp(prefix="pyxis-", dir=CACHE))
    request.addfinalizer(lambda: subprocess.run(["rm", "-rf", "--one-file-system", str(d)]))
    return d


def role_run(tmp: Path, playbook: str, **settings: object) -> PlaybookRun:
    """One of the role's task files (``playbook`` includes it) against this machine as a
    slurm-node host, ``settings`` as extra variables."""
    require_setup()
    variables = tmp / "vars.json"
    variables.write_text(json.dumps({"ansible_python_interpreter": sys.executable, **settings}))
    inventory = tmp / "hosts.ini"
    inventory.write_text("[slurm-node]\nlocalhost ansible_connection=local\n")
    return run_playbook(tmp, inventory, "-e", f"@{variables}", playbook=HERE / playbook)


def failures(run: PlaybookRun) -> list[str]:
    """The msg of every failed task, last one last."""
    return [
        json.loads(line.split("FAILED! => ", 1)[1])["msg"]
        for line in run.output.splitlines()
        if line.startswith("fatal: ") and "FAILED! => " in line
    ]


def slurm_dir(tmp: Path, pyxis: str | None) -> Path:
    """A Slurm configuration directory; with ``pyxis``, plugstack.conf.d/pyxis.conf holds it."""
    conf = tmp / "slurm"
    (conf / "plugstack.conf.d").mkdir(parents=True)
    (conf / "plugstack.conf").write_text(f"include {conf}/plugstack.conf.d/*\n")
    if pyxis is not None:
        (conf / "plugstack.conf.d/pyxis.conf").write_text(pyxis)
    return conf


DECISIONS = {
    # id: (pyxis.conf, settings, runtime, apptainer installed)
    "deepops-python": (PYXIS_LINE, {}, "pyxis", False),
    "deepops-image": (PYXIS_LINE, {"dask_hpc_provider": "image"}, "pyxis", False),
    "apptainer-opt-in": (
        PYXIS_LINE,
        {"dask_hpc_provider": "image", "dask_hpc_container_runtime": "apptainer"},
        "apptainer",
        True,
    ),
    "no-pyxis-image": (None, {"dask_hpc_provider": "image"}, "apptainer", True),
    "no-pyxis-python": (None, {}, "none", False),
    "commented-out": ("# required spank_pyxis.so\n", {}, "none", False),
    "optional-plugin": ("optional /usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so\n", {}, "pyxis",
                        False),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(DECISIONS))
def test_runtime_decided_from_slurms_plugin_stack(tmp: Path, case: str) -> None:
    """auto: Pyxis where plugstack names spank_pyxis.so (and enroot is on PATH), and then no
    Apptainer even for the image provider, whose image becomes the .sqsh; Apptainer stays the
    choice where asked for, or where there is no Pyxis and the provider is image."""
    pyxis, settings, runtime, apptainer = DECISIONS[case]
    run = role_run(
        tmp, "render_runtime.yml", dask_hpc_slurm_config_dir=str(slurm_dir(tmp, pyxis)),
        dask_hpc_enroot_bin="sh", **settings,
    )  # fmt: skip
    assert run.returncode == 0, run.describe()
    decided = re.search(r"DECIDED runtime=(\S+) apptainer=(\S+) image=([^\"]+)", run.output)
    assert decided, run.describe()
    assert decided.groups() == (
        runtime,
        str(apptainer),
        "dask-hpc.sqsh" if runtime == "pyxis" else "dask-hpc.sif",
    )


REFUSED = {
    "pyxis-asked-none-there": (
        None,
        {"dask_hpc_container_runtime": "pyxis"},
        "dask_hpc_container_runtime=pyxis, but localhost has no Pyxis (no line naming "
        "spank_pyxis.so in {conf}/plugstack.conf or {conf}/plugstack.conf.d/*.conf): install "
        "Pyxis and Enroot first (DeepOps: its slurm-cluster playbook), or set "
        "dask_hpc_container_runtime=apptainer (or auto).",
    ),
    "pyxis-without-enroot": (
        PYXIS_LINE,
        {"dask_hpc_enroot_bin": "no-such-enroot"},
        "localhost has Pyxis but no no-such-enroot on PATH, which Pyxis runs to start every "
        "container: install Enroot (DeepOps: its enroot role)",
    ),
    "image-with-no-runtime": (
        PYXIS_LINE,
        {"dask_hpc_provider": "image", "dask_hpc_container_runtime": "none"},
        "dask_hpc_provider=image runs the site image, and dask_hpc_container_runtime=none runs "
        "no image",
    ),
    "sif-for-pyxis": (
        PYXIS_LINE,
        {"dask_hpc_provider": "image", "dask_hpc_image_src": "/srv/dask-hpc-deepops.sif"},
        "/srv/dask-hpc-deepops.sif is a SIF, which Pyxis cannot run: give the squashfs invoke "
        "build makes beside it (/srv/dask-hpc-deepops.sqsh)",
    ),
    "registry-for-pyxis": (
        PYXIS_LINE,
        {"dask_hpc_provider": "image", "dask_hpc_image_url": "oras://head:5000/dask-hpc:1"},
        "is a registry reference, which only Apptainer pulls",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_runtime_the_node_lacks_is_refused_in_one_line(tmp: Path, case: str) -> None:
    """A runtime asked that the node lacks (or an image it cannot run) stops the play at its
    first check, in one line naming the problem and the fix."""
    pyxis, settings, expected = REFUSED[case]
    conf = slurm_dir(tmp, pyxis)
    run = role_run(
        tmp, "render_runtime.yml", dask_hpc_slurm_config_dir=str(conf),
        **{"dask_hpc_enroot_bin": "sh", **settings},
    )  # fmt: skip
    assert run.returncode != 0, run.describe()
    messages = failures(run)
    assert len(messages) == 1 and "\n" not in messages[0], messages
    assert expected.format(conf=conf) in messages[0], (expected, messages)
    assert "DECIDED" not in run.output


def render_pyxis(tmp: Path, playbook: str, **settings: object) -> PlaybookRun:
    """A render playbook with the image provider under Pyxis."""
    defaults = {
        "dask_hpc_prefix": str(tmp / "prefix"),
        "dask_hpc_shared_dir": "/sw/dask-hpc",
        "dask_hpc_wrapper_link": "",
        "dask_hpc_hpc_cluster_link": "",
        "dask_hpc_lmod": True,
        "dask_hpc_lmod_modulefiles": str(tmp / "modulefiles"),
        "dask_hpc_deepops_dir": str(tmp / "deepops"),
        "dask_hpc_provider": "image",
        "_dask_hpc_runtime": "pyxis",
        "_dask_hpc_gpu_vendor": "nvidia",
    }
    run = role_run(tmp, playbook, **{**defaults, **settings})
    assert run.returncode == 0, run.describe()
    return run


MOUNTS = '--container-mounts=/sw/dask-hpc:/sw/dask-hpc,/tmp:/tmp,/etc/dask:/etc/dask:ro,"$PWD:$PWD"'
PYXIS = (
    f"--container-image=/sw/dask-hpc/images/dask-hpc.sqsh {MOUNTS} --no-container-remap-root "
    "--no-container-mount-home --no-container-entrypoint --container-readonly "
    '--container-workdir="$PWD"'
)


def test_wrapper_under_pyxis_names_srun_container_image_in_one_line(tmp: Path) -> None:
    """Run on the node by itself (no srun --container-image), start-cluster starts nothing and
    says in one line how to run it: srun with the site squashfs and its mounts, the DeepOps
    launch script, or hpc-job. Exit 2. The Lmod module names the squashfs."""
    render_pyxis(tmp, "render_wrapper.yml")
    wrapper = tmp / "prefix/bin/start-cluster"
    assert "apptainer" not in wrapper.read_text()
    result = subprocess.run(["sh", str(wrapper), "gpu", "2"], env={"PATH": "/usr/bin:/bin"},
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0] == (
        "start-cluster: on this cluster dask-hpc runs in the site image through Pyxis: run it "
        f"as srun {PYXIS} start-cluster ARGS inside salloc or sbatch, or {tmp}/deepops/"
        "launch-dask-cluster.sh ARGS, or write a batch job with hpc-job --site deepops"
    )
    module = (tmp / "modulefiles/dask-hpc/0.1.0.lua").read_text()
    assert 'setenv("DASK_HPC_IMAGE", "/sw/dask-hpc/images/dask-hpc.sqsh")' in module


def test_deepops_launch_script_runs_each_rank_in_the_squashfs(tmp: Path) -> None:
    """launch-dask-cluster.sh under Pyxis: srun runs the image's start-cluster in the site
    squashfs (the options dask-hpc's job scripts give Pyxis); a working directory that
    --container-mounts cannot take is refused in one line before srun."""
    render_pyxis(tmp, "render_deepops.yml")
    launch = tmp / "deepops/launch-dask-cluster.sh"
    text = launch.read_text()
    assert subprocess.run(["sh", "-n", str(launch)], check=False).returncode == 0
    last = " ".join(text.rstrip().replace("\\\n", " ").splitlines()[-1].split())
    assert last == (
        'exec srun --ntasks-per-node=1 --cpus-per-task="${SLURM_CPUS_ON_NODE:-1}" --no-kill '
        f'--kill-on-bad-exit=0 {PYXIS} start-cluster "$@"'
    )
    odd = tmp / "a,b"
    odd.mkdir()
    result = subprocess.run(["sh", str(launch), "gpu", "1"], cwd=odd, capture_output=True,
                            text=True, env={"PATH": "/usr/bin:/bin"}, check=False)  # fmt: skip
    assert result.returncode == 2, result
    assert result.stderr == (
        f"launch-dask-cluster.sh: the working directory {odd} has a comma or a colon, which "
        "--container-mounts cannot take: run it from another directory\n"
    )


def test_dask_config_names_the_squashfs_for_hpccluster(tmp: Path) -> None:
    """/etc/dask/dask-hpc.yaml under Pyxis: the site, the scheduler directory, and the squashfs
    as hpc.image and hpc.cluster.image (what hpc-job's and HPCCluster's jobs run); no image line
    with the python provider."""
    target = tmp / "etc/dask/dask-hpc.yaml"
    common = {"_dask_hpc_dask_config_file": str(target), "_dask_hpc_node_gpus": 0,
              "_dask_hpc_node_cpus": 0, "dask_hpc_image": None}  # fmt: skip
    render_pyxis(tmp, "render_dask_config.yml", **common)
    text = target.read_text()
    assert re.search(r'^  site: "deepops"$', text, re.M), text
    assert '  cluster:\n    image: "/sw/dask-hpc/images/dask-hpc.sqsh"\n' in text, text
    assert '\n  image: "/sw/dask-hpc/images/dask-hpc.sqsh"\n' in text, text  # hpc-job's
    render_pyxis(tmp, "render_dask_config.yml", **common, dask_hpc_provider="python")
    assert "image" not in target.read_text()


def signed_squashfs(directory: Path, key: Path, name: str = "dask-hpc-deepops.sqsh") -> Path:
    """A stand-in squashfs (its content does not matter to the role) with what invoke build
    writes beside it: its recorded sha256 and, signed with ``key``, that sha256's signature."""
    image = directory / name
    image.write_bytes(os.urandom(1 << 16))
    images.record_digest(image)
    images.sign_digest(image, key)
    return image


def key_pair(directory: Path, name: str) -> tuple[Path, Path]:
    """An Ed25519 key pair (PEM), as a site makes its image key."""
    private, public = directory / f"{name}.pem", directory / f"{name}.pub.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(private)],
                   check=True, capture_output=True)  # fmt: skip
    subprocess.run(["openssl", "pkey", "-in", str(private), "-pubout", "-out", str(public)],
                   check=True, capture_output=True)  # fmt: skip
    return private, public


def test_squashfs_placed_verified_and_a_bad_one_refused(tmp: Path) -> None:
    """image_pyxis.yml: the squashfs, its recorded sha256 and the signature come in staged, are
    checked (sha256, openssl with the site key) and put in place root:group 0640; the next
    deploy verifies them in place and changes nothing; a squashfs whose sha256 is signed with
    another key, or that lacks its signature on the controller, is refused in one line and the
    one in place stays."""
    site_private, site_public = key_pair(tmp, "site")
    other_private, _ = key_pair(tmp, "other")
    (tmp / "build").mkdir()
    good = signed_squashfs(tmp / "build", site_private)
    shared = tmp / "shared"
    (shared / "images").mkdir(parents=True)
    settings: dict[str, object] = {
        "_dask_hpc_runtime": "pyxis",
        "dask_hpc_provider": "image",
        "dask_hpc_shared_dir": str(shared),
        "dask_hpc_prefix": str(tmp / "prefix"),
        "dask_hpc_group": "root",
        "dask_hpc_image_src": str(good),
        "dask_hpc_image_checksum": f"sha256:{images.sha256(good)}",
        "dask_hpc_image_key": str(site_public),
    }
    first = role_run(tmp, "render_image_pyxis.yml", **settings)
    assert first.returncode == 0, first.describe()
    placed = shared / "images/dask-hpc.sqsh"
    in_place = ["dask-hpc.sqsh", "dask-hpc.sqsh.sha256", "dask-hpc.sqsh.sha256.sig"]
    assert sorted(p.name for p in (shared / "images").iterdir()) == in_place
    for name in in_place:
        st = (shared / "images" / name).stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 0, 0o640), name
    assert images.sha256(placed) == images.sha256(good)
    # What a job runs next: openssl verifies the signature of the recorded sha256 in place.
    key = tmp / "prefix/etc/image-key.pem"
    verify = ["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", str(key), "-rawin",
              "-in", f"{placed}.sha256", "-sigfile", f"{placed}.sha256.sig"]  # fmt: skip
    assert subprocess.run(verify, capture_output=True, check=False).returncode == 0

    again = role_run(tmp, "render_image_pyxis.yml", **settings)
    assert again.returncode == 0, again.describe()
    assert again.recap()["localhost"]["changed"] == 0, again.changed_tasks()
    verified = again.output.split("Verify the signature in place (once per deploy)]", 1)[1]
    assert verified.split("\n", 2)[1] == "ok: [localhost]", again.describe()

    (tmp / "other").mkdir()
    forged = signed_squashfs(tmp / "other", other_private)
    settings.update(dask_hpc_image_src=str(forged),
                    dask_hpc_image_checksum=f"sha256:{images.sha256(forged)}")  # fmt: skip
    refused = role_run(tmp, "render_image_pyxis.yml", **settings)
    assert refused.returncode != 0, refused.describe()
    last = failures(refused)[-1]
    assert "\n" not in last, last
    assert last.startswith(
        "localhost: the squashfs's recorded sha256 is not signed with the site key "
        f"{site_public} (openssl: "
    ), last
    assert last.endswith("or set dask_hpc_image_verify=false. The image in place is unchanged.")
    assert images.sha256(placed) == images.sha256(good)
    assert sorted(p.name for p in (shared / "images").iterdir()) == in_place

    forged.with_name(forged.name + ".sha256.sig").unlink()
    missing = role_run(tmp, "render_image_pyxis.yml", **settings)
    assert missing.returncode != 0, missing.describe()
    assert failures(missing) == [
        f"{forged}.sha256.sig missing on the controller: with Pyxis the squashfs comes with its "
        "recorded sha256 and, with dask_hpc_image_key, its signature: copy what invoke build "
        "--site deepops wrote beside it, or sign it with python3 -m dask_hpc.images_enroot "
        "--key PEM SIF."
    ]
    assert images.sha256(placed) == images.sha256(good)
