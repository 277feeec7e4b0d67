"""Gradient clipping by total norm across owners (:func:`plugin.optim.clip_grad_norm_`): one RPC
per owner for its gradients' norms, answered natively without the owner's GIL
(``plugin/csrc/optim/gradient_clipping.cpp``), then, unless the coefficient is 1, one RPC per
owner that has gradients to scale them in place in the context.
"""
from collections import OrderedDict
from typing import Any, Dict, List, Tuple

import torch
from torch import Tensor
from torch.distributed.rpc import RRef

from .. import _rpc_functions
from ._distributed import DistributedOptimizer
from ._owners import check_context, check_rrefs, owners_of, wait_all

__all__ = ["clip_grad_norm_"]


# --- on the caller --------------------------------------------------------------------------


def _params_by_owner(parameters: Any) -> Tuple["OrderedDict[str, List[int]]", List[RRef]]:
    if isinstance(parameters, DistributedOptimizer):
        params = list(parameters._params_rref)
    elif isinstance(parameters, (list, tuple)):
        params = list(parameters)
        check_rrefs(params, "clip_grad_norm_(): parameters")
    else:
        raise TypeError(
            "clip_grad_norm_(): parameters must be a DistributedOptimizer or a list of RRefs to parameters, "
            f"got {type(parameters).__name__}"
        )
    return owners_of(params), params


def clip_grad_norm_(
    context_id: int,
    parameters: Any,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
) -> Tensor:
    r"""Clips the gradients of parameters spread over workers by their total norm, in a
    distributed autograd context: ``torch.nn.utils.clip_grad_norm_`` for
    :class:`DistributedOptimizer`.

    The total norm is the ``norm_type``-norm of the vector of every gradient's norm (as if all
    gradients were one vector). When it exceeds ``max_norm``, every gradient in the context is
    multiplied in place by :math:`\min(\frac{max\_norm}{total\_norm + 10^{-6}}, 1)`, on its
    owner; the next ``step(context_id)`` applies the clipped gradients. Gradients never leave
    their owners: each sends one scalar per parameter.

    Call it after the backward pass (the plugin's or torch's) and before the step. Parameters
    without a gradient in the context are skipped, as torch skips a ``None`` ``.grad``.

    Args:
        context_id (int): the distributed autograd context holding the gradients.
        parameters (DistributedOptimizer or List[RRef[Tensor]]): a distributed optimizer (its
            parameters are clipped) or RRefs to the parameters, local or remote.
        max_norm (float): the largest total norm let through, in the gradients' units.
        norm_type (float): the ``p`` of the p-norm; ``float('inf')`` for the largest absolute
            value. Default: 2.0.
        error_if_nonfinite (bool): raise, changing nothing, when the total norm is NaN or
            infinite. Default: ``False`` (the gradients are then multiplied by a NaN or 0
            coefficient, as torch does).

    Returns:
        Tensor: the total norm before clipping, a 0-dim tensor on the CPU (float64 when the
        gradients are float64, else their promoted dtype); ``tensor(0.)`` when no parameter has
        a gradient.

    Raises:
        TypeError: ``parameters`` is neither a DistributedOptimizer nor a list of RRefs.
        RuntimeError: the total norm is not finite and ``error_if_nonfinite`` is set (torch's
            message; nothing was scaled); ``context_id`` is not a live context on this worker;
            an owner failed, named in the message; a parameter's gradient is sparse (the owner's
            norm raises torch's error, as ``torch.nn.utils.clip_grad_norm_`` does on sparse
            gradients: ``linalg_vector_norm`` has no sparse kernel; nothing was scaled).

    Algorithm: ``torch.nn.utils.clip_grad_norm_`` (``torch/nn/utils/clip_grad.py``): per-gradient
    norms with ``torch._foreach_norm``, stacked in parameter order, their norm, and
    ``clip_coef = clamp(max_norm / (total_norm + 1e-6), max=1)``. Equal to torch's result on the
    same gradients (bitwise when they share one dtype).
    """
    by_owner, params = _params_by_owner(parameters)
    norm_type = float(norm_type)
    max_norm = float(max_norm)
    check_context(context_id, f"clip_grad_norm_({context_id})", "clip")
    # (sent with no current context, as the optimizer's step: an RPC sent from inside a context
    # would create it on an owner the backward pass never reached, and leave it there)
    futures = OrderedDict(
        (owner, _rpc_functions.call(owner, "_gradient_norms", (context_id, [params[i] for i in indices], norm_type)))
        for owner, indices in by_owner.items()
    )
    answers = wait_all(futures, "computing the gradient norms", prefix="clip_grad_norm_")
    norms: Dict[int, Tensor] = {}
    for owner, (owner_norms, positions) in answers.items():
        for k, position in enumerate(positions):
            norms[by_owner[owner][position]] = owner_norms[k]
    if not norms:
        return torch.tensor(0.0)
    total_norm = torch.linalg.vector_norm(torch.stack([norms[i] for i in sorted(norms)]), norm_type)
    if error_if_nonfinite and bool(torch.logical_or(total_norm.isnan(), total_norm.isinf())):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from "
            "`parameters` is non-finite, so it cannot be clipped. To disable "
            "this error and scale the gradients by the non-finite norm anyway, "
            "set `error_if_nonfinite=False`"
        )
    coefficient = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    if bool(coefficient == 1.0):
        return total_norm  # x * 1.0 == x: nothing to send
    owners_with_grads = OrderedDict(
        (owner, indices) for owner, indices in by_owner.items() if answers[owner][1]
    )
    futures = OrderedDict(
        (owner, _rpc_functions.call(owner, "_scale_gradients", (context_id, [params[i] for i in indices], coefficient)))
        for owner, indices in owners_with_grads.items()
    )
    wait_all(futures, "scaling the gradients", prefix="clip_grad_norm_")
    return total_norm
