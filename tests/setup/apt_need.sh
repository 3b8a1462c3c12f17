# Sourced by the setup parts that need Debian packages (enroot.sh, flux.sh, podman.sh).
#
# apt_need WHO WHAT PACKAGE...: install those of PACKAGE... that are not installed (one
# dpkg-query for all: a second run only checks, well under a second). install.sh runs its parts
# side by side, so apt-get waits for dpkg's lock (DPkg::Lock::Timeout) rather than failing on
# it. On a failure: apt-get's last 30 lines, then one line "WHO: apt-get could not install
# WHAT: PACKAGES", and exit 1. APT_INSTALLED holds what it installed (empty: nothing was
# missing).
apt_need() {
  local who=$1 what=$2 installed p log
  shift 2
  installed="$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "$@" 2>/dev/null || true)"
  APT_INSTALLED=()
  for p in "$@"; do grep -q "^$p ii" <<<"$installed" || APT_INSTALLED+=("$p"); done
  [ ${#APT_INSTALLED[@]} -gt 0 ] || return 0
  log="$(mktemp)"
  if ! { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -qq \
         && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
              --no-install-recommends "${APT_INSTALLED[@]}"; } >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "$who: apt-get could not install $what: ${APT_INSTALLED[*]}" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
}
