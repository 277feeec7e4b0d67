r"""Adamax: class and functional form, whose one body holds the single-tensor and multi-tensor
implementations (torch has no fused Adamax kernel).

Algorithm: Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015, section 7.1
(https://arxiv.org/abs/1412.6980). Reference implementation: ``torch/optim/adamax.py`` (torch 2.13).
"""
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import _docs, _methods, _validation
from ._state import choose_impl, foreach_gradients, fused_step, no_fresh, scalar_list

__all__ = ["Adamax", "adamax"]


@_docs.fill
def adamax(
    params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor], exp_infs: List[Tensor],
    state_steps: List[Tensor], foreach: Optional[bool] = None,
    fused: Optional[bool] = None, *,
    eps: float, beta1: float, beta2: float, lr: float, weight_decay: float, maximize: bool,
) -> None:
    r"""Functional Adamax: update ``params`` and their state in place, one step.

    {_functional_intro_doc}

    Args:
        {_functional_args_doc}
        {_functional_fused_doc}
        exp_avgs: first moment estimates; exp_infs: exponentially weighted infinity norms
            (both like ``params``).
        eps, beta1, beta2, lr, weight_decay, maximize: as in :class:`Adamax`.

    {_functional_raises_doc}

    Algorithm: Kingma & Ba 2015, section 7.1; reference code ``torch/optim/adamax.py`` (torch
    2.13).
    """
    impl = choose_impl(params, foreach, fused)
    if impl == "single":
        for i in range(len(params)):
            param = params[i]
            grad = grads[i] if not maximize else -grads[i]
            exp_avg = exp_avgs[i]
            exp_inf = exp_infs[i]
            step_t = state_steps[i]
            step_t.add_(1)
            if weight_decay != 0:
                grad = grad.add(param, alpha=weight_decay)
            exp_avg.lerp_(grad, 1 - beta1)
            torch.maximum(exp_inf.mul_(beta2), grad.abs().add_(eps), out=exp_inf)
            clr = lr / (1 - beta1 ** float(step_t.item()))
            param.addcdiv_(exp_avg, exp_inf, value=-clr)
    elif len(params) > 0 and impl == "foreach":
        torch._foreach_add_(state_steps, 1.0)
        grads = foreach_gradients(params, grads, weight_decay, maximize)
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_infs, beta2)
        if not maximize and weight_decay == 0:
            grads = torch._foreach_abs(grads)  # the caller's gradients must not change
        else:
            torch._foreach_abs_(grads)
        torch._foreach_add_(grads, eps)
        torch._foreach_maximum_(exp_infs, grads)
        step_sizes: List[float] = []
        for step_t in state_steps:
            step_sizes.append((lr / (1 - beta1 ** float(step_t.item()))) * -1)
        torch._foreach_addcdiv_(params, exp_avgs, exp_infs, scalar_list(step_sizes))
    elif len(params) > 0:
        fused_step(
            "adamax", params, grads, [state_steps, exp_avgs, exp_infs], no_fresh(len(params)),
            ["lr", "beta1", "beta2", "eps", "weight_decay", "maximize"],
            [lr, beta1, beta2, eps, weight_decay, 1.0 if maximize else 0.0],
        )


@_docs.fill
@_methods.with_shared_methods
class Adamax:
    r"""Adamax (Adam with the infinity norm), as ``torch.optim.Adamax``; eager or TorchScript.

    .. math::
       \begin{aligned}
       &\textbf{input}: \gamma \text{ (lr)}, \beta_1, \beta_2 \text{ (betas)}, \theta_0,
            \lambda \text{ (weight decay)}, \epsilon\\
       &\textbf{initialize}: m_0 \leftarrow 0,\ u_0 \leftarrow 0\\
       &\textbf{for}\ t = 1, 2, \ldots:\\
       &\quad g_t \leftarrow \pm\nabla_\theta f_t(\theta_{t-1});\quad
            \textbf{if}\ \lambda \ne 0:\ g_t \leftarrow g_t + \lambda\theta_{t-1}\\
       &\quad m_t \leftarrow \beta_1 m_{t-1} + (1-\beta_1) g_t,\quad
            u_t \leftarrow \max(\beta_2 u_{t-1}, |g_t| + \epsilon)\\
       &\quad \theta_t \leftarrow \theta_{t-1} - \frac{\gamma m_t}{(1-\beta_1^t) u_t}
       \end{aligned}

    Sources: Kingma & Ba 2015, section 7.1; reference code ``torch/optim/adamax.py``.

    Args:
        {_params_doc}
        lr: learning rate, >= 0 (default 2e-3).
        betas: decay rates, each in [0, 1) (default (0.9, 0.999)).
        eps: added to ``|g|``, >= 0 (default 1e-8).
        weight_decay: L2 penalty, >= 0 (default 0).
        {_common_args_doc}
        {_capturable_doc}

    ``maximize``, ``differentiable``, ``capturable``
    {_keyword_only_doc}
    {_fused_extra_doc}

    State per parameter: ``'step'`` (0-dim float32 on the CPU), ``'exp_avg'``, ``'exp_inf'``
    (like the parameter).

    {_tensor_doc}

    {_raises_doc}
    """

    def __init__(
        self, params: List[Tensor], lr: float = 2e-3, betas: Tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8, weight_decay: float = 0.0, foreach: Optional[bool] = None,
        maximize: bool = False, differentiable: bool = False, capturable: bool = False, fused: Optional[bool] = None,
    ) -> None:
        hparams: Dict[str, float] = {
            "lr": lr, "beta1": betas[0], "beta2": betas[1], "eps": eps, "weight_decay": weight_decay,
        }
        options: Dict[str, Optional[bool]] = {
            "foreach": foreach, "maximize": maximize, "differentiable": differentiable, "capturable": capturable,
            "fused": fused,
        }
        self._s = self._new_state(params, hparams, options, "adamax")
        self._init_groups()

    def _check(self, h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
        _validation.check_values(h, ["lr", "eps", "betas", "weight_decay"])

    def _group_step(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
        s = self._s
        h = s.hparams[g]
        lists = s.prepare_state(g, indices, grads)  # keys, initial values: csrc/steps/adamax.cpp
        adamax(
            lists["param"], grads, lists["exp_avg"], lists["exp_inf"], lists["step"], s.impl[g] == "foreach", False,
            eps=h["eps"], beta1=h["beta1"], beta2=h["beta2"], lr=h["lr"], weight_decay=h["weight_decay"],
            maximize=s.flag(g, "maximize"),
        )

    def _sparse_error(self, h: Dict[str, float], impl: str) -> Optional[str]:
        return "Adamax does not support sparse gradients"
