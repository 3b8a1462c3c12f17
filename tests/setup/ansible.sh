#!/usr/bin/env bash
# What the Ansible role's tests need, on a fresh Debian 12 machine (run as root). Idempotent, and
# fast when everything is already there:
#   - ansible-core, ansible-lint, pytest-testinfra (pip), and ansible-core 2.17 (DeepOps' pin) in
#     its own venv, $CACHE/venv-ansible-core-2.17;
#   - the community.general collection (its chroot connection plugin), extracted from the
#     `ansible` wheel on PyPI into $CACHE/collections (Galaxy is not reachable; nothing committed);
#   - minbase Debian 12, Ubuntu 22.04 and Ubuntu 24.04 root filesystems (mmdebstrap), cached as tarballs
#     in $CACHE/rootfs; each test session unpacks fresh copies (~1 s each);
#   - dependency wheels for Debian 12's Python, in $CACHE/wheels/cp311 (the wheelhouse of the
#     tests' configured node; the other nodes install dependencies from the package index).
# Mirrors are never written down here: Debian's comes from this machine's apt sources, Ubuntu's
# from debootstrap's own script for the suite; Ubuntu's keyring is fetched from that archive and
# accepted only if it signs the suite's Release file with the published archive key.
set -Eeuo pipefail
trap 'echo "ansible.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

CACHE="${DASK_HPC_ANSIBLE_CACHE:-/var/tmp/dask-hpc-tests/ansible}"
ANSIBLE_WHEEL_VERSION="12.3.0"   # the `ansible` community package that carries community.general
ANSIBLE_CORE_DEEPOPS="2.17.14"   # what DeepOps' Ansible 10.7.0 installs (ansible-core ~=2.17.7 in its requirements)
# Ubuntu Archive Automatic Signing Key (2018): its fingerprint as Ubuntu publishes it.
UBUNTU_ARCHIVE_FPR="F6ECB3762474EDA9D21B7022871920D1991BC93C"

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
mkdir -p "$CACHE"
log() { printf '[ansible.sh %(%H:%M:%S)T] %s\n' -1 "$*"; }
pip() { python3 -m pip --disable-pip-version-check "$@"; }
start=$SECONDS

# --- host tools -------------------------------------------------------------------------------
# shellcheck source=apt_need.sh
. "$here/apt_need.sh"
apt_need ansible "mmdebstrap, debootstrap's scripts (the Ubuntu mirror) and their tools" \
  mmdebstrap debootstrap gpgv gpg xz-utils curl
[ ${#APT_INSTALLED[@]} -eq 0 ] || log "apt-get install ${APT_INSTALLED[*]}"

# --- Python tools -------------------------------------------------------------------------------
if ! python3 - <<'EOF' 2>/dev/null
import importlib.metadata as m
for name in ("ansible-core", "ansible-lint", "pytest-testinfra"):
    m.version(name)
EOF
then
  log "ansible-core, ansible-lint and pytest-testinfra (pip)"
  pip install -q 'ansible-core>=2.17' 'ansible-lint>=24' 'pytest-testinfra>=10'
fi

# --- ansible-core 2.17, DeepOps' pin (scripts/setup.sh: Ansible 10.7.0), in a venv of its own --
# The role is tested under it and under the newest ansible-core (above, on PATH).
core217="$CACHE/venv-ansible-core-2.17"
if ! "$core217/bin/ansible-playbook" --version 2>/dev/null | grep -q '^ansible-playbook \[core 2\.17\.'; then
  log "venv with ansible-core $ANSIBLE_CORE_DEEPOPS"
  rm -rf "$core217"
  python3 -m venv "$core217"
  # shellcheck source=uv_install.sh
  . "$here/uv_install.sh"
  uv_install "$core217/bin/python" -q "ansible-core==$ANSIBLE_CORE_DEEPOPS"
fi

# --- community.general (chroot connection) ----------------------------------------------------
coll="$CACHE/collections"
if [ ! -f "$coll/ansible_collections/community/general/plugins/connection/chroot.py" ]; then
  log "extracting community.general from ansible==$ANSIBLE_WHEEL_VERSION"
  tmp="$(mktemp -d)"
  pip download -q --no-deps "ansible==$ANSIBLE_WHEEL_VERSION" -d "$tmp" 2>&1 | { grep -v 'is ignored' >&2 || true; }
  rm -rf "$coll.partial"
  python3 - "$tmp"/ansible-*.whl "$coll.partial" <<'EOF'
import sys
import zipfile

wheel, dest = sys.argv[1], sys.argv[2]
prefix = "ansible_collections/community/general/"
with zipfile.ZipFile(wheel) as z:
    z.extractall(dest, [n for n in z.namelist() if n.startswith(prefix)])
EOF
  rm -rf "$tmp" "$coll"
  mv "$coll.partial" "$coll"
fi

# --- root filesystems -------------------------------------------------------------------------
# shellcheck source=debian_mirror.sh
. "$here/debian_mirror.sh"  # host_debian_mirror

debootstrap_default_mirror() {
  # The mirror debootstrap itself uses for the Ubuntu SUITE on this architecture (from its script).
  local suite=$1 arch script
  arch="$(dpkg --print-architecture)"
  script="$(ubuntu_script "$suite")"
  # shellcheck disable=SC2016
  ARCH="$arch" bash -c '
    default_mirror() { echo "$1"; exit 0; }
    mirror_style() { :; }; download_style() { :; }; finddebs_style() { :; }
    variants() { :; }; keyring() { :; }; force_md5() { :; }; work_out_debs() { :; }
    first_stage_install() { :; }; second_stage_install() { :; }
    SUITE='"$suite"'; source "'"$script"'"; exit 1'
}

ubuntu_keyring() {
  # Fetch ubuntu-keyring from the archive; keep only the published archive key, and only if it
  # signs the suite's Release file.
  local suite=$1 mirror=$2 out=$3 tmp pkg
  tmp="$(mktemp -d)"
  curl -fsS --retry 3 -o "$tmp/Packages.xz" "$mirror/dists/$suite/main/binary-amd64/Packages.xz"
  pkg="$(xz -dc "$tmp/Packages.xz" | awk '/^Package: /{p=$2} p=="ubuntu-keyring" && /^Filename: /{print $2}' | head -n1)"
  [ -n "$pkg" ] || { echo "ubuntu-keyring not found in $suite" >&2; return 1; }
  curl -fsS --retry 3 -o "$tmp/keyring.deb" "$mirror/$pkg"
  dpkg-deb -x "$tmp/keyring.deb" "$tmp/x"
  mkdir -m 0700 "$tmp/gnupg"
  GNUPGHOME="$tmp/gnupg" gpg -q --batch --no-default-keyring \
    --keyring "$tmp/all.gpg" --import "$tmp/x/usr/share/keyrings/ubuntu-archive-keyring.gpg" 2>/dev/null
  GNUPGHOME="$tmp/gnupg" gpg -q --batch --no-default-keyring \
    --keyring "$tmp/all.gpg" --export "$UBUNTU_ARCHIVE_FPR" >"$tmp/archive.gpg"
  [ -s "$tmp/archive.gpg" ] || { echo "published Ubuntu key $UBUNTU_ARCHIVE_FPR missing" >&2; return 1; }
  curl -fsS --retry 3 -o "$tmp/InRelease" "$mirror/dists/$suite/InRelease"
  if ! gpgv --status-fd 1 --keyring "$tmp/archive.gpg" "$tmp/InRelease" 2>/dev/null \
      | grep -q "^\[GNUPG:\] VALIDSIG .* $UBUNTU_ARCHIVE_FPR\$"; then
    echo "Ubuntu $suite Release is not signed by $UBUNTU_ARCHIVE_FPR" >&2; return 1
  fi
  install -m 0644 "$tmp/archive.gpg" "$out"
  rm -rf "$tmp"
}

ubuntu_script() {
  # debootstrap's script for an Ubuntu SUITE; releases newer than this debootstrap (noble on
  # Debian 12's 1.0.128) use the script every Ubuntu release since gutsy links to.
  local suite=$1 dir=/usr/share/debootstrap/scripts
  if [ -e "$dir/$suite" ]; then readlink -f "$dir/$suite"; else readlink -f "$dir/gutsy"; fi
}

make_rootfs() {
  # make_rootfs NAME SUITE MIRROR [mmdebstrap options...]: cache $CACHE/rootfs/NAME.tar.
  # mmdebstrap's minbase is debootstrap's (Priority: required, and apt, which Ubuntu marks
  # important: named), the same packages and /etc as debootstrap --variant=minbase made for
  # these three suites (compared 2026-12-01; jammy's lacks only debootstrap's dangling
  # /etc/localtime), in half the CPU: apt resolves and installs what debootstrap's shell does
  # package by package (bookworm 26 -> 20 CPU s, noble 30 -> 16, apt-get update and tar
  # included). The package lists stay, fresh, so a converge needs no full download first.
  local name=$1 suite=$2 mirror=$3; shift 3
  local tar="$CACHE/rootfs/$name.tar" t0=$SECONDS
  [ -f "$tar" ] && return 0
  mkdir -p "$CACHE/rootfs"
  log "mmdebstrap $name ($suite)"
  # Acquire::Languages: mmdebstrap fetches no Translation-en lists by default, apt does (a
  # converge's refresh then fetched 35 MB more on every Ubuntu target: 3 CPU s a converge); the
  # option itself is not left in the root filesystem.
  if ! mmdebstrap --variant=minbase --include=apt,python3,python3-apt --skip=cleanup/apt/lists \
      --aptopt='Acquire::Languages "en"' \
      --customize-hook='rm "$1"/etc/apt/apt.conf.d/99mmdebstrap' \
      --format=tar "$@" "$suite" "$tar.partial" "$mirror" >"$CACHE/rootfs/$name.log" 2>&1; then
    tail -n 20 "$CACHE/rootfs/$name.log" >&2
    return 1
  fi
  mv "$tar.partial" "$tar"
  log "$name ready ($((SECONDS - t0)) s)"
}

debian_mirror="$(host_debian_mirror)"
ubuntu_mirror="$(debootstrap_default_mirror jammy)"
pids=()
# Debian 12's merged /usr as debootstrap makes it (usr-is-merged; without the hook apt picks
# usrmerge, and perl with it).
make_rootfs debian12 bookworm "$debian_mirror" --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  & pids+=($!)
(
  [ -f "$CACHE/rootfs/ubuntu2204.tar" ] && exit 0
  mkdir -p "$CACHE/rootfs"
  ubuntu_keyring jammy "$ubuntu_mirror" "$CACHE/rootfs/ubuntu-archive.gpg"
  make_rootfs ubuntu2204 jammy "$ubuntu_mirror" --components=main,universe \
    --keyring="$CACHE/rootfs/ubuntu-archive.gpg"
) & pids+=($!)
(
  [ -f "$CACHE/rootfs/ubuntu2404.tar" ] && exit 0
  mkdir -p "$CACHE/rootfs"
  ubuntu_keyring noble "$ubuntu_mirror" "$CACHE/rootfs/ubuntu-archive-noble.gpg"
  make_rootfs ubuntu2404 noble "$ubuntu_mirror" --components=main,universe \
    --keyring="$CACHE/rootfs/ubuntu-archive-noble.gpg"
) & pids+=($!)

# --- dependency wheels for each target's Python ----------------------------------------------
wheels() {
  # wheels PYVER: binary wheels of dask-hpc's dependencies for CPython PYVER on x86_64 Linux.
  local ver=$1 dest="$CACHE/wheels/cp${1/./}" stamp
  stamp="$(cat "$repo/pyproject.toml" "$repo/constraints.txt" | sha256sum | cut -c1-16)"
  [ -f "$dest/.stamp-$stamp" ] && return 0
  log "wheels for Python $ver"
  rm -rf "$dest"; mkdir -p "$dest"
  pip download -q --only-binary=:all: --python-version "$ver" --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 -c "$repo/constraints.txt" -d "$dest" "$repo" 2>&1 \
    | { grep -v 'is ignored' >&2 || true; }  # the test environment's exact Dask
  rm -f "$dest"/dask_hpc-*   # the role gets the project's own wheel separately
  local round extra
  for round in 1 2 3; do
    extra="$(python3 "$repo/tests/ansible/missing_wheels.py" "$dest" "$ver")"
    [ -n "$extra" ] || break
    log "wheels for Python $ver, round $round: adding $extra"
    # shellcheck disable=SC2086
    pip download -q --only-binary=:all: --python-version "$ver" --implementation cp \
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux_2_28_x86_64 -d "$dest" $extra 2>&1 | { grep -v 'is ignored' >&2 || true; }
  done
  ls "$dest"/distributed-*.whl >/dev/null
  touch "$dest/.stamp-$stamp"
}
wheels 3.11 & pids+=($!)

rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
[ "$rc" = 0 ] || { echo "ansible.sh: setup failed" >&2; exit 1; }
log "done in $((SECONDS - start)) s (cache $CACHE)"
