"""DistributedOptimizer.backward_and_step: the step taken inside the backward pass, where each
owner's part of the pass ends (plugin/csrc/optim/part_end_hook.h), against torch.optim and
against the same training with backward then step()."""
import warnings

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import plugin
from plugin.optim import DistributedOptimizer
from tests.support import optim_remote
from tests.support.user_optim import HeavyBall

THREE = ["worker1", "worker2", "worker3"]


def make(names, shapes, seed):
    return [rpc.rpc_sync(o, optim_remote.make_param, args=(n, s, seed + i))
            for i, (o, n, s) in enumerate(zip(THREE, names, shapes))]


def values(names):
    return [rpc.rpc_sync(o, optim_remote.param_value, args=(n,)) for o, n in zip(THREE, names)]


def forward(names, x, sparse_on=()):
    """Each owner's parameter times x, squared and summed; or an embedding lookup of rows 0
    and 2 on the owners in ``sparse_on`` (a sparse gradient there)."""
    loss = 0
    for owner, name in zip(THREE, names):
        if owner in sparse_on:
            loss = loss + (rpc.rpc_sync(owner, optim_remote.use_param_sparse, args=(torch.tensor([0, 2]), name)) ** 2).sum()
        else:
            loss = loss + (rpc.rpc_sync(owner, optim_remote.use_param, args=(x, name)) ** 2).sum()
    return loss


@pytest.mark.parametrize("mode", ["smart", "fast"])
def test_matches_torch_optim_over_three_owners(cluster, mode):
    """4 Adam steps taken inside the pass equal torch.optim.Adam's over the same parameters."""
    names = [f"inpass_{mode}_{i}" for i in range(3)]
    rrefs = make(names, [(5,)] * 3, 40)
    local = [v.requires_grad_() for v in values(names)]
    opt = DistributedOptimizer(torch.optim.Adam, rrefs, lr=0.05)
    reference = torch.optim.Adam(local, lr=0.05)
    for step in range(4):
        x = torch.full((5,), 1.0 + step, dtype=torch.float64)
        with dist_autograd.context() as ctx:
            opt.backward_and_step(ctx, [forward(names, x)], mode=mode)
        reference.zero_grad()
        sum(((x * p) ** 2).sum() for p in local).backward()
        reference.step()
    for got, want in zip(values(names), local):
        torch.testing.assert_close(got, want.detach(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("optim_class", [torch.optim.Adagrad, torch.optim.SparseAdam, torch.optim.SGD])
def test_sparse_gradients_step_as_after_the_pass(cluster, optim_class):
    """Embedding tables on three owners (sparse gradients): 3 steps inside the pass leave the
    tables and the optimizer state exactly as backward followed by step() on twin tables."""
    shapes = [(6, 3), (5, 3), (4, 3)]
    ours, twins = ([f"inpass_sparse_{optim_class.__name__}_{k}_{i}" for i in range(3)] for k in ("a", "b"))
    opts = [DistributedOptimizer(optim_class, make(names, shapes, 50), lr=0.1) for names in (ours, twins)]
    start = values(ours)
    for _ in range(3):
        with dist_autograd.context() as ctx:
            opts[0].backward_and_step(ctx, [forward(ours, None, sparse_on=THREE)])
        with dist_autograd.context() as ctx:
            plugin.autograd.backward(ctx, [forward(twins, None, sparse_on=THREE)])
            opts[1].step(ctx)
    for a, b in zip(values(ours), values(twins)):
        assert torch.equal(a, b)
    assert not any(torch.equal(a, b) for a, b in zip(values(ours), start))
    state_a, state_b = opts[0].state_dict()["state"], opts[1].state_dict()["state"]
    assert state_a.keys() == state_b.keys() == (set() if optim_class is torch.optim.SGD else {0, 1, 2})
    for i in state_a:
        for key, value in state_a[i].items():
            other = state_b[i][key]
            assert torch.equal(value, other) if isinstance(value, torch.Tensor) else value == other, (i, key)


def test_a_refused_gradient_is_named_with_the_owners_that_applied(cluster):
    """Adam over three owners; worker3's gradient is sparse, which Adam refuses. Not all or
    nothing: worker1 and worker2 applied, worker3 is unchanged, and the error names both."""
    names = [f"inpass_refuse_{i}" for i in range(3)]
    rrefs = make(names, [(3,), (3,), (6, 3)], 60)
    before = values(names)
    opt = DistributedOptimizer(torch.optim.Adam, rrefs, lr=0.1)
    with dist_autograd.context() as ctx:
        loss = forward(names, torch.ones(3, dtype=torch.float64), sparse_on=["worker3"])
        with pytest.raises(RuntimeError, match=r"backward_and_step\(\d+\) failed on owner 'worker3'.*does not support "
                                               r"sparse gradients.*the step was applied on owners \['worker1', 'worker2'\]"):
            opt.backward_and_step(ctx, [loss])
    after = values(names)
    assert not torch.equal(after[0], before[0]) and not torch.equal(after[1], before[1])
    assert torch.equal(after[2], before[2])
    assert set(opt.state_dict()["state"]) == {0, 1}
    assert all(rpc.rpc_sync(o, optim_remote.optimizer_debug_info)["num_prepared_steps"] == 0 for o in THREE)


def test_an_owner_alone_refusing_raises_its_error_and_changes_nothing(cluster):
    """One owner, which refuses: no owner applied, so the error is the owner's own, as step()
    raises it, and nothing changed."""
    name = "inpass_alone"
    rref = rpc.rpc_sync("worker3", optim_remote.make_param, args=(name, (6, 3), 70))
    before = rpc.rpc_sync("worker3", optim_remote.param_value, args=(name,))
    opt = DistributedOptimizer(torch.optim.Adam, [rref], lr=0.1)
    with dist_autograd.context() as ctx:
        loss = rpc.rpc_sync("worker3", optim_remote.use_param_sparse, args=(torch.tensor([1]), name)).sum()
        with pytest.raises(RuntimeError, match=r"failed on owner 'worker3'.*does not support sparse gradients.*"
                                               r"no owner applied the step") as info:
            opt.backward_and_step(ctx, [loss])
    assert "applied on owners" not in str(info.value)
    assert torch.equal(rpc.rpc_sync("worker3", optim_remote.param_value, args=(name,)), before)
    assert opt.state_dict()["state"] == {}


def test_an_owner_the_pass_never_reached_skips_its_parameters(cluster):
    """Only worker1's parameter is used: worker2 and worker3 take no part and change nothing."""
    names = [f"inpass_unreached_{i}" for i in range(3)]
    rrefs = make(names, [(4,)] * 3, 80)
    before = values(names)
    opt = DistributedOptimizer(torch.optim.SGD, rrefs, lr=0.5)
    with dist_autograd.context() as ctx:
        y = rpc.rpc_sync("worker1", optim_remote.use_param, args=(torch.ones(4, dtype=torch.float64), names[0]))
        opt.backward_and_step(ctx, [y.sum()])
    after = values(names)
    torch.testing.assert_close(after[0], before[0] - 0.5, rtol=0, atol=1e-12)
    assert torch.equal(after[1], before[1]) and torch.equal(after[2], before[2])


def test_a_python_local_optimizer_steps_after_the_pass(cluster):
    """An optimizer with no native local optimizer (a user's torch.optim subclass) cannot step
    inside the pass: backward_and_step is then backward followed by step(), with the same result."""
    names = [f"inpass_python_{i}" for i in range(3)]
    rrefs = make(names, [(4,)] * 3, 90)
    before = values(names)
    with warnings.catch_warnings():  # PythonStepWarning, once per class and process
        warnings.simplefilter("ignore", plugin.optim.PythonStepWarning)
        opt = DistributedOptimizer(HeavyBall, rrefs, lr=0.25, momentum=0.9)
    assert set(opt.local_optimizer_kinds.values()) == {"python"}
    x = torch.ones(4, dtype=torch.float64)
    with dist_autograd.context() as ctx:
        opt.backward_and_step(ctx, [forward(names, x)])
    for b, a in zip(before, values(names)):
        torch.testing.assert_close(a, b - 0.25 * 2 * b, rtol=0, atol=1e-12)  # HeavyBall's first step: p - lr * grad, grad = 2p


def test_bad_arguments_raise_before_anything_runs(cluster):
    names = [f"inpass_args_{i}" for i in range(3)]
    opt = DistributedOptimizer(torch.optim.SGD, make(names, [(4,)] * 3, 100), lr=0.5)
    before = values(names)
    with dist_autograd.context() as ctx:
        loss = forward(names, torch.ones(4, dtype=torch.float64))
        with pytest.raises(TypeError, match=r"roots must be a list of Tensors"):
            opt.backward_and_step(ctx, loss)
        with pytest.raises(ValueError, match=r'mode must be "smart" or "fast", got "quick"'):
            opt.backward_and_step(ctx, [loss], mode="quick")
        with pytest.raises(RuntimeError, match=r"no distributed autograd context 123456"):
            opt.backward_and_step(123456, [loss])
    assert all(torch.equal(a, b) for a, b in zip(values(names), before))


def test_the_caller_steps_its_own_parameters_once_the_pass_has_ended(cluster):
    """A parameter on the calling worker (worker0) beside one on worker1: the caller's part
    steps too, after the pass ended everywhere. 3 Adam steps equal torch.optim.Adam's."""
    names = ["inpass_local", "inpass_remote"]
    rrefs = [rpc.rpc_sync("worker0", optim_remote.make_param, args=(names[0], (4,), 110)),
             rpc.rpc_sync("worker1", optim_remote.make_param, args=(names[1], (4,), 111))]
    local = [rpc.rpc_sync(o, optim_remote.param_value, args=(n,)).requires_grad_() for o, n in zip(("worker0", "worker1"), names)]
    opt = DistributedOptimizer(torch.optim.Adam, rrefs, lr=0.05)
    reference = torch.optim.Adam(local, lr=0.05)
    for step in range(3):
        x = torch.full((4,), 1.0 + step, dtype=torch.float64)
        with dist_autograd.context() as ctx:
            loss = (optim_remote.use_param(x, names[0]) ** 2).sum() + \
                (rpc.rpc_sync("worker1", optim_remote.use_param, args=(x, names[1])) ** 2).sum()
            opt.backward_and_step(ctx, [loss])
        reference.zero_grad()
        sum(((x * p) ** 2).sum() for p in local).backward()
        reference.step()
    for o, n, want in zip(("worker0", "worker1"), names, local):
        torch.testing.assert_close(rpc.rpc_sync(o, optim_remote.param_value, args=(n,)), want.detach(), rtol=1e-10, atol=1e-12)
