#!/usr/bin/env bash
# Developer check (not CI): concretize every dask-hpc Spack environment offline.
#
#   spack/check-concretize.sh SPACK_DIR SPACK_PACKAGES_DIR [ENV...]
#
# SPACK_DIR is a Spack 1.1 checkout, SPACK_PACKAGES_DIR a spack-packages checkout
# (the builtin repository). Python needs the clingo module (pip install clingo).
# Downloads nothing: bootstrapping is disabled and Spack's configuration is
# kept in a private temporary directory. Environments run one at a time.
# Set LOG_DIR to keep each environment's full log (LOG_DIR/ENV.log) and its
# concretized specs (LOG_DIR/ENV.spec); otherwise only the head of an error is shown.
# TIMEOUT (seconds) bounds each environment's solve (default: none).
set -euo pipefail

if [ $# -lt 2 ]; then
  sed -n 2,12p "$0" >&2
  exit 2
fi
spack_dir="$(cd "$1" && pwd)"
packages_dir="$(cd "$2" && pwd)"
shift 2
here="$(cd "$(dirname "$0")" && pwd)"
builtin="$packages_dir/repos/spack_repo/builtin"
[ -x "$spack_dir/bin/spack" ] || { echo "no bin/spack in $spack_dir" >&2; exit 2; }
[ -f "$builtin/repo.yaml" ] || { echo "no builtin repository in $packages_dir" >&2; exit 2; }

envs=("$@")
if [ ${#envs[@]} -eq 0 ]; then
  for d in "$here"/envs/*/; do envs+=("$(basename "$d")"); done
fi

if [ -n "${LOG_DIR:-}" ]; then mkdir -p "$LOG_DIR"; LOG_DIR="$(cd "$LOG_DIR" && pwd)"; fi
work="$(mktemp -d "${TMPDIR:-/tmp}/dask-hpc-spack.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# (Not SPACK_DISABLE_LOCAL_CONFIG: that would drop the private user scope too.)
export SPACK_USER_CONFIG_PATH="$work/config"
export SPACK_USER_CACHE_PATH="$work/cache"
export SPACK_PYTHON="${SPACK_PYTHON:-$(command -v python3)}"
mkdir -p "$SPACK_USER_CONFIG_PATH"
cat > "$SPACK_USER_CONFIG_PATH/repos.yaml" <<YAML
repos::
  builtin: $builtin
YAML
cat > "$SPACK_USER_CONFIG_PATH/bootstrap.yaml" <<YAML
bootstrap:
  enable: false
YAML
"$SPACK_PYTHON" -c 'import clingo' || { echo "python module clingo missing" >&2; exit 2; }

# The environments are checked with the one Spack release and spack-packages commit that the
# image builds use (spack/pins.yaml); ANY_COMMIT=1 allows others (results then do not count).
want_spack="$(sed -n 's/^spack: *v\{0,1\}\([0-9.]*\).*/\1/p' "$here/pins.yaml")"
want_packages="$(sed -n 's/^spack_packages: *\([0-9a-f]*\).*/\1/p' "$here/pins.yaml")"
have_spack="$("$spack_dir/bin/spack" --version | cut -d' ' -f1)"
have_packages="$(git -C "$packages_dir" rev-parse HEAD 2>/dev/null || echo unknown)"
if [ "$have_spack" != "$want_spack" ] || [ "$have_packages" != "$want_packages" ]; then
  echo "spack $have_spack with spack-packages $have_packages; spack/pins.yaml says" \
    "$want_spack with $want_packages" >&2
  [ "${ANY_COMMIT:-0}" = 1 ] || exit 2
fi

# Environments are copied so that Spack's lock files and .spack-env stay out of the
# source tree; the copy keeps the layout the relative paths need.
cp -r "$here/common.yaml" "$here/include" "$here/repo" "$work/"
mkdir -p "$work/envs"
key='python|py-dask-hpc|py-dask|py-distributed|py-bokeh|py-numpy|py-pandas|py-cupy|cuda|hip'
key="$key|gcc|intel-oneapi-compilers|glibc"
# dask-hpc's version as the image build gets it (setuptools-scm, from git: invoke build)
version="$(python3 -m setuptools_scm -c "$(dirname "$here")/pyproject.toml")"
status=0
for env in "${envs[@]}"; do
  mkdir -p "$work/envs/$env"
  cp "$here/envs/$env/spack.yaml" "$work/envs/$env/"
  log="$work/$env.log"
  start=$(date +%s)
  # As the image build does: dask-hpc itself comes from this source tree, at its git version.
  if "$spack_dir/bin/spack" -e "$work/envs/$env" develop --no-clone \
       --path "$(dirname "$here")" "py-dask-hpc@=$version" >"$log" 2>&1 &&
     timeout "${TIMEOUT:-0}" "$spack_dir/bin/spack" -e "$work/envs/$env" concretize -f \
       >>"$log" 2>&1; then
    took=$(( $(date +%s) - start ))
    "$spack_dir/bin/spack" -e "$work/envs/$env" spec -l --no-install-status \
      >"$work/$env.spec" 2>/dev/null || true
    picked=$(grep -oE "(^|[ ^])($key)@[^ %+~]+" "$work/$env.spec" | tr -d ' ^' | sort -u \
      | tr '\n' ' ')
    echo "OK   $env ${took}s $picked"
    if [ -n "${LOG_DIR:-}" ]; then cp "$work/$env.spec" "$LOG_DIR/$env.spec"; fi
  else
    took=$(( $(date +%s) - start ))
    echo "FAIL $env ${took}s (log below)"
    grep -q Error "$log" && sed -n "/Error/,\$p" "$log" | head -60 || tail -60 "$log"
    status=1
  fi
  if [ -n "${LOG_DIR:-}" ]; then cp "$log" "$LOG_DIR/$env.log"; fi
done
exit $status
