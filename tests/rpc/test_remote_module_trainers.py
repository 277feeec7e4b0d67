"""plugin.nn.RemoteModule under several trainers (the parameter-server pattern), on a real RPC
group of six workers: the test process (trainer A, worker0), the owner (worker1) and four
trainers (worker2 .. worker5). A backward pass computes the gradients at the weights its own
forward used, whatever steps came between (the stale case, directly, with both engines and
both kinds of owner step); four trainers train one module written as for local training (no
weight clones) without autograd's in-place error; a forward never reads half a step."""
import threading

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import plugin.autograd
from plugin import ops
from plugin.nn import RemoteModule
from tests.support import nn_modules as mods
from tests.support.cluster import Cluster

TOL = dict(rtol=1e-6, atol=1e-6)


@pytest.fixture(scope="module")
def group():
    c = Cluster(world_size=6, num_worker_threads=8, rpc_timeout=60.0, imports=("tests.support.nn_modules",))
    c.start()
    yield c
    c.stop()


def outside_context(call):
    """``call()`` with no current distributed autograd context on this thread (an RPC sent inside
    one carries it to the receiver, whose own `with context()` would then fail)."""
    previous = ops._swap_current_context(-1)
    try:
        return call()
    finally:
        ops._swap_current_context(previous)


def twin_at(values):
    twin = mods.MLP()
    twin.load_state_dict(values)
    return twin


@pytest.mark.parametrize("engine", ["plugin", "torch"])
@pytest.mark.parametrize("owner_step", ["native", "python"])
def test_a_backward_uses_the_weights_its_forward_used(group, engine, owner_step):
    """A's forward; B's whole iteration with a large step (the owner's native step, or a step in
    Python: torch.optim's foreach Adam); A's backward: A's input gradient and the parameters'
    gradients in A's context equal eager's at the weights A's forward saw, not the new ones."""
    remote = RemoteModule("worker1/cpu", mods.MLP, example_inputs=(torch.randn(3, 6),))
    seen = rpc.rpc_sync("worker1", mods.state, args=(remote.module_rref,))
    x = torch.randn(4, 6, requires_grad=True)
    with dist_autograd.context() as ctx:
        out = remote(x)
        outside_context(lambda: rpc.rpc_sync("worker2", mods.iteration, args=(
            remote, (torch.randn(5, 6),), 10.0, "Adam", True if owner_step == "python" else None)))
        after = rpc.rpc_sync("worker1", mods.state, args=(remote.module_rref,))
        assert not torch.equal(after["layers.0.weight"], seen["layers.0.weight"]), "B's step changed nothing"
        loss = (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum()
        if engine == "plugin":
            plugin.autograd.backward(ctx, [loss])
            input_grad = plugin.autograd.get_gradients(ctx)[x]
        else:
            dist_autograd.backward(ctx, [loss])
            input_grad = dist_autograd.get_gradients(ctx)[x]
        param_grads = rpc.rpc_sync("worker1", mods.parameter_gradients, args=(remote.module_rref, ctx, engine))
    twin = twin_at(seen)
    y = x.detach().clone().requires_grad_(True)
    want = twin(y)
    (want * torch.linspace(-1, 1, want.numel()).reshape(want.shape)).sum().backward()
    torch.testing.assert_close(out.detach(), want.detach(), **TOL)
    torch.testing.assert_close(input_grad, y.grad, **TOL)
    for got, p in zip(param_grads, twin.parameters()):
        torch.testing.assert_close(got, p.grad, **TOL)
    # and at the new weights, the next forward
    torch.testing.assert_close(remote(x.detach()), twin_at(after)(x.detach()), **TOL)


def test_four_trainers_train_one_module(group):
    """Four trainers, each with its own DistributedOptimizer (Adam) and data, train one module
    (no weight clones) at the same time: no error, every loss finite, the loss falls; the owner
    took one snapshot per step that a forward followed, at most."""
    remote = RemoteModule("worker1/cpu", mods.MLP, example_inputs=(torch.randn(3, 6),))
    steps = 25
    futures = [rpc.rpc_async(f"worker{w}", mods.train, args=(remote, w, steps, 0.02)) for w in range(2, 6)]
    results = [f.wait() for f in futures]
    for r in results:
        assert all(torch.isfinite(torch.tensor(r["losses"])))
    first = sum(sum(r["losses"][:5]) for r in results)
    last = sum(sum(r["losses"][-5:]) for r in results)
    assert last < 0.5 * first, results
    info = remote._debug_info()
    assert info["forwards"] == 4 * steps
    assert 1 <= info["snapshots"] <= 4 * steps + 1, info


def test_a_forward_never_reads_half_a_step(group):
    """A writer on the owner sets every parameter to one value at a time, holding the parameters'
    locks and pausing between parameters; forwards sent meanwhile from two trainers each see one
    value in every parameter (an output of that value's form), never a mix."""
    n = 64
    remote = RemoteModule("worker1/cpu", mods.Uniform, (n,), example_inputs=(torch.ones(2, n),))
    values = [float(k) for k in range(1, 9)]
    writer = rpc.rpc_async("worker1", mods.write_uniform, args=(remote.module_rref, values, 0.002))

    def expected(k):
        return n * k * (n * 1.0 * k + k) + k

    allowed = [expected(k) for k in [0.0] + values]
    outputs = []

    def read(times):
        for _ in range(times):
            outputs.append(remote(torch.ones(2, n)))

    threads = [threading.Thread(target=read, args=(20,)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert writer.wait() == len(values)
    for out in outputs:
        value = out[0, 0].item()
        assert torch.all(out == value), "one forward read two different values"
        assert any(abs(value - a) <= 1e-3 * max(1.0, abs(a)) for a in allowed), value


def test_buffer_updates_of_concurrent_forwards_do_not_race(group):
    """Four trainers run train-mode forwards of a module with BatchNorm at the same time: every
    forward's update of the running statistics lands (num_batches_tracked counts them all), and
    the statistics stay those of some order of the forwards (finite, the variance positive)."""
    remote = RemoteModule("worker1/cpu", mods.ConvNet, example_inputs=(torch.randn(2, 3, 8, 8),))
    futures = [rpc.rpc_async(f"worker{w}", mods.forwards, args=(remote, 25, w)) for w in range(2, 6)]
    assert [f.wait() for f in futures] == [25] * 4
    state = rpc.rpc_sync("worker1", mods.state, args=(remote.module_rref,))
    assert state["bn.num_batches_tracked"].item() == 100
    assert torch.isfinite(state["bn.running_mean"]).all() and (state["bn.running_var"] > 0).all()
