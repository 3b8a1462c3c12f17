# Sourced by the setup parts that install Python packages into a venv (python.sh, dpnp.sh,
# newest_dask.sh, user_python.sh, ansible.sh, podman.sh).
#
# uv_install PYTHON ARG...: `PYTHON -m pip install ARG...` done by uv (`uv pip install --python
# PYTHON --compile-bytecode --link-mode copy ARG...`; -q, -e, -c, --no-deps, --upgrade mean the
# same), into a venv made by `python3 -m venv` as before (it keeps its pip). The same versions as
# pip's resolver picks (pip freeze of the suite's venv, made both ways, 2026-12-01: identical),
# for half the CPU and a third of the time, files copied as pip does: the suite's venv from the
# package index, pip 40.8 CPU s in 42.6 s, uv 20.2 CPU s in 12.4 s; dpnp's runtime wheels 24
# against 14 CPU s. The install's parts run side by side on a CPU-bound machine, so what they
# save goes to the others (issue 47). uv itself is installed once, by pip, into $CACHE/uv
# (pinned). What users run stays pip: the README's commands and the role's installs are tested
# with pip.
# uv reads no pip configuration: where this machine's pip has a certificate (PIP_CERT) and no
# SSL_CERT_FILE is set, uv is given it; uv's own cache is ~/.cache/uv, as pip's ~/.cache/pip.
UV_VERSION=0.13.9
UV_PREFIX=${DASK_HPC_TEST_CACHE:-/var/tmp/dask-hpc-tests}/uv

uv_has_version() {
  case "$("$UV_PREFIX/bin/uv" --version 2>/dev/null)" in "uv $UV_VERSION"|"uv $UV_VERSION "*) ;; *) return 1 ;; esac
}

uv_install() {
  local python=$1
  shift
  if ! uv_has_version; then
    mkdir -p "$(dirname "$UV_PREFIX")"
    (
      flock 8  # the parts that run side by side install it once
      if ! uv_has_version; then
        rm -rf "$UV_PREFIX"
        /usr/bin/python3 -m venv "$UV_PREFIX"
        "$UV_PREFIX/bin/python" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION" \
          2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' >&2 || true; }
      fi
    ) 8>"$UV_PREFIX.lock"
  fi
  # uv's lock files (a 0666 uv-setuptools-HASH.lock per build environment) go to TMPDIR: a
  # directory of its own, not /tmp, where another user could make those names first
  install -d -m 700 "$UV_PREFIX.tmp"
  local cert=${SSL_CERT_FILE:-${PIP_CERT:-}}
  TMPDIR="$UV_PREFIX.tmp" SSL_CERT_FILE="$cert" "$UV_PREFIX/bin/uv" pip install --python "$python" \
    --compile-bytecode --link-mode copy "$@"
}
