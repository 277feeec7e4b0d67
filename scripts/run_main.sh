#!/usr/bin/env bash
# Sets the machine up (scripts/setup_env.sh), then runs the main job: a parameter server
# (4 trainers, 2 servers, a 2.2M-parameter MLP) training on scikit-learn's digits, every
# worker on this machine. Extra arguments go to scripts/train.py (see --help). Its metrics and
# loss curve go into a new folder under runs/ (ignored by git), named at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
bash scripts/setup_env.sh
"$PYTHON" scripts/train.py "$@"
