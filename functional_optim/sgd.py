r"""SGD (with momentum, Nesterov momentum, dampening, weight decay): class and functional form
(one body holds the single-tensor, multi-tensor and fused implementations).

Algorithm: Robbins & Monro, "A Stochastic Approximation Method" (1951); momentum as in
Sutskever et al., "On the importance of initialization and momentum in deep learning", ICML 2013
(Nesterov momentum: Nesterov 1983). Reference implementation: ``torch/optim/sgd.py`` (torch 2.13).
"""
from typing import Dict, List, Optional

import torch
from torch import Tensor

from . import _docs, _methods, _validation
from .sparse_adam import add_sparse_
from ._state import choose_impl, flag, foreach_gradients, fused_step, no_fresh

__all__ = ["SGD", "sgd"]


def _foreach_momentum_step(
    params: List[Tensor], grads: List[Tensor], bufs: List[Tensor], weight_decay: float, momentum: float, lr: float,
    dampening: float, nesterov: bool, maximize: bool, has_sparse_grad: bool,
) -> None:
    """The multi-tensor step with ``momentum != 0`` once every parameter has its buffer."""
    grads = foreach_gradients(params, grads, weight_decay, maximize)
    torch._foreach_mul_(bufs, momentum)
    torch._foreach_add_(bufs, grads, alpha=1 - dampening)
    _foreach_momentum_update(params, grads, bufs, momentum, nesterov, lr, has_sparse_grad)


def _foreach_momentum_update(
    params: List[Tensor], grads: List[Tensor], bufs: List[Tensor], momentum: float, nesterov: bool, lr: float,
    has_sparse_grad: bool,
) -> None:
    """The multi-tensor step's update once the momentum buffers hold this step's values."""
    if nesterov:
        # torch adds in place here, which can write into the caller's gradients; the values
        # are the same out of place.
        grads = torch._foreach_add(grads, bufs, alpha=momentum)
    else:
        grads = bufs
    _foreach_update(params, grads, lr, has_sparse_grad)


def _foreach_update(params: List[Tensor], grads: List[Tensor], lr: float, has_sparse_grad: bool) -> None:
    if not has_sparse_grad:
        torch._foreach_add_(params, grads, alpha=-lr)
    else:
        for i in range(len(params)):
            if grads[i].is_sparse:
                add_sparse_(params[i], grads[i], -lr)  # (a parameter at a storage offset too)
            else:
                params[i].add_(grads[i], alpha=-lr)


@_docs.fill
def sgd(
    params: List[Tensor], d_p_list: List[Tensor], momentum_buffer_list: List[Optional[Tensor]],
    foreach: Optional[bool] = None, fused: Optional[bool] = None, *, weight_decay: float, momentum: float,
    lr: float, dampening: float, nesterov: bool, maximize: bool, has_sparse_grad: bool,
) -> None:
    r"""Functional SGD: update ``params`` (and momentum buffers) in place, one step.

    Same arguments and results as ``torch.optim.sgd.sgd`` (``has_sparse_grad`` is keyword-only
    here and required). Compiles with TorchScript, multi-tensor and fused paths included.

    Args:
        params: parameters, any shapes, floating dtypes, CPU or CUDA.
        d_p_list: their gradients, same shapes/dtypes/devices; sparse COO allowed except for
            ``fused``.
        momentum_buffer_list: one entry per parameter: its buffer, or None before its first
            step with momentum; None entries are replaced by new buffers (``buf = grad``, as
            torch, no dampening on the first step). Ignored (may be empty) when ``momentum == 0``.
        foreach: the implementation, as for :func:`functional_optim.adam.adam`.
        {_functional_fused_doc}
        weight_decay, momentum, lr, dampening, nesterov, maximize: as in :class:`SGD`.
        has_sparse_grad: whether any gradient is sparse.

    Raises:
        RuntimeError: ``fused`` with a sparse gradient (torch's message).

    Algorithm: Robbins & Monro 1951; momentum: Sutskever et al. 2013; reference code
    ``torch/optim/sgd.py`` (torch 2.13).
    """
    _sgd(
        params, d_p_list, momentum_buffer_list, no_fresh(len(params)), choose_impl(params, foreach, fused),
        weight_decay=weight_decay, momentum=momentum, lr=lr, dampening=dampening, nesterov=nesterov,
        maximize=maximize, has_sparse_grad=has_sparse_grad,
    )


def _sgd(
    params: List[Tensor], grads: List[Tensor], momentum_buffer_list: List[Optional[Tensor]], fresh: List[bool],
    impl: str, weight_decay: float, momentum: float, lr: float, dampening: float, nesterov: bool, maximize: bool,
    has_sparse_grad: bool,
) -> None:
    """:func:`sgd`'s one body, with implementation ``impl`` (``"single"``, ``"foreach"`` or
    ``"fused"``): ``momentum_buffer_list[i]`` None is a buffer made here as torch's first step
    makes it (``buf = grad``, from the gradient used), ``fresh[i]`` a buffer made by the op
    library's ``new_state`` (the class's state: ``csrc/steps/sgd.cpp``) that this step starts
    likewise, writing it (``buf.copy_(grad)``: torch's values)."""
    if impl == "single":
        for i in range(len(params)):
            param = params[i]
            grad = grads[i] if not maximize else -grads[i]
            if weight_decay != 0:
                grad = grad.add(param, alpha=weight_decay)
            if momentum != 0:
                buf = momentum_buffer_list[i]
                if buf is None:
                    buf = grad.detach().clone()
                    momentum_buffer_list[i] = buf
                elif fresh[i]:
                    buf.copy_(grad)
                else:
                    buf.mul_(momentum).add_(grad, alpha=1 - dampening)
                if nesterov:
                    grad = grad.add(buf, alpha=momentum)
                else:
                    grad = buf
            if grad.is_sparse:
                add_sparse_(param, grad, -lr)  # (a parameter at a storage offset too)
            else:
                param.add_(grad, alpha=-lr)
        return
    if len(params) == 0:
        return
    if impl == "fused":
        if has_sparse_grad:
            raise RuntimeError("`_fused_sgd` does not support sparse gradients")
        columns: List[List[Tensor]] = []
        fused_fresh = no_fresh(len(params))
        if momentum != 0:
            bufs: List[Tensor] = []
            for i in range(len(params)):
                buf = momentum_buffer_list[i]
                if buf is None:  # started by the step (buf = grad), as torch's first step
                    new_buf = torch.empty_like(grads[i])
                    momentum_buffer_list[i] = new_buf
                    fused_fresh[i] = True
                    bufs.append(new_buf)
                else:
                    fused_fresh[i] = fresh[i]
                    bufs.append(buf)
            columns.append(bufs)
        fused_step(
            "sgd", params, grads, columns, fused_fresh,
            ["lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize"],
            [lr, momentum, dampening, weight_decay, 1.0 if nesterov else 0.0, 1.0 if maximize else 0.0],
        )
        return
    bufs: List[Tensor] = []
    if momentum != 0:
        for k in range(len(momentum_buffer_list)):
            buf = momentum_buffer_list[k]
            if buf is not None and not fresh[k]:
                bufs.append(buf)
        if len(bufs) == len(params):
            _foreach_momentum_step(
                params, grads, bufs, weight_decay, momentum, lr, dampening, nesterov, maximize, has_sparse_grad
            )
            return
    grads = foreach_gradients(params, grads, weight_decay, maximize)
    if momentum != 0:
        bufs = []
        for i in range(len(momentum_buffer_list)):
            buf = momentum_buffer_list[i]
            if buf is None:
                buf = grads[i].detach().clone()
                momentum_buffer_list[i] = buf
            elif fresh[i]:
                buf.copy_(grads[i])
            else:
                buf.mul_(momentum).add_(grads[i], alpha=1 - dampening)
            bufs.append(buf)
        _foreach_momentum_update(params, grads, bufs, momentum, nesterov, lr, has_sparse_grad)
        return
    _foreach_update(params, grads, lr, has_sparse_grad)


@_docs.fill
@_methods.with_shared_methods
class SGD:
    r"""Stochastic gradient descent, as ``torch.optim.SGD``, with gradients passed in; eager or
    TorchScript.

    .. math::
       \begin{aligned}
       &\textbf{input}: \gamma \text{ (lr)}, \theta_0, \lambda \text{ (weight decay)}, \mu \text{ (momentum)},
            \tau \text{ (dampening)}, \textit{nesterov}, \textit{maximize}\\
       &\textbf{for}\ t = 1, 2, \ldots:\\
       &\quad g_t \leftarrow \pm\nabla_\theta f_t(\theta_{t-1}) \quad (- \text{ if maximize})\\
       &\quad \textbf{if}\ \lambda \ne 0:\ g_t \leftarrow g_t + \lambda\theta_{t-1}\\
       &\quad \textbf{if}\ \mu \ne 0:\ b_t \leftarrow g_t \ (t = 1)\ \textbf{else}\ \mu b_{t-1} + (1-\tau) g_t;\quad
            g_t \leftarrow g_t + \mu b_t \ (\textit{nesterov})\ \textbf{else}\ b_t\\
       &\quad \theta_t \leftarrow \theta_{t-1} - \gamma g_t
       \end{aligned}

    Sources: Robbins & Monro 1951; Sutskever et al. 2013 (momentum); reference code
    ``torch/optim/sgd.py``.

    Args:
        {_params_doc}
        lr: learning rate, >= 0 (default 1e-3, as torch 2.13).
        momentum: momentum factor, >= 0 (default 0).
        dampening: dampening of the momentum (default 0).
        weight_decay: L2 penalty, >= 0 (default 0).
        nesterov: Nesterov momentum; needs momentum > 0 and dampening 0 (default False).
        {_common_args_doc}

    ``maximize`` ... ``fused``
    {_keyword_only_doc}

    Sparse (COO) gradients are accepted, as torch accepts them: not with ``fused=True`` and not
    with ``weight_decay != 0`` (torch's messages, raised before any change). Without momentum,
    a sparse gradient of a contiguous CPU parameter is stepped by the fused sparse kernel
    (``torch.ops.gilfree_optim.sparse_sgd_``: only the rows present).

    State per parameter: ``'momentum_buffer'`` (like the parameter) once the parameter has
    stepped with momentum != 0; no state otherwise (as torch).

    {_tensor_doc}

    {_raises_doc}
    """

    def __init__(
        self, params: List[Tensor], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
        weight_decay: float = 0.0, nesterov: bool = False, maximize: bool = False,
        foreach: Optional[bool] = None, differentiable: bool = False, fused: Optional[bool] = None,
    ) -> None:
        hparams: Dict[str, float] = {
            "lr": lr, "momentum": momentum, "dampening": dampening, "weight_decay": weight_decay,
        }
        options: Dict[str, Optional[bool]] = {
            "nesterov": nesterov, "maximize": maximize, "foreach": foreach,
            "differentiable": differentiable, "fused": fused,
        }
        self._s = self._new_state(params, hparams, options, "sgd")
        self._init_groups()

    def _check(self, h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
        _validation.check_values(h, ["lr"])
        if h["momentum"] < 0.0:  # torch's test (NaN passes)
            raise ValueError("Invalid momentum value: " + str(h["momentum"]))
        _validation.check_values(h, ["weight_decay"])
        if flag(o, "nesterov") and (h["momentum"] <= 0 or h["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def _group_step(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
        s = self._s
        h = s.hparams[g]
        momentum = h["momentum"]
        cached = not s.needs_init(g, indices)
        fresh = no_fresh(len(indices))
        if not cached:
            # keys ('momentum_buffer' with momentum != 0), the buffers: csrc/steps/sgd.cpp; a new
            # buffer is written by its first step (buf = the gradient used), as torch starts it
            fresh = s.make_state(g, indices, grads)
        lists = s.state_lists(g, indices, s.keys[indices[0]])
        if momentum != 0 and cached and s.impl[g] == "foreach":
            # Every whole-group step after the first: every buffer exists and the cached lists hold
            # them, typed as the kernels take them. One call for the group: what sgd() does when
            # every buffer exists, without copying the buffers into a List[Optional[Tensor]] and
            # back (the interpreter pays per element for that).
            _foreach_momentum_step(
                s.cache_params[g], grads, lists["momentum_buffer"], h["weight_decay"], momentum, h["lr"],
                h["dampening"], s.flag(g, "nesterov"), s.flag(g, "maximize"), sparse,
            )
            return
        buffers: List[Optional[Tensor]] = []
        if momentum != 0:
            for buf in lists["momentum_buffer"]:
                buffers.append(buf)
        impl = s.sparse_impl[g] if sparse else s.impl[g]
        _sgd(
            s.params_of(g, indices), grads, buffers, fresh, "foreach" if impl == "foreach" else "single",
            weight_decay=h["weight_decay"], momentum=momentum, lr=h["lr"], dampening=h["dampening"],
            nesterov=s.flag(g, "nesterov"), maximize=s.flag(g, "maximize"), has_sparse_grad=sparse,
        )

    def _sparse_error(self, h: Dict[str, float], impl: str) -> Optional[str]:
        if impl == "fused":
            return "`_fused_sgd` does not support sparse gradients"
        if h["weight_decay"] != 0:
            # what torch's step raises at grad.add(param) (torch 2.13, every implementation),
            # here before anything changes
            return "add(sparse, dense) is not supported. Use add(dense, sparse) instead."
        return None
