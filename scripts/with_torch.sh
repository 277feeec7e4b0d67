#!/usr/bin/env bash
# Runs a command on another torch release than the system's, the plugin built against it:
#
#   bash scripts/with_torch.sh 2.15.0 python -m pytest -q tests/engine
#
# (CI's second test pass, scripts/run_tests.sh). Set up on first use and reused after:
# * a virtual environment with that torch (requirements/torch-<major>.<minor>.txt) and the test
#   packages (setup.py's extras "test" and "job"), in $GILFREE_CACHE/torch-<version> (default
#   ~/.cache/gilfree-rpc), outside the checkout: torch's wheel on PyPI is a CUDA build (it runs on
#   the CPU; about 5.3 GB installed, 3 GB downloaded), fetched once per machine;
# * the two op libraries built against that torch into build/torch-<version>/ in the checkout
#   (ignored by git), not in place: the checkout's own libraries (plugin/_C*.so,
#   functional_optim/_C*.so) stay built against the system's torch. The build must print no
#   warning (but one of GCC 12's, below); what is checked is what the build compiles (a fresh
#   checkout: everything; ccache repeats a cached compilation's warnings).
# The command then runs in the checkout with the environment's python first on PATH, the
# checkout on PYTHONPATH and those libraries named by GILFREE_RPC_LIBRARY and
# GILFREE_OPTIM_LIBRARY, which the packages load instead of their own (and so do the worker
# processes the tests start, which inherit the environment).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
    echo "usage: bash scripts/with_torch.sh VERSION COMMAND [ARGS...]" >&2
    exit 2
fi
VERSION="$1"
shift
REQUIREMENTS="requirements/torch-${VERSION%.*}.txt"
if ! grep -qx "torch==$VERSION" "$REQUIREMENTS" 2>/dev/null; then
    echo "with_torch.sh: $REQUIREMENTS does not ask for torch==$VERSION" >&2
    exit 2
fi
VENV="${GILFREE_CACHE:-$HOME/.cache/gilfree-rpc}/torch-$VERSION"
PY="$VENV/bin/python"
BUILD="build/torch-$VERSION"
# The compiler through ccache where the machine has it (a second build of the same sources is quick).
if [ -d /usr/lib/ccache ]; then
    export PATH="/usr/lib/ccache:$PATH"
fi

# What the environment was made from; it is complete once this is written into it.
WANT="$(cat "$REQUIREMENTS" setup.py pyproject.toml | sha256sum | cut -c1-16)"
if [ "$(cat "$VENV/.gilfree-ready" 2>/dev/null)" != "$WANT" ]; then
    echo "[with_torch] ${SECONDS} s: preparing $VENV (torch $VERSION; several GB on first use)"
    [ -x "$PY" ] || python3 -m venv "$VENV"
    # Some machines cap pip's torch with a constraints file in pip's global configuration;
    # this environment asks for its own release, so that constraint is replaced for these
    # installs (PIP_CONSTRAINT overrides the configuration's; the other settings stay).
    # --no-cache-dir: the environment is the cache; a second copy of the wheels is 3 GB more.
    # shellcheck disable=SC2046  # the build tools (pyproject.toml's), one per word
    PIP_CONSTRAINT=/dev/null "$PY" -m pip install --quiet --no-cache-dir -r "$REQUIREMENTS" $("$PY" scripts/requirements.py build)
    # setup.py's extras "test" and "job" (scripts/requirements.py reads them)
    extras="$("$PY" scripts/requirements.py --missing test,job)"
    # shellcheck disable=SC2086  # one package per word
    [ -z "$extras" ] || PIP_CONSTRAINT=/dev/null "$PY" -m pip install --quiet $extras
    echo "$WANT" > "$VENV/.gilfree-ready"
fi
installed="$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')"
if [ "$installed" != "$VERSION" ]; then
    echo "with_torch.sh: $VENV holds torch $installed, not $VERSION (remove the folder to make it again)" >&2
    exit 1
fi

mkdir -p "$BUILD"
echo "[with_torch] ${SECONDS} s: building the op libraries against torch $VERSION into $BUILD"
if ! PATH="$VENV/bin:$PATH" "$PY" setup.py build_ext --build-lib "$BUILD/lib" --build-temp "$BUILD/temp" \
        > "$BUILD/build.log" 2>&1; then
    tail -n 60 "$BUILD/build.log" >&2
    echo "with_torch.sh: the build against torch $VERSION failed (log: $BUILD/build.log)" >&2
    exit 1
fi
# Every warning fails, but GCC 12's about its own AVX-512 intrinsics header ("'__Y' may be used
# uninitialized" in avx512fintrin.h, GCC bug 105593, fixed in GCC 13), which the fused kernels
# get with any torch.
if grep -i "warning:" "$BUILD/build.log" | grep -v "^/usr/lib/gcc/.*/include/avx512[a-z]*intrin.h:.*\[-Wmaybe-uninitialized\]" >&2; then
    echo "with_torch.sh: the build against torch $VERSION printed the warnings above (log: $BUILD/build.log)" >&2
    exit 1
fi

echo "[with_torch] ${SECONDS} s: ready"
export PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
GILFREE_RPC_LIBRARY="$(ls "$PWD/$BUILD"/lib/plugin/_C*.so)"
GILFREE_OPTIM_LIBRARY="$(ls "$PWD/$BUILD"/lib/functional_optim/_C*.so)"
export GILFREE_RPC_LIBRARY GILFREE_OPTIM_LIBRARY
exec "$@"
