#!/bin/bash -l
@{directives}
@{summary}
set -euo pipefail
cd "${PBS_O_WORKDIR:-.}"
@{setup}
@{launch}
