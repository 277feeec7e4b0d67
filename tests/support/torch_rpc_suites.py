"""Running torch's own RPC test suites (torch.testing._internal.distributed...) against the
plugin, as torch's ``rpc_utils.generate_tests`` runs them: the suite's class with the TensorPipe
fixture and a process starter, real worker processes on loopback. Shared by
scripts/torch_suite.py (distributed autograd and optimizer) and
tests/support/torch_remote_module_suite.py (RemoteModule).

Imports no plugin module: each worker imports ``plugin`` after the fork (ForkHelper._run), so
that the plugin's threads start in the process that uses them.
"""
import time
import unittest

import torch
from torch.testing._internal.common_distributed import MultiProcessTestCase
from torch.testing._internal.distributed.rpc.tensorpipe_rpc_agent_test_fixture import TensorPipeRpcAgentTestFixture


class ForkHelper(MultiProcessTestCase):
    """torch.testing._internal.distributed.rpc_utils.SpawnHelper (that module imports every RPC
    test module, several of which need TorchScript), forking the worker processes (spawning
    imports torch and the test modules again in each: about 10 s of CPU per test)."""

    def setUp(self):
        super().setUp()
        self._start_processes(torch.multiprocessing.get_context("fork").Process)

    @classmethod
    def _run(cls, rank, test_name, file_name, parent_pipe, **kwargs):
        import plugin  # noqa: F401  (loads the op library and its RPC functions before RPC starts)

        super()._run(rank, test_name, file_name, parent_pipe, **kwargs)


def generated(test_class, namespace):
    """``Plugin<Class>``: ``test_class`` with the TensorPipe fixture and ForkHelper, as torch's
    rpc_utils.generate_tests makes it, defined in ``namespace`` (a module's globals())."""
    name = f"Plugin{test_class.__name__}"
    cls = type(name, (test_class, TensorPipeRpcAgentTestFixture, ForkHelper), {})
    cls.__module__ = namespace["__name__"]
    namespace[name] = cls
    return cls


class OutcomeResult(unittest.TextTestResult):
    """A TextTestResult that also keeps, per ``"<Class>.<test>"``, the outcome ("passed",
    "failed" or "skipped"), its detail (the traceback, the skip's reason) and its seconds."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = {}
        self.details = {}
        self.durations = {}
        self._started = {}

    def startTest(self, test):
        self._started[test.id()] = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome, detail=""):
        suite, name = test.id().rsplit(".", 2)[-2:]
        key = f"{suite}.{name}"
        self.outcomes[key] = outcome
        self.details[key] = detail
        self.durations[key] = time.monotonic() - self._started.get(test.id(), time.monotonic())

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


def suite_of(classes, selected=()):
    """A unittest suite of every test of ``classes`` whose name contains one of ``selected`` (all
    when empty)."""
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    for cls in classes:
        for name in loader.getTestCaseNames(cls):
            if not selected or any(k in name for k in selected):
                suite.addTest(cls(name))
    return suite
