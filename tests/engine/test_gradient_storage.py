"""Whether a leaf's gradient is stored without a copy, against torch's engine on the same graphs.

torch's distributed engine keeps the tensor that reaches a leaf as its gradient when nothing
else refers to it and it obeys the gradient layout contract, keeps a sparse gradient's
indices and values (in a new sparse tensor) under the rules of AccumulateGrad::accumulateGrad,
and copies otherwise; a second pass in the same context adds into the stored gradient in
place. Each case runs once per engine and compares where the stored gradient's data lives
with where the last backward node put it (``tests/support/grad_storage.py``).
"""
import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import plugin
from tests.support import grad_storage, graphs

ENGINES = ("torch", "plugin")

# What torch's engine does with each kind of gradient (grad_storage.KINDS): True when it
# keeps the produced tensor's memory. Checked against torch in every run below, so a
# change in torch shows up as a failure here rather than as a silent pass.
TORCH_KEEPS = {
    "dense": True,
    "dense_referenced": False,
    "noncontiguous": False,
    "sparse": True,
    "sparse_values_referenced": True,
    "sparse_referenced": False,
    "sparse_noncontiguous_values": False,
}


def clear_everywhere():
    for w in grad_storage.rpc_workers():
        rpc.rpc_sync(w, grad_storage.clear)


def remote_leaf_shares(kind: str, engine: str) -> bool:
    """Leaf on worker1, its last node (Emit) on worker1; backward called on worker0."""
    clear_everywhere()
    name = f"remote_{kind}"
    with dist_autograd.context() as ctx:
        loss = rpc.rpc_sync("worker1", grad_storage.emitted_sum, args=(name, kind))
        grad_storage.run_backward(ctx, [loss], engine)
        return rpc.rpc_sync("worker1", grad_storage.stored_shares, args=(ctx, name, engine))


def local_leaf_shares(kind: str, engine: str) -> bool:
    """Leaf and Emit on worker0 (the caller), the loss computed on worker1."""
    clear_everywhere()
    name = f"local_{kind}"
    with dist_autograd.context() as ctx:
        w = graphs.make_leaf(name, (3, 4), 7)
        y = grad_storage.Emit.apply(w, name, kind)
        loss = rpc.rpc_sync("worker1", torch.sum, args=(y,))
        grad_storage.run_backward(ctx, [loss], engine)
        return grad_storage.stored_shares(ctx, name, engine)


@pytest.mark.parametrize("kind", grad_storage.KINDS)
@pytest.mark.parametrize("where", ["remote_leaf", "local_leaf"])
def test_stored_without_copy_as_torch(cluster, where, kind):
    run = remote_leaf_shares if where == "remote_leaf" else local_leaf_shares
    theirs = run(kind, "torch")
    ours = run(kind, "plugin")
    assert theirs == TORCH_KEEPS[kind], f"torch's engine changed: keeps {kind} gradient: {theirs}"
    assert ours == theirs, f"{kind}: torch keeps the produced tensor: {theirs}, ours: {ours}"


def gradient_by_rpc_shares(engine: str, leaf_worker: str) -> bool:
    """The leaf's gradient arrives by RPC (its send function feeds AccumulateGrad directly),
    on the worker that calls backward (worker0) or on another one (worker2); a tensor hook
    on the leaf records the tensor that reaches it."""
    clear_everywhere()
    name = f"by_rpc_{leaf_worker}"
    with dist_autograd.context() as ctx:
        if leaf_worker == "worker0":
            product = rpc.rpc_sync("worker1", torch.mul, args=(grad_storage.hooked_leaf(name), 3.0))
        else:
            product = rpc.rpc_sync(leaf_worker, grad_storage.hooked_product, args=(name,))
        grad_storage.run_backward(ctx, [product.sum()], engine)
        return rpc.rpc_sync(leaf_worker, grad_storage.stored_shares, args=(ctx, name, engine))


@pytest.mark.parametrize("leaf_worker", ["worker0", "worker2"])
def test_gradient_arriving_by_rpc_as_torch(cluster, leaf_worker):
    """The request message that brought the gradient still refers to it while our engine
    stores it (torch's has returned from its handler by then); its reference does not
    count (compat.h, dropMessageReferences).

    torch's engine runs the leaf's task on another thread than the RPC handler's, so whether
    the message still holds its reference then is a race: on a loaded machine torch copies now
    and then (seen in two full CI runs, once with three tries in a row copying). Its usual
    behaviour is taken from up to ten tries, stopping at the first that keeps the tensor; ours
    does not race (the reference is dropped before the gradient is stored), so one try must
    keep it."""
    theirs = []
    while len(theirs) < 10 and not any(theirs):
        theirs.append(gradient_by_rpc_shares("torch", leaf_worker))
    ours = gradient_by_rpc_shares("plugin", leaf_worker)
    assert any(theirs), f"torch's engine changed: it copies a gradient that arrives by RPC ({theirs})"
    assert ours is True, f"torch keeps the received tensor ({theirs}), ours: {ours}"


def shared_gradient_by_rpc(engine: str):
    """Both leaves are arguments of a remote add, whose gradient (one tensor for both
    inputs) comes back in one message, which holds it once and refers to it twice: neither
    leaf may keep it."""
    clear_everywhere()
    with dist_autograd.context() as ctx:
        a = graphs.make_leaf("a", (3, 4), 1)
        b = graphs.make_leaf("b", (3, 4), 2)
        loss = rpc.rpc_sync("worker1", torch.add, args=(a, b)).sum()
        grad_storage.run_backward(ctx, [loss], engine)
        a_ptr, b_ptr = grad_storage.stored_ptr(ctx, "a", engine), grad_storage.stored_ptr(ctx, "b", engine)
        return a_ptr == b_ptr


def test_gradient_shared_by_two_leaves_by_rpc_is_copied(cluster):
    assert shared_gradient_by_rpc("torch") is False
    assert shared_gradient_by_rpc("plugin") is False


def shared_gradient_two_leaves(engine: str):
    """An add hands one gradient tensor to both of its inputs: neither leaf may keep it
    (a change to one leaf's gradient would show in the other's)."""
    clear_everywhere()
    with dist_autograd.context() as ctx:
        a = graphs.make_leaf("a", (3, 4), 1)
        b = graphs.make_leaf("b", (3, 4), 2)
        loss = rpc.rpc_sync("worker1", torch.sum, args=(a + b,))
        grad_storage.run_backward(ctx, [loss], engine)
        return grad_storage.stored_ptr(ctx, "a", engine) == grad_storage.stored_ptr(ctx, "b", engine)


def test_gradient_shared_by_two_leaves_is_copied(cluster):
    assert shared_gradient_two_leaves("torch") is False
    assert shared_gradient_two_leaves("plugin") is False


def second_pass(engine: str):
    """Two passes in one context (retain_graph): is the second gradient added in place?"""
    clear_everywhere()
    name = "twice"
    with dist_autograd.context() as ctx:
        w = graphs.make_leaf(name, (3, 4), 7)
        y = grad_storage.Emit.apply(w, name, "dense")
        loss = rpc.rpc_sync("worker1", torch.sum, args=(y * y,))
        grad_storage.run_backward(ctx, [loss], engine, retain_graph=True)
        first = grad_storage.stored_gradient(ctx, name, engine)
        first_ptr, first_value = first.data_ptr(), first.clone()
        grad_storage.run_backward(ctx, [loss], engine)
        second = grad_storage.stored_gradient(ctx, name, engine)
        assert torch.equal(second, 2 * first_value)
        return second.data_ptr() == first_ptr, torch.equal(first, second)


def test_second_pass_accumulates_as_torch(cluster):
    theirs = second_pass("torch")
    ours = second_pass("plugin")
    # torch adds in place: the stored tensor (and a dict returned earlier) holds the sum
    assert theirs == (True, True), theirs
    assert ours == theirs, (ours, theirs)


# torch's test_no_grad_copy: what torch's distributed engine does on its three graphs. It holds
# every leaf's gradient until the pass ends, so a tensor one function returns for two leaves is
# copied for both (unlike torch's local engine, which hands it to one of them).
TORCH_NO_GRAD_COPY = {
    "noncontiguous_a": False, "noncontiguous_b": False,
    "single_a": True,
    "shared_a": False, "shared_b": False, "shared_same": False,
}


@pytest.mark.parametrize("loss_on", ["", "worker1"], ids=["local", "loss_by_rpc"])
def test_no_grad_copy_as_torch(cluster, loss_on):
    clear_everywhere()
    theirs = grad_storage.no_grad_copy_cases("torch", loss_on)
    ours = grad_storage.no_grad_copy_cases("plugin", loss_on)
    assert theirs == TORCH_NO_GRAD_COPY, f"torch's engine changed: {theirs}"
    assert ours == theirs
