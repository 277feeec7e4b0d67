r"""Adadelta: class and functional form, whose one body holds the single-tensor and multi-tensor
implementations (torch has no fused Adadelta kernel).

Algorithm: Zeiler, "ADADELTA: An Adaptive Learning Rate Method" (2012),
https://arxiv.org/abs/1212.5701. Reference implementation: ``torch/optim/adadelta.py`` (torch 2.13).
"""
from typing import Dict, List, Optional

import torch
from torch import Tensor

from . import _docs, _methods, _validation
from ._state import choose_impl, foreach_gradients, fused_step, no_fresh

__all__ = ["Adadelta", "adadelta"]


@_docs.fill
def adadelta(
    params: List[Tensor], grads: List[Tensor], square_avgs: List[Tensor], acc_deltas: List[Tensor],
    state_steps: List[Tensor], foreach: Optional[bool] = None,
    fused: Optional[bool] = None, *,
    lr: float, rho: float, eps: float, weight_decay: float, maximize: bool,
) -> None:
    r"""Functional Adadelta: update ``params`` and their state in place, one step.

    {_functional_intro_doc}

    Args:
        {_functional_args_doc}
        {_functional_fused_doc}
        square_avgs: running averages of squared gradients; acc_deltas: running averages of
            squared updates (both like ``params``).
        lr, rho, eps, weight_decay, maximize: as in :class:`Adadelta`.

    {_functional_raises_doc}

    Algorithm: Zeiler 2012 (https://arxiv.org/abs/1212.5701); reference code
    ``torch/optim/adadelta.py`` (torch 2.13).
    """
    impl = choose_impl(params, foreach, fused)
    if impl == "single":
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
    elif len(params) > 0 and impl == "foreach":
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
    elif len(params) > 0:
        fused_step(
            "adadelta", params, grads, [state_steps, square_avgs, acc_deltas], no_fresh(len(params)),
            ["lr", "rho", "eps", "weight_decay", "maximize"], [lr, rho, eps, weight_decay, 1.0 if maximize else 0.0],
        )


@_docs.fill
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
        {_params_doc}
        lr: coefficient scaling delta before it is applied, >= 0 (default 1.0).
        rho: decay of the running averages, in [0, 1] (default 0.9).
        eps: added inside the square roots, >= 0 (default 1e-6).
        weight_decay: L2 penalty, >= 0 (default 0).
        {_common_args_doc}
        {_capturable_doc}

    ``capturable``, ``maximize``, ``differentiable``
    {_keyword_only_doc}
    {_fused_extra_doc}

    State per parameter: ``'step'`` (0-dim float32 on the CPU), ``'square_avg'``,
    ``'acc_delta'`` (like the parameter).

    {_tensor_doc}

    {_raises_doc}
    """

    def __init__(
        self, params: List[Tensor], lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
        weight_decay: float = 0.0, foreach: Optional[bool] = None, capturable: bool = False,
        maximize: bool = False, differentiable: bool = False, fused: Optional[bool] = None,
    ) -> None:
        hparams: Dict[str, float] = {"lr": lr, "rho": rho, "eps": eps, "weight_decay": weight_decay}
        options: Dict[str, Optional[bool]] = {
            "maximize": maximize, "capturable": capturable, "foreach": foreach, "differentiable": differentiable,
            "fused": fused,
        }
        self._s = self._new_state(params, hparams, options, "adadelta")
        self._init_groups()

    def _check(self, h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
        _validation.check_values(h, ["lr", "rho", "eps", "weight_decay"])

    def _group_step(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
        s = self._s
        h = s.hparams[g]
        lists = s.prepare_state(g, indices, grads)  # keys, initial values: csrc/steps/adadelta.cpp
        adadelta(
            lists["param"], grads, lists["square_avg"], lists["acc_delta"], lists["step"], s.impl[g] == "foreach",
            False, lr=h["lr"], rho=h["rho"], eps=h["eps"], weight_decay=h["weight_decay"],
            maximize=s.flag(g, "maximize"),
        )

    def _sparse_error(self, h: Dict[str, float], impl: str) -> Optional[str]:
        return "Adadelta does not support sparse gradients"
