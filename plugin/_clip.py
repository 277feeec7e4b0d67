"""Gradient clipping by total norm for parameters spread over workers
(:func:`plugin.optim.clip_grad_norm_`).

torch's ``torch.nn.utils.clip_grad_norm_`` (``torch/nn/utils/clip_grad.py``) computes the norm of
each gradient, the norm of those norms (the total norm), and multiplies every gradient in place
by ``min(max_norm / (total_norm + 1e-6), 1)``. Here the gradients stay where they are, in the
distributed autograd context on their owners:

1. every owner computes the norms of its parameters' gradients in the context (one RPC each,
   in parallel, run as TorchScript: no owner takes the GIL), and sends back those norms, one
   scalar per parameter;
2. the caller stacks them in the order of the parameters and takes their norm, as torch does;
3. unless the coefficient is 1 (nothing to clip: no RPC), every owner multiplies its gradients
   in the context by it, in place, so that the next ``DistributedOptimizer.step(context_id)``
   applies the clipped gradients.
"""
import math
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
from torch import Tensor
from torch.distributed.rpc import RRef

from functional_optim import _jit

from . import ops
from ._errors import raise_on_worker

__all__ = ["clip_grad_norm_"]


# --- run on the owners, by RPC, as TorchScript ----------------------------------------------


def _owner_grads(context_id: int, params: List[RRef[Tensor]]) -> Tuple[List[Tensor], List[int]]:
    tensors: List[Tensor] = []
    for p in params:
        tensors.append(p.local_value())
    grads = ops.gradients_for(context_id, tensors)
    present: List[Tensor] = []
    positions: List[int] = []
    for i, g in enumerate(grads):
        if g is not None:
            present.append(g)
            positions.append(i)
    return present, positions


def _owner_norms(context_id: int, params: List[RRef[Tensor]], norm_type: float) -> Tuple[Tensor, List[int]]:
    """The norm of each gradient of ``params`` in the context (0-dim, the gradient's dtype,
    moved to the CPU; one per parameter that has a gradient) and the positions in ``params`` of
    those parameters. Computed as torch computes them: ``torch._foreach_norm`` per device and
    dtype."""
    grads, positions = _owner_grads(context_id, params)
    cpu = torch.device("cpu")
    norms: List[Tensor] = []
    for i in range(len(grads)):
        norms.append(torch.zeros([], dtype=grads[i].dtype))
    done: List[bool] = [False] * len(grads)
    for i in range(len(grads)):
        if done[i]:
            continue
        group: List[Tensor] = []
        where: List[int] = []
        for j in range(i, len(grads)):
            if not done[j] and grads[j].device == grads[i].device and grads[j].dtype == grads[i].dtype:
                group.append(grads[j])
                where.append(j)
                done[j] = True
        group_norms = torch._foreach_norm(group, norm_type)
        for k in range(len(where)):
            norms[where[k]] = group_norms[k].to(cpu)
    if len(norms) == 0:
        return torch.zeros([0], dtype=torch.float64), positions
    return torch.stack(norms), positions


def _owner_scale(context_id: int, params: List[RRef[Tensor]], coefficient: Tensor) -> None:
    """Multiplies the gradients of ``params`` in the context by ``coefficient``, in place."""
    grads, _ = _owner_grads(context_id, params)
    for g in grads:
        g.mul_(coefficient.to(g.device))


_owner_norms = _jit.script(_owner_norms)
_owner_scale = _jit.script(_owner_scale)


# --- on the caller --------------------------------------------------------------------------


def _params_by_owner(parameters: Any) -> Tuple["OrderedDict[str, List[int]]", List[RRef]]:
    from .optim import DistributedOptimizer

    if isinstance(parameters, DistributedOptimizer):
        params = list(parameters._params_rref)
    elif isinstance(parameters, (list, tuple)):
        params = list(parameters)
        for i, rref in enumerate(params):
            if not isinstance(rref, rpc.PyRRef):
                raise TypeError(f"clip_grad_norm_(): parameters[{i}] is a {type(rref).__name__}, not an RRef")
    else:
        raise TypeError(
            "clip_grad_norm_(): parameters must be a DistributedOptimizer or a list of RRefs to parameters, "
            f"got {type(parameters).__name__}"
        )
    by_owner: "OrderedDict[str, List[int]]" = OrderedDict()
    for i, rref in enumerate(params):
        by_owner.setdefault(rref.owner().name, []).append(i)
    return by_owner, params


def _wait_all(futures: "OrderedDict[str, torch.futures.Future]", what: str) -> Dict[str, Any]:
    """Waits for every owner, then raises the first error, naming its owner."""
    results, errors = {}, []
    for owner, fut in futures.items():
        try:
            results[owner] = fut.wait()
        except Exception as e:  # noqa: BLE001 (re-raised below with the owner's name)
            errors.append((owner, e))
    if errors:
        raise_on_worker(errors[0][0], what, errors[0][1], "clip_grad_norm_")
    return results


def _check_context(context_id: int) -> None:
    """Raises unless ``context_id`` is a live context on this worker (as the optimizer's step:
    owners skip a context they do not know, so the caller is where a released one is caught)."""
    try:
        dist_autograd._is_valid_context(context_id)
    except RuntimeError as e:
        raise RuntimeError(
            f"clip_grad_norm_({context_id}): no distributed autograd context {context_id} on this worker "
            f"({rpc.get_worker_info().name!r}): clip inside the `with dist_autograd.context()` block that created it"
        ) from e


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
            an owner failed, named in the message.

    Algorithm: ``torch.nn.utils.clip_grad_norm_`` (``torch/nn/utils/clip_grad.py``): per-gradient
    norms with ``torch._foreach_norm``, stacked in parameter order, their norm, and
    ``clip_coef = clamp(max_norm / (total_norm + 1e-6), max=1)``. Equal to torch's result on the
    same gradients (bitwise when they share one dtype).
    """
    by_owner, params = _params_by_owner(parameters)
    norm_type = float(norm_type)
    max_norm = float(max_norm)
    _check_context(context_id)
    from .optim import _OutsideAutogradContext

    # Sent with no current context, as the optimizer's step: an RPC sent from inside a context
    # would create it on an owner the backward pass never reached (and leave it there).
    with _OutsideAutogradContext():
        futures = OrderedDict(
            (owner, rpc.rpc_async(owner, _owner_norms, args=(context_id, [params[i] for i in indices], norm_type)))
            for owner, indices in by_owner.items()
        )
    answers = _wait_all(futures, "computing the gradient norms")
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
    with _OutsideAutogradContext():
        futures = OrderedDict(
            (owner, rpc.rpc_async(owner, _owner_scale, args=(context_id, [params[i] for i in indices], coefficient)))
            for owner, indices in owners_with_grads.items()
        )
    _wait_all(futures, "scaling the gradients")
    return total_norm
