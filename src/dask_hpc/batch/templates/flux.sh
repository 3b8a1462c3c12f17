#!/bin/bash
@{directives}
@{summary}
set -euo pipefail
@{setup}
@{launch}
