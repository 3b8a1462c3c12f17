# Sourced by the setup parts that fetch from Debian's archive themselves (ansible.sh's debootstrap,
# podman.sh's squashfs-tools source). The mirror is never written down: it is this machine's.
host_debian_mirror() {
  # First Debian archive URI of this machine's apt sources (deb822 or one-line format).
  local f uri
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list /etc/apt/sources.list; do
    [ -f "$f" ] || continue
    uri="$(awk '
      /^URIs:/ { for (i = 2; i <= NF; i++) print $i }
      /^deb / { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }
    ' "$f" | grep -E '/debian/?$' | head -n1 || true)"
    if [ -n "$uri" ]; then echo "${uri%/}"; return 0; fi
  done
  echo "no Debian mirror in this machine's apt sources" >&2
  return 1
}
