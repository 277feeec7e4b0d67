"""plugin.embedding: embedding-bag lookups answered natively by the owner, against torch's
nn.EmbeddingBag in one process and against the Python RPC to the owner's module (torch's
parameter-server pattern) on the same tables, on a real RPC group."""
import time

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import plugin
import plugin.embedding
from plugin.optim import DistributedOptimizer
from tests.support import embedding_remote as remote
from tests.support import optim_remote

INPUTS = [torch.tensor([1, 2, 4, 4, 0, 7]), torch.tensor([3, 5, 5])]
OFFSETS = [torch.tensor([0, 2, 4, 6]), torch.tensor([0, 1, 1, 3])]  # the last bag of table 0 and the third of table 1 are empty
WEIGHTS = torch.tensor([0.5, -1.0, 2.0, 0.25, 1.5])  # the loss's weights on the 3 + 2 columns


def tables(prefix, mode="sum"):
    return [rpc.rpc_sync("worker1", remote.make_table, args=(f"{prefix}_{i}", 8, d, mode, 7 + i))
            for i, d in enumerate((3, 2))]


def local_twins(prefix):
    return [torch.nn.EmbeddingBag.from_pretrained(rpc.rpc_sync("worker1", remote.weight, args=(f"{prefix}_{i}",)),
                                                  freeze=False, mode=mode, sparse=True)
            for i, mode in enumerate(("sum", "sum"))]


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_bags_and_sparse_gradients_equal_torchs(cluster, mode):
    """The bags equal nn.EmbeddingBag's on the same weights; the plugin's backward pass gives the
    owner's tables sparse COO gradients equal to the local module's."""
    names = [f"bags_{mode}_0", f"bags_{mode}_1"]
    handles = tables(f"bags_{mode}", mode)
    local = [torch.nn.EmbeddingBag.from_pretrained(rpc.rpc_sync("worker1", remote.weight, args=(n,)), freeze=False,
                                                   mode=mode, sparse=True) for n in names]
    with dist_autograd.context() as ctx:
        rows = plugin.embedding.lookup_bags_async("worker1", ctx, handles, INPUTS, OFFSETS).wait()
        plugin.autograd.backward(ctx, [(rows * WEIGHTS).sum()])
        grads = rpc.rpc_sync("worker1", remote.gradients, args=(ctx, names))
    want = torch.cat([m(i, o) for m, i, o in zip(local, INPUTS, OFFSETS)], dim=1)
    torch.testing.assert_close(rows.detach(), want.detach())
    (want * WEIGHTS).sum().backward()
    for g, m in zip(grads, local):
        assert g.layout == torch.sparse_coo
        torch.testing.assert_close(g.to_dense(), m.weight.grad.to_dense())


def test_equals_the_python_rpc_to_the_module(cluster):
    """The same lookups by torch's Python RPC to the owner's module, backward by the plugin's
    engine: the same rows and the same gradients."""
    names = ["py_0", "py_1"]
    handles = tables("py")
    with dist_autograd.context() as ctx:
        native = plugin.embedding.lookup_bags_async("worker1", ctx, handles, INPUTS, OFFSETS).wait()
        plugin.autograd.backward(ctx, [(native * WEIGHTS).sum()])
        native_grads = rpc.rpc_sync("worker1", remote.gradients, args=(ctx, names))
    with dist_autograd.context() as ctx:
        python = torch.cat([rpc.rpc_sync("worker1", remote.python_lookup, args=(n, i, o))
                            for n, i, o in zip(names, INPUTS, OFFSETS)], dim=1)
        plugin.autograd.backward(ctx, [(python * WEIGHTS).sum()])
        python_grads = rpc.rpc_sync("worker1", remote.gradients, args=(ctx, names))
    assert torch.equal(native.detach(), python.detach())
    for a, b in zip(native_grads, python_grads):
        assert torch.equal(a.to_dense(), b.to_dense())


def test_adagrad_steps_in_the_backward_pass_as_torch_optim(cluster):
    """Three steps of sparse Adagrad on the owner's tables through native lookups and
    backward_and_step equal torch.optim.Adagrad on the local twins."""
    names = ["ada_0", "ada_1"]
    handles = tables("ada")
    local = local_twins("ada")
    params = [rpc.rpc_sync("worker1", remote.weight_rref, args=(n,)) for n in names]
    opt = DistributedOptimizer(torch.optim.Adagrad, params, lr=0.1)
    reference = torch.optim.Adagrad([m.weight for m in local], lr=0.1)
    for step in range(3):
        w = WEIGHTS * (step + 1)
        with dist_autograd.context() as ctx:
            rows = plugin.embedding.lookup_bags_async("worker1", ctx, handles, INPUTS, OFFSETS).wait()
            opt.backward_and_step(ctx, [(rows * w).sum()], mode="fast")
        reference.zero_grad()
        (torch.cat([m(i, o) for m, i, o in zip(local, INPUTS, OFFSETS)], dim=1) * w).sum().backward()
        reference.step()
    for n, m in zip(names, local):
        torch.testing.assert_close(rpc.rpc_sync("worker1", remote.weight, args=(n,)), m.weight.detach())


def test_without_a_context_nothing_is_recorded_and_the_owners_context_goes_with_the_callers(cluster):
    handles = tables("ctx")
    rows = plugin.embedding.lookup_bags_async("worker1", None, handles, INPUTS, OFFSETS).wait()
    assert not rows.requires_grad and rows.grad_fn is None
    with dist_autograd.context() as ctx:
        rows = plugin.embedding.lookup_bags_async("worker1", ctx, handles, INPUTS, OFFSETS).wait()
        assert rows.requires_grad
        assert rpc.rpc_sync("worker1", optim_remote.contexts_known, args=([ctx],)) == [ctx]
    # the caller's release reaches the owner (it knows the owner); the owner sends nothing back
    for _ in range(100):
        if not rpc.rpc_sync("worker1", optim_remote.contexts_known, args=([ctx],)):
            break
        time.sleep(0.02)  # a moment for the release message
    assert rpc.rpc_sync("worker1", optim_remote.contexts_known, args=([ctx],)) == []


def test_bad_requests_name_the_argument(cluster):
    handles = tables("bad")
    with pytest.raises(RuntimeError, match=r"handles\[1\] = 999999 is not a shared table on this worker"):
        plugin.embedding.lookup_bags_async("worker1", None, [handles[0], 999999], INPUTS, OFFSETS).wait()
    with pytest.raises(RuntimeError, match=r"indices\[0\] must be a 1-D int64 tensor"):
        plugin.embedding.lookup_bags_async("worker1", None, handles, [INPUTS[0].int(), INPUTS[1]], OFFSETS).wait()
    with pytest.raises(RuntimeError, match=r"offsets\[1\] has 3 bags, offsets\[0\] 4"):
        plugin.embedding.lookup_bags_async("worker1", None, handles, INPUTS, [OFFSETS[0], OFFSETS[1][:3]]).wait()
    with pytest.raises(TypeError, match=r"lists of one length"):
        plugin.embedding.lookup_bags_async("worker1", None, handles, INPUTS[:1], OFFSETS)


@pytest.mark.parametrize("kind,error,message", [
    ("dense", ValueError, "must be built with sparse=True"),
    ("padding", ValueError, "uses padding_idx"),
    ("max", ValueError, "max mode does not support sparse weights"),
    ("linear", TypeError, "must be a torch.nn.EmbeddingBag, got Linear"),
])
def test_share_refuses_what_the_lookup_cannot_apply(kind, error, message):
    with pytest.raises(error, match=message):
        remote.share(kind)
