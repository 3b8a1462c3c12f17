#!/usr/bin/env bash
# Enroot 4.1.2 and Pyxis 0.11.1 (DeepOps' pin) for the test suite: tests/containers/ runs
# `srun --container-image` for real in a private Slurm (tests/harness/slurm.py, `pyxis=`) that
# loads Pyxis's SPANK plugin through its own plugstack.conf; nothing is installed system-wide
# but Debian packages (Enroot's runtime tools, libslurm-dev for Pyxis's headers).
#
# The release tarballs beside the project (../shared/vendor/, or $DASK_HPC_ENROOT_TARBALL and
# $DASK_HPC_PYXIS_TARBALL; never part of the project) are checked against their sha256, built
# and installed under $CACHE/enroot-4.1.2 (Enroot, its prefix built in) and
# $CACHE/enroot-4.1.2/pyxis (spank_pyxis.so) once per machine; a second run only checks. Each
# step prints the seconds it took.
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE=${DASK_HPC_TEST_CACHE:-/var/tmp/dask-hpc-tests}
VERSION=4.1.2
SHA256=e585c0e14d31faa2e104c0db9653249c3c47c381250044e298a51b474abbd2a7
PYXIS_VERSION=0.11.1
PYXIS_SHA256=4b5ae94a0f2a24f4ec352176e21d3339eb5a400c43f72a9ea3f5f7e2beb90049
TARBALL=${DASK_HPC_ENROOT_TARBALL:-$repo/../shared/vendor/enroot-$VERSION.tar.gz}
PYXIS_TARBALL=${DASK_HPC_PYXIS_TARBALL:-$repo/../shared/vendor/pyxis-$PYXIS_VERSION.tar.gz}
PREFIX=$CACHE/enroot-$VERSION
STAMP=$PREFIX/.dask-hpc-enroot
step() { echo "enroot: $1: $((SECONDS - t)) s"; t=$SECONDS; }
t=$SECONDS

# Build: gcc, make (musl and libbsd are built from the tarball); Pyxis: Slurm's headers, of the
# same release as slurm-wlm. Runtime: Enroot's own list (its README), less curl's registry use.
need=(make gcc libc6-dev libslurm-dev jq parallel squashfs-tools fuse-overlayfs squashfuse pigz
      zstd curl)
# shellcheck source=apt_need.sh
. "$repo/tests/setup/apt_need.sh"
apt_need enroot "Enroot's and Pyxis's dependencies" "${need[@]}"
[ ${#APT_INSTALLED[@]} -eq 0 ] || step "apt-get ${APT_INSTALLED[*]}"
slurm_release="$(dpkg-query -W -f='${Version}' slurm-wlm 2>/dev/null || true)"
headers="$(dpkg-query -W -f='${Version}' libslurm-dev)"
if [ -n "$slurm_release" ] && [ "$slurm_release" != "$headers" ]; then
  echo "enroot: libslurm-dev $headers is not slurm-wlm's release ($slurm_release): install the same version of both" >&2
  exit 1
fi

mkdir -p "$CACHE"
# What runs from the cache (as root, in CI; slurmstepd loads the plugin as root) must be ours
# alone: /var/tmp is everyone's, so a cache another user made or may change is refused.
ours() {
  [ ! -e "$1" ] && return 0
  [ ! -L "$1" ] && [ "$(stat -c %u "$1")" = "$(id -u)" ] && [ $(( 0$(stat -c %a "$1") & 022 )) -eq 0 ]
}
for path in "$CACHE" "$PREFIX" "$PREFIX/bin" "$PREFIX/bin/enroot" "$PREFIX/pyxis" \
            "$PREFIX/pyxis/spank_pyxis.so"; do
  ours "$path" || { echo "enroot: $path is not yours alone (another user may change it): remove it, or set DASK_HPC_TEST_CACHE to a directory of your own" >&2; exit 1; }
done
exec 9>"$CACHE/.enroot-setup.lock"  # one build at a time
flock 9
# Containers get a /dev/shm of their own (tmpfs) instead of Enroot's bind of the host's: the
# suite's Ansible tests mount sshfs targets under the host's /dev/shm meanwhile, and the bind
# then failed ("enroot-mount: failed to mount: /dev/shm at .../dev/shm: Invalid argument",
# a clean-clone CI run). The only change to Enroot's own configuration here.
shm_of_its_own() {
  local fstab="$PREFIX/etc/enroot/mounts.d/10-system.fstab"
  [ -f "$fstab" ] || return 0
  sed -i 's|^/dev/shm[[:space:]].*|tmpfs /dev/shm tmpfs x-create=dir,rw,nosuid,nodev,mode=1777,slave 0 -1|' "$fstab"
}
want="enroot $VERSION $SHA256 pyxis $PYXIS_VERSION $PYXIS_SHA256 slurm $headers"
if [ -x "$PREFIX/bin/enroot" ] && [ -f "$PREFIX/pyxis/spank_pyxis.so" ] && [ -f "$STAMP" ] \
   && [ "$(cat "$STAMP")" = "$want" ]; then
  shm_of_its_own
  echo "enroot: ok ($PREFIX/bin/enroot, $PREFIX/pyxis/spank_pyxis.so, cached)"
  exit 0
fi
for tarball in "$TARBALL" "$PYXIS_TARBALL"; do
  [ -f "$tarball" ] || { echo "enroot: $tarball not found: put it there or set DASK_HPC_ENROOT_TARBALL / DASK_HPC_PYXIS_TARBALL" >&2; exit 1; }
done
echo "$SHA256  $TARBALL" | sha256sum -c --quiet - \
  || { echo "enroot: $TARBALL is not Enroot $VERSION (sha256 differs)" >&2; exit 1; }
echo "$PYXIS_SHA256  $PYXIS_TARBALL" | sha256sum -c --quiet - \
  || { echo "enroot: $PYXIS_TARBALL is not Pyxis $PYXIS_VERSION (sha256 differs)" >&2; exit 1; }
build="$(mktemp -d "$CACHE/.enroot-build.XXXXXX")"
trap 'rm -rf "$build"' EXIT
tar -xzf "$TARBALL" -C "$build"
tar -xzf "$PYXIS_TARBALL" -C "$build"
rm -f "$STAMP"
step "sha256 and unpack"
(
  cd "$build/enroot-$VERSION"
  make -j"$(nproc)" prefix="$PREFIX" >"$build/make.log" 2>&1 || { tail -n 60 "$build/make.log" >&2; exit 1; }
  make install prefix="$PREFIX" >"$build/install.log" 2>&1 || { tail -n 40 "$build/install.log" >&2; exit 1; }
)
"$PREFIX/bin/enroot" version >/dev/null
step "Enroot $VERSION built (musl, libbsd, its helpers) and installed"
(
  cd "$build/pyxis-$PYXIS_VERSION"
  make -j"$(nproc)" >"$build/pyxis.log" 2>&1 || { tail -n 40 "$build/pyxis.log" >&2; exit 1; }
  install -d -m 755 "$PREFIX/pyxis"
  install -m 644 spank_pyxis.so "$PREFIX/pyxis/spank_pyxis.so"
)
step "Pyxis $PYXIS_VERSION built against libslurm-dev $headers"
shm_of_its_own
echo "$want" >"$STAMP"
echo "enroot: built $PREFIX/bin/enroot ($("$PREFIX/bin/enroot" version)), $PREFIX/pyxis/spank_pyxis.so"
