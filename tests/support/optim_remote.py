"""Worker-side helpers for the distributed optimizer tests: parameters that live on a
worker, reached through RRefs."""
import threading
import time
from typing import Dict, List

import torch
from torch import Tensor
from torch.distributed.rpc import RRef

import plugin.ops

# name -> parameter, on each worker
PARAMS: Dict[str, Tensor] = {}


def make_param(name: str, shape, seed: int, dtype=torch.float64) -> RRef:
    gen = torch.Generator().manual_seed(seed)
    PARAMS[name] = torch.rand(shape, generator=gen, dtype=dtype).requires_grad_()
    return RRef(PARAMS[name])


def param_value(name: str) -> Tensor:
    return PARAMS[name].detach().clone()


def param_version(name: str) -> int:
    """The parameter's version counter (``_version``)."""
    return PARAMS[name]._version


def set_param(name: str, value: Tensor) -> None:
    with torch.no_grad():
        PARAMS[name].copy_(value)


def use_param(x: Tensor, name: str) -> Tensor:
    """The forward pass on the owner: multiplies by the parameter (broadcast)."""
    return x * PARAMS[name]


def use_param_sparse(indices: Tensor, name: str) -> Tensor:
    return torch.nn.functional.embedding(indices, PARAMS[name], sparse=True)


def use_param_then(x: Tensor, name: str, next_owner: str, next_name: str, sparse_next: bool) -> Tensor:
    """A forward pass through two owners, the second reached only from this one: ``x`` times
    this owner's parameter, then, on ``next_owner``, times its parameter ``next_name`` and
    summed (``sparse_next``: a scalar from a sparse embedding lookup in ``next_name``, rows 0
    and 2, times that product's sum)."""
    import torch.distributed.rpc as rpc

    y = x * PARAMS[name]
    return rpc.rpc_sync(next_owner, sparse_scaled if sparse_next else dense_scaled, args=(y, next_name))


def dense_scaled(y: Tensor, name: str) -> Tensor:
    return (y * PARAMS[name]).sum()


def sparse_scaled(y: Tensor, name: str) -> Tensor:
    rows = torch.nn.functional.embedding(torch.tensor([0, 2]), PARAMS[name], sparse=True)
    return rows.sum() * y.sum()


def backward_from_here_in(context_id: int, owner: str, name: str) -> None:
    """On a worker that did not create the context: a backward pass of that context started
    here, through ``owner``'s parameter ``name`` (its sum: a dense gradient of ones)."""
    import torch.distributed.rpc as rpc

    import plugin.autograd

    previous = plugin.ops._swap_current_context(context_id)
    try:
        x = torch.ones(1, dtype=torch.float64)  # broadcast over the parameter
        y = rpc.rpc_sync(owner, use_param, args=(x, name))
        plugin.autograd.backward(context_id, [y.sum()])
    finally:
        plugin.ops._swap_current_context(previous)


class _SlowBackward(torch.autograd.Function):
    """Identity whose backward sleeps 0.5 s: the deepest worker's part ends last."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        time.sleep(0.5)
        return grad


def slow_scaled(y: Tensor, name: str) -> Tensor:
    return (_SlowBackward.apply(y) * PARAMS[name]).sum()


def use_param_then_slow(x: Tensor, name: str, next_owner: str, next_name: str) -> Tensor:
    """As use_param_then, with the next owner's backward taking 0.5 s."""
    import torch.distributed.rpc as rpc

    return rpc.rpc_sync(next_owner, slow_scaled, args=(x * PARAMS[name], next_name))


def not_a_tensor() -> RRef:
    return RRef("hello")


# --- a thread that holds the GIL ----------------------------------------------------------

_HOG: Dict[str, float] = {}


def start_gil_hog(seconds_of_work: int) -> None:
    """Starts a thread that, after 0.3 s, runs one long C call (builtin sum over a range)
    that never releases the GIL, and records when it ends."""

    def hog():
        time.sleep(0.3)
        sum(range(seconds_of_work * 25_000_000))
        _HOG["done"] = time.time()

    _HOG.clear()
    threading.Thread(target=hog, daemon=True).start()


def gil_hog_done() -> float:
    return _HOG.get("done", 0.0)


def wait_for_gil_hog() -> float:
    while "done" not in _HOG:
        time.sleep(0.05)
    return _HOG["done"]


def context_gradients(context_id: int, names: List[str]):
    """Copies of the named parameters' gradients in a distributed autograd context, as the
    optimizer step reads them (None where a parameter has none)."""
    grads = plugin.ops.gradients_for(context_id, [PARAMS[n] for n in names])
    return [None if g is None else g.clone() for g in grads]


def param_sum(name: str) -> Tensor:
    """The sum of the parameter, computed on its owner: its gradient there is the gradient of
    a sum, a stride-0 view of one element in torch's backward."""
    return PARAMS[name].sum()


# --- holding the locks of a parameter, on its owner ---------------------------------------

_HOLDS: Dict[str, threading.Event] = {}


def hold_param_lock(name: str, seconds: float) -> None:
    """Takes the step locks of parameter ``name`` on this worker (a StepLock over it, the
    per-parameter lock every local optimizer takes) from a thread, and keeps them until
    release_param_lock(name) or ``seconds`` pass: a step over the parameter waits meanwhile.
    Returns once they are held."""
    lock = torch.classes.gilfree_rpc.StepLock([PARAMS[name]])
    held, release = threading.Event(), threading.Event()

    def hold():
        lock.__enter__()
        held.set()
        release.wait(seconds)
        lock.__exit__(None, None, None)

    _HOLDS[name] = release
    threading.Thread(target=hold, daemon=True).start()
    held.wait()


def release_param_lock(name: str) -> None:
    _HOLDS.pop(name).set()


def optimizer_debug_info() -> Dict[str, int]:
    return plugin.debug_info()


def contexts_known(context_ids: List[int]) -> List[int]:
    """The ids among ``context_ids`` that are live distributed autograd contexts here."""
    import torch.distributed.autograd as dist_autograd

    known = []
    for context_id in context_ids:
        try:
            dist_autograd._is_valid_context(context_id)
            known.append(context_id)
        except RuntimeError:
            pass
    return known
