"""torch's RemoteModule suite run against plugin.nn.RemoteModule: ``RemoteModuleTest`` and
``ThreeWorkersRemoteModuleTest`` (and ``CudaRemoteModuleTest`` where CUDA is available) from
``torch/testing/_internal/distributed/nn/api/remote_module_test.py``, as torch's
``rpc_utils.generate_tests`` runs them (the TensorPipe fixture, real worker processes on
loopback, forked here rather than spawned), with ``plugin.nn.RemoteModule`` in the place of
torch's (the suite's module imports ``RemoteModule`` by name: that attribute is replaced, in this
process before the workers fork). The suite's TorchScript-interface cases keep running torch's
``_RemoteModule`` (the plugin has no TorchScript path). Needs TorchScript at import.

Run by tests/nn/test_torch_remote_module_suite.py::

    PYTHONPATH=$PWD python tests/support/torch_remote_module_suite.py OUT.json [-k NAME]

writes ``{"<Class>.<test>": {"outcome": "passed" | "failed" | "skipped", "detail": ...}}``.
"""
import json
import sys
import time
import unittest
import warnings

warnings.simplefilter("ignore", DeprecationWarning)
warnings.simplefilter("ignore", FutureWarning)

import torch  # noqa: E402
from torch.testing._internal.distributed.nn.api import remote_module_test  # noqa: E402

from tests.support.torch_rpc_suites import OutcomeResult, generated, suite_of  # noqa: E402

import plugin.nn  # noqa: E402  (imported before the fork: the workers inherit the swap)

remote_module_test.RemoteModule = plugin.nn.RemoteModule

SUITE_CLASSES = (remote_module_test.RemoteModuleTest, remote_module_test.ThreeWorkersRemoteModuleTest)
# torch's CUDA cases (valid device, invalid devices, inputs moved to the device), on a machine with
# a GPU only (torch skips them without one)
CUDA_CLASSES = (remote_module_test.CudaRemoteModuleTest,) if torch.cuda.is_available() else ()


SUITES = [generated(c, globals()) for c in SUITE_CLASSES + CUDA_CLASSES]


def test_names():
    """``"<Class>.<test>"`` of every test of the suite."""
    loader = unittest.TestLoader()
    return [f"{c.__name__}.{n}" for c in SUITE_CLASSES + CUDA_CLASSES for n in loader.getTestCaseNames(c)]


def main(argv) -> int:
    out, selected = argv[0], argv[2::2] if len(argv) > 1 and argv[1] == "-k" else []
    suite = suite_of(SUITES, selected)
    start = time.monotonic()
    result = unittest.TextTestRunner(resultclass=OutcomeResult, verbosity=2, stream=sys.stderr).run(suite)
    with open(out, "w") as f:
        # keyed by torch's class names (the generated classes' without "Plugin")
        json.dump({key[len("Plugin"):]: {"outcome": outcome, "detail": result.details[key][-4000:]}
                   for key, outcome in result.outcomes.items()}, f, indent=1)
    print(f"{suite.countTestCases()} tests in {time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
