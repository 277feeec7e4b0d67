"""plugin.optim.clip_grad_norm_ against torch.nn.utils.clip_grad_norm_ on the same gradients:
the same total norm and the same clipped gradients, which the next step applies."""
import math

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import plugin
from plugin.optim import DistributedOptimizer, clip_grad_norm_
from tests.optim.test_distributed_optimizer import OWNERS, local_params, make_remote_params, remote_values
from tests.support import optim_remote

INF = float("inf")


def xs(step, scale=1.0):
    return {name: scale * torch.linspace(-1.0, 2.0 + step, shape[-1], dtype=torch.float64) for name, (_, shape, _) in OWNERS.items()}


def dist_loss(names, x, summed=()):
    loss = 0
    for name in names:
        owner = OWNERS[name][0]
        if name in summed:
            loss = loss + rpc.rpc_sync(owner, optim_remote.param_sum, args=(name,)) * 3
        else:
            loss = loss + (rpc.rpc_sync(owner, optim_remote.use_param, args=(x[name], name)) ** 2).sum() / 2
    return loss


def local_loss(params, names, x, summed=()):
    loss = 0
    for name in names:
        if name in summed:
            loss = loss + params[name].sum() * 3
        else:
            loss = loss + ((x[name] * params[name]) ** 2).sum() / 2
    return loss


def owner_grads(ctx, names):
    out = {}
    for name in names:
        (g,) = rpc.rpc_sync(OWNERS[name][0], optim_remote.context_gradients, args=(ctx, [name]))
        out[name] = g
    return out


@pytest.mark.parametrize("engine", ["plugin", "torch"])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, INF, 3.0])
@pytest.mark.parametrize("max_norm", [0.5, 1e6], ids=["clips", "no_clip"])
def test_matches_torch_clip_grad_norm(cluster, engine, norm_type, max_norm):
    """Parameters in an order that interleaves owners; the clipped gradients and the total
    norm equal torch's exactly, and an SGD step applies the clipped gradients."""
    order = ["p2", "p1", "p3"]  # worker2, worker1, worker2
    rrefs = make_remote_params()
    opt = DistributedOptimizer(torch.optim.SGD, [rrefs[n] for n in order], lr=0.1)
    x = xs(0)
    with dist_autograd.context() as ctx:
        loss = dist_loss(order, x)
        if engine == "plugin":
            plugin.autograd.backward(ctx, [loss])
        else:
            dist_autograd.backward(ctx, [loss])
        total = clip_grad_norm_(ctx, opt, max_norm, norm_type=norm_type)
        got = owner_grads(ctx, order)
        opt.step(ctx)

    params = local_params()
    local_loss(params, order, x).backward()
    expected_total = torch.nn.utils.clip_grad_norm_([params[n] for n in order], max_norm, norm_type=norm_type)
    assert total.dtype == expected_total.dtype and total.device.type == "cpu"
    assert torch.equal(total, expected_total)
    for name in order:
        assert torch.equal(got[name], params[name].grad), name
    torch.optim.SGD([params[n] for n in order], lr=0.1).step()
    for name, value in remote_values().items():
        assert torch.equal(value, params[name].detach()), name


@pytest.mark.filterwarnings("ignore::plugin.optim.PythonStepWarning")
def test_clips_what_a_python_local_optimizer_steps(cluster):
    """HeavyBall steps in Python on the owners: clip_grad_norm_ clips the context's gradients
    that those owners read, as for native ones: the total norm is torch's, and the step equals
    HeavyBall's after torch's clipping."""
    from tests.support.user_optim import HeavyBall

    order = ["p2", "p1", "p3"]
    rrefs = make_remote_params()
    opt = DistributedOptimizer(HeavyBall, [rrefs[n] for n in order], lr=0.1, momentum=0.5)
    assert set(opt.local_optimizer_kinds.values()) == {"python"}
    x = xs(0)
    with dist_autograd.context() as ctx:
        plugin.autograd.backward(ctx, [dist_loss(order, x)])
        total = clip_grad_norm_(ctx, opt, 0.5)
        opt.step(ctx)

    params = local_params()
    local_loss(params, order, x).backward()
    expected_total = torch.nn.utils.clip_grad_norm_([params[n] for n in order], 0.5)
    assert torch.equal(total, expected_total) and total.item() > 0.5
    HeavyBall([params[n] for n in order], lr=0.1, momentum=0.5).step()
    for name, value in remote_values().items():
        torch.testing.assert_close(value, params[name].detach(), rtol=1e-12, atol=1e-14, msg=name)


def test_params_rref_list_skips_parameters_without_gradients_and_sum_gradients(cluster):
    """A list of RRefs instead of an optimizer; p3 gets no gradient (skipped, as torch skips a
    None .grad); p2's gradient is the gradient of a sum (a stride-0 view in torch's backward),
    which the engine stores laid out like the parameter, so it is scaled in place."""
    rrefs = make_remote_params()
    x = xs(1)
    with dist_autograd.context() as ctx:
        plugin.autograd.backward(ctx, [dist_loss(["p1", "p2"], x, summed=("p2",))])
        total = clip_grad_norm_(ctx, [rrefs["p1"], rrefs["p2"], rrefs["p3"]], 0.25)
        got = owner_grads(ctx, ["p1", "p2", "p3"])
    params = local_params()
    local_loss(params, ["p1", "p2"], x, summed=("p2",)).backward()
    expected_total = torch.nn.utils.clip_grad_norm_(list(params.values()), 0.25)
    assert torch.equal(total, expected_total)
    assert got["p3"] is None and params["p3"].grad is None
    for name in ("p1", "p2"):
        assert torch.equal(got[name], params[name].grad), name


def test_nonfinite_norm(cluster):
    rrefs = make_remote_params()
    x = xs(0)
    x["p1"][0] = INF
    with dist_autograd.context() as ctx:
        plugin.autograd.backward(ctx, [dist_loss(["p1", "p2"], x)])
        before = owner_grads(ctx, ["p1", "p2"])
        with pytest.raises(RuntimeError, match=r"^The total norm of order 2.0 for gradients from `parameters` is non-finite"):
            clip_grad_norm_(ctx, [rrefs["p1"], rrefs["p2"]], 1.0, error_if_nonfinite=True)
        after = owner_grads(ctx, ["p1", "p2"])
        for name in before:  # nothing was scaled
            assert torch.equal(after[name], before[name])
        total = clip_grad_norm_(ctx, [rrefs["p1"], rrefs["p2"]], 1.0)
        got = owner_grads(ctx, ["p1", "p2"])
    params = local_params()
    local_loss(params, ["p1", "p2"], x).backward()
    expected_total = torch.nn.utils.clip_grad_norm_([params["p1"], params["p2"]], 1.0)
    assert math.isinf(total.item()) and torch.equal(total, expected_total)
    for name in ("p1", "p2"):
        torch.testing.assert_close(got[name], params[name].grad, rtol=0, atol=0, equal_nan=True)


def test_no_gradients_and_bad_arguments(cluster):
    rrefs = make_remote_params()
    with dist_autograd.context() as ctx:
        total = clip_grad_norm_(ctx, list(rrefs.values()), 1.0)
        assert torch.equal(total, torch.tensor(0.0))
        with pytest.raises(TypeError, match=r"parameters\[1\] is a Tensor, not an RRef"):
            clip_grad_norm_(ctx, [rrefs["p1"], torch.zeros(2)], 1.0)
        with pytest.raises(TypeError, match="DistributedOptimizer or a list of RRefs"):
            clip_grad_norm_(ctx, rrefs["p1"], 1.0)
    with pytest.raises(RuntimeError, match=r"no distributed autograd context 424242 on this worker"):
        clip_grad_norm_(424242, [rrefs["p1"]], 1.0)
