r"""Adadelta: class, functional form and its single-tensor and multi-tensor implementations
(torch has no fused Adadelta kernel).

Algorithm: Zeiler, "ADADELTA: An Adaptive Learning Rate Method" (2012),
https://arxiv.org/abs/1212.5701. Reference implementation: ``torch/optim/adadelta.py`` (torch 2.13).
"""
from typing import Dict, List, Optional

import torch
from torch import Tensor

from . import _methods, _validation
from ._state import GroupedState, choose_impl, flag, foreach_gradients

__all__ = ["Adadelta", "adadelta"]


def _single_tensor_adadelta(
    params: List[Tensor],
    grads: List[Tensor],
    square_avgs: List[Tensor],
    acc_deltas: List[Tensor],
    state_steps: List[Tensor],
    *,
    lr: float,
    rho: float,
    eps: float,
    weight_decay: float,
    maximize: bool,
) -> None:
    for i in range(len(params)):
        param = params[i]
        square_avg = square_avgs[i]
        acc_delta = acc_deltas[i]
        state_steps[i].add_(1)
        grad = grads[i] if not maximize else -grads[i]
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)
        square_avg.mul_(rho).addcmul_(grad, grad, value=1 - rho)
        std = square_avg.add(eps).sqrt_()
        delta = acc_delta.add(eps).sqrt_()
        delta.div_(std).mul_(grad)
        acc_delta.mul_(rho).addcmul_(delta, delta, value=1 - rho)
        param.add_(delta, alpha=-lr)


def _multi_tensor_adadelta(
    params: List[Tensor],
    grads: List[Tensor],
    square_avgs: List[Tensor],
    acc_deltas: List[Tensor],
    state_steps: List[Tensor],
    *,
    lr: float,
    rho: float,
    eps: float,
    weight_decay: float,
    maximize: bool,
) -> None:
    if len(params) == 0:
        return
    torch._foreach_add_(state_steps, 1.0)
    grads = foreach_gradients(params, grads, weight_decay, maximize)
    torch._foreach_mul_(square_avgs, rho)
    torch._foreach_addcmul_(square_avgs, grads, grads, value=1 - rho)
    std = torch._foreach_add(square_avgs, eps)
    torch._foreach_sqrt_(std)
    deltas = torch._foreach_add(acc_deltas, eps)
    torch._foreach_sqrt_(deltas)
    torch._foreach_div_(deltas, std)
    torch._foreach_mul_(deltas, grads)
    torch._foreach_mul_(acc_deltas, rho)
    torch._foreach_addcmul_(acc_deltas, deltas, deltas, value=1 - rho)
    torch._foreach_add_(params, deltas, alpha=-lr)


def adadelta(
    params: List[Tensor],
    grads: List[Tensor],
    square_avgs: List[Tensor],
    acc_deltas: List[Tensor],
    state_steps: List[Tensor],
    foreach: Optional[bool] = None,
    *,
    lr: float,
    rho: float,
    eps: float,
    weight_decay: float,
    maximize: bool,
) -> None:
    r"""Functional Adadelta: update ``params`` and their state in place, one step.

    Same arguments and results as ``torch.optim.adadelta.adadelta`` (without ``capturable``,
    ``differentiable`` and complex support). Compiles with TorchScript, multi-tensor included.

    Args:
        params: parameters, any shapes, floating dtypes, CPU or CUDA.
        grads: dense gradients like ``params``.
        square_avgs: running averages of squared gradients; acc_deltas: running averages of
            squared updates (both like ``params``).
        state_steps: 0-dim step counters, incremented here.
        foreach: True multi-tensor, False single-tensor, None torch's default.
        lr, rho, eps, weight_decay, maximize: as in :class:`Adadelta`.

    Raises:
        RuntimeError: inputs whose lengths, shapes, dtypes or devices do not match (from the
            aten ops; the class checks its inputs before calling this).

    Algorithm: Zeiler 2012 (https://arxiv.org/abs/1212.5701); reference code
    ``torch/optim/adadelta.py`` (torch 2.13).
    """
    if foreach is None:
        foreach = choose_impl(params, None, None) == "foreach"
    if foreach:
        _multi_tensor_adadelta(
            params, grads, square_avgs, acc_deltas, state_steps, lr=lr, rho=rho, eps=eps,
            weight_decay=weight_decay, maximize=maximize,
        )
    else:
        _single_tensor_adadelta(
            params, grads, square_avgs, acc_deltas, state_steps, lr=lr, rho=rho, eps=eps,
            weight_decay=weight_decay, maximize=maximize,
        )



def check_adadelta_hyperparameters(h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
    """torch's checks for Adadelta."""
    _validation.check_lr(h["lr"])
    if not 0.0 <= h["rho"] <= 1.0:
        raise ValueError("Invalid rho value: " + str(h["rho"]))
    _validation.check_non_negative(h["eps"], "epsilon")
    _validation.check_non_negative(h["weight_decay"], "weight_decay")
    _validation.check_impl_flags(o["foreach"], None, flag(o, "capturable"), flag(o, "differentiable"))


def adadelta_group_step(s: GroupedState, g: int, indices: List[int], grads: List[Tensor]) -> None:
    """Step the parameters ``indices`` (all in group ``g``) of an Adadelta optimizer."""
    h = s.hparams[g]
    o = s.options[g]
    s.init_state(g, indices, False, {"square_avg": 0.0, "acc_delta": 0.0})
    lists = s.state_lists(g, indices, ["step", "square_avg", "acc_delta"])
    params = s.params_of(g, indices)
    adadelta(
        params, grads, lists["square_avg"], lists["acc_delta"], lists["step"],
        foreach=s.impl[g] == "foreach", lr=h["lr"], rho=h["rho"], eps=h["eps"],
        weight_decay=h["weight_decay"], maximize=flag(o, "maximize"),
    )


@_methods.with_shared_methods
class Adadelta:
    r"""Adadelta, as ``torch.optim.Adadelta``, with gradients passed in; eager or TorchScript.

    .. math::
       \begin{aligned}
       &\textbf{input}: \gamma \text{ (lr)}, \theta_0, \rho \text{ (decay)}, \lambda \text{ (weight decay)}, \epsilon\\
       &\textbf{initialize}: v_0 \leftarrow 0 \text{ (square avg)},\ u_0 \leftarrow 0 \text{ (accumulate variables)}\\
       &\textbf{for}\ t = 1, 2, \ldots:\\
       &\quad g_t \leftarrow \pm\nabla_\theta f_t(\theta_{t-1});\quad
            \textbf{if}\ \lambda \ne 0:\ g_t \leftarrow g_t + \lambda\theta_{t-1}\\
       &\quad v_t \leftarrow \rho v_{t-1} + (1-\rho) g_t^2,\quad
            \Delta x_t \leftarrow \frac{\sqrt{u_{t-1} + \epsilon}}{\sqrt{v_t + \epsilon}} g_t\\
       &\quad u_t \leftarrow \rho u_{t-1} + (1-\rho)\Delta x_t^2,\quad \theta_t \leftarrow \theta_{t-1} - \gamma\Delta x_t
       \end{aligned}

    Sources: Zeiler 2012 (https://arxiv.org/abs/1212.5701); reference code ``torch/optim/adadelta.py``.

    Args:
        params: a list of tensors, or (eagerly only) of torch-style param-group dicts.
            Floating-point, dense, real, leaf tensors on CPU or CUDA; each at most once.
        lr: coefficient scaling delta before it is applied, >= 0 (default 1.0).
        rho: decay of the running averages, in [0, 1] (default 0.9).
        eps: added inside the square roots, >= 0 (default 1e-6).
        weight_decay: L2 penalty, >= 0 (default 0).
        foreach: True multi-tensor, False single-tensor, None torch's default (default None).
        capturable, differentiable: must be False.
        maximize: maximise instead of minimising (default False).

    ``capturable``, ``maximize``, ``differentiable`` are keyword-only in torch; here they are
    positional-or-keyword (TorchScript does not compile keyword-only arguments with defaults).

    State per parameter: ``'step'`` (0-dim float32 on the CPU), ``'square_avg'``,
    ``'acc_delta'`` (like the parameter).

    Raises:
        ValueError: invalid hyperparameters (torch's messages), an empty, non-leaf, sparse,
            complex or repeated parameter, ``capturable``/``differentiable`` True.
        RuntimeError: at ``step``, a sparse gradient (torch's message), before any change.
        TypeError: (eagerly) a Tensor hyperparameter or a malformed ``params``.
    """

    def __init__(
        self,
        params: List[Tensor],
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        foreach: Optional[bool] = None,
        capturable: bool = False,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        hparams: Dict[str, float] = {"lr": lr, "rho": rho, "eps": eps, "weight_decay": weight_decay}
        options: Dict[str, Optional[bool]] = {
            "maximize": maximize, "capturable": capturable, "foreach": foreach, "differentiable": differentiable,
        }
        self._s = self._new_state(params, hparams, options)
        self._init_groups()

    def _check(self, h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
        check_adadelta_hyperparameters(h, o)

    def _group_step(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
        adadelta_group_step(self._s, g, indices, grads)

    def _sparse_error(self, h: Dict[str, float], impl: str) -> Optional[str]:
        return "Adadelta does not support sparse gradients"
