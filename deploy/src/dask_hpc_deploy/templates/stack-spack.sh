    # The stack from the site's Spack environment (spack/envs/@{name}, see spack/README.md)
    git clone --quiet --depth 1 --branch "{{ spack_version }}" https://github.com/spack/spack /opt/spack
    # The builtin packages at the commit the environments were checked with (spack/pins.yaml)
    git init --quiet /opt/spack-packages
    git -C /opt/spack-packages fetch --quiet --depth 1 https://github.com/spack/spack-packages "{{ spack_packages }}"
    git -C /opt/spack-packages checkout --quiet FETCH_HEAD
    printf 'repos::\n  builtin: /opt/spack-packages/repos/spack_repo/builtin\n' > /opt/spack/etc/spack/repos.yaml
    . /opt/spack/share/spack/setup-env.sh
    env=/opt/dask-hpc/spack/envs/@{name}
    spack -e "$env" config add "config:install_tree:root:/opt/dask-hpc/store"
    spack -e "$env" develop --no-clone --path /opt/dask-hpc/src "py-dask-hpc@={{ dask_hpc_version }}"
    spack -e "$env" concretize -f
    spack -e "$env" install --fail-fast -j "$(nproc)"
    spack -e "$env" gc -y
    # What Spack lacks (dask-cuda, dpnp, dpctl) from PyPI, never replacing what Spack built
    /opt/dask-hpc/view/bin/python3 -m venv --system-site-packages /opt/dask-hpc/venv
    /opt/dask-hpc/view/bin/python3 -m pip freeze > /opt/dask-hpc/constraints.txt
    pip="/opt/dask-hpc/venv/bin/pip install --no-cache-dir"
    if [ -s "$env/pypi-nodeps.txt" ]; then $pip --no-deps -r "$env/pypi-nodeps.txt"; fi
    if [ -s "$env/pypi.txt" ]; then $pip -c /opt/dask-hpc/constraints.txt -r "$env/pypi.txt"; fi
    rm -rf /opt/spack /opt/spack-packages /root/.spack
