r"""Adamax: class, functional form and its single-tensor and multi-tensor implementations
(torch has no fused Adamax kernel).

Algorithm: Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015, section 7.1
(https://arxiv.org/abs/1412.6980). Reference implementation: ``torch/optim/adamax.py`` (torch 2.13).
"""
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import _methods, _validation
from ._state import GroupedState, choose_impl, flag, foreach_gradients, scalar_list

__all__ = ["Adamax", "adamax"]


def _single_tensor_adamax(
    params: List[Tensor],
    grads: List[Tensor],
    exp_avgs: List[Tensor],
    exp_infs: List[Tensor],
    state_steps: List[Tensor],
    *,
    eps: float,
    beta1: float,
    beta2: float,
    lr: float,
    weight_decay: float,
    maximize: bool,
) -> None:
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
        bias_correction = 1 - beta1 ** float(step_t.item())
        clr = lr / bias_correction
        param.addcdiv_(exp_avg, exp_inf, value=-clr)


def _multi_tensor_adamax(
    params: List[Tensor],
    grads: List[Tensor],
    exp_avgs: List[Tensor],
    exp_infs: List[Tensor],
    state_steps: List[Tensor],
    *,
    eps: float,
    beta1: float,
    beta2: float,
    lr: float,
    weight_decay: float,
    maximize: bool,
) -> None:
    if len(params) == 0:
        return
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


def adamax(
    params: List[Tensor],
    grads: List[Tensor],
    exp_avgs: List[Tensor],
    exp_infs: List[Tensor],
    state_steps: List[Tensor],
    foreach: Optional[bool] = None,
    *,
    eps: float,
    beta1: float,
    beta2: float,
    lr: float,
    weight_decay: float,
    maximize: bool,
) -> None:
    r"""Functional Adamax: update ``params`` and their state in place, one step.

    Same arguments and results as ``torch.optim.adamax.adamax`` (without ``capturable``,
    ``differentiable`` and complex support). Compiles with TorchScript, multi-tensor included.

    Args:
        params: parameters, any shapes, floating dtypes, CPU or CUDA.
        grads: dense gradients like ``params``.
        exp_avgs: first moment estimates; exp_infs: exponentially weighted infinity norms
            (both like ``params``).
        state_steps: 0-dim step counters, incremented here.
        foreach: True multi-tensor, False single-tensor, None torch's default.
        eps, beta1, beta2, lr, weight_decay, maximize: as in :class:`Adamax`.

    Raises:
        RuntimeError: inputs whose lengths, shapes, dtypes or devices do not match (from the
            aten ops; the class checks its inputs before calling this).

    Algorithm: Kingma & Ba 2015, section 7.1; reference code ``torch/optim/adamax.py`` (torch
    2.13).
    """
    if foreach is None:
        foreach = choose_impl(params, None, None) == "foreach"
    if foreach:
        _multi_tensor_adamax(
            params, grads, exp_avgs, exp_infs, state_steps, eps=eps, beta1=beta1, beta2=beta2,
            lr=lr, weight_decay=weight_decay, maximize=maximize,
        )
    else:
        _single_tensor_adamax(
            params, grads, exp_avgs, exp_infs, state_steps, eps=eps, beta1=beta1, beta2=beta2,
            lr=lr, weight_decay=weight_decay, maximize=maximize,
        )



def check_adamax_hyperparameters(h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
    """torch's checks for Adamax."""
    _validation.check_lr(h["lr"])
    _validation.check_non_negative(h["eps"], "epsilon")
    _validation.check_betas(h["beta1"], h["beta2"])
    _validation.check_non_negative(h["weight_decay"], "weight_decay")
    _validation.check_impl_flags(o["foreach"], None, flag(o, "capturable"), flag(o, "differentiable"))


def adamax_group_step(s: GroupedState, g: int, indices: List[int], grads: List[Tensor]) -> None:
    """Step the parameters ``indices`` (all in group ``g``) of an Adamax optimizer."""
    h = s.hparams[g]
    o = s.options[g]
    s.init_state(g, indices, False, {"exp_avg": 0.0, "exp_inf": 0.0})
    lists = s.state_lists(g, indices, ["step", "exp_avg", "exp_inf"])
    params = s.params_of(g, indices)
    adamax(
        params, grads, lists["exp_avg"], lists["exp_inf"], lists["step"],
        foreach=s.impl[g] == "foreach", eps=h["eps"], beta1=h["beta1"], beta2=h["beta2"],
        lr=h["lr"], weight_decay=h["weight_decay"], maximize=flag(o, "maximize"),
    )


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
        params: a list of tensors, or (eagerly only) of torch-style param-group dicts.
            Floating-point, dense, real, leaf tensors on CPU or CUDA; each at most once.
        lr: learning rate, >= 0 (default 2e-3).
        betas: decay rates, each in [0, 1) (default (0.9, 0.999)).
        eps: added to ``|g|``, >= 0 (default 1e-8).
        weight_decay: L2 penalty, >= 0 (default 0).
        foreach: True multi-tensor, False single-tensor, None torch's default (default None).
        maximize: maximise instead of minimising (default False).
        differentiable, capturable: must be False.

    ``maximize``, ``differentiable``, ``capturable`` are keyword-only in torch; here they are
    positional-or-keyword (TorchScript does not compile keyword-only arguments with defaults).

    State per parameter: ``'step'`` (0-dim float32 on the CPU), ``'exp_avg'``, ``'exp_inf'``
    (like the parameter).

    Raises:
        ValueError: invalid hyperparameters (torch's messages), an empty, non-leaf, sparse,
            complex or repeated parameter, ``capturable``/``differentiable`` True.
        RuntimeError: at ``step``, a sparse gradient (torch's message), before any change.
        TypeError: (eagerly) a Tensor hyperparameter or a malformed ``params``.
    """

    def __init__(
        self,
        params: List[Tensor],
        lr: float = 2e-3,
        betas: Tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        foreach: Optional[bool] = None,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ) -> None:
        hparams: Dict[str, float] = {
            "lr": lr, "beta1": betas[0], "beta2": betas[1], "eps": eps, "weight_decay": weight_decay,
        }
        options: Dict[str, Optional[bool]] = {
            "foreach": foreach, "maximize": maximize, "differentiable": differentiable, "capturable": capturable,
        }
        self._s = self._new_state(params, hparams, options)
        self._init_groups()

    def _check(self, h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
        check_adamax_hyperparameters(h, o)

    def _group_step(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
        adamax_group_step(self._s, g, indices, grads)

    def _sparse_error(self, h: Dict[str, float], impl: str) -> Optional[str]:
        return "Adamax does not support sparse gradients"
