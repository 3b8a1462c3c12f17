    # The stack from the site's Spack environment (spack/envs/@{name}/spack.yaml)
    git clone --quiet --depth 1 --branch "{{ spack_version }}" https://github.com/spack/spack /opt/spack
    . /opt/spack/share/spack/setup-env.sh
    env=/opt/dask-hpc/spack/envs/@{name}
    spack -e "$env" config add "config:install_tree:root:/opt/dask-hpc/store"
    spack -e "$env" concretize --fresh
    spack -e "$env" install --fail-fast -j "$(nproc)"
    spack -e "$env" gc -y
    /opt/dask-hpc/view/bin/python3 -m venv --system-site-packages /opt/dask-hpc/venv
    @{pip_line}
    rm -rf /opt/spack /root/.spack /opt/dask-hpc/wheels
