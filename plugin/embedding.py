"""Embedding-bag lookups served natively by RPC: the forward pass of a parameter server's
embedding tables without Python, pickling or the GIL on the owner.

In torch's parameter-server pattern a trainer calls a Python function on the server by RPC
(``rpc.rpc_sync(server, fn, args=(module_rref, input, offsets))``): the server unpickles the
call, takes its GIL, runs the module and pickles the answer. Here the owner shares its
``nn.EmbeddingBag`` tables once (:func:`share_embedding_bag`, a handle per table), and a
trainer asks for the bags of several tables in one message (:func:`lookup_bags_async`),
which the owner answers on its RPC thread in C++. Inside a distributed autograd context
the lookup is recorded as torch's RPC records one (a send function on the owner, a recv
function on the caller, sharing an ``autograd_message_id``), so the plugin's backward pass
(``plugin.autograd.backward``, ``DistributedOptimizer.backward_and_step``) brings the bags'
gradient to the owner, where the tables get sparse gradients (``sparse=True``'s) in the
context, for a ``DistributedOptimizer`` to step. torch's own engine
(``torch.distributed.autograd.backward``) takes these lookups too: the tables' gradients land in
the same context (tests/embedding/test_embedding_lookups.py checks both engines against
``nn.EmbeddingBag``).

The owner's side of the graph is released with the caller's context, as for torch's RPCs, also
when the caller's context is released before the answer arrives (the caller then records
nothing and tells the owner to release its side). A lookup is checked on the caller before it
is sent and again on the owner, which answers a bad request with an error and keeps serving;
every error of a lookup names the owner.

Steps between a lookup and its backward pass. An optimizer's step moves the version counter
of every parameter it writes, so a backward pass through weights that a step changed after the
forward pass saved them raises autograd's error (docs: "Version counters"). A lookup's backward
pass needs no such guard: the gradient of an embedding bag in ``"sum"`` or ``"mean"`` mode is
the bag's gradient spread over the rows its indices name (divided by the bag's size for
``"mean"``), computed from the indices and offsets alone, never from the table's values; so a
step of the table between a lookup and its backward pass changes nothing of that backward
pass's result, and the lookups save no version of the table.
"""
from typing import List, Optional

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
from torch import Tensor

from . import _rpc_functions, ops

__all__ = ["share_embedding_bag", "unshare_embedding_bag", "lookup_bags_async"]

_MODES = {"sum": 0, "mean": 1}


def share_embedding_bag(module: torch.nn.EmbeddingBag) -> int:
    """On the owner: shares ``module``'s table for :func:`lookup_bags_async`; returns its handle.

    The lookups read ``module.weight`` itself (float, ``num_embeddings x embedding_dim``, on the
    CPU), so its updates (an optimizer's step) show in the next lookup.

    Args:
        module (torch.nn.EmbeddingBag): with ``sparse=True`` (its gradient is sparse here
            whatever the flag, as ``nn.EmbeddingBag(sparse=True)``'s), ``mode`` "sum" or "mean"
            (torch refuses "max" with sparse weights), and no ``max_norm``, ``scale_grad_by_freq``, ``padding_idx`` or
            ``include_last_offset`` (the native lookup does not apply them).

    Returns:
        int: the table's handle on this worker (unique in the process, never reused).

    Raises:
        TypeError: ``module`` is not an ``nn.EmbeddingBag``.
        ValueError: ``module`` uses an option the lookup does not apply, or is not sparse.
        RuntimeError: its weight is not a dense floating-point tensor on the CPU.
    """
    if not isinstance(module, torch.nn.EmbeddingBag):
        raise TypeError(f"share_embedding_bag: module must be a torch.nn.EmbeddingBag, got {type(module).__name__}")
    unsupported = [name for name, set_ in (("max_norm", module.max_norm is not None),
                                           ("scale_grad_by_freq", module.scale_grad_by_freq),
                                           ("padding_idx", module.padding_idx is not None),
                                           ("include_last_offset", module.include_last_offset)) if set_]
    if unsupported:
        raise ValueError(f"share_embedding_bag: module uses {', '.join(unsupported)}, which the native lookup does "
                         f"not apply")
    if not module.sparse:
        raise ValueError("share_embedding_bag: module must be built with sparse=True (the lookup's gradient is sparse)")
    if module.mode not in _MODES:
        raise ValueError(f"share_embedding_bag: max mode does not support sparse weights (module.mode is "
                         f"{module.mode!r}; sum and mean are)")
    return ops._share_table(module.weight, _MODES[module.mode])


def unshare_embedding_bag(handle: int) -> bool:
    """On the owner: forgets a handle of :func:`share_embedding_bag`; the table is no longer
    held for lookups (a lookup of it then raises).

    Args:
        handle (int): a handle :func:`share_embedding_bag` returned on this worker.

    Returns:
        bool: whether it was shared.

    Raises nothing.
    """
    return ops._unshare_table(handle)


def _check_request(to: str, handles: List[int], inputs: List[Tensor], offsets: List[Tensor]) -> None:
    """The checks of a lookup that need no table: the arguments' Python types and the handles'
    range here, then the owner's own checks of the tensors (``plugin/csrc/embedding/remote_lookup.cpp``,
    without the rows' upper bound), with ``inputs`` for the owner's ``indices``; every message
    after ``"lookup_bags_async to '<owner>': "``."""
    def fail(error: type, message: str):
        raise error(f"lookup_bags_async to {to!r}: {message}")

    if not (isinstance(handles, list) and isinstance(inputs, list) and isinstance(offsets, list)
            and len(handles) == len(inputs) == len(offsets)):
        fail(TypeError, "handles, inputs and offsets must be lists of one length")
    if not handles:
        fail(ValueError, "handles is empty")
    for i, handle in enumerate(handles):
        if not isinstance(handle, int) or isinstance(handle, bool):
            fail(TypeError, f"handles[{i}] must be an int (a handle of share_embedding_bag), got {type(handle).__name__}")
        if not 0 <= handle < 2**63:
            fail(RuntimeError, f"handles[{i}] = {handle} is not a shared table on {to!r} (handles are from 0 to 2**63 - 1)")
    for name, tensors in (("inputs", inputs), ("offsets", offsets)):
        for i, t in enumerate(tensors):
            if not isinstance(t, Tensor):
                fail(TypeError, f"{name}[{i}] must be a Tensor, got {type(t).__name__}")
    ops._check_lookup(f"lookup_bags_async to {to!r}: ", inputs, offsets)


def lookup_bags_async(to: str, context_id: Optional[int], handles: List[int], inputs: List[Tensor],
                      offsets: List[Tensor]) -> torch.futures.Future:
    """The bags of tables on worker ``to``, computed there natively, as a future.

    For each ``i``, ``nn.EmbeddingBag``'s forward of table ``handles[i]`` on ``inputs[i]`` and
    ``offsets[i]``; the results side by side (``torch.cat(..., dim=1)``).

    Every argument is checked here before anything is sent, and again by the owner, which
    trusts no caller (a bad request is refused with an error and the owner keeps serving):
    bag ``k`` of table ``i`` is ``inputs[i][offsets[i][k]:offsets[i][k + 1]]`` (the last one up
    to the end), so ``offsets[i]`` must start at 0, never decrease and end within
    ``inputs[i]``, and every row must be in ``[0, num_embeddings)`` (the upper bound is checked
    by the owner only: the caller does not know the tables' sizes). The messages name the
    argument, the position and value that broke the rule, and the owner; where
    ``nn.EmbeddingBag`` checks the same, they carry torch's text (and exception type) after
    that. ``nn.EmbeddingBag``'s ``per_sample_weights`` is not supported.

    Args:
        to (str): the owner's worker name.
        context_id (Optional[int]): the distributed autograd context to record the lookup in
            (``with torch.distributed.autograd.context() as context_id``), so that the plugin's
            backward pass reaches the tables; ``None`` for a lookup without gradient
            (evaluation). It must be live on this worker when the lookup is sent and when its
            answer arrives.
        handles (List[int]): tables shared on ``to`` (:func:`share_embedding_bag`).
        inputs (List[Tensor]): per table, the rows to look up: int64 or int32, 1-D (``N_i``),
            dense, on the CPU, each in ``[0, num_embeddings)``.
        offsets (List[Tensor]): per table, where each bag starts in ``inputs[i]``: int64, 1-D,
            dense, on the CPU, ``B`` bags for every table, ``offsets[i][0] == 0``,
            non-decreasing, ``offsets[i][-1] <= N_i`` (an empty bag gives zeros; ``B = 0``
            gives a ``0 x width`` result).

    Returns:
        torch.futures.Future: completes with a float Tensor ``B x (sum of the tables' widths)``,
        on the CPU, requiring grad when recorded in a context. Or with an error that names the
        owner (``"lookup_bags_async: the lookup of handles [...] failed on owner '<to>': "``,
        then the cause: the owner's refusal, of the type it raised, for an unknown or unshared
        handle or a row out of range; no answer within the RPC timeout, the owner frozen, busy
        or unreachable; the connection lost, the owner dead); or with a ``RuntimeError`` when
        ``context_id`` was released on this worker before the answer arrived (nothing is
        recorded, and the owner is told to release its side).

    Raises:
        TypeError: ``handles``, ``inputs`` and ``offsets`` are not lists of one length, or hold
            something other than ints and Tensors; ``context_id`` is not an int.
        ValueError: ``handles`` is empty; a tensor is not 1-D (torch's text).
        RuntimeError: a handle is negative; a tensor is sparse, not on the CPU or of another
            dtype; the tables' numbers of bags differ; offsets that do not start at 0, decrease
            or pass the end of their input; a negative row; ``context_id`` is not a live
            context on this worker (nothing is sent); RPC is not running.

    Checks as ``torch.nn.functional.embedding_bag``'s (``aten/src/ATen/native/EmbeddingBag.cpp``),
    plus the non-decreasing offsets, which torch does not check.
    """
    _check_request(to, handles, inputs, offsets)
    return _rpc_functions.call_recorded(
        to, rpc.get_worker_info(to).id, "_lookup_bags", context_id, [],
        lambda ctx, _message_id, _mask: (ctx, handles, inputs, offsets),
        lambda answer: ([answer[0]], [True], answer[1]), lambda recorded: recorded[0],
        label=f"lookup_bags_async to {to!r}", prefix="lookup_bags_async", what=f"the lookup of handles {handles}",
        record_label="lookup_bags_async")
