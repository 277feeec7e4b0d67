"""torch's RemoteModule suite run against plugin.nn.RemoteModule: ``RemoteModuleTest`` and
``ThreeWorkersRemoteModuleTest`` (and ``CudaRemoteModuleTest`` where CUDA is available) from
``torch/testing/_internal/distributed/nn/api/remote_module_test.py``, as torch's
``rpc_utils.generate_tests`` runs them (the TensorPipe fixture, real worker processes on
loopback, forked here rather than spawned), with ``plugin.nn.RemoteModule`` in the place of
torch's (the suite's module imports ``RemoteModule`` by name: that attribute is replaced, in this
process before the workers fork). The suite's TorchScript-interface cases keep running torch's
``_RemoteModule`` (the plugin has no TorchScript path). Needs TorchScript at import.

Run by tests/rpc/test_torch_remote_module_suite.py::

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
from torch.testing._internal.common_distributed import MultiProcessTestCase  # noqa: E402
from torch.testing._internal.distributed.nn.api import remote_module_test  # noqa: E402
from torch.testing._internal.distributed.rpc.tensorpipe_rpc_agent_test_fixture import (  # noqa: E402
    TensorPipeRpcAgentTestFixture,
)

import plugin.nn  # noqa: E402  (imported before the fork: the workers inherit the swap)

remote_module_test.RemoteModule = plugin.nn.RemoteModule

SUITE_CLASSES = (remote_module_test.RemoteModuleTest, remote_module_test.ThreeWorkersRemoteModuleTest)
# torch's CUDA cases (valid device, invalid devices, inputs moved to the device), on a machine with
# a GPU only (torch skips them without one)
CUDA_CLASSES = (remote_module_test.CudaRemoteModuleTest,) if torch.cuda.is_available() else ()


class _ForkHelper(MultiProcessTestCase):
    """torch's rpc_utils.SpawnHelper, forking the worker processes (as scripts/torch_suite.py)."""

    def setUp(self):
        super().setUp()
        self._start_processes(torch.multiprocessing.get_context("fork").Process)


def _generated(test_class):
    name = f"Plugin{test_class.__name__}"
    cls = type(name, (test_class, TensorPipeRpcAgentTestFixture, _ForkHelper), {})
    cls.__module__ = __name__
    globals()[name] = cls
    return cls


SUITES = [_generated(c) for c in SUITE_CLASSES + CUDA_CLASSES]


def test_names():
    """``"<Class>.<test>"`` of every test of the suite."""
    loader = unittest.TestLoader()
    return [f"{c.__name__}.{n}" for c in SUITE_CLASSES + CUDA_CLASSES for n in loader.getTestCaseNames(c)]


class _Result(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = {}

    def _record(self, test, outcome, detail=""):
        cls, name = test.id().rsplit(".", 2)[-2:]
        self.outcomes[f"{cls[len('Plugin'):]}.{name}"] = {"outcome": outcome, "detail": detail[-4000:]}

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failed", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "failed", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)


def main(argv) -> int:
    out, selected = argv[0], argv[2::2] if len(argv) > 1 and argv[1] == "-k" else []
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    for cls in SUITES:
        for name in loader.getTestCaseNames(cls):
            if not selected or any(k in name for k in selected):
                suite.addTest(cls(name))
    start = time.monotonic()
    result = unittest.TextTestRunner(resultclass=_Result, verbosity=2, stream=sys.stderr).run(suite)
    with open(out, "w") as f:
        json.dump(result.outcomes, f, indent=1)
    print(f"{suite.countTestCases()} tests in {time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
