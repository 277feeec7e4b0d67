r"""NAdam: class, functional form and its single-tensor and multi-tensor implementations
(torch has no fused NAdam kernel).

Algorithm: Dozat, "Incorporating Nesterov Momentum into Adam", ICLR 2016 workshop
(https://openreview.net/forum?id=OM0jvwB8jIp57ZJjtNEZ), with momentum decay; NAdamW-style
decoupled weight decay from Loshchilov & Hutter 2019. Reference implementation:
``torch/optim/nadam.py`` (torch 2.13).
"""
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import _methods, _validation
from ._state import GroupedState, choose_impl, flag, foreach_gradients, new_step, scalar_list

__all__ = ["NAdam", "nadam"]


def _single_tensor_nadam(
    params: List[Tensor],
    grads: List[Tensor],
    exp_avgs: List[Tensor],
    exp_avg_sqs: List[Tensor],
    mu_products: List[Tensor],
    state_steps: List[Tensor],
    *,
    beta1: float,
    beta2: float,
    lr: float,
    weight_decay: float,
    momentum_decay: float,
    eps: float,
    decoupled_weight_decay: bool,
    maximize: bool,
) -> None:
    for i in range(len(params)):
        param = params[i]
        grad = grads[i] if not maximize else -grads[i]
        exp_avg = exp_avgs[i]
        exp_avg_sq = exp_avg_sqs[i]
        mu_product = mu_products[i]
        step_t = state_steps[i]
        step_t.add_(1)
        step = float(step_t.item())
        bias_correction2 = 1 - beta2**step
        if weight_decay != 0:
            if decoupled_weight_decay:
                param.mul_(1 - lr * weight_decay)
            else:
                grad = grad.add(param, alpha=weight_decay)
        # momentum cache mu_t and mu_{t+1}
        mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * momentum_decay)))
        mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * momentum_decay)))
        mu_product.mul_(mu)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = exp_avg_sq.div(bias_correction2).sqrt()
        mu_product_value = float(mu_product.item())
        mu_product_next = mu_product_value * mu_next
        denom.add_(eps)
        param.addcdiv_(grad, denom, value=(-lr * (1.0 - mu) / (1.0 - mu_product_value)))
        param.addcdiv_(exp_avg, denom, value=(-lr * mu_next) / (1.0 - mu_product_next))


def _multi_tensor_nadam(
    params: List[Tensor],
    grads: List[Tensor],
    exp_avgs: List[Tensor],
    exp_avg_sqs: List[Tensor],
    mu_products: List[Tensor],
    state_steps: List[Tensor],
    *,
    beta1: float,
    beta2: float,
    lr: float,
    weight_decay: float,
    momentum_decay: float,
    eps: float,
    decoupled_weight_decay: bool,
    maximize: bool,
) -> None:
    if len(params) == 0:
        return
    torch._foreach_add_(state_steps, 1.0)
    if decoupled_weight_decay and weight_decay != 0:
        torch._foreach_mul_(params, 1 - lr * weight_decay)
    grads = foreach_gradients(params, grads, 0.0 if decoupled_weight_decay else weight_decay, maximize)
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
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


def nadam(
    params: List[Tensor],
    grads: List[Tensor],
    exp_avgs: List[Tensor],
    exp_avg_sqs: List[Tensor],
    mu_products: List[Tensor],
    state_steps: List[Tensor],
    foreach: Optional[bool] = None,
    *,
    beta1: float,
    beta2: float,
    lr: float,
    weight_decay: float,
    momentum_decay: float,
    eps: float,
    decoupled_weight_decay: bool,
    maximize: bool,
) -> None:
    r"""Functional NAdam: update ``params`` and their state in place, one step.

    Same arguments and results as ``torch.optim.nadam.nadam`` (without ``capturable``,
    ``differentiable`` and complex support). Compiles with TorchScript, multi-tensor included.

    Args:
        params: parameters, any shapes, floating dtypes, CPU or CUDA.
        grads: dense gradients like ``params``.
        exp_avgs, exp_avg_sqs: moment estimates, like ``params``.
        mu_products: 0-dim running products of the momentum coefficients (float32 on the CPU).
        state_steps: 0-dim step counters, incremented here.
        foreach: True multi-tensor, False single-tensor, None torch's default.
        beta1, beta2, lr, weight_decay, momentum_decay, eps, decoupled_weight_decay, maximize:
            as in :class:`NAdam`.

    Raises:
        RuntimeError: inputs whose lengths, shapes, dtypes or devices do not match (from the
            aten ops; the class checks its inputs before calling this).

    Algorithm: Dozat 2016; reference code ``torch/optim/nadam.py`` (torch 2.13).
    """
    if foreach is None:
        foreach = choose_impl(params, None, None) == "foreach"
    if foreach:
        _multi_tensor_nadam(
            params, grads, exp_avgs, exp_avg_sqs, mu_products, state_steps, beta1=beta1,
            beta2=beta2, lr=lr, weight_decay=weight_decay, momentum_decay=momentum_decay,
            eps=eps, decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
        )
    else:
        _single_tensor_nadam(
            params, grads, exp_avgs, exp_avg_sqs, mu_products, state_steps, beta1=beta1,
            beta2=beta2, lr=lr, weight_decay=weight_decay, momentum_decay=momentum_decay,
            eps=eps, decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
        )



def check_nadam_hyperparameters(h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
    """torch's checks for NAdam."""
    _validation.check_lr(h["lr"])
    _validation.check_non_negative(h["eps"], "epsilon")
    _validation.check_betas(h["beta1"], h["beta2"])
    _validation.check_non_negative(h["weight_decay"], "weight_decay")
    _validation.check_non_negative(h["momentum_decay"], "momentum_decay")
    _validation.check_impl_flags(o["foreach"], None, flag(o, "capturable"), flag(o, "differentiable"))


def nadam_group_step(s: GroupedState, g: int, indices: List[int], grads: List[Tensor]) -> None:
    """Step the parameters ``indices`` (all in group ``g``) of an NAdam optimizer."""
    h = s.hparams[g]
    o = s.options[g]
    if s.needs_init(g, indices):
        for i in indices:  # 'step' and 'mu_product' first: torch's key order
            state = s.state[i]
            if "step" not in state:
                state["step"] = new_step(s.params[i], False)
            if "mu_product" not in state:
                state["mu_product"] = torch.ones((), device=torch.device("cpu"))
    s.init_state(g, indices, False, {"exp_avg": 0.0, "exp_avg_sq": 0.0})
    lists = s.state_lists(g, indices, ["step", "mu_product", "exp_avg", "exp_avg_sq"])
    params = s.params_of(g, indices)
    nadam(
        params, grads, lists["exp_avg"], lists["exp_avg_sq"], lists["mu_product"], lists["step"],
        foreach=s.impl[g] == "foreach", beta1=h["beta1"], beta2=h["beta2"], lr=h["lr"],
        weight_decay=h["weight_decay"], momentum_decay=h["momentum_decay"], eps=h["eps"],
        decoupled_weight_decay=flag(o, "decoupled_weight_decay"), maximize=flag(o, "maximize"),
    )


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
        params: a list of tensors, or (eagerly only) of torch-style param-group dicts.
            Floating-point, dense, real, leaf tensors on CPU or CUDA; each at most once.
        lr: learning rate, >= 0 (default 2e-3).
        betas: decay rates, each in [0, 1) (default (0.9, 0.999)).
        eps: denominator term, >= 0 (default 1e-8).
        weight_decay: L2 penalty (or decoupled decay rate), >= 0 (default 0).
        momentum_decay: psi, >= 0 (default 4e-3).
        decoupled_weight_decay: NAdamW-style weight decay (default False).
        foreach: True multi-tensor, False single-tensor, None torch's default (default None).
        maximize: maximise instead of minimising (default False).
        capturable, differentiable: must be False.

    ``foreach`` ... ``differentiable`` are keyword-only in torch; here they are
    positional-or-keyword (TorchScript does not compile keyword-only arguments with defaults).

    State per parameter: ``'step'`` and ``'mu_product'`` (0-dim float32 on the CPU; as in torch,
    loading a state dict casts ``'mu_product'`` to the parameter's dtype), ``'exp_avg'``,
    ``'exp_avg_sq'`` (like the parameter).

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
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        foreach: Optional[bool] = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ) -> None:
        hparams: Dict[str, float] = {
            "lr": lr, "beta1": betas[0], "beta2": betas[1], "eps": eps, "weight_decay": weight_decay,
            "momentum_decay": momentum_decay,
        }
        options: Dict[str, Optional[bool]] = {
            "decoupled_weight_decay": decoupled_weight_decay, "maximize": maximize, "foreach": foreach,
            "capturable": capturable, "differentiable": differentiable,
        }
        self._s = self._new_state(params, hparams, options)
        self._init_groups()

    def _check(self, h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
        check_nadam_hyperparameters(h, o)

    def _group_step(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
        nadam_group_step(self._s, g, indices, grads)

    def _sparse_error(self, h: Dict[str, float], impl: str) -> Optional[str]:
        return "NAdam does not support sparse gradients"
