    # The stack from wheels made on the build host (no index, no network)
    python3 -m venv /opt/dask-hpc/venv
    /opt/dask-hpc/venv/bin/pip install --no-cache-dir --no-index --find-links /opt/dask-hpc/wheels dask-hpc @{pip_packages}
    rm -rf /opt/dask-hpc/wheels
