r"""Adam: class and functional form, whose one body holds the single-tensor, multi-tensor and
fused implementations.

Algorithm: Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015
(https://arxiv.org/abs/1412.6980); AMSGrad from Reddi et al., "On the Convergence of Adam and
Beyond", ICLR 2018; decoupled weight decay from Loshchilov & Hutter, "Decoupled Weight Decay
Regularization", ICLR 2019. Reference implementation: ``torch/optim/adam.py`` (torch 2.13),
whose results these functions reproduce element by element.
"""
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import _docs, _methods, _validation
from ._state import adam_moments, choose_impl, foreach_adam_moments, fused_step, no_fresh, scalar_list

__all__ = ["Adam", "adam"]


@_docs.fill
def adam(
    params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor], exp_avg_sqs: List[Tensor],
    max_exp_avg_sqs: List[Tensor], state_steps: List[Tensor], foreach: Optional[bool] = None,
    fused: Optional[bool] = None, *, amsgrad: bool, beta1: float, beta2: float, lr: float,
    weight_decay: float, eps: float, maximize: bool, decoupled_weight_decay: bool,
) -> None:
    r"""Functional Adam: update ``params`` and their state in place, one step.

    Same arguments and results as ``torch.optim.adam.adam`` (without ``capturable``,
    ``differentiable``, ``grad_scale``/``found_inf`` and complex support). Compiles with
    TorchScript, and, unlike torch's, keeps the multi-tensor and fused paths under TorchScript.

    Args:
        {_functional_args_doc}
        exp_avgs, exp_avg_sqs: first and second moment estimates, like ``params``.
        max_exp_avg_sqs: running maxima of ``exp_avg_sqs`` (like ``params``) when ``amsgrad``,
            else an empty list.
        {_functional_fused_doc}
        amsgrad, maximize, decoupled_weight_decay: as in :class:`Adam`.
        beta1, beta2, lr, weight_decay, eps: as in :class:`Adam` (``lr`` in parameter units
            per unit of normalised gradient).

    {_functional_raises_doc}

    Algorithm: Kingma & Ba 2015 (https://arxiv.org/abs/1412.6980); AMSGrad: Reddi et al. 2018;
    reference code ``torch/optim/adam.py`` (torch 2.13).
    """
    impl = choose_impl(params, foreach, fused)
    if impl == "single":
        for i in range(len(params)):
            exp_avg_sq = exp_avg_sqs[i]
            grad, step = adam_moments(
                i, params, grads, exp_avgs, exp_avg_sqs, state_steps, beta1, beta2, lr, weight_decay,
                decoupled_weight_decay, maximize,
            )
            step_size = lr / (1 - beta1**step)
            bias_correction2_sqrt = (1 - beta2**step) ** 0.5
            if amsgrad:
                torch.maximum(max_exp_avg_sqs[i], exp_avg_sq, out=max_exp_avg_sqs[i])
                denom = (max_exp_avg_sqs[i].sqrt() / bias_correction2_sqrt).add_(eps)
            else:
                denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
            params[i].addcdiv_(exp_avgs[i], denom, value=-step_size)
    elif len(params) > 0 and impl == "foreach":
        torch._foreach_add_(state_steps, 1.0)
        grads = foreach_adam_moments(
            params, grads, exp_avgs, exp_avg_sqs, beta1, beta2, lr, weight_decay, decoupled_weight_decay, maximize
        )
        step_sizes: List[float] = []
        bias_correction2_sqrts: List[float] = []
        for step_t in state_steps:
            step = float(step_t.item())
            step_sizes.append((lr / (1 - beta1**step)) * -1)
            bias_correction2_sqrts.append((1 - beta2**step) ** 0.5)
        if amsgrad:
            torch._foreach_maximum_(max_exp_avg_sqs, exp_avg_sqs)
            exp_avg_sq_sqrt = torch._foreach_sqrt(max_exp_avg_sqs)
        else:
            exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(exp_avg_sq_sqrt, scalar_list(bias_correction2_sqrts))
        torch._foreach_add_(exp_avg_sq_sqrt, eps)
        torch._foreach_addcdiv_(params, exp_avgs, exp_avg_sq_sqrt, scalar_list(step_sizes))
    elif len(params) > 0:
        columns = [state_steps, exp_avgs, exp_avg_sqs]
        if amsgrad:
            columns.append(max_exp_avg_sqs)
        fused_step(
            "adamw" if decoupled_weight_decay else "adam", params, grads, columns, no_fresh(len(params)),
            ["lr", "beta1", "beta2", "weight_decay", "eps", "amsgrad", "maximize", "decoupled_weight_decay"],
            [lr, beta1, beta2, weight_decay, eps, 1.0 if amsgrad else 0.0, 1.0 if maximize else 0.0, 1.0 if decoupled_weight_decay else 0.0],
        )


@_docs.fill
@_methods.with_shared_methods
class Adam:
    r"""Adam, as ``torch.optim.Adam``, with gradients passed in; eager or TorchScript.

    .. math::
       \begin{aligned}
       &\textbf{input}: \gamma \text{ (lr)}, \beta_1, \beta_2 \text{ (betas)}, \theta_0 \text{ (params)},
            \lambda \text{ (weight decay)}, \epsilon, \textit{amsgrad}, \textit{maximize},
            \textit{decoupled}\\
       &\textbf{initialize}: m_0 \leftarrow 0,\ v_0 \leftarrow 0,\ v_0^{max} \leftarrow 0\\
       &\textbf{for}\ t = 1, 2, \ldots:\\
       &\quad g_t \leftarrow \pm\nabla_\theta f_t(\theta_{t-1}) \quad (- \text{ if maximize})\\
       &\quad \textbf{if}\ \lambda \ne 0:\ \textbf{if}\ \textit{decoupled}:\ \theta_{t-1} \leftarrow \theta_{t-1}(1 - \gamma\lambda)
            \ \textbf{else}\ g_t \leftarrow g_t + \lambda\theta_{t-1}\\
       &\quad m_t \leftarrow \beta_1 m_{t-1} + (1-\beta_1) g_t,\quad v_t \leftarrow \beta_2 v_{t-1} + (1-\beta_2) g_t^2\\
       &\quad \textbf{if amsgrad}: v_t^{max} \leftarrow \max(v_{t-1}^{max}, v_t),\ \hat v_t \leftarrow v_t^{max}/(1-\beta_2^t)
            \ \textbf{else}\ \hat v_t \leftarrow v_t/(1-\beta_2^t)\\
       &\quad \theta_t \leftarrow \theta_{t-1} - \gamma\, \frac{m_t/(1-\beta_1^t)}{\sqrt{\hat v_t} + \epsilon}
       \end{aligned}

    Sources: Kingma & Ba 2015 (https://arxiv.org/abs/1412.6980); AMSGrad: Reddi et al. 2018;
    decoupled weight decay: Loshchilov & Hutter 2019; reference code ``torch/optim/adam.py``.

    Args:
        {_params_doc}
        lr: learning rate, > 0 in parameter units (default 1e-3).
        betas: decay rates of the moment estimates, each in [0, 1) (default (0.9, 0.999)).
        eps: added to the denominator, >= 0 (default 1e-8).
        weight_decay: L2 penalty (or decoupled decay rate), >= 0 (default 0).
        amsgrad: use AMSGrad (default False).
        {_common_args_doc}
        {_capturable_doc}
        decoupled_weight_decay: AdamW-style weight decay (default False).

    ``foreach`` ... ``decoupled_weight_decay``
    {_keyword_only_doc}

    State per parameter (``get_state()``/``state_dict()``, as torch): ``'step'`` (0-dim float32,
    on the CPU, or on the parameter's device when fused), ``'exp_avg'``, ``'exp_avg_sq'`` and,
    with amsgrad, ``'max_exp_avg_sq'`` (each like the parameter).

    {_tensor_doc}

    {_raises_doc}
    """

    def __init__(
        self, params: List[Tensor], lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False, foreach: Optional[bool] = None,
        maximize: bool = False, capturable: bool = False, differentiable: bool = False,
        fused: Optional[bool] = None, decoupled_weight_decay: bool = False,
    ) -> None:
        hparams: Dict[str, float] = {
            "lr": lr, "beta1": betas[0], "beta2": betas[1], "eps": eps, "weight_decay": weight_decay,
        }
        options: Dict[str, Optional[bool]] = {
            "amsgrad": amsgrad, "maximize": maximize, "foreach": foreach, "capturable": capturable,
            "differentiable": differentiable, "fused": fused, "decoupled_weight_decay": decoupled_weight_decay,
        }
        self._s = self._new_state(params, hparams, options, "adam")
        self._init_groups()

    # AdamW binds these three hooks too.
    def _group_step(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
        s = self._s
        h = s.hparams[g]
        amsgrad = s.flag(g, "amsgrad")
        lists = s.prepare_state(g, indices, grads)  # keys, initial values: csrc/steps/adam.cpp
        empty: List[Tensor] = []
        adam(
            lists["param"], grads, lists["exp_avg"], lists["exp_avg_sq"],
            lists["max_exp_avg_sq"] if amsgrad else empty, lists["step"], s.impl[g] == "foreach", False,
            amsgrad=amsgrad, beta1=h["beta1"], beta2=h["beta2"], lr=h["lr"], weight_decay=h["weight_decay"],
            eps=h["eps"], maximize=s.flag(g, "maximize"), decoupled_weight_decay=s.flag(g, "decoupled_weight_decay"),
        )

    def _check(self, h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
        _validation.check_values(h, ["lr", "eps", "betas", "weight_decay"])

    def _sparse_error(self, h: Dict[str, float], impl: str) -> Optional[str]:
        return "Adam does not support sparse gradients, please consider SparseAdam instead"
