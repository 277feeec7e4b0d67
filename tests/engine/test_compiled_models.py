"""Models compiled with torch.compile, on the trainer and on a server, through the plugin's
engine: the gradients of a pass (smart and fast mode) and the parameters after steps taken
inside the backward pass equal those of the same models run eagerly.

torch.compile's kernels may round differently from eager ATen's, so values are compared in
float64 to a relative 1e-10 (the eager and compiled twins start from the same seeded values);
the engine runs the compiled graph's backward node like any other (a custom autograd Function
of AOTAutograd), across workers.
"""
import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import plugin.autograd
from plugin.optim import DistributedOptimizer
from tests.support import compiled_remote as remote

pytestmark = pytest.mark.timeout(600)

SERVER = "worker1"
TOL = {"rtol": 1e-10, "atol": 1e-12}


def _twins(tag: str):
    """An eager and a compiled copy of the same trainer module (here) and server module."""
    twins = {}
    for compiled in (False, True):
        name = f"{tag}_{'compiled' if compiled else 'eager'}"
        server = rpc.rpc_sync(SERVER, remote.make_module, args=(name, 11, compiled, (3, 5, 2)))
        remote.make_module(name, 7, compiled)
        twins[compiled] = (name, server)
    return twins


def _loss(name: str, x: torch.Tensor) -> torch.Tensor:
    hidden = remote.forward(name, x)  # trainer module, here
    out = rpc.rpc_sync(SERVER, remote.forward, args=(name, torch.tanh(hidden)))  # server module
    return (out ** 2).sum()


@pytest.mark.parametrize("mode", ["smart", "fast"])
def test_compiled_models_give_the_eager_gradients(cluster, mode):
    twins = _twins(f"grads_{mode}")
    x = torch.linspace(-1, 1, 24, dtype=torch.float64).reshape(4, 6)
    got = {}
    for compiled, (name, _) in twins.items():
        with dist_autograd.context() as ctx:
            plugin.autograd.backward(ctx, [_loss(name, x)], mode=mode)
            got[compiled] = remote.gradients(name, ctx) + rpc.rpc_sync(SERVER, remote.gradients, args=(name, ctx))
    assert len(got[True]) == 8
    for a, b in zip(got[True], got[False]):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("mode", ["smart", "fast"])
def test_compiled_models_step_inside_the_pass_as_eager_ones(cluster, mode):
    twins = _twins(f"steps_{mode}")
    optimizers = {}
    for compiled, (name, server) in twins.items():
        local = [rpc.RRef(p) for p in remote.MODULES[name][0].parameters()]
        optimizers[compiled] = DistributedOptimizer(torch.optim.Adam, local + server, lr=0.05)
    eager_name = twins[False][0]
    start = remote.parameters(eager_name) + rpc.rpc_sync(SERVER, remote.parameters, args=(eager_name,))
    for step in range(3):
        x = torch.full((4, 6), 0.3 * (step + 1), dtype=torch.float64)
        for compiled, (name, _) in twins.items():
            with dist_autograd.context() as ctx:
                optimizers[compiled].backward_and_step(ctx, [_loss(name, x)], mode=mode)
    eager = remote.parameters(eager_name) + rpc.rpc_sync(SERVER, remote.parameters, args=(eager_name,))
    compiled_name = twins[True][0]
    compiled = remote.parameters(compiled_name) + rpc.rpc_sync(SERVER, remote.parameters, args=(compiled_name,))
    for a, b in zip(compiled, eager):
        torch.testing.assert_close(a, b, **TOL)
    # the comparison can fail: the steps moved every parameter away from its start
    assert not any(torch.equal(a, b) for a, b in zip(eager, start))
