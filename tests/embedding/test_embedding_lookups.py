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
from plugin import _rpc_functions
from plugin.optim import DistributedOptimizer
from tests.support import embedding_remote as remote
from tests.support import graphs, optim_remote

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


def lookup(handles, inputs, offsets, context_id=None):
    return plugin.embedding.lookup_bags_async("worker1", context_id, handles, inputs, offsets).wait()


def raw_lookup(handles, indices, offsets, context_id=-1):
    """The owner's op called by RPC as any worker could, without the caller's checks."""
    return _rpc_functions.call("worker1", "_lookup_bags", (context_id, handles, indices, offsets)).wait()


def assert_owner_serves(handles):
    rows = lookup(handles, INPUTS, OFFSETS)
    assert rows.shape == (4, 5)


T = torch.tensor
NON_DECREASING = r"offsets\[0\]: offsets have to be non-decreasing, but "
# (inputs, offsets for table 0 (table 1 keeps its own), the caller's error, its message after
# "lookup_bags_async to 'worker1': "). Where nn.EmbeddingBag checks the same, torch's text.
CALLER_REFUSES = [
    (T([1, 2, 4]), T([0, -100000000, 2, 3]), RuntimeError,
     r"offsets\[0\]: offsets have to be non-decreasing, but offsets\[1\] = -100000000 is less than offsets\[0\] = 0$"),
    (T([1, 2, 4]), T([0, -(2**31), 2, 3]), RuntimeError, NON_DECREASING + r"offsets\[1\] = -2147483648 is less than offsets\[0\] = 0$"),
    (T([1, 2, 4]), T([0, 2**40, 2, 3]), RuntimeError, NON_DECREASING + r"offsets\[2\] = 2 is less than offsets\[1\] = 1099511627776$"),
    (T([1, 2, 4]), T([0, 2**33 + 1, 3, 3]), RuntimeError, NON_DECREASING + r"offsets\[2\] = 3 is less than offsets\[1\] = 8589934593$"),
    (T([1, 2, 4]), T([0, -1, 2, 3]), RuntimeError, NON_DECREASING + r"offsets\[1\] = -1 is less than offsets\[0\] = 0$"),
    (T([1, 2, 4]), T([1, 1, 2, 3]), RuntimeError,
     r"offsets\[0\]: offsets\[0\] has to be 0, i\.e\., the first sequence in the mini-batch has to start from "
     r"position 0\. However, got 1$"),
    (T([1, 2, 4]), T([0, 1, 2, 5]), RuntimeError,
     r"offsets\[0\]: offsets\[-1\] can not be greater than input's length 3 but got offsets\[-1\] of 5$"),
    (T([1, -7, 4]), T([0, 1, 2, 3]), RuntimeError,
     r"inputs\[0\]: Index 1 of input takes value -7 which is not in the valid range \[0, num_embeddings\)$"),
    (T([1, 2, 4]).float(), T([0, 1, 2, 3]), RuntimeError,
     r"inputs\[0\]: Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; "
     r"but got torch\.FloatTensor instead \(while checking arguments for embedding_bag\)$"),
    (T([1, 2, 4]), T([0, 1, 2, 3]).int(), RuntimeError,
     r"offsets\[0\]: Expected tensor for argument #2 'offsets' to have scalar type Long; but got torch\.IntTensor "
     r"instead \(while checking arguments for embedding_bag\)$"),
    (T([[1, 2, 4]]), T([0, 1, 2, 3]), ValueError,
     r"inputs\[0\]: input has to be a 1D Tensor \(the bags' rows, with offsets\), but got Tensor of dimension 2$"),
    (T([1, 2, 4]), T([[0, 1, 2, 3]]), ValueError, r"offsets\[0\]: offsets has to be a 1D Tensor, but got Tensor of dimension 2$"),
    (T([1, 2, 4]), T([0, 1, 2]), RuntimeError, r"offsets\[1\] has 4 bags, offsets\[0\] 3$"),
    (T([1, 2, 4]).to_sparse(), T([0, 1, 2, 3]), RuntimeError, r"inputs\[0\] must be a dense \(strided\) tensor, got layout torch\.sparse_coo$"),
    ([1, 2, 4], T([0, 1, 2, 3]), TypeError, r"inputs\[0\] must be a Tensor, got list$"),
]


@pytest.mark.parametrize("inputs,offsets,error,message", CALLER_REFUSES)
def test_the_caller_refuses_a_bad_lookup_before_sending_it(cluster, inputs, offsets, error, message):
    """Each rule is checked on the caller, which sends nothing: the error names the owner, the
    argument, the position and the value (torch's text and type where nn.EmbeddingBag checks the
    same). The order of the checks: table 0's offsets before table 1's count of bags."""
    handles = tables("caller_checks")
    with pytest.raises(error, match=r"^lookup_bags_async to 'worker1': " + message):
        plugin.embedding.lookup_bags_async("worker1", None, handles, [inputs, INPUTS[1]], [offsets, OFFSETS[1]])


def test_the_caller_refuses_bad_handles_and_lists(cluster):
    handles = tables("caller_lists")
    for bad, error, message in (
        ([handles[0], -3], RuntimeError, r"handles\[1\] = -3 is not a shared table on 'worker1'"),
        ([handles[0], 2**64], RuntimeError, r"handles\[1\] = 18446744073709551616 is not a shared table"),
        ([handles[0], "1"], TypeError, r"handles\[1\] must be an int \(a handle of share_embedding_bag\), got str"),
        ([], ValueError, r"handles is empty"),
    ):
        with pytest.raises(error, match=r"^lookup_bags_async to 'worker1': " + message):
            plugin.embedding.lookup_bags_async("worker1", None, bad, INPUTS[:len(bad)], OFFSETS[:len(bad)])
    with pytest.raises(TypeError, match=r"lists of one length"):
        plugin.embedding.lookup_bags_async("worker1", None, handles, INPUTS[:1], OFFSETS)


# The requests (#30), sent to the owner's op as any worker could: before the owner's
# checks, the first one ended the owner (SIGSEGV in torch's embedding_bag), the third was
# answered as valid and the last answered with a value read outside the caller's data.
OWNER_REFUSES = [
    ([0, -100000000, 2], r"offsets\[1\] = -100000000 is less than offsets\[0\] = 0"),
    ([0, -(2**31), 2], r"offsets\[1\] = -2147483648 is less than offsets\[0\] = 0"),
    ([0, 2**40, 2], r"offsets\[2\] = 2 is less than offsets\[1\] = 1099511627776"),
    ([0, 2**33 + 1, 3], r"offsets\[2\] = 3 is less than offsets\[1\] = 8589934593"),
    ([0, -1, 2], r"offsets\[1\] = -1 is less than offsets\[0\] = 0"),
]


@pytest.mark.parametrize("offsets,message", OWNER_REFUSES)
def test_the_owner_refuses_bad_offsets_and_keeps_serving(cluster, offsets, message):
    handles = tables("owner_offsets")
    with pytest.raises(RuntimeError, match=r"lookup_bags: offsets\[0\]: offsets have to be non-decreasing, but " + message):
        raw_lookup(handles[:1], [T([1, 2, 4])], [T(offsets)])
    assert_owner_serves(handles)


def test_the_owner_checks_every_argument_itself(cluster):
    """The owner refuses what the caller would have refused, and what only it can check (the
    handle, a row past the table's end), naming the argument, the position and the value; it
    keeps serving."""
    handles = tables("owner_checks")
    for args, message in (
        (([handles[0], 999999], INPUTS, OFFSETS),
         r"lookup_bags: handles\[1\] = 999999 is not a shared table on this worker \(never shared, or unshared\)"),
        ((handles, [INPUTS[0], T([3, 8, 5])], OFFSETS),
         r"lookup_bags: indices\[1\]: Index 1 of input takes value 8 which is not in the valid range \[0, 8\)"),
        ((handles, [INPUTS[0], T([3, -(2**40), 5])], OFFSETS),
         r"lookup_bags: indices\[1\]: Index 1 of input takes value -1099511627776 which is not in the valid range"),
        ((handles, [INPUTS[0], T([3, 2**31, 5])], OFFSETS), r"Index 1 of input takes value 2147483648 which"),
        ((handles, INPUTS, [OFFSETS[0], T([0, 1, 1, 4])]),
         r"lookup_bags: offsets\[1\]: offsets\[-1\] can not be greater than input's length 3 but got offsets\[-1\] of 4"),
        ((handles, INPUTS, [OFFSETS[0], T([0, 1, 3])]), r"lookup_bags: offsets\[1\] has 3 bags, offsets\[0\] 4"),
        ((handles, [INPUTS[0].float(), INPUTS[1]], OFFSETS), r"lookup_bags: indices\[0\]: Expected tensor for argument #1 "
                                                             r"'indices' to have one of the following scalar types: Long, Int; "
                                                             r"but got torch.FloatTensor instead"),
        ((handles, INPUTS, [OFFSETS[0], OFFSETS[1].int()]), r"lookup_bags: offsets\[1\]: Expected tensor for argument #2"),
        ((handles, [INPUTS[0].view(2, 3), INPUTS[1]], OFFSETS), r"lookup_bags: indices\[0\]: input has to be a 1D.*"
                                                      r"\[ValueError raised on worker 'worker1' \(id 1\), in gilfree_rpc::_lookup_bags\]"),
        ((handles, [INPUTS[0].to_sparse(), INPUTS[1]], OFFSETS), r"lookup_bags: indices\[0\] must be a dense \(strided\)"),
        ((handles, INPUTS[:1], OFFSETS), r"lookup_bags: expected one indices and one offsets tensor per handle \(2\), got 1 and 2"),
        (([], [], []), r"lookup_bags: handles is empty"),
    ):
        with pytest.raises(RuntimeError, match=message):
            raw_lookup(*args)
    for context_id, message in ((-5, r"context_id must be -1 \(no context\) or a distributed autograd context id, got -5"),
                                (2**62, r"context_id 4611686018427387904 was not made by a worker of this group")):
        with pytest.raises(RuntimeError, match=message):
            raw_lookup(handles, INPUTS, OFFSETS, context_id)
    assert_owner_serves(handles)


def test_int32_rows_and_empty_inputs_equal_torchs(cluster):
    """What nn.EmbeddingBag takes, the lookup takes: int32 rows, empty bags, no bags, no rows."""
    handles = tables("edges")
    local = local_twins("edges")
    for inputs, offsets in (
        ([INPUTS[0].int(), INPUTS[1]], OFFSETS),
        ([T([], dtype=torch.int64), T([], dtype=torch.int64)], [T([0, 0]), T([0, 0])]),
        ([INPUTS[0], INPUTS[1]], [T([], dtype=torch.int64), T([], dtype=torch.int64)]),
        ([INPUTS[0][::2], INPUTS[1]], [T([0, 3]), T([0, 3])]),  # a strided view of the rows
    ):
        want = torch.cat([m(i, o) for m, i, o in zip(local, inputs, offsets)], dim=1)
        torch.testing.assert_close(lookup(handles, inputs, offsets), want.detach())


def test_a_lookup_in_a_released_or_unknown_context_raises_on_the_caller_and_records_nothing(cluster):
    handles = tables("released")
    with dist_autograd.context() as released:
        pass
    before = rpc.rpc_sync("worker1", graphs.engine_debug_info)["num_torch_contexts"]
    for context_id in (released, released + 10**6):
        with pytest.raises(RuntimeError, match=rf"^lookup_bags_async to 'worker1': no distributed autograd context "
                                               rf"{context_id} on this worker \(worker 'worker0' \(id 0\); released, or "
                                               rf"never made here\).*nothing was sent$"):
            plugin.embedding.lookup_bags_async("worker1", context_id, handles, INPUTS, OFFSETS)
    assert rpc.rpc_sync("worker1", optim_remote.contexts_known, args=([released, released + 10**6],)) == []
    assert optim_remote.contexts_known([released, released + 10**6]) == []
    assert rpc.rpc_sync("worker1", graphs.engine_debug_info)["num_torch_contexts"] <= before


@pytest.mark.parametrize("kind,error,message", [
    ("dense", ValueError, "must be built with sparse=True"),
    ("padding", ValueError, "uses padding_idx"),
    ("max", ValueError, "max mode does not support sparse weights"),
    ("linear", TypeError, "must be a torch.nn.EmbeddingBag, got Linear"),
])
def test_share_refuses_what_the_lookup_cannot_apply(kind, error, message):
    with pytest.raises(error, match=message):
        remote.share(kind)


def test_torchs_own_engine_takes_a_lookups_graph_too(cluster):
    """A lookup is recorded as torch's RPC records one (send and recv functions sharing an
    autograd_message_id), so torch's dist_autograd.backward brings the bags' gradient to the
    owner too: the tables' gradients in the context equal nn.EmbeddingBag's, read through torch's
    dist_autograd.get_gradients and the plugin's get_gradients alike."""
    names = ["torch_engine_0", "torch_engine_1"]
    handles = tables("torch_engine")
    local = local_twins("torch_engine")
    with dist_autograd.context() as ctx:
        rows = plugin.embedding.lookup_bags_async("worker1", ctx, handles, INPUTS, OFFSETS).wait()
        dist_autograd.backward(ctx, [(rows * WEIGHTS).sum()])
        grads = rpc.rpc_sync("worker1", remote.gradients, args=(ctx, names))
        torch_grads = rpc.rpc_sync("worker1", remote.torch_gradients, args=(ctx, names))
    want = torch.cat([m(i, o) for m, i, o in zip(local, INPUTS, OFFSETS)], dim=1)
    (want * WEIGHTS).sum().backward()
    for g, t, m in zip(grads, torch_grads, local):
        assert g is not None and t is not None
        torch.testing.assert_close(g.to_dense(), m.weight.grad.to_dense())
        torch.testing.assert_close(t.to_dense(), m.weight.grad.to_dense())
