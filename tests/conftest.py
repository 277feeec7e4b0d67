import os
import sys

import pytest
import torch

# Tests import their helpers (cluster.py, graphs.py) as top-level modules, and so do
# the worker processes they spawn.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="session")
def cluster():
    """A 4-worker RPC group for the whole session (this process is worker0)."""
    from cluster import Cluster

    c = Cluster(world_size=4, num_worker_threads=4, rpc_timeout=60.0, imports=("graphs", "optim_remote"))
    c.start()
    yield c
    c.stop()
