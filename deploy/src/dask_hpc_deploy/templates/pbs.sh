#!/bin/bash
@{directives}
# dask-hpc on @{site}: @{nodes} node(s) x @{per_node} @{worker_type} worker(s), one container per rank.
set -euo pipefail
cd "${PBS_O_WORKDIR:-.}"
@{setup}
@{launch}
