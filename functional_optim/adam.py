r"""Adam: class, functional form and its single-tensor, multi-tensor and fused implementations.

Algorithm: Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015
(https://arxiv.org/abs/1412.6980); AMSGrad from Reddi et al., "On the Convergence of Adam and
Beyond", ICLR 2018; decoupled weight decay from Loshchilov & Hutter, "Decoupled Weight Decay
Regularization", ICLR 2019. Reference implementation: ``torch/optim/adam.py`` (torch 2.13),
whose results these functions reproduce element by element.
"""
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import _methods, _validation
from ._state import GroupedState, choose_impl, device_dtype_splits, flag, foreach_gradients, scalar_list, take

__all__ = ["Adam", "adam"]


def _single_tensor_adam(
    params: List[Tensor],
    grads: List[Tensor],
    exp_avgs: List[Tensor],
    exp_avg_sqs: List[Tensor],
    max_exp_avg_sqs: List[Tensor],
    state_steps: List[Tensor],
    *,
    amsgrad: bool,
    beta1: float,
    beta2: float,
    lr: float,
    weight_decay: float,
    eps: float,
    maximize: bool,
    decoupled_weight_decay: bool,
) -> None:
    for i in range(len(params)):
        param = params[i]
        grad = grads[i] if not maximize else -grads[i]
        exp_avg = exp_avgs[i]
        exp_avg_sq = exp_avg_sqs[i]
        step_t = state_steps[i]
        step_t.add_(1)
        if weight_decay != 0:
            if decoupled_weight_decay:
                param.mul_(1 - lr * weight_decay)
            else:
                grad = grad.add(param, alpha=weight_decay)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step = float(step_t.item())
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        step_size = lr / bias_correction1
        bias_correction2_sqrt = bias_correction2**0.5
        if amsgrad:
            torch.maximum(max_exp_avg_sqs[i], exp_avg_sq, out=max_exp_avg_sqs[i])
            denom = (max_exp_avg_sqs[i].sqrt() / bias_correction2_sqrt).add_(eps)
        else:
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        param.addcdiv_(exp_avg, denom, value=-step_size)


def _multi_tensor_adam(
    params: List[Tensor],
    grads: List[Tensor],
    exp_avgs: List[Tensor],
    exp_avg_sqs: List[Tensor],
    max_exp_avg_sqs: List[Tensor],
    state_steps: List[Tensor],
    *,
    amsgrad: bool,
    beta1: float,
    beta2: float,
    lr: float,
    weight_decay: float,
    eps: float,
    maximize: bool,
    decoupled_weight_decay: bool,
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


def _fused_adam(
    params: List[Tensor],
    grads: List[Tensor],
    exp_avgs: List[Tensor],
    exp_avg_sqs: List[Tensor],
    max_exp_avg_sqs: List[Tensor],
    state_steps: List[Tensor],
    *,
    amsgrad: bool,
    beta1: float,
    beta2: float,
    lr: float,
    weight_decay: float,
    eps: float,
    maximize: bool,
    decoupled_weight_decay: bool,
) -> None:
    if len(params) == 0:
        return
    torch._foreach_add_(state_steps, 1.0)
    if decoupled_weight_decay:
        torch._fused_adamw_(
            params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
            lr=lr, beta1=beta1, beta2=beta2, weight_decay=weight_decay, eps=eps,
            amsgrad=amsgrad, maximize=maximize,
        )
    else:
        torch._fused_adam_(
            params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
            lr=lr, beta1=beta1, beta2=beta2, weight_decay=weight_decay, eps=eps,
            amsgrad=amsgrad, maximize=maximize,
        )


def adam(
    params: List[Tensor],
    grads: List[Tensor],
    exp_avgs: List[Tensor],
    exp_avg_sqs: List[Tensor],
    max_exp_avg_sqs: List[Tensor],
    state_steps: List[Tensor],
    foreach: Optional[bool] = None,
    fused: Optional[bool] = None,
    *,
    amsgrad: bool,
    beta1: float,
    beta2: float,
    lr: float,
    weight_decay: float,
    eps: float,
    maximize: bool,
    decoupled_weight_decay: bool,
) -> None:
    r"""Functional Adam: update ``params`` and their state in place, one step.

    Same arguments and results as ``torch.optim.adam.adam`` (without ``capturable``,
    ``differentiable``, ``grad_scale``/``found_inf`` and complex support). Compiles with
    TorchScript, and, unlike torch's, keeps the multi-tensor and fused paths under TorchScript.

    Args:
        params: parameters, any shapes; floating dtype (any float dtype, one per tensor);
            CPU or CUDA.
        grads: one dense gradient per parameter, same shape, dtype and device.
        exp_avgs, exp_avg_sqs: first and second moment estimates, like ``params``.
        max_exp_avg_sqs: running maxima of ``exp_avg_sqs`` (like ``params``) when ``amsgrad``,
            else an empty list.
        state_steps: 0-dim step counters (float32 on the parameter's device for ``fused``),
            incremented by one here.
        foreach, fused: the implementation; ``None``/``None`` picks torch's default
            (multi-tensor when all parameters are on CUDA/XPU/MTIA, else single-tensor).
            ``fused=True`` needs all tensors on one device (group them first; the classes do).
        amsgrad, maximize, decoupled_weight_decay: as in :class:`Adam`.
        beta1, beta2, lr, weight_decay, eps: as in :class:`Adam` (``lr`` in parameter units
            per unit of normalised gradient).

    The checks of :class:`Adam` are not repeated here: mismatched inputs fail inside aten ops.

    Raises:
        RuntimeError: inputs whose lengths, shapes, dtypes or devices do not match (from the
            aten ops; the class checks its inputs before calling this).

    Algorithm: Kingma & Ba 2015 (https://arxiv.org/abs/1412.6980); AMSGrad: Reddi et al. 2018;
    reference code ``torch/optim/adam.py`` (torch 2.13).
    """
    if fused is None and foreach is None:
        foreach = choose_impl(params, None, None) == "foreach"
    if fused is not None and fused:
        _fused_adam(
            params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
            amsgrad=amsgrad, beta1=beta1, beta2=beta2, lr=lr, weight_decay=weight_decay,
            eps=eps, maximize=maximize, decoupled_weight_decay=decoupled_weight_decay,
        )
    elif foreach is not None and foreach:
        _multi_tensor_adam(
            params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
            amsgrad=amsgrad, beta1=beta1, beta2=beta2, lr=lr, weight_decay=weight_decay,
            eps=eps, maximize=maximize, decoupled_weight_decay=decoupled_weight_decay,
        )
    else:
        _single_tensor_adam(
            params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
            amsgrad=amsgrad, beta1=beta1, beta2=beta2, lr=lr, weight_decay=weight_decay,
            eps=eps, maximize=maximize, decoupled_weight_decay=decoupled_weight_decay,
        )


def check_adam_hyperparameters(h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
    """torch's checks for Adam/AdamW (``ValueError("Invalid learning rate: -1.0")`` etc.)."""
    _validation.check_lr(h["lr"])
    _validation.check_non_negative(h["eps"], "epsilon")
    _validation.check_betas(h["beta1"], h["beta2"])
    _validation.check_non_negative(h["weight_decay"], "weight_decay")
    _validation.check_impl_flags(o["foreach"], o["fused"], flag(o, "capturable"), flag(o, "differentiable"))


def adam_group_step(s: GroupedState, g: int, indices: List[int], grads: List[Tensor]) -> None:
    """Step the parameters ``indices`` (all in group ``g``) of an Adam or AdamW optimizer."""
    h = s.hparams[g]
    o = s.options[g]
    amsgrad = flag(o, "amsgrad")
    fused = s.impl[g] == "fused"
    fills: Dict[str, float] = {"exp_avg": 0.0, "exp_avg_sq": 0.0}
    if amsgrad:
        fills["max_exp_avg_sq"] = 0.0
    s.init_state(g, indices, fused, fills)
    lists = s.state_lists(g, indices, ["step"] + list(fills.keys()))
    params = s.params_of(g, indices)
    empty: List[Tensor] = []
    for part in device_dtype_splits(s, g, params):
        whole = len(part) == len(params)
        adam(
            params if whole else take(params, part),
            grads if whole else take(grads, part),
            lists["exp_avg"] if whole else take(lists["exp_avg"], part),
            lists["exp_avg_sq"] if whole else take(lists["exp_avg_sq"], part),
            empty if not amsgrad else (lists["max_exp_avg_sq"] if whole else take(lists["max_exp_avg_sq"], part)),
            lists["step"] if whole else take(lists["step"], part),
            foreach=s.impl[g] == "foreach",
            fused=fused,
            amsgrad=amsgrad,
            beta1=h["beta1"],
            beta2=h["beta2"],
            lr=h["lr"],
            weight_decay=h["weight_decay"],
            eps=h["eps"],
            maximize=flag(o, "maximize"),
            decoupled_weight_decay=flag(o, "decoupled_weight_decay"),
        )


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
        params: a list of tensors, or (eagerly only) of param-group dicts as in ``torch.optim``
            (``{'params': [...], 'lr': ..., 'betas': (...), ...}``). Floating-point, dense,
            real, leaf tensors on CPU or CUDA; each at most once.
        lr: learning rate, > 0 in parameter units (default 1e-3).
        betas: decay rates of the moment estimates, each in [0, 1) (default (0.9, 0.999)).
        eps: added to the denominator, >= 0 (default 1e-8).
        weight_decay: L2 penalty (or decoupled decay rate), >= 0 (default 0).
        amsgrad: use AMSGrad (default False).
        foreach: ``True`` multi-tensor (``torch._foreach_*``), ``False`` single-tensor, ``None``
            torch's default (multi-tensor on CUDA, single-tensor on CPU) (default None).
        maximize: maximise instead of minimising (default False).
        capturable: must be False (CUDA-graph capture is not supported).
        differentiable: must be False (the step runs under ``torch.no_grad()``).
        fused: ``True`` uses ``torch._fused_adam_`` (CPU and CUDA, float16/bfloat16/float32/float64)
            (default None = not fused, as torch).
        decoupled_weight_decay: AdamW-style weight decay (default False).

    ``foreach`` ... ``decoupled_weight_decay`` are keyword-only in ``torch.optim.Adam``; here
    they are positional-or-keyword because TorchScript does not compile keyword-only arguments
    with defaults. Pass them by keyword.

    State per parameter (``get_state()``/``state_dict()``, as torch): ``'step'`` (0-dim float32,
    on the CPU, or on the parameter's device when fused), ``'exp_avg'``, ``'exp_avg_sq'`` and,
    with amsgrad, ``'max_exp_avg_sq'`` (each like the parameter).

    Raises:
        ValueError: invalid hyperparameters (torch's conditions and messages, e.g.
            ``"Invalid learning rate: -1.0"``), an empty, non-leaf, sparse, complex or repeated
            parameter, ``capturable``/``differentiable`` True.
        RuntimeError: ``fused`` with ``foreach`` or with a non-floating parameter.
        TypeError: (eagerly) a Tensor hyperparameter or a malformed ``params``.
    """

    def __init__(
        self,
        params: List[Tensor],
        lr: float = 1e-3,
        betas: Tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        foreach: Optional[bool] = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: Optional[bool] = None,
        decoupled_weight_decay: bool = False,
    ) -> None:
        hparams: Dict[str, float] = {
            "lr": lr, "beta1": betas[0], "beta2": betas[1], "eps": eps, "weight_decay": weight_decay,
        }
        options: Dict[str, Optional[bool]] = {
            "amsgrad": amsgrad, "maximize": maximize, "foreach": foreach, "capturable": capturable,
            "differentiable": differentiable, "fused": fused, "decoupled_weight_decay": decoupled_weight_decay,
        }
        self._s = self._new_state(params, hparams, options)
        self._init_groups()

    def _check(self, h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
        check_adam_hyperparameters(h, o)

    def _group_step(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
        adam_group_step(self._s, g, indices, grads)

    def _sparse_error(self, h: Dict[str, float], impl: str) -> Optional[str]:
        return "Adam does not support sparse gradients, please consider SparseAdam instead"
