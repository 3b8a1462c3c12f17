# Sourced by the setup parts that need Debian packages (ansible.sh, enroot.sh, flux.sh, podman.sh).
#
# apt_need WHO WHAT PACKAGE...: install those of PACKAGE... that are not installed (one
# dpkg-query for all: a second run only checks, well under a second). install.sh runs its parts
# side by side, and `apt-get update` does not wait for the lock of apt's lists (dpkg's lock
# timeout, DPkg::Lock::Timeout, covers dpkg's alone): on a fresh machine two parts' updates met
# and one failed with "Could not get lock /var/lib/apt/lists/lock" (2026-11-30). So each part's
# update and install hold one lock of ours in turn (flock, at most 10 minutes, on dpkg's
# directory: root's alone, where nobody else can plant a file), and wait for dpkg's lock too,
# should anything else hold it. On a failure: apt-get's last 30 lines, then one line "WHO: apt-get could not install
# WHAT: PACKAGES", and exit 1. APT_INSTALLED holds what it installed (empty: nothing was
# missing).
apt_need() {
  local who=$1 what=$2 installed p log lock
  shift 2
  installed="$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "$@" 2>/dev/null || true)"
  APT_INSTALLED=()
  for p in "$@"; do grep -q "^$p ii" <<<"$installed" || APT_INSTALLED+=("$p"); done
  [ ${#APT_INSTALLED[@]} -gt 0 ] || return 0
  log="$(mktemp)"
  if ! { exec {lock}</var/lib/dpkg && flock -w 600 "$lock" \
         && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -qq \
         && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
              --no-install-recommends "${APT_INSTALLED[@]}"; } >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "$who: apt-get could not install $what: ${APT_INSTALLED[*]}" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
  exec {lock}>&-
}
