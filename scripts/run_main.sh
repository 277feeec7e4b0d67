#!/usr/bin/env bash
# Sets the machine up (scripts/setup_env.sh), then runs the main job: model-parallel
# training on scikit-learn's digits with every worker on loopback. Extra arguments go to
# scripts/train.py (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
bash scripts/setup_env.sh
"$PYTHON" scripts/train.py "$@"
