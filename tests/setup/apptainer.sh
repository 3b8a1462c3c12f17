#!/usr/bin/env bash
# Real Apptainer on a Debian 12 host: Debian sid's apptainer inside a sid root filesystem.
#
# No apptainer package runs on bookworm, so we make a sid root filesystem with mmdebstrap (mirror
# read from the host's apt sources) with apptainer, squashfs-tools, debootstrap and MPICH in it,
# and enter it with unshare + pivot_root (apptainer refuses a plain chroot). The root filesystem is cached as a
# tarball under /var/tmp/dask-hpc-tests/; a second run only checks it (well under a second).
#
# Installs two commands on the host:
#   sidroot CMD...   run CMD inside the root filesystem (host /tmp, /var/tmp and the current
#                    directory are bound at the same paths; the namespace's processes all end
#                    when CMD ends or when sidroot is killed)
#   apptainer ...    `sidroot apptainer ...`; `apptainer build` runs in a user namespace mapped
#                    0 0 65536 (this host lacks CAP_SYS_RESOURCE in its bounding set)
# A real apptainer already on PATH is left alone.
set -euo pipefail

CACHE=${DASK_HPC_TEST_CACHE:-/var/tmp/dask-hpc-tests}
ROOTFS=$CACHE/apptainer-sid
VERSION=2  # bump when the root filesystem's recipe changes (2: made by mmdebstrap)
TARBALL=$CACHE/apptainer-sid-v$VERSION.tar
BIN=$CACHE/bin
STAMP=.dask-hpc-rootfs-v$VERSION
PACKAGES=apptainer,squashfs-tools,uidmap,debootstrap,mpich,mount,ca-certificates

mkdir -p "$CACHE"
# One setup at a time (install.sh may run while a developer runs this script).
exec 9>"$CACHE/.apptainer-setup.lock"
flock 9
mkdir -p "$BIN"

host_mirror() {
  # The host's Debian mirror: the URI serving "<codename>/main" in apt's own view of its sources.
  local codename
  codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
  apt-cache policy | awk -v s="$codename/main" '$3 == s && $2 ~ /^https?:/ {print $2; exit}'
}

enter_script() {
  # Body of the namespace entry: runs as PID 1 of a new mount+pid namespace.
  cat <<'EOF'
set -eu
root=$1; shift
if [ "${SIDROOT_WAIT_MAP:-0}" = 1 ]; then
  n=0
  until grep -q . /proc/self/uid_map; do
    n=$((n + 1))
    [ $n -lt 20000 ] || { echo "sidroot: uid map never written" >&2; exit 1; }
  done
  unset SIDROOT_WAIT_MAP
fi
cwd=$(pwd)
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
for d in /tmp /var/tmp $SIDROOT_BINDS; do
  [ -d "$d" ] || continue
  mkdir -p "$root$d"
  mount --rbind "$d" "$root$d"
done
for f in /etc/hosts /etc/resolv.conf; do
  if [ -f "$f" ] && ! cmp -s "$f" "$root$f"; then cp "$f" "$root$f.$$" && mv -f "$root$f.$$" "$root$f"; fi
done
mkdir -p "$root/.oldroot"
cd "$root"
pivot_root . .oldroot
umount -l /.oldroot
cd "$cwd" 2>/dev/null || cd /
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
exec "$@"
EOF
}

install_commands() {
  # Written aside, then renamed: a running sh reads its script as it goes.
  enter_script >"$BIN/.sidroot-enter.new"
  sed -e "s|@BIN@|$BIN|g" -e "s|@ROOTFS@|$ROOTFS|g" >"$BIN/.sidroot.new" <<'EOF'
#!/bin/sh
# Run a command inside the Apptainer root filesystem (see tests/setup/apptainer.sh).
# SIDROOT_USERNS=1: also a new user namespace mapped 0 0 65536 (full capabilities inside).
cwd=$(pwd)
case "$cwd" in /|/tmp|/tmp/*|/var/tmp|/var/tmp/*) binds= ;; *) binds=$cwd ;; esac
SIDROOT_BINDS="$binds ${SIDROOT_EXTRA_BINDS:-}"
export SIDROOT_BINDS
set -- --mount --pid --kill-child --propagation private /bin/sh @BIN@/sidroot-enter @ROOTFS@ "$@"
[ "${SIDROOT_USERNS:-0}" = 1 ] || exec unshare "$@"
# newuidmap refuses 0-65535 without /etc/subuid entries; root writes the maps itself instead.
exec 3<&0
SIDROOT_WAIT_MAP=1 unshare --user "$@" <&3 &
pid=$!
trap 'kill $pid 2>/dev/null' HUP INT TERM
own=$(readlink /proc/self/ns/user)
n=0
while [ "$(readlink /proc/$pid/ns/user 2>/dev/null)" = "$own" ]; do
  n=$((n + 1))
  [ $n -lt 20000 ] || { echo "sidroot: no user namespace" >&2; kill $pid; exit 1; }
done
echo "0 0 65536" >/proc/$pid/uid_map
echo "0 0 65536" >/proc/$pid/gid_map
wait $pid; rc=$?
trap - HUP INT TERM
exit $rc
EOF
  sed -e "s|@BIN@|$BIN|g" >"$BIN/.apptainer.new" <<'EOF'
#!/bin/sh
# apptainer from the sid root filesystem (see tests/setup/apptainer.sh).
if [ "${1:-}" = build ]; then SIDROOT_USERNS=1; export SIDROOT_USERNS; fi
exec @BIN@/sidroot apptainer "$@"
EOF
  chmod 755 "$BIN/.sidroot.new" "$BIN/.apptainer.new"
  for f in sidroot-enter sidroot apptainer; do
    if cmp -s "$BIN/.$f.new" "$BIN/$f"; then rm -f "$BIN/.$f.new"; else mv -f "$BIN/.$f.new" "$BIN/$f"; fi
  done
  ln -sf "$BIN/sidroot" /usr/local/bin/sidroot
  local found
  found=$(command -v apptainer || true)
  if [ -z "$found" ] || [ "$(readlink -f "$found")" = "$BIN/apptainer" ]; then
    ln -sf "$BIN/apptainer" /usr/local/bin/apptainer
  else
    echo "apptainer.sh: keeping the apptainer already at $found"
  fi
}

build_rootfs() {
  local mirror tmp
  mirror=$(host_mirror)
  [ -n "$mirror" ] || { echo "apptainer.sh: no Debian mirror in the host's apt sources" >&2; exit 1; }
  tmp=$ROOTFS.partial
  rm -rf "$tmp"
  echo "apptainer.sh: mmdebstrap sid from $mirror"
  # mmdebstrap, as tests/setup/ansible.sh's root filesystems (debootstrap's minbase in about
  # half the CPU), with sid's merged /usr as debootstrap makes it. apt checks a Release file's
  # Valid-Until, debootstrap never did: a mirror that is a snapshot serves sid's past its date
  # (the signature is still checked). The setting is not left in the root filesystem.
  mmdebstrap --variant=minbase --include="$PACKAGES" --aptopt='Acquire::Check-Valid-Until "false"' \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr sid "$tmp" "$mirror" \
    >"$CACHE/mmdebstrap.log" 2>&1 || { tail -20 "$CACHE/mmdebstrap.log" >&2; exit 1; }
  rm -f "$tmp/etc/apt/apt.conf.d/99mmdebstrap"
  sed -i 's/^#* *root default capabilities *=.*/root default capabilities = file/' \
    "$tmp/etc/apptainer/apptainer.conf"
  grep -q '^root default capabilities = file' "$tmp/etc/apptainer/apptainer.conf"
  rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*_Packages
  touch "$tmp/$STAMP"
  tar -C "$tmp" -cf "$TARBALL.partial" .
  mv "$TARBALL.partial" "$TARBALL"
  mv "$tmp" "$ROOTFS"
}

if [ ! -f "$ROOTFS/$STAMP" ]; then
  rm -rf "$ROOTFS"
  if [ -f "$TARBALL" ]; then
    mkdir -p "$ROOTFS.partial"
    tar -C "$ROOTFS.partial" -xf "$TARBALL"
    mv "$ROOTFS.partial" "$ROOTFS"
  else
    build_rootfs
  fi
fi
install_commands
apptainer --version
