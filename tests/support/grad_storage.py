"""Graphs whose last backward node hands a known tensor to a leaf, to see whether an
engine stores that tensor as the leaf's gradient or a copy of it.

``Emit`` is an autograd function whose backward returns a tensor made in one of several
ways (``KINDS``) and records the address of its data (for a sparse one, of its values) in
the worker-local ``PRODUCED``, by leaf name. ``stored_shares`` then says, on the worker that
holds the leaf, whether the gradient the engine stored shares that memory.
"""
from typing import Dict, List

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
from torch import Tensor

import plugin
from tests.support import graphs

# leaf name -> data_ptr of the tensor the last node produced for it (values for sparse)
PRODUCED: Dict[str, int] = {}
# tensors kept alive on purpose, so that the produced gradient is referenced elsewhere
KEPT: List[Tensor] = []

# How Emit's backward makes the gradient of its input (a 3x4 float64 leaf).
KINDS = (
    "dense",  # a new contiguous tensor, referenced by nothing else
    "dense_referenced",  # the same, also kept in KEPT
    "noncontiguous",  # a transposed view (strides (1, 3)), unlike the leaf's (4, 1)
    "sparse",  # a sparse COO tensor over new indices and values
    "sparse_values_referenced",  # the same, its values also kept in KEPT
    "sparse_referenced",  # the same, the sparse tensor itself kept in KEPT
    "sparse_noncontiguous_values",  # values that are a non-contiguous view
)


class Emit(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, name: str, kind: str) -> Tensor:
        ctx.name, ctx.kind = name, kind
        return x.clone()

    @staticmethod
    def backward(ctx, grad: Tensor):
        kind = ctx.kind
        g = grad * 2.0  # a new contiguous tensor
        if kind in ("dense", "dense_referenced"):
            out, produced = g, g
        elif kind == "noncontiguous":
            out = g.t().contiguous().t()
            produced = out
        else:
            # rows 0 and 2 of the gradient, as a sparse COO tensor
            indices = torch.tensor([[0, 2]])
            values = g[[0, 2]]
            if kind == "sparse_noncontiguous_values":
                values = values.t().contiguous().t()
            out = torch.sparse_coo_tensor(indices, values, g.shape, check_invariants=True)
            produced = out._values()
            if kind == "sparse_values_referenced":
                KEPT.append(values)
            del values
        if kind in ("dense_referenced", "sparse_referenced"):
            KEPT.append(out)
        PRODUCED[ctx.name] = produced.data_ptr()
        return out, None, None


def clear() -> None:
    PRODUCED.clear()
    KEPT.clear()
    graphs.clear_leaves()


def emitted_sum(name: str, kind: str) -> Tensor:
    """On the leaf's worker: a new 3x4 leaf ``name`` through Emit, summed."""
    w = graphs.make_leaf(name, (3, 4), 7)
    return Emit.apply(w, name, kind).sum()


def hooked_leaf(name: str) -> Tensor:
    """A leaf whose tensor hook records the address of the gradient that reaches it."""
    w = graphs.make_leaf(name, (3, 4), 8)

    def record(grad: Tensor) -> None:
        PRODUCED[name] = grad.data_ptr()

    w.register_hook(record)
    return w


def hooked_product(name: str) -> Tensor:
    """On a worker other than the caller: a hooked leaf ``name`` sent to worker1 and
    multiplied there, so that its gradient arrives here by RPC."""
    return rpc.rpc_sync("worker1", torch.mul, args=(hooked_leaf(name), 3.0))


def stored_gradient(context_id: int, name: str, engine: str) -> Tensor:
    grads = dist_autograd.get_gradients(context_id) if engine == "torch" else plugin.autograd.get_gradients(context_id)
    return grads[graphs.LEAVES[name]]


def stored_shares(context_id: int, name: str, engine: str) -> bool:
    """Whether the stored gradient of ``name`` shares memory with the produced one."""
    stored = stored_gradient(context_id, name, engine)
    ptr = stored._values().data_ptr() if stored.is_sparse else stored.data_ptr()
    return ptr == PRODUCED[name]


def stored_ptr(context_id: int, name: str, engine: str) -> int:
    stored = stored_gradient(context_id, name, engine)
    return stored._values().data_ptr() if stored.is_sparse else stored.data_ptr()


def run_backward(context_id: int, roots: List[Tensor], engine: str, retain_graph: bool = False) -> None:
    if engine == "torch":
        dist_autograd.backward(context_id, roots, retain_graph=retain_graph)
    else:
        plugin.autograd.backward(context_id, roots, retain_graph=retain_graph)


def rpc_workers() -> List[str]:
    return [info.name for info in rpc._get_current_rpc_agent().get_worker_infos()]


# torch's test_no_grad_copy (torch/testing/_internal/distributed/rpc/dist_autograd_test.py):
# autograd functions that record the address of the gradient they hand on.
class SharedGrad(torch.autograd.Function):
    """inp1 + inp2, whose backward returns the incoming gradient itself for both inputs."""

    @staticmethod
    def forward(ctx, inp1: Tensor, inp2: Tensor) -> Tensor:
        return inp1 + inp2

    @staticmethod
    def backward(ctx, grad: Tensor):
        PRODUCED["shared"] = grad.data_ptr()
        return grad, grad


class PassGrad(torch.autograd.Function):
    """The identity, whose backward returns the incoming gradient itself."""

    @staticmethod
    def forward(ctx, inp: Tensor) -> Tensor:
        return inp

    @staticmethod
    def backward(ctx, grad: Tensor):
        PRODUCED["single"] = grad.data_ptr()
        return grad


class NonContiguousGrad(torch.autograd.Function):
    """A one-element result whose backward returns an expanded (non-contiguous) gradient."""

    @staticmethod
    def forward(ctx, inp: Tensor) -> Tensor:
        ctx.size = inp.size()
        return torch.tensor([1.0], dtype=inp.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return torch.ones(1, dtype=grad.dtype).expand(ctx.size)


def no_grad_copy_cases(engine: str, loss_on: str = "") -> Dict[str, bool]:
    """The three graphs of torch's test_no_grad_copy, on this worker's leaves "a" and "b"
    (the loss computed on worker ``loss_on`` when given, so that the gradient arrives by RPC).
    Returns, per case, whether the stored gradients share the produced tensor's memory:
    ``noncontiguous_a``/``_b`` (SharedGrad under NonContiguousGrad), ``single_a`` (PassGrad),
    ``shared_a``/``_b`` and ``shared_same`` (whether a and b share one buffer)."""
    a = graphs.make_leaf("a", (5, 6), 11)
    b = graphs.make_leaf("b", (5, 6), 12)

    def loss_of(t: Tensor) -> Tensor:
        return rpc.rpc_sync(loss_on, torch.sum, args=(t,)) if loss_on else t.sum()

    found = {}
    with dist_autograd.context() as ctx:
        run_backward(ctx, [loss_of(NonContiguousGrad.apply(SharedGrad.apply(a, b)))], engine)
        grads = dist_autograd.get_gradients(ctx) if engine == "torch" else plugin.autograd.get_gradients(ctx)
        found["noncontiguous_a"] = grads[a].data_ptr() == PRODUCED["shared"]
        found["noncontiguous_b"] = grads[b].data_ptr() == PRODUCED["shared"]
    with dist_autograd.context() as ctx:
        run_backward(ctx, [loss_of(PassGrad.apply(a)[1][0])], engine)
        grads = dist_autograd.get_gradients(ctx) if engine == "torch" else plugin.autograd.get_gradients(ctx)
        found["single_a"] = grads[a].data_ptr() == PRODUCED["single"]
    with dist_autograd.context() as ctx:
        run_backward(ctx, [loss_of(SharedGrad.apply(a, b)[1][0])], engine)
        grads = dist_autograd.get_gradients(ctx) if engine == "torch" else plugin.autograd.get_gradients(ctx)
        found["shared_a"] = grads[a].data_ptr() == PRODUCED["shared"]
        found["shared_b"] = grads[b].data_ptr() == PRODUCED["shared"]
        found["shared_same"] = grads[a].data_ptr() == grads[b].data_ptr()
        torch.testing.assert_close(grads[a], grads[b])
    return found
