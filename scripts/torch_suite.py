"""torch's own distributed autograd and distributed optimizer tests, run against the plugin.

Runs the test classes ``DistAutogradTest``, ``TensorPipeAgentDistAutogradTest`` (their sparse
variants) and ``DistOptimizerTest`` from ``torch.testing._internal.distributed.rpc`` with
the TensorPipe agent, exactly as torch's CI runs them (real worker processes on loopback,
four per test, started by torch's ``MultiProcessTestCase``, forked here rather than
spawned), but with the plugin swapped in
for torch's in every process:

* ``torch.distributed.autograd.backward`` -> ``plugin.autograd.backward`` (SMART mode, the
  default; ``--mode fast`` for FAST mode),
* ``torch.distributed.autograd.get_gradients`` -> ``plugin.autograd.get_gradients``,
* ``DistributedOptimizer`` (as ``dist_optimizer_test`` imports it) ->
  ``plugin.optim.DistributedOptimizer``.

Code that torch compiled with TorchScript before the swap (the tests' ``@torch.jit.script``
functions that call ``dist_autograd.backward``) still runs torch's engine; the tests that
use it are listed below.

Every test passes except those in ``EXPECTED_DIFFERENCES``, each with its reason; those must
fail (so that the list stays true: one that starts to pass is reported). The exit status is
0 when both hold, 1 otherwise. Needs TorchScript at import (torch's test module scripts a few
functions when it is imported), unlike the plugin itself.

Usage::

    PYTHONPATH=$PWD python3 scripts/torch_suite.py              # all of them, about 4-8 min
    PYTHONPATH=$PWD python3 scripts/torch_suite.py -k no_grad   # names containing "no_grad"
    PYTHONPATH=$PWD python3 scripts/torch_suite.py --list       # the expected differences
"""
import argparse
import os
import sys
import time
import unittest
import warnings

warnings.simplefilter("ignore", DeprecationWarning)
warnings.simplefilter("ignore", FutureWarning)

import torch  # noqa: E402
import torch.distributed.autograd as dist_autograd  # noqa: E402

MODE_VARIABLE = "GILFREE_TORCH_SUITE_MODE"

# The worker processes are forked from this one (torch's harness spawns them, which imports
# torch and its test modules again in each: about 10 s of CPU per test). The plugin is
# imported in each worker after the fork (tests/support/torch_rpc_suites.py: ForkHelper._run), never here, so that its
# threads (the peer watch) start in the worker that uses them.


def _plugin_backward(context_id, roots, retain_graph=False):
    import plugin

    plugin.autograd.backward(context_id, roots, retain_graph=retain_graph, mode=os.environ.get(MODE_VARIABLE, "smart"))


def _plugin_get_gradients(context_id):
    import plugin

    return plugin.autograd.get_gradients(context_id)


def _plugin_distributed_optimizer(*args, **kwargs):
    import plugin

    return plugin.optim.DistributedOptimizer(*args, **kwargs)


# The swap, inherited by every worker process.
dist_autograd.backward = _plugin_backward
dist_autograd.get_gradients = _plugin_get_gradients

from torch.testing._internal.distributed.rpc import dist_optimizer_test  # noqa: E402
from torch.testing._internal.distributed.rpc.dist_autograd_test import (  # noqa: E402
    DistAutogradTest,
    TensorPipeAgentDistAutogradTest,
)
from torch.testing._internal.distributed.rpc.dist_optimizer_test import DistOptimizerTest  # noqa: E402

from tests.support.torch_rpc_suites import OutcomeResult, generated, suite_of  # noqa: E402

dist_optimizer_test.DistributedOptimizer = _plugin_distributed_optimizer

# test name -> why the plugin differs from torch there, on purpose. Each must fail.
EXPECTED_DIFFERENCES = {
    "test_backward_unused_send_function": (
        "SMART mode (the default) skips a forward RPC whose output does not reach the loss, so backward "
        "completes; torch's FAST mode waits for that send function's gradient until the RPC timeout, and the "
        "test asserts that backward is still running after 10 s. (With --mode fast the plugin waits as torch does.)"
    ),
    "test_debug_info": (
        "reads torch's engine counters (dist_autograd._get_debug_info()['num_current_backward_passes'] while a "
        "backward pass runs): the plugin's engine keeps its own (plugin.debug_info()['num_running_passes'])"
    ),
}
# Only in FAST mode.
EXPECTED_DIFFERENCES_FAST = {
    "test_backward_unused_send_function": None,  # passes: FAST mode waits as torch does
}


# As torch's rpc_utils.generate_tests: the suite, the TensorPipe fixture, the process starter.
SUITES = [generated(c, globals()) for c in (DistAutogradTest, TensorPipeAgentDistAutogradTest, DistOptimizerTest)]


def expected_differences(mode: str):
    expected = dict(EXPECTED_DIFFERENCES)
    if mode == "fast":
        for name, reason in EXPECTED_DIFFERENCES_FAST.items():
            if reason is None:
                expected.pop(name, None)
            else:
                expected[name] = reason
    return expected


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", action="append", default=[], help="run only tests whose name contains this (repeatable)")
    parser.add_argument("--mode", choices=("smart", "fast"), default="smart", help="the plugin's backward mode")
    parser.add_argument("--list", action="store_true", help="print the expected differences and exit")
    parser.add_argument("-v", action="store_true", help="unittest's verbose output")
    args = parser.parse_args(argv)
    os.environ[MODE_VARIABLE] = args.mode
    expected = expected_differences(args.mode)
    if args.list:
        for name, reason in expected.items():
            print(f"{name}: {reason}")
        return 0

    suite = suite_of(SUITES, args.k)
    print(f"torch {torch.__version__}: {suite.countTestCases()} tests of torch's suite, plugin backward in "
          f"{args.mode} mode", flush=True)
    start = time.monotonic()
    runner = unittest.TextTestRunner(resultclass=OutcomeResult, verbosity=2 if args.v else 1, stream=sys.stderr)
    result = runner.run(suite)

    unexpected_failures, unexpected_passes, differences = [], [], []
    for key, outcome in sorted(result.outcomes.items()):
        name = key.rsplit(".", 1)[-1]
        if name in expected:
            if outcome == "failed":
                differences.append(key)
            elif outcome == "passed":
                unexpected_passes.append(key)
        elif outcome == "failed":
            unexpected_failures.append(key)
    passed = sum(1 for o in result.outcomes.values() if o == "passed")
    skipped = sum(1 for o in result.outcomes.values() if o == "skipped")
    print(f"\n{passed} passed, {skipped} skipped, {len(differences)} expected differences, "
          f"{len(unexpected_failures)} unexpected failures, {len(unexpected_passes)} unexpected passes "
          f"in {time.monotonic() - start:.0f} s")
    for key in differences:
        print(f"  differs as expected: {key}: {expected[key.rsplit('.', 1)[-1]]}")
    for key in unexpected_passes:
        print(f"  UNEXPECTED PASS (remove it from EXPECTED_DIFFERENCES): {key}")
    for key in unexpected_failures:
        print(f"  UNEXPECTED FAILURE: {key}\n{result.details[key]}")
    return 0 if not unexpected_failures and not unexpected_passes else 1


if __name__ == "__main__":
    sys.exit(main())
