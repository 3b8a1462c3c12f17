#!/usr/bin/env bash
# Flux (flux-core) for the test suite: tests/harness/flux.py starts a whole Flux instance of
# three brokers on this machine (`flux start --test-size=3`), as three nodes, for each test that
# needs one; no daemon, munge or configuration is installed.
#
# A Flux already installed (`flux` on PATH, as on HPC sites) is used as it is. Otherwise the
# release tarball beside the project (../shared/vendor/flux-core-0.88.0.tar.gz, or
# $DASK_HPC_FLUX_TARBALL; never part of the project) is checked against its sha256, built and
# installed under $CACHE/flux-core-0.88.0 once per machine; a second run only checks (under a
# second). Flux's Python bindings are built for the distribution's /usr/bin/python3, which is
# what the installed `flux` command runs its Python subcommands under, whatever python3 is on
# PATH (tests run under a pyenv Python).
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE=${DASK_HPC_TEST_CACHE:-/var/tmp/dask-hpc-tests}
VERSION=0.88.0
SHA256=8635be1a1410efc228b383ae59703b3c088d8ab1360167f986a5487491f49f56
TARBALL=${DASK_HPC_FLUX_TARBALL:-$repo/../shared/vendor/flux-core-$VERSION.tar.gz}
PREFIX=$CACHE/flux-core-$VERSION
STAMP=$PREFIX/.dask-hpc-flux

version() { "$1" version | sed -n 's/^commands:[[:space:]]*//p'; }
if command -v flux >/dev/null && [ "$(command -v flux)" != "$PREFIX/bin/flux" ]; then
  echo "flux: using $(command -v flux) ($(version flux))"
  exit 0
fi

# Flux's own scripts/install-deps-deb.sh, less docs and checks (liblua5.1-0-dev: the package
# behind the virtual liblua5.1-dev, which dpkg-query does not know). One of install.sh's
# side-by-side ones that need Debian packages: apt_need takes them in turn with the others.
need=(make gcc pkg-config libc6-dev libzmq3-dev uuid-dev libjansson-dev liblz4-dev libarchive-dev
      libhwloc-dev libsqlite3-dev lua5.1 liblua5.1-0-dev lua-posix python3-dev python3-cffi
      python3-ply python3-setuptools python3-yaml jq)
# One dpkg-query for all (a second run only checks: well under a second).
# shellcheck source=apt_need.sh
. "$repo/tests/setup/apt_need.sh"
apt_need flux "Flux's build dependencies" "${need[@]}"

mkdir -p "$CACHE"
# What runs from the cache (as root, in CI) must be ours alone: /var/tmp is everyone's, so a
# cache (or a build in it) another user made or may change is refused, never used.
ours() {
  [ ! -e "$1" ] && return 0
  [ ! -L "$1" ] && [ "$(stat -c %u "$1")" = "$(id -u)" ] && [ $(( 0$(stat -c %a "$1") & 022 )) -eq 0 ]
}
for path in "$CACHE" "$PREFIX" "$PREFIX/bin" "$PREFIX/bin/flux"; do
  ours "$path" || { echo "flux: $path is not yours alone (another user may change it): remove it, or set DASK_HPC_TEST_CACHE to a directory of your own" >&2; exit 1; }
done
exec 9>"$CACHE/.flux-setup.lock"  # one build at a time
flock 9
# -O1 and no debug information: the build's CPU is the install's longest part on a fresh
# machine (make -j2, nothing else running: 127 CPU s at autoconf's "-g -O2", 110 at -O2, 88 at
# -O1, 71 at -O0; 2026-11-30), and the brokers' own CPU in the whole suite is a few seconds.
# --disable-static: libtool otherwise compiles every library source twice (for a .so and a .a),
# and Flux installs no static library anyway (its link flags say --disable-static): make -j2 at
# -O1, 94 -> 67 CPU s (2026-12-01).
# --disable-dependency-tracking: a build made once and never rebuilt needs no .deps files
# (configure and make -j2, 74 -> 65 CPU s, 2026-12-01).
CFLAGS_FLUX="-O1"
CONFIGURE_FLUX=(--disable-docs --disable-static --disable-dependency-tracking)
want="flux-core $VERSION $SHA256 CFLAGS=$CFLAGS_FLUX ${CONFIGURE_FLUX[*]}"
if [ -x "$PREFIX/bin/flux" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  echo "flux: ok ($PREFIX/bin/flux, cached)"
  exit 0
fi
[ -f "$TARBALL" ] || { echo "flux: $TARBALL not found: put flux-core-$VERSION.tar.gz there or set DASK_HPC_FLUX_TARBALL" >&2; exit 1; }
echo "$SHA256  $TARBALL" | sha256sum -c --quiet - \
  || { echo "flux: $TARBALL is not flux-core $VERSION (sha256 differs)" >&2; exit 1; }
build="$(mktemp -d "$CACHE/.flux-build.XXXXXX")"
trap 'rm -rf "$build"' EXIT
tar -xzf "$TARBALL" -C "$build"
rm -f "$STAMP"
(
  cd "$build/flux-core-$VERSION"
  ./configure -q --prefix="$PREFIX" "${CONFIGURE_FLUX[@]}" PYTHON=/usr/bin/python3 \
    CFLAGS="$CFLAGS_FLUX" >"$build/configure.log" 2>&1 \
    || { tail -n 40 "$build/configure.log" >&2; exit 1; }
  make -s -j"$(nproc)" >"$build/make.log" 2>&1 || { tail -n 60 "$build/make.log" >&2; exit 1; }
  make -s install >"$build/install.log" 2>&1 || { tail -n 40 "$build/install.log" >&2; exit 1; }
)
"$PREFIX/bin/flux" version >/dev/null
echo "$want" >"$STAMP"
echo "flux: built $PREFIX/bin/flux ($(version "$PREFIX/bin/flux"))"
