#!/usr/bin/env bash
# Sets the machine up (scripts/setup_env.sh), runs the test suite, runs the engine, optimizer,
# RPC, docs-example and main-job tests again with torch.jit's entry points raising (as torch's
# removal of TorchScript will make them: tests/support/no_torchscript), then builds the docs
# with warnings treated as errors. Extra arguments go to both pytest runs. (The RPC lifecycle
# tests, shutdown after dead workers, and the movielens job's tests run once: the start-up they
# share with the others runs again in test_rpc_init and the main-job tests, the native lookups
# and the step in the backward pass in their own tests, and CI must stay under 35 minutes.)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
bash scripts/setup_env.sh
"$PYTHON" -m pytest -q "$@"
"$PYTHON" -m pytest -q --torchscript-removed \
  tests/engine tests/rpc/test_rpc_init.py tests/rpc/test_main_job.py \
  tests/rpc/test_embedding_lookups.py tests/rpc/test_cuda.py tests/build/test_build.py \
  tests/optim/test_native_local_optimizer.py tests/optim/test_distributed_optimizer.py \
  tests/optim/test_checked_step.py tests/optim/test_backward_and_step.py tests/optim/test_optimizer_faults.py \
  tests/optim/test_python_local_optimizer.py tests/optim/test_lr_schedulers.py \
  tests/optim/test_clip_grad_norm.py tests/optim/test_sparse_optim.py tests/docs/test_docs_examples.py \
  --deselect tests/build/test_build.py::test_cmake_builds_the_same_library "$@"
"$PYTHON" -m sphinx -W --keep-going -b html docs docs/_build/html
