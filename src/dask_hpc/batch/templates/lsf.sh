#!/bin/bash
@{directives}
@{summary}
set -euo pipefail
cd "${LS_SUBCWD:-.}"
@{setup}
@{launch}
