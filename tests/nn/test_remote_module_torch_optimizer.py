"""plugin.nn.RemoteModule with torch's own DistributedOptimizer: remote_parameters() are RRefs to
the live parameters, which torch's optimizer steps too. (In a file of its own: torch 2.13 scripts
torch.distributed.optim when it is imported, so this runs where TorchScript does, the first CI
pass; the other remote-module tests run with torch.jit raising.)"""
import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

from plugin.nn import RemoteModule
from tests.support import nn_modules as mods

TOL = dict(rtol=1e-6, atol=1e-6)

pytestmark = pytest.mark.torchscript


def local_twin(remote: RemoteModule, cls, *args):
    twin = cls(*args)
    twin.load_state_dict(rpc.rpc_sync(remote.on, mods.state, args=(remote.module_rref,)))
    return twin


def test_torchs_distributed_optimizer_steps_the_remote_parameters(cluster):
    """remote_parameters() are RRefs to the live parameters: torch's DistributedOptimizer steps
    them too (with torch's engine), and the next forward sees the step."""
    from torch.distributed.optim import DistributedOptimizer as TorchDistributedOptimizer

    remote = RemoteModule("worker1/cpu", mods.MLP, example_inputs=(torch.randn(3, 6),))
    twin = local_twin(remote, mods.MLP)
    x = torch.randn(2, 6)
    opt = TorchDistributedOptimizer(torch.optim.SGD, remote.remote_parameters(), lr=0.1)
    with dist_autograd.context() as ctx:
        dist_autograd.backward(ctx, [remote(x).sum()])
        opt.step(ctx)
    twin(x).sum().backward()
    torch.optim.SGD(twin.parameters(), lr=0.1).step()
    torch.testing.assert_close(remote(x), twin(x), **TOL)
