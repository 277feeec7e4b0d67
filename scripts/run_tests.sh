#!/usr/bin/env bash
# Sets the machine up (scripts/setup_env.sh), runs the test suite, then builds the docs
# with warnings treated as errors. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
bash scripts/setup_env.sh
"$PYTHON" -m pytest -q "$@"
"$PYTHON" -m sphinx -W --keep-going -b html docs docs/_build/html
