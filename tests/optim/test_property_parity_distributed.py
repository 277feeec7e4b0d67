"""Property-based parity with torch.optim through the native owner's path over RPC: a
plugin.optim.DistributedOptimizer whose parameters live on other workers, drawn as
tests/functional_optim/test_property_parity.py draws them (shapes, empty ones included, layouts, dtypes, a
number or a Tensor lr), the gradients made by a distributed backward pass on the owners.

Bounded for CI: a few examples (derandomized), a few steps each, on the session's 4-worker
group (tests/conftest.py).
"""
import itertools
import warnings

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import plugin
from plugin.optim import DistributedOptimizer
from tests.functional_optim.test_property_parity import (
    STEPS, compare, draw_native_case, laid_out, make_values, torch_reference,
)
from tests.support import optim_remote

SETTINGS = settings(
    max_examples=12, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
_names = itertools.count()


def make_laid_out_param(name, values, layout):
    """On the owner: a parameter of ``values`` laid out as ``layout`` (test_property_parity.laid_out)."""
    optim_remote.PARAMS[name] = laid_out(values, layout).requires_grad_()
    return rpc.RRef(optim_remote.PARAMS[name])


def loss_on_owner(name, grad):
    """On the owner: a loss whose gradient for the parameter is ``grad``."""
    return (optim_remote.PARAMS[name] * grad).sum()


@SETTINGS
@given(data=st.data())
def test_distributed_optimizer_on_drawn_parameters_matches_torch(cluster, data):
    cls, info, dtype, specs, kwargs = draw_native_case(data)
    values = make_values(specs, dtype, seed=5)
    owners = [f"worker{1 + k % 3}" for k in range(len(specs))]
    names = [f"drawn{next(_names)}" for _ in specs]
    rrefs = [
        rpc.rpc_sync(owner, make_laid_out_param, args=(name, v, layout))
        for owner, name, v, (_, layout, _) in zip(owners, names, values, specs)
    ]
    torch_params, reference = torch_reference(info, values, kwargs)
    optimizer = DistributedOptimizer(cls, rrefs, **kwargs)
    gen = torch.Generator().manual_seed(6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(STEPS):
            grads = [torch.randn(v.shape, generator=gen, dtype=dtype) for v in values]
            for p, g in zip(torch_params, grads):
                p.grad = g.clone()
            reference.step()
            with dist_autograd.context() as ctx:
                loss = sum(rpc.rpc_sync(o, loss_on_owner, args=(n, g)) for o, n, g in zip(owners, names, grads))
                plugin.autograd.backward(ctx, [loss])
                optimizer.step(ctx)
    ours = [rpc.rpc_sync(o, optim_remote.param_value, args=(n,)) for o, n in zip(owners, names)]
    compare(torch_params, ours, reference, optimizer.state_dict(), dtype)
