"""Caller-side checks shared by the distributed optimizer tests: run in the test process, with
RPC started by the ``cluster`` fixture (workers ``worker1`` and ``worker2``)."""
import time
import warnings

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import plugin
from plugin.optim import DistributedOptimizer, PythonStepWarning
from tests.support import optim_remote


def assert_sparse_rejection_changes_neither(optimizer_class, dense_name: str, table_name: str, step_match: str) -> None:
    """A parameter ``dense_name`` on worker1 gets a dense gradient and ``table_name`` on worker2
    a sparse one, which ``optimizer_class`` rejects: ``step`` raises matching ``step_match`` and
    ``step_async`` raises naming worker2; neither owner's parameter changed, the caller's
    state_dict has no state, and nothing stays prepared on worker1."""
    dense = rpc.rpc_sync("worker1", optim_remote.make_param, args=(dense_name, (4,), 1))
    table = rpc.rpc_sync("worker2", optim_remote.make_param, args=(table_name, (6, 3), 2))
    opt = DistributedOptimizer(optimizer_class, [dense, table], lr=0.1)
    before = {
        dense_name: rpc.rpc_sync("worker1", optim_remote.param_value, args=(dense_name,)),
        table_name: rpc.rpc_sync("worker2", optim_remote.param_value, args=(table_name,)),
    }
    with dist_autograd.context() as ctx:
        a = rpc.rpc_sync("worker1", optim_remote.use_param, args=(torch.ones(4, dtype=torch.float64), dense_name))
        b = rpc.rpc_sync("worker2", optim_remote.use_param_sparse, args=(torch.tensor([0, 2]), table_name))
        plugin.autograd.backward(ctx, [a.sum() + b.sum()])
        with pytest.raises(RuntimeError, match=step_match):
            opt.step(ctx)
        with pytest.raises(RuntimeError, match=r"failed on owner 'worker2'.*no owner applied the step"):
            opt.step_async(ctx).wait()
    assert torch.equal(rpc.rpc_sync("worker1", optim_remote.param_value, args=(dense_name,)), before[dense_name])
    assert torch.equal(rpc.rpc_sync("worker2", optim_remote.param_value, args=(table_name,)), before[table_name])
    assert opt.state_dict()["state"] == {}
    deadline = time.time() + 10  # the drop of worker1's prepared step is not waited for
    while rpc.rpc_sync("worker1", optim_remote.optimizer_debug_info)["num_prepared_steps"] and time.time() < deadline:
        time.sleep(0.05)
    assert rpc.rpc_sync("worker1", optim_remote.optimizer_debug_info)["num_prepared_steps"] == 0


def step_ones_on_trainer(optimizer_class, kwargs, param_names, param_rrefs, steps: int) -> int:
    """Runs on a trainer: its own ``DistributedOptimizer(optimizer_class, param_rrefs, lr=1.0,
    **kwargs)`` over some of one server's parameters (``param_names``, in the order of
    ``param_rrefs``), ``steps`` times a pass whose gradients are ones and a step. With a plain
    SGD rule (no momentum) each step subtracts exactly 1. The Python-step warning is silenced.
    Returns ``steps``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PythonStepWarning)
        opt = DistributedOptimizer(optimizer_class, param_rrefs, lr=1.0, **kwargs)
    owner = param_rrefs[0].owner()
    one = torch.tensor(1.0, dtype=torch.float64)
    for _ in range(steps):
        with dist_autograd.context() as ctx:
            loss = sum(rpc.rpc_sync(owner, optim_remote.use_param, args=(one, name)).sum() for name in param_names)
            plugin.autograd.backward(ctx, [loss])
            opt.step(ctx)
    return steps
