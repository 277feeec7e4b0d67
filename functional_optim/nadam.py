r"""NAdam: class and functional form, whose one body holds the single-tensor and multi-tensor
implementations (torch has no fused NAdam kernel).

Algorithm: Dozat, "Incorporating Nesterov Momentum into Adam", ICLR 2016 workshop
(https://openreview.net/forum?id=OM0jvwB8jIp57ZJjtNEZ), with momentum decay; NAdamW-style
decoupled weight decay from Loshchilov & Hutter 2019. Reference implementation:
``torch/optim/nadam.py`` (torch 2.13).
"""
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import _docs, _methods, _validation
from ._state import adam_moments, choose_impl, foreach_adam_moments, fused_step, no_fresh, scalar_list

__all__ = ["NAdam", "nadam"]


@_docs.fill
def nadam(
    params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor], exp_avg_sqs: List[Tensor],
    mu_products: List[Tensor], state_steps: List[Tensor], foreach: Optional[bool] = None,
    fused: Optional[bool] = None, *,
    beta1: float, beta2: float, lr: float, weight_decay: float, momentum_decay: float, eps: float,
    decoupled_weight_decay: bool, maximize: bool,
) -> None:
    r"""Functional NAdam: update ``params`` and their state in place, one step.

    {_functional_intro_doc}

    Args:
        {_functional_args_doc}
        {_functional_fused_doc}
        exp_avgs, exp_avg_sqs: moment estimates, like ``params``.
        mu_products: 0-dim running products of the momentum coefficients (float32 on the CPU).
        beta1, beta2, lr, weight_decay, momentum_decay, eps, decoupled_weight_decay, maximize:
            as in :class:`NAdam`.

    {_functional_raises_doc}

    Algorithm: Dozat 2016; reference code ``torch/optim/nadam.py`` (torch 2.13).
    """
    impl = choose_impl(params, foreach, fused)
    if impl == "single":
        for i in range(len(params)):
            param = params[i]
            exp_avg_sq = exp_avg_sqs[i]
            mu_product = mu_products[i]
            grad, step = adam_moments(
                i, params, grads, exp_avgs, exp_avg_sqs, state_steps, beta1, beta2, lr, weight_decay,
                decoupled_weight_decay, maximize,
            )
            # momentum cache mu_t and mu_{t+1}
            mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * momentum_decay)))
            mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * momentum_decay)))
            mu_product.mul_(mu)
            denom = exp_avg_sq.div(1 - beta2**step).sqrt()
            mu_product_value = float(mu_product.item())
            mu_product_next = mu_product_value * mu_next
            denom.add_(eps)
            param.addcdiv_(grad, denom, value=(-lr * (1.0 - mu) / (1.0 - mu_product_value)))
            param.addcdiv_(exp_avgs[i], denom, value=(-lr * mu_next) / (1.0 - mu_product_next))
    elif len(params) > 0 and impl == "foreach":
        torch._foreach_add_(state_steps, 1.0)
        grads = foreach_adam_moments(
            params, grads, exp_avgs, exp_avg_sqs, beta1, beta2, lr, weight_decay, decoupled_weight_decay, maximize
        )
        exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)
        bias_correction_sqrt: List[float] = []
        mus: List[float] = []
        mu_nexts: List[float] = []
        for step_t in state_steps:
            step = float(step_t.item())
            bias_correction_sqrt.append((1 - beta2**step) ** 0.5)
            mus.append(beta1 * (1.0 - 0.5 * (0.96 ** (step * momentum_decay))))
            mu_nexts.append(beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * momentum_decay))))
        torch._foreach_mul_(mu_products, scalar_list(mus))
        torch._foreach_div_(exp_avg_sq_sqrt, scalar_list(bias_correction_sqrt))
        torch._foreach_add_(exp_avg_sq_sqrt, eps)
        step_size_grads: List[float] = []
        step_size_expavg: List[float] = []
        for k in range(len(mu_products)):
            mu_product = float(mu_products[k].item())
            step_size_grads.append((lr * (1.0 - mus[k]) / (1.0 - mu_product)) * -1)
            step_size_expavg.append((lr * mu_nexts[k] / (1.0 - mu_product * mu_nexts[k])) * -1)
        torch._foreach_addcdiv_(params, grads, exp_avg_sq_sqrt, scalar_list(step_size_grads))
        torch._foreach_addcdiv_(params, exp_avgs, exp_avg_sq_sqrt, scalar_list(step_size_expavg))
    elif len(params) > 0:
        fused_step(
            "nadam", params, grads, [state_steps, mu_products, exp_avgs, exp_avg_sqs], no_fresh(len(params)),
            ["lr", "beta1", "beta2", "weight_decay", "momentum_decay", "eps", "decoupled_weight_decay", "maximize"],
            [lr, beta1, beta2, weight_decay, momentum_decay, eps, 1.0 if decoupled_weight_decay else 0.0, 1.0 if maximize else 0.0],
        )


@_docs.fill
@_methods.with_shared_methods
class NAdam:
    r"""NAdam (Adam with Nesterov momentum), as ``torch.optim.NAdam``; eager or TorchScript.

    .. math::
       \begin{aligned}
       &\textbf{input}: \gamma_t \text{ (lr)}, \beta_1, \beta_2 \text{ (betas)}, \theta_0,
            \lambda \text{ (weight decay)}, \psi \text{ (momentum decay)}, \epsilon, \textit{decoupled}\\
       &\textbf{initialize}: m_0 \leftarrow 0,\ v_0 \leftarrow 0,\ \textstyle\prod_0 \mu \leftarrow 1\\
       &\textbf{for}\ t = 1, 2, \ldots:\\
       &\quad g_t \leftarrow \pm\nabla_\theta f_t(\theta_{t-1});\quad
            \textbf{if}\ \lambda \ne 0:\ \theta_{t-1} \leftarrow \theta_{t-1}(1-\gamma\lambda)\ (\textit{decoupled})
            \ \textbf{else}\ g_t \leftarrow g_t + \lambda\theta_{t-1}\\
       &\quad \mu_t \leftarrow \beta_1(1 - \tfrac12 0.96^{t\psi}),\quad \mu_{t+1} \leftarrow \beta_1(1 - \tfrac12 0.96^{(t+1)\psi})\\
       &\quad m_t \leftarrow \beta_1 m_{t-1} + (1-\beta_1) g_t,\quad v_t \leftarrow \beta_2 v_{t-1} + (1-\beta_2) g_t^2\\
       &\quad \theta_t \leftarrow \theta_{t-1} - \gamma\left(\frac{(1-\mu_t) g_t}{1-\prod_{i\le t}\mu_i}
            + \frac{\mu_{t+1} m_t}{1-\prod_{i\le t+1}\mu_i}\right) \Big/ \left(\sqrt{v_t/(1-\beta_2^t)} + \epsilon\right)
       \end{aligned}

    Sources: Dozat 2016; reference code ``torch/optim/nadam.py``.

    Args:
        {_params_doc}
        lr: learning rate, >= 0 (default 2e-3).
        betas: decay rates, each in [0, 1) (default (0.9, 0.999)).
        eps: denominator term, >= 0 (default 1e-8).
        weight_decay: L2 penalty (or decoupled decay rate), >= 0 (default 0).
        momentum_decay: psi, >= 0 (default 4e-3).
        decoupled_weight_decay: NAdamW-style weight decay (default False).
        {_common_args_doc}
        {_capturable_doc}

    ``foreach`` ... ``differentiable``
    {_keyword_only_doc}
    {_fused_extra_doc}

    State per parameter: ``'step'`` and ``'mu_product'`` (0-dim float32 on the CPU; as in torch,
    loading a state dict casts ``'mu_product'`` to the parameter's dtype), ``'exp_avg'``,
    ``'exp_avg_sq'`` (like the parameter).

    {_tensor_doc}

    {_raises_doc}
    """

    def __init__(
        self, params: List[Tensor], lr: float = 2e-3, betas: Tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8, weight_decay: float = 0.0, momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False, foreach: Optional[bool] = None, maximize: bool = False,
        capturable: bool = False, differentiable: bool = False, fused: Optional[bool] = None,
    ) -> None:
        hparams: Dict[str, float] = {
            "lr": lr, "beta1": betas[0], "beta2": betas[1], "eps": eps, "weight_decay": weight_decay,
            "momentum_decay": momentum_decay,
        }
        options: Dict[str, Optional[bool]] = {
            "decoupled_weight_decay": decoupled_weight_decay, "maximize": maximize, "foreach": foreach,
            "capturable": capturable, "differentiable": differentiable,
            "fused": fused,
        }
        self._s = self._new_state(params, hparams, options, "nadam")
        self._init_groups()

    def _check(self, h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
        _validation.check_values(h, ["lr", "eps", "betas", "weight_decay", "momentum_decay"])

    def _group_step(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
        s = self._s
        h = s.hparams[g]
        # keys (torch's order: 'step', 'mu_product' first), initial values: csrc/steps/nadam.cpp
        lists = s.prepare_state(g, indices, grads)
        params = lists["param"]
        nadam(
            params, grads, lists["exp_avg"], lists["exp_avg_sq"], lists["mu_product"], lists["step"],
            s.impl[g] == "foreach", False, beta1=h["beta1"], beta2=h["beta2"], lr=h["lr"],
            weight_decay=h["weight_decay"], momentum_decay=h["momentum_decay"], eps=h["eps"],
            decoupled_weight_decay=s.flag(g, "decoupled_weight_decay"), maximize=s.flag(g, "maximize"),
        )

    def _sparse_error(self, h: Dict[str, float], impl: str) -> Optional[str]:
        return "NAdam does not support sparse gradients"
