"""The lines of a job script that settle its image before the launcher starts any rank.

Every rank runs ``apptainer exec`` on the image's path, on its own node: a check made once
holds for what the ranks run only if nobody else can change that path between the check and
the last rank's start. So the job resolves the path once (relative to its directory, links
followed), refuses one that a user other than the owner and root could change (the rules of
``private.changeable_by_others``, in shell: the node needs coreutils, not dask-hpc), then
checks the image's recorded sha256 (``IMAGE.sha256``, written by ``invoke build``/``pull``)
and, with the site's key, its signature. The ranks run ``$dask_hpc_image``. The shell is in
``templates/image.sh``.

A project directory (group-writable, 2770: ALCF runs jobs from them) is such a place. Its
members are trusted only when the user names their group, ``hpc.image-group``
(``DASK_HPC__IMAGE_GROUP``): then a step of the path may also be a member's, or writable by
that group (by no other group or user, and no access control list naming more), and an image
let through by that trust alone runs only with its sha256 recorded (``IMAGE.sha256``, under
the same rule) and matching at job start, even with ``DASK_HPC__IMAGE_VERIFY=false``. The ranks
run the shared file itself, not a private copy: a member could still swap it between the check
and a rank's start, which is inside the trust the user gave; a copy per job would cost gigabytes
of the user's quota and minutes at each start (docs/images.md#images-in-a-project-directory).
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shlex
import stat
from importlib import resources
from pathlib import Path

from .. import config
from ..errors import UsageError
from ..guard import images, private
from .templating import Template

VARIABLE = "dask_hpc_image"  # what the launch line runs: "$dask_hpc_image"
FIX = (
    "use an image built or pulled with the site's key (invoke build, invoke pull), or opt out: "
    f"{images.OPT_OUT}"
)


GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
GROUP_FIX = "name your project's group (id -Gn lists yours)"


def trusted_group(name: str | None = None) -> private.TrustedGroup | None:
    """The group named by ``name``, else by ``hpc.image-group``; None when neither names one.
    UsageError for a name that is no group here, or a group the user is not in."""
    name = config.get("image-group") if name is None else name
    if not name:
        return None
    if not isinstance(name, str) or not GROUP_NAME.fullmatch(name):
        raise UsageError(f"hpc.image-group: {name!r} is not a group's name", GROUP_FIX)
    try:
        group = private.TrustedGroup(name, grp.getgrnam(name).gr_gid)
    except KeyError:
        raise UsageError(f"hpc.image-group: no group {name} here", GROUP_FIX) from None
    if not group.has_member(os.geteuid()):
        user = pwd.getpwuid(os.geteuid()).pw_name
        raise UsageError(f"hpc.image-group: you ({user}) are not in group {name}", GROUP_FIX)
    return group


def _copy_fix(image: str) -> str:
    digest = images.digest_path(Path(image))
    return (
        f"copy it to a directory only you can write (cp -- {image} {digest} ~/) and give that path"
    )


def _group_to_trust(path: Path) -> str | None:
    """The group of the first step up from ``path`` that others could change, where trusting a
    group could help (not one any user can write); the job's refusal names the same."""
    for at in (path, *path.parents):
        try:
            st = at.stat()
        except OSError:
            return None
        mine = st.st_uid in (os.geteuid(), 0)
        sticky = at != path and st.st_mode & stat.S_ISVTX
        if mine and (sticky or not st.st_mode & private.OTHERS_WRITE):
            continue
        if st.st_mode & stat.S_IWOTH and not sticky:
            return None
        try:
            return grp.getgrgid(st.st_gid).gr_name
        except KeyError:
            return None
    return None


def place_refusal(
    image: str, path: Path, group: private.TrustedGroup | None
) -> tuple[str, str] | None:
    """(problem, fix) where ``image`` (as given; ``path`` here) exists and could be changed by
    a user other than the owner, root and (with ``group``) its members, or is let through by
    ``group`` alone without its sha256 recorded; else None. The job checks the same at its
    start."""
    if not path.exists():
        return None
    if group is None:
        problem = private.changeable_by_others(path)
        if not problem:
            return None
        name = _group_to_trust(path.resolve())
        fix = _copy_fix(image)
        if name:
            fix = (
                f"set hpc.image-group={name} (DASK_HPC__IMAGE_GROUP={name}) to trust your "
                f"project's members, or {fix}"
            )
        return f"image {image} can be changed by other users: {problem}", fix
    problem, shared = private.changeable_outside(path, group)
    if problem:
        return (
            f"image {image} can be changed by users outside group {group.name}: {problem}",
            f"make it writable by that group only, or {_copy_fix(image)}",
        )
    digest = images.digest_path(path)
    if not shared:
        return None
    if digest.is_symlink():
        return f"{digest} is a symbolic link", "remove it, or record the digest again"
    if not digest.exists():
        return (
            f"image {image} is trusted through group {group.name} only with its sha256 recorded, "
            f"and {digest} is missing",
            f"record it (invoke pull, or sha256sum -- {path} > {digest})",
        )
    problem, _ = private.changeable_outside(digest, group)
    if problem:
        return (
            f"the recorded sha256 of {image} can be changed by other users: {problem}",
            "record it again (invoke pull)",
        )
    return None


def _apptainer_signature(key: Path, apptainer: str) -> list[str]:
    """The lines that verify a SIF's own signature with the site's public key."""
    verify = f'{shlex.quote(apptainer)} verify --key "$dask_hpc_key" "${VARIABLE}"'
    return [
        f"  if ! dask_hpc_verify=$({verify} 2>&1); then",
        "    dask_hpc_said=$(printf '%s\\n' \"$dask_hpc_verify\" | sed -n 's/^FATAL: *//p'"
        " | tail -n 1)",
        f'    dask_hpc_refuse "image ${VARIABLE} failed verification ($dask_hpc_key:'
        f' $dask_hpc_said); {FIX}"',
        "  fi",
    ]


def _digest_signature() -> list[str]:
    """The lines that verify the signature of a squashfs's recorded sha256
    (``guard.images.sign_digest``), which the image's sha256 was checked against above."""
    digest, sig = f"${VARIABLE}{images.DIGEST_SUFFIX}", f"${VARIABLE}{images.SIGNATURE_SUFFIX}"
    return [
        f'  if [ ! -f "{digest}" ] || [ -L "{sig}" ] || [ ! -f "{sig}" ]; then',
        f'    dask_hpc_refuse "image ${VARIABLE} has no signed sha256 ({sig}) for the site key'
        f' $dask_hpc_key; {FIX}"',
        "  fi",
        '  if ! openssl pkeyutl -verify -pubin -inkey "$dask_hpc_key" -rawin'
        f' -in "{digest}" -sigfile "{sig}" >/dev/null 2>&1; then',
        f'    dask_hpc_refuse "image ${VARIABLE} failed verification ($dask_hpc_key: the'
        f' signature of {digest} does not match); {FIX}"',
        "  fi",
    ]


def lines(
    image: str,
    key: Path | None,
    apptainer: str = "apptainer",
    group: str | None = None,
    runtime: str = "apptainer",
) -> list[str]:
    """The job script's lines that settle ``image`` into ``$dask_hpc_image`` (one line and
    exit status 2 for each refusal); with ``key``, its signature is verified too: a SIF's own
    (``apptainer verify``), or for another ``runtime``'s image (a squashfs) the signature of
    its recorded sha256 (``openssl``). ``group``: the one group whose members may change it
    (default: ``hpc.image-group``; "" for none)."""
    trusted = trusted_group(group)
    signature = ""
    if key is not None:
        check = (
            _apptainer_signature(key, apptainer) if runtime == "apptainer" else _digest_signature()
        )
        signature = "\n".join(
            [
                'if [ "${DASK_HPC__IMAGE_VERIFY:-true}" != false ]; then',
                f"  dask_hpc_key={shlex.quote(str(key))}",
                *check,
                "fi",
            ]
        )
    text = resources.files(__package__).joinpath("templates", "image.sh").read_text()
    body = Template(text).substitute(
        image=shlex.quote(image),
        group=shlex.quote(trusted.name if trusted else ""),
        signature=signature,
    )
    return body.rstrip("\n").split("\n")
