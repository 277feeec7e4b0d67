import importlib.util
import os

import pytest
import torch

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

_NO_TORCHSCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support", "no_torchscript")


def _no_torchscript_site():
    spec = importlib.util.spec_from_file_location("_no_torchscript_site", os.path.join(_NO_TORCHSCRIPT, "sitecustomize.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pytest_addoption(parser):
    parser.addoption(
        "--torchscript-removed", action="store_true",
        help="run with torch.jit's Python entry points raising in this process and every process the tests "
             "start (tests/support/no_torchscript/sitecustomize.py); tests marked `torchscript` are skipped",
    )


def torchscript_removed(config) -> bool:
    site = _no_torchscript_site()
    return config.getoption("--torchscript-removed") or os.environ.get(site.ENV_VAR) == "1"


def pytest_configure(config):
    config.addinivalue_line("markers", "torchscript: needs TorchScript (skipped with --torchscript-removed)")
    if torchscript_removed(config):
        site = _no_torchscript_site()
        os.environ[site.ENV_VAR] = "1"
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_NO_TORCHSCRIPT, os.environ.get("PYTHONPATH")) if p)
        site.remove_torchscript()


def pytest_collection_modifyitems(config, items):
    if not torchscript_removed(config):
        return
    skip = pytest.mark.skip(reason="needs TorchScript (--torchscript-removed)")
    for item in items:
        if "torchscript" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=["checked", "two_phase"])
def step_protocol(request, monkeypatch):
    """Runs a test twice: with ``DistributedOptimizer.step`` choosing its protocol as it does
    by default (the checked step after a pass of the plugin's engine over native owners), and
    with every step forced to take its two phases (prepare, then commit)."""
    if request.param == "two_phase":
        from plugin.optim import DistributedOptimizer

        monkeypatch.setattr(DistributedOptimizer, "_checked_versions", lambda self, context_id: [])
    return request.param


@pytest.fixture(scope="session")
def cluster():
    """A 4-worker RPC group for the whole session (this process is worker0)."""
    from tests.support.cluster import Cluster

    c = Cluster(world_size=4, num_worker_threads=4, rpc_timeout=60.0, imports=("tests.support.graphs", "tests.support.optim_remote"))
    c.start()
    yield c
    c.stop()
