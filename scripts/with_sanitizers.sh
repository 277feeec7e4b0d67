#!/usr/bin/env bash
# Runs a command with both op libraries built under AddressSanitizer and UndefinedBehaviorSanitizer:
#
#   bash scripts/with_sanitizers.sh python -m pytest -q tests/functional_optim/test_fused_kernels.py
#
# (CI's sanitizer pass, scripts/run_tests.sh). The libraries are built once into build/sanitize/
# in the checkout (GILFREE_SANITIZE=address,undefined, setup.py; ignored by git) and rebuilt
# only where a source changed; the checkout's own libraries stay as they are. The command then
# runs with the checkout on PYTHONPATH, those libraries named by GILFREE_RPC_LIBRARY and
# GILFREE_OPTIM_LIBRARY (the packages load them instead of their own; so do the worker processes
# the tests start, which inherit the environment) and the sanitizers' runtime preloaded (ASan must
# be the first library of a process, and python is not built with it):
# * every report ends the process with an error (ASan's default, UBSan's -fno-sanitize-recover),
#   so the test that caused it fails;
# * what torch and Python themselves report is suppressed, each with its reason, in
#   scripts/sanitizers.supp (LeakSanitizer reports too: Python frees little at exit);
# * GILFREE_KERNEL_ISAS (default: native) chooses the kernels' instruction sets.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
    echo "usage: bash scripts/with_sanitizers.sh COMMAND [ARGS...]" >&2
    exit 2
fi
PYTHON="${PYTHON:-python3}"
BUILD="build/sanitize"
if [ -d /usr/lib/ccache ]; then
    export PATH="/usr/lib/ccache:$PATH"
fi
mkdir -p "$BUILD"
echo "[with_sanitizers] ${SECONDS} s: building the op libraries with ASan and UBSan into $BUILD"
if ! GILFREE_SANITIZE=address,undefined GILFREE_KERNEL_ISAS="${GILFREE_KERNEL_ISAS:-native}" \
        "$PYTHON" setup.py build_ext --build-lib "$BUILD/lib" --build-temp "$BUILD/temp" > "$BUILD/build.log" 2>&1; then
    tail -n 60 "$BUILD/build.log" >&2
    echo "with_sanitizers.sh: the sanitizer build failed (log: $BUILD/build.log)" >&2
    exit 1
fi
echo "[with_sanitizers] ${SECONDS} s: ready"
CXX="$("$PYTHON" -c 'import sysconfig; print((sysconfig.get_config_var("CXX") or "g++").split()[0])')"
ASAN_RUNTIME="$("$CXX" -print-file-name=libasan.so)"
if [ ! -e "$ASAN_RUNTIME" ]; then
    echo "with_sanitizers.sh: $CXX has no libasan.so ($ASAN_RUNTIME)" >&2
    exit 1
fi
# libstdc++ preloaded beside it: python does not link it, and ASan's interceptor of __cxa_throw
# finds no real one when libstdc++ comes later (a CHECK failure at the first C++ exception)
STDCXX="$("$CXX" -print-file-name=libstdc++.so.6)"
SUPP="$PWD/scripts/sanitizers.supp"
# detect_leaks=0: see sanitizers.supp; abort_on_error: the process ends by SIGABRT, which the
# tests' process watchers report.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:suppressions=$SUPP${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1:suppressions=$SUPP${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
GILFREE_RPC_LIBRARY="$(ls "$PWD/$BUILD"/lib/plugin/_C*.so)"
GILFREE_OPTIM_LIBRARY="$(ls "$PWD/$BUILD"/lib/functional_optim/_C*.so)"
export GILFREE_RPC_LIBRARY GILFREE_OPTIM_LIBRARY GILFREE_SANITIZED=1
# last: this script's own commands run without the runtime
export LD_PRELOAD="$ASAN_RUNTIME:$STDCXX${LD_PRELOAD:+:$LD_PRELOAD}"
exec "$@"
