#!/usr/bin/env bash
# dpnp on a real SYCL device for tests/test_aurora_dpnp.py: Intel's Data Parallel Python (dpnp,
# dpctl) and the oneAPI runtime wheels it runs on (SYCL, Unified Runtime, oneMKL, and the OpenCL
# CPU runtime intel-opencl-rt, which is the SYCL device here: no Intel GPU on CI machines).
#
# They go into a venv of their own ($CACHE/dpnp-venv, ~3 GB: the wheels copy each .so per name),
# seeing the suite's site-packages (dask, distributed, numpy: a .pth adding them as a site
# directory, after its own) and holding dask-hpc editable from this checkout, so it has its own `start-cluster`. Kept apart because dpnp makes
# examples/pi.py choose dpnp, and the runtime wheels put libOpenCL, TBB and OpenMP into
# <prefix>/lib. Every version is pinned; a second run only checks (well under a second).
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE=${DASK_HPC_TEST_CACHE:-/var/tmp/dask-hpc-tests}
VENV=$CACHE/dpnp-venv
PYTHON=${PYTHON:-python3}
# dpnp and dpctl as in pyproject.toml's `aurora` extra; the runtime wheels as resolved for them.
PINS=(
  dpnp==0.20.0 dpctl==0.22.1
  dpcpp-cpp-rt==2026.2.0 intel-sycl-rt==2026.2.0 intel-opencl-rt==2026.2.0
  intel-cmplr-lib-rt==2026.2.0 intel-cmplr-lib-ur==2026.2.0 intel-cmplr-lic-rt==2026.2.0
  intel-openmp==2026.2.0 mkl==2026.2.0 onemkl-sycl-blas==2026.2.0 onemkl-sycl-dft==2026.2.0
  onemkl-sycl-lapack==2026.2.0 onemkl-sycl-rng==2026.2.0 onemkl-sycl-vm==2026.2.0
  tbb==2023.2.0 tcmlib==1.6.0 umf==1.2.0
)
STAMP=$VENV/.dask-hpc-dpnp
# the suite's site-packages (tests/setup/python.sh's venv: python3 on PATH here)
suite_site=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
want="${PINS[*]} | $repo"

mkdir -p "$CACHE"
exec 9>"$CACHE/.dpnp-setup.lock"  # one setup at a time
flock 9

if [ -x "$VENV/bin/python" ] && grep -q "include-system-site-packages = true" "$VENV/pyvenv.cfg"; then
  rm -rf "$VENV"  # made before the suite had a venv of its own: it saw that Python's packages
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
# written on every run: the checkout whose suite runs next is the one it names
"$VENV/bin/python" -c 'import sysconfig, sys
with open(sysconfig.get_path("purelib") + "/dask-hpc-suite.pth", "w") as pth:
    pth.write(f"import site; site.addsitedir({sys.argv[1]!r})\n")' "$suite_site"
if [ -x "$VENV/bin/start-cluster" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  exit 0
fi
rm -f "$STAMP"
# shellcheck source=uv_install.sh
. "$repo/tests/setup/uv_install.sh"
uv_install "$VENV/bin/python" -q "${PINS[@]}"
# dask-hpc itself, for the venv's own start-cluster (its dependencies come from the suite's).
uv_install "$VENV/bin/python" -q --no-deps -e "$repo"
echo "$want" >"$STAMP"
