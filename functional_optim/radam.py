r"""RAdam: class and functional form, whose one body holds the single-tensor and multi-tensor
implementations (torch has no fused RAdam kernel).

Algorithm: Liu et al., "On the Variance of the Adaptive Learning Rate and Beyond", ICLR 2020
(https://arxiv.org/abs/1908.03265); decoupled weight decay from Loshchilov & Hutter 2019.
Reference implementation: ``torch/optim/radam.py`` (torch 2.13).
"""
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import _docs, _methods, _validation
from ._state import adam_moments, choose_impl, foreach_adam_moments, fused_step, no_fresh, scalar_list

__all__ = ["RAdam", "radam"]


@_docs.fill
def radam(
    params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor], exp_avg_sqs: List[Tensor],
    state_steps: List[Tensor], foreach: Optional[bool] = None,
    fused: Optional[bool] = None, *, beta1: float, beta2: float, lr: float,
    weight_decay: float, eps: float, decoupled_weight_decay: bool, maximize: bool,
) -> None:
    r"""Functional RAdam: update ``params`` and their state in place, one step.

    {_functional_intro_doc}

    Args:
        {_functional_args_doc}
        {_functional_fused_doc}
        exp_avgs, exp_avg_sqs: moment estimates, like ``params``.
        beta1, beta2, lr, weight_decay, eps, decoupled_weight_decay, maximize: as in :class:`RAdam`.

    {_functional_raises_doc}

    Algorithm: Liu et al., ICLR 2020 (https://arxiv.org/abs/1908.03265); reference code
    ``torch/optim/radam.py`` (torch 2.13).
    """
    # maximum length of the approximated simple moving average
    rho_inf = 2 / (1 - beta2) - 1
    impl = choose_impl(params, foreach, fused)
    compiling = torch.compiler.is_compiling()
    if impl == "single" or (impl == "foreach" and compiling):
        for i in range(len(params)):
            param = params[i]
            exp_avg_sq = exp_avg_sqs[i]
            _, step = adam_moments(
                i, params, grads, exp_avgs, exp_avg_sqs, state_steps, beta1, beta2, lr, weight_decay,
                decoupled_weight_decay, maximize,
            )
            if compiling:  # both implementations, traced (Inductor fuses the loop)
                _traced_update(param, exp_avgs[i], exp_avg_sq, state_steps[i], beta1, beta2, rho_inf, lr, eps)
                continue
            bias_correction1 = 1 - beta1**step
            bias_correction2 = 1 - beta2**step
            bias_corrected_exp_avg = exp_avgs[i] / bias_correction1
            # current length of the approximated simple moving average
            rho_t = rho_inf - 2 * step * (beta2**step) / bias_correction2
            if rho_t > 5.0:
                rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
                exp_avg_sq_sqrt = exp_avg_sq.sqrt().add_(eps)
                # float / tensor, spelled as eager torch computes it (Tensor.__rtruediv__)
                adaptive_lr = exp_avg_sq_sqrt.reciprocal() * (bias_correction2**0.5)
                param.add_(bias_corrected_exp_avg * lr * adaptive_lr * rect, alpha=-1.0)
            else:
                param.add_(bias_corrected_exp_avg * lr, alpha=-1.0)
    elif len(params) > 0 and impl == "foreach":
        torch._foreach_add_(state_steps, 1.0)
        grads = foreach_adam_moments(
            params, grads, exp_avgs, exp_avg_sqs, beta1, beta2, lr, weight_decay, decoupled_weight_decay, maximize
        )
        unrect_step_size: List[float] = []
        rect_step_size: List[float] = []
        for step_t in state_steps:
            step = float(step_t.item())
            rho_t = rho_inf - 2 * step * (beta2**step) / (1 - beta2**step)
            rect = 0.0
            if rho_t > 5:
                rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
            unrectified = 0.0 if rect > 0 else 1.0
            bias_correction1 = 1 - beta1**step
            unrect_step_size.append((lr * unrectified / bias_correction1) * -1)
            rect_step_size.append(((1 - beta2**step) ** 0.5) * (lr * rect / bias_correction1) * -1)
        buffer = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_add_(buffer, eps)
        torch._foreach_div_(buffer, scalar_list(rect_step_size))
        torch._foreach_reciprocal_(buffer)
        torch._foreach_add_(buffer, scalar_list(unrect_step_size))
        # buffer = sqrt(1 - beta2^t) * rect_step_size / (sqrt(v) + eps) + unrect_step_size
        torch._foreach_addcmul_(params, exp_avgs, buffer)
    elif len(params) > 0:
        fused_step(
            "radam", params, grads, [state_steps, exp_avgs, exp_avg_sqs], no_fresh(len(params)),
            ["lr", "beta1", "beta2", "weight_decay", "eps", "decoupled_weight_decay", "maximize"],
            [lr, beta1, beta2, weight_decay, eps, 1.0 if decoupled_weight_decay else 0.0, 1.0 if maximize else 0.0],
        )


def _traced_update(
    param: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step_t: Tensor, beta1: float, beta2: float,
    rho_inf: float, lr: float, eps: float,
) -> None:
    """The single-tensor update of one parameter after its moments, in the form torch.compile
    traces (torch.optim's capturable one): the step's factors are float64 tensors, not Python
    floats read from the step, and the rectification is chosen by ``torch.where``, as Dynamo
    cannot branch on a value read from a tensor."""
    step = step_t.to(torch.float64)
    bias_correction2 = 1 - beta2**step
    rho_t = rho_inf - 2 * step * (beta2**step) / bias_correction2
    rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)).clamp(min=0.0).sqrt()
    adaptive_lr = exp_avg_sq.sqrt().add_(eps).reciprocal() * bias_correction2.sqrt()
    factor = torch.where(rho_t > 5.0, adaptive_lr * rect, 1.0)
    param.add_(exp_avg / (1 - beta1**step) * lr * factor, alpha=-1.0)


@_docs.fill
@_methods.with_shared_methods
class RAdam:
    r"""RAdam (rectified Adam), as ``torch.optim.RAdam``; eager or TorchScript.

    .. math::
       \begin{aligned}
       &\textbf{input}: \gamma \text{ (lr)}, \beta_1, \beta_2 \text{ (betas)}, \theta_0,
            \lambda \text{ (weight decay)}, \epsilon, \textit{decoupled}\\
       &\textbf{initialize}: m_0 \leftarrow 0,\ v_0 \leftarrow 0,\ \rho_\infty \leftarrow 2/(1-\beta_2) - 1\\
       &\textbf{for}\ t = 1, 2, \ldots:\\
       &\quad g_t \leftarrow \pm\nabla_\theta f_t(\theta_{t-1});\quad
            \textbf{if}\ \lambda \ne 0:\ \theta_{t-1} \leftarrow \theta_{t-1}(1-\gamma\lambda)\ (\textit{decoupled})
            \ \textbf{else}\ g_t \leftarrow g_t + \lambda\theta_{t-1}\\
       &\quad m_t \leftarrow \beta_1 m_{t-1} + (1-\beta_1) g_t,\quad v_t \leftarrow \beta_2 v_{t-1} + (1-\beta_2) g_t^2\\
       &\quad \hat m_t \leftarrow m_t/(1-\beta_1^t),\quad \rho_t \leftarrow \rho_\infty - 2t\beta_2^t/(1-\beta_2^t)\\
       &\quad \textbf{if}\ \rho_t > 5:\ r_t \leftarrow \sqrt{\tfrac{(\rho_t-4)(\rho_t-2)\rho_\infty}{(\rho_\infty-4)(\rho_\infty-2)\rho_t}},\
            \theta_t \leftarrow \theta_{t-1} - \gamma\hat m_t r_t \sqrt{1-\beta_2^t}/(\sqrt{v_t} + \epsilon)\\
       &\quad \textbf{else}\ \theta_t \leftarrow \theta_{t-1} - \gamma\hat m_t
       \end{aligned}

    Sources: Liu et al., ICLR 2020 (https://arxiv.org/abs/1908.03265); reference code
    ``torch/optim/radam.py``.

    Args:
        {_params_doc}
        lr: learning rate, >= 0 (default 1e-3).
        betas: decay rates, each in [0, 1) (default (0.9, 0.999)).
        eps: denominator term, >= 0 (default 1e-8).
        weight_decay: L2 penalty (or decoupled decay rate), >= 0 (default 0).
        decoupled_weight_decay: AdamW-style weight decay (default False).
        {_common_args_doc}
        {_capturable_doc}

    ``foreach`` ... ``differentiable``
    {_keyword_only_doc}
    {_fused_extra_doc}

    State per parameter: ``'step'`` (0-dim float32 on the CPU), ``'exp_avg'``, ``'exp_avg_sq'``
    (like the parameter).

    {_tensor_doc}

    {_raises_doc}
    """

    def __init__(
        self, params: List[Tensor], lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8, weight_decay: float = 0.0, decoupled_weight_decay: bool = False,
        foreach: Optional[bool] = None, maximize: bool = False, capturable: bool = False,
        differentiable: bool = False, fused: Optional[bool] = None,
    ) -> None:
        hparams: Dict[str, float] = {
            "lr": lr, "beta1": betas[0], "beta2": betas[1], "eps": eps, "weight_decay": weight_decay,
        }
        options: Dict[str, Optional[bool]] = {
            "maximize": maximize, "foreach": foreach, "capturable": capturable,
            "decoupled_weight_decay": decoupled_weight_decay, "differentiable": differentiable,
            "fused": fused,
        }
        self._s = self._new_state(params, hparams, options, "radam")
        self._init_groups()

    def _check(self, h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
        _validation.check_values(h, ["lr", "eps", "betas", "weight_decay"])

    def _group_step(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
        s = self._s
        h = s.hparams[g]
        lists = s.prepare_state(g, indices, grads)  # keys, initial values: csrc/steps/radam.cpp
        radam(
            lists["param"], grads, lists["exp_avg"], lists["exp_avg_sq"], lists["step"], s.impl[g] == "foreach", False,
            beta1=h["beta1"], beta2=h["beta2"], lr=h["lr"], weight_decay=h["weight_decay"], eps=h["eps"],
            maximize=s.flag(g, "maximize"), decoupled_weight_decay=s.flag(g, "decoupled_weight_decay"),
        )

    def _sparse_error(self, h: Dict[str, float], impl: str) -> Optional[str]:
        return "RAdam does not support sparse gradients"
