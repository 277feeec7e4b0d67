import pytest
import torch

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="session")
def cluster():
    """A 4-worker RPC group for the whole session (this process is worker0)."""
    from tests.support.cluster import Cluster

    c = Cluster(world_size=4, num_worker_threads=4, rpc_timeout=60.0, imports=("tests.support.graphs", "tests.support.optim_remote"))
    c.start()
    yield c
    c.stop()
