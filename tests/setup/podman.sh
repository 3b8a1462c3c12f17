#!/usr/bin/env bash
# podman (Debian 12's package) and podman-hpc 1.1.4 (NERSC's wrapper, Perlmutter's runtime) for
# the test suite: tests/containers/test_podman_hpc.py runs `podman-hpc run` for real.
#
# podman-hpc is a Python package: it is installed from the release tarball beside the project
# (../shared/vendor/, or $DASK_HPC_PODMAN_HPC_TARBALL; checked against its sha256) into a venv
# of Debian's own /usr/bin/python3 (readable by every user, unlike a pyenv under /root) at
# $CACHE/podman-hpc-1.1.4, with its OCI hook configured in $CACHE/podman-hpc-1.1.4/hooks.d and
# a site config ($CACHE/podman-hpc-1.1.4/podman_hpc.yaml: what /etc/podman_hpc/podman_hpc.yaml
# is on Perlmutter; a test names it in PODMANHPC_CONFIG_FILE). Nothing is written under /etc
# or /usr but by apt. Once per machine; a second run only checks. Each step prints its seconds.
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE=${DASK_HPC_TEST_CACHE:-/var/tmp/dask-hpc-tests}
VERSION=1.1.4
SHA256=fae7133b7c9f4a07ef6a51124fc7ddf3d73180d298f68f0f8e50c2245eba4d38
TARBALL=${DASK_HPC_PODMAN_HPC_TARBALL:-$repo/../shared/vendor/podman-hpc-$VERSION.tar.gz}
PREFIX=$CACHE/podman-hpc-$VERSION
STAMP=$PREFIX/.dask-hpc-podman-hpc
step() { echo "podman: $1: $((SECONDS - t)) s"; t=$SECONDS; }
t=$SECONDS

# podman and what podman-hpc runs beside it: fuse-overlayfs (its mount_program's wrapper),
# squashfuse and mksquashfs (squashed images: `podman-hpc migrate`), inotify-tools (the
# wrapper's unmount watcher), runc and catatonit (podman run --init), uidmap (newuidmap for
# rootless podman), python3-venv.
need=(podman crun runc catatonit fuse-overlayfs squashfuse squashfs-tools inotify-tools uidmap slirp4netns
      python3-venv make gcc libc6-dev zlib1g-dev liblz4-dev xz-utils)
# shellcheck source=apt_need.sh
. "$repo/tests/setup/apt_need.sh"
# shellcheck source=debian_mirror.sh
. "$repo/tests/setup/debian_mirror.sh"
apt_need podman "podman and podman-hpc's tools" "${need[@]}"
[ ${#APT_INSTALLED[@]} -eq 0 ] || step "apt-get ${APT_INSTALLED[*]}"
# podman-hpc's `migrate` runs mksquashfs inside a container of the image (mounted there alone:
# NERSC's site config names a static build, `mksquashfs.static`) with `-xattrs-exclude`, which
# squashfs-tools 4.6 added; Debian 12 ships 4.5.1, linked dynamically. So squashfs-tools 4.6.1
# is built here, static (gzip and lz4, podman-hpc's -comp), from Debian 13's source package:
# apt fetches it from this machine's Debian mirror (read from its apt sources, as ansible.sh
# does) and checks it against the signed Sources index; its upstream tarball's sha256 is pinned.
SQUASHFS_VERSION=4.6.1
SQUASHFS_SHA256=94201754b36121a9f022a190c75f718441df15402df32c2b520ca331a107511c

static_mksquashfs() {  # WORKDIR OUT
  local work=$1 out=$2 mirror
  mkdir -p "$work/lists/partial" "$work/parts" "$work/src"
  mirror="$(host_debian_mirror)" || exit 1
  printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\n' "$mirror" \
    >"$work/parts/trixie.sources"
  local apt=(apt-get -qq -o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$work/parts"
             -o "Dir::State::Lists=$work/lists" -o APT::Sandbox::User=root)
  "${apt[@]}" update >"$work/apt.log" 2>&1 \
    && (cd "$work/src" && "${apt[@]}" source --download-only squashfs-tools >>"$work/apt.log" 2>&1) \
    || { tail -n 20 "$work/apt.log" >&2; echo "podman: apt-get could not fetch squashfs-tools' source" >&2; exit 1; }
  local tarball="$work/src/squashfs-tools_$SQUASHFS_VERSION.orig.tar.gz"
  echo "$SQUASHFS_SHA256  $tarball" | sha256sum -c --quiet - \
    || { echo "podman: Debian 13's squashfs-tools is no longer $SQUASHFS_VERSION (sha256 differs)" >&2; exit 1; }
  tar -xzf "$tarball" -C "$work/src"
  make -C "$work/src/squashfs-tools-$SQUASHFS_VERSION/squashfs-tools" -j"$(nproc)" mksquashfs \
    GZIP_SUPPORT=1 LZ4_SUPPORT=1 XZ_SUPPORT=0 LZO_SUPPORT=0 ZSTD_SUPPORT=0 XATTR_SUPPORT=1 \
    EXTRA_LDFLAGS=-static >"$work/make.log" 2>&1 \
    || { tail -n 20 "$work/make.log" >&2; echo "podman: mksquashfs did not build" >&2; exit 1; }
  install -m 755 "$work/src/squashfs-tools-$SQUASHFS_VERSION/squashfs-tools/mksquashfs" "$out"
}

mkdir -p "$CACHE"
# What runs from the cache must be ours alone: /var/tmp is everyone's.
ours() {
  [ ! -e "$1" ] && return 0
  [ ! -L "$1" ] && [ "$(stat -c %u "$1")" = "$(id -u)" ] && [ $(( 0$(stat -c %a "$1") & 022 )) -eq 0 ]
}
for path in "$CACHE" "$PREFIX" "$PREFIX/venv" "$PREFIX/venv/bin" "$PREFIX/venv/bin/podman-hpc" \
            "$PREFIX/podman_hpc.yaml" "$PREFIX/hooks.d"; do
  ours "$path" || { echo "podman: $path is not yours alone (another user may change it): remove it, or set DASK_HPC_TEST_CACHE to a directory of your own" >&2; exit 1; }
done
exec 9>"$CACHE/.podman-setup.lock"  # one install at a time
flock 9

# /dev/fuse and /dev/net/tun as every node with udev has them, 0666 (systemd's
# rules.d/50-udev-default.rules: KERNEL=="fuse", MODE="0666" and KERNEL=="tun", MODE="0666", read
# 2026-11-29): this VM has no udev, and left them root's alone, which refused a second user's
# rootless podman-hpc its mount program ("fuse: failed to open /dev/fuse: Permission denied")
# and `migrate` its container's network (slirp4netns: "open("/dev/net/tun"): Permission denied").
for dev in /dev/fuse /dev/net/tun; do
  [ "$(stat -c %a "$dev")" = 666 ] || { chmod 0666 "$dev" && step "chmod 0666 $dev, as udev"; }
done

podman_release="$(dpkg-query -W -f='${Version}' podman)"
want="podman-hpc $VERSION $SHA256 podman $podman_release mksquashfs $SQUASHFS_VERSION"
if [ -x "$PREFIX/venv/bin/podman-hpc" ] && [ -f "$PREFIX/podman_hpc.yaml" ] && [ -f "$STAMP" ] \
   && [ "$(cat "$STAMP")" = "$want" ]; then
  echo "podman: ok (podman $podman_release, $PREFIX/venv/bin/podman-hpc, cached)"
  exit 0
fi
[ -f "$TARBALL" ] || { echo "podman: $TARBALL not found: put it there or set DASK_HPC_PODMAN_HPC_TARBALL" >&2; exit 1; }
echo "$SHA256  $TARBALL" | sha256sum -c --quiet - \
  || { echo "podman: $TARBALL is not podman-hpc $VERSION (sha256 differs)" >&2; exit 1; }
rm -rf "$PREFIX" && install -d -m 755 "$PREFIX"
build="$(mktemp -d "$CACHE/.podman-hpc-build.XXXXXX")"
trap 'rm -rf "$build"' EXIT
tar -xzf "$TARBALL" -C "$build"
step "sha256 and unpack"
/usr/bin/python3 -m venv "$PREFIX/venv"
# Its setup.py runs `make setuptools-build_py`, a target its Makefile lacks: installed without
# that step (the target would only have built nothing; `make build` says "Nothing to do").
printf 'setuptools-build_py:\n\t@true\n' >>"$build/podman-hpc-$VERSION/Makefile"
# shellcheck source=uv_install.sh
. "$repo/tests/setup/uv_install.sh"
uv_install "$PREFIX/venv/bin/python" -q "$build/podman-hpc-$VERSION" \
  >"$build/pip.log" 2>&1 || { tail -n 30 "$build/pip.log" >&2; exit 1; }
step "podman-hpc $VERSION and its Python packages (click, pyyaml, toml) in $PREFIX/venv"
static_mksquashfs "$build/squashfs" "$PREFIX/mksquashfs.static"
step "squashfs-tools $SQUASHFS_VERSION's mksquashfs, static"
"$PREFIX/venv/bin/python" -m podman_hpc.configure_hooks --hooksd "$PREFIX/hooks.d" >/dev/null
# The site config, as Perlmutter's /etc/podman_hpc/podman_hpc.yaml names its parts; the
# per-user storage (graph_root, run_root, config_home) is what each job sets for itself
# (PODMANHPC_GRAPH_ROOT ...: dask_hpc.batch.runtimes), never /tmp/UID_hpc another user may make.
cat >"$PREFIX/podman_hpc.yaml" <<EOF
podman_bin: "/usr/bin/podman"
mount_program: "$PREFIX/venv/bin/fuse-overlayfs-wrap"
modules_dir: "$PREFIX/venv/etc/podman_hpc/modules.d"
hooks_dir: "$PREFIX/hooks.d"
mksquashfs_bin: "$PREFIX/mksquashfs.static"
localid_var: "SLURM_LOCALID"
tasks_per_node_var: "SLURM_STEP_TASKS_PER_NODE"
ntasks_pattern: "[0-9]+"
EOF
chmod -R go-w "$PREFIX"
"$PREFIX/venv/bin/podman-hpc" --help >/dev/null
step "hooks.d and site config"
echo "$want" >"$STAMP"
echo "podman: installed podman $podman_release, $PREFIX/venv/bin/podman-hpc"
