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
(``torch.distributed.autograd.backward``) does not take these lookups: use the plugin's.

The owner's side of the graph is released with the caller's context, as for torch's RPCs.
"""
from typing import List, Optional

import torch
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


def lookup_bags_async(to: str, context_id: Optional[int], handles: List[int], inputs: List[Tensor],
                      offsets: List[Tensor]) -> torch.futures.Future:
    """The bags of tables on worker ``to``, computed there natively, as a future.

    For each ``i``, ``nn.EmbeddingBag``'s forward of table ``handles[i]`` on ``inputs[i]`` and
    ``offsets[i]``; the results side by side (``torch.cat(..., dim=1)``).

    Args:
        to (str): the owner's worker name.
        context_id (Optional[int]): the distributed autograd context to record the lookup in
            (``with torch.distributed.autograd.context() as context_id``), so that the plugin's
            backward pass reaches the tables; ``None`` for a lookup without gradient
            (evaluation).
        handles (List[int]): tables shared on ``to`` (:func:`share_embedding_bag`).
        inputs (List[Tensor]): per table, the rows to look up: int64, 1-D (``N_i``).
        offsets (List[Tensor]): per table, where each bag starts in ``inputs[i]``: int64, 1-D,
            ``B`` bags for every table (an empty bag gives zeros in "sum" mode).

    Returns:
        torch.futures.Future: completes with a float Tensor ``B x (sum of the tables' widths)``,
        on the CPU, requiring grad when recorded in a context; or with the owner's error
        (``RuntimeError``: an unknown handle or a bad shape, named by argument) or the RPC's
        (timeout, lost connection).

    Raises:
        TypeError: ``handles``, ``inputs`` and ``offsets`` are not lists of one length.
        RuntimeError: RPC is not running.
    """
    if not (isinstance(handles, list) and isinstance(inputs, list) and isinstance(offsets, list)
            and len(handles) == len(inputs) == len(offsets)):
        raise TypeError("lookup_bags_async: handles, inputs and offsets must be lists of one length")
    ctx = -1 if context_id is None else context_id
    owner = rpc.get_worker_info(to).id
    answer = _rpc_functions.call(to, "_lookup_bags", (ctx, handles, inputs, offsets))

    def recorded(done: torch.futures.Future) -> Tensor:
        rows, message_id = done.value()
        return ops._record_lookup_answer(ctx, message_id, owner, rows)

    return answer.then(recorded)
