r"""Adafactor: class and functional form, whose one body holds the single-tensor and multi-tensor
implementations; the default one is the op library's group step (``csrc/steps/adafactor.cpp``:
torch's single-tensor step, its ATen ops in its order, in C++).

Algorithm: Shazeer and Stern, "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost",
ICML 2018, https://arxiv.org/abs/1804.04235, as torch changes it (see :class:`Adafactor`).
Reference implementation: ``torch/optim/_adafactor.py`` (torch 2.13).
"""
import math
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import _docs, _methods, ops
from ._state import choose_impl, empty_names, empty_tensors, no_fresh, scalar_list, split_by_device_dtype, take

__all__ = ["Adafactor", "adafactor"]


def _machine_epsilon(dtype: torch.dtype) -> float:
    """``torch.finfo(dtype).eps`` (TorchScript)."""
    if dtype == torch.float64:
        return 2.220446049250313e-16
    if dtype == torch.bfloat16:
        return 0.0078125
    if dtype == torch.float16:
        return 0.0009765625
    return 1.1920928955078125e-07


@_docs.fill
def adafactor(
    params: List[Tensor], grads: List[Tensor], row_vars: List[Optional[Tensor]], col_vars: List[Optional[Tensor]],
    variances: List[Optional[Tensor]], state_steps: List[Tensor], foreach: Optional[bool] = None,
    fused: Optional[bool] = None, *,
    d: float, lr: float, beta2_decay: float, weight_decay: float, eps1: Optional[float], eps2: float, maximize: bool,
) -> None:
    r"""Functional Adafactor: update ``params`` and their state in place, one step.

    {_functional_intro_doc}

    Args:
        params: parameters, any shapes, floating dtypes, CPU or CUDA.
        grads: one dense gradient per parameter, same shape, dtype and device.
        row_vars, col_vars: per parameter of two or more dimensions, the running means of the
            squared gradient over its last dimension (shape ``p.shape[:-1] + (1,)``) and over the
            one before (``p.shape[:-2] + (1,) + p.shape[-1:]``), of its dtype; ``None`` for the others.
        variances: per parameter of fewer dimensions, the running mean of the squared gradient
            (like the parameter); ``None`` for the others.
        state_steps: 0-dim step counters (float32 on the CPU), incremented by one here.
        foreach: ``True`` multi-tensor (torch's ``_multi_tensor_adafactor``: the parameters
            grouped by device, dtype and factoring), else single-tensor (torch's default for
            Adafactor, which is never multi-tensor unless asked).
        fused: ``True``: the op library's group step (``torch.ops.gilfree_optim.group_step``:
            the single-tensor step in C++, to the bit), which needs every state tensor present.
        d, lr, beta2_decay, weight_decay, maximize: as in :class:`Adafactor`.
        eps1, eps2: ``eps`` of :class:`Adafactor`; ``eps1`` None: ``torch.finfo`` of the first
            parameter's dtype.

    {_functional_raises_doc}

    Algorithm: Shazeer and Stern 2018 (https://arxiv.org/abs/1804.04235); reference code
    ``torch/optim/_adafactor.py`` (torch 2.13).
    """
    impl = choose_impl(params, foreach, fused)
    if len(params) > 0 and impl == "fused":
        state: List[Tensor] = []
        for i in range(len(params)):
            state.append(state_steps[i])
            row_var = row_vars[i]
            col_var = col_vars[i]
            variance = variances[i]
            if row_var is not None and col_var is not None:
                state.append(row_var)
                state.append(col_var)
            elif variance is not None:
                state.append(variance)
        ops.group_step(
            "adafactor", params, grads, state, no_fresh(len(params)),
            ["lr", "beta2_decay", "eps1", "eps2", "d", "weight_decay", "maximize"],
            [lr, beta2_decay, -math.inf if eps1 is None else eps1, eps2, d, weight_decay, 1.0 if maximize else 0.0],
            empty_names(), empty_tensors(),
        )
        return
    # torch.compile traces the multi-tensor form for both (the single-tensor one moves its
    # moments by a Python float read from the step, a weight whose sign Inductor's lerp tests)
    if ((foreach is not None and foreach) or torch.compiler.is_compiling()) and len(params) > 0:
        _multi_tensor(params, grads, row_vars, col_vars, variances, state_steps, d, lr, beta2_decay, weight_decay,
                      eps1, eps2, maximize)
        return
    eps = 0.0 if eps1 is None else eps1
    for i in range(len(params)):
        param = params[i]
        grad = grads[i] if not maximize else -grads[i]
        step_t = state_steps[i]
        if i == 0 and eps1 is None:
            eps = _machine_epsilon(param.dtype)  # kept for the next parameters, as torch
        step_t.add_(1)
        step = float(step_t.item())
        one_minus_beta2_t = step**beta2_decay
        rho_t = min(lr, 1 / (step**0.5))
        alpha = max(eps2, float(torch.linalg.vector_norm(param).item()) / (param.numel() ** 0.5)) * rho_t
        if weight_decay != 0:
            param.mul_(1 - lr * weight_decay)
        row_var = row_vars[i]
        col_var = col_vars[i]
        variance = variances[i]
        if grad.dim() > 1:
            assert row_var is not None and col_var is not None
            # (g * g).mean over a dimension, without the intermediate of g's size
            row_mean = torch.linalg.vector_norm(grad, dim=[-1], keepdim=True).square_().div_(grad.size(-1))
            row_var.lerp_(row_mean, one_minus_beta2_t)
            col_mean = torch.linalg.vector_norm(grad, dim=[-2], keepdim=True).square_().div_(grad.size(-2))
            col_var.lerp_(col_mean, one_minus_beta2_t)
            var_estimate = row_var @ col_var
            var_estimate.div_(row_var.mean(dim=-2, keepdim=True).clamp_(min=eps))
        else:
            assert variance is not None
            variance.lerp_(grad * grad, one_minus_beta2_t)
            var_estimate = variance.clone()
        # eps1 squared: the square root follows
        update = var_estimate.clamp_(min=eps * eps).rsqrt_()
        update.mul_(grad)
        denom = max(1.0, float(torch.linalg.vector_norm(update).item()) / ((update.numel() ** 0.5) * d))
        param.add_(update, alpha=-alpha / denom)


def _multi_tensor(
    params: List[Tensor], grads: List[Tensor], row_vars: List[Optional[Tensor]], col_vars: List[Optional[Tensor]],
    variances: List[Optional[Tensor]], state_steps: List[Tensor], d: float, lr: float, beta2_decay: float,
    weight_decay: float, eps1: Optional[float], eps2: float, maximize: bool,
) -> None:
    """torch's ``_multi_tensor_adafactor``: per (device, dtype), the factored parameters (two or
    more dimensions) and the others in turn, each with ``torch._foreach_*`` ops."""
    eps = 0.0 if eps1 is None else eps1
    first = True
    for device_part in split_by_device_dtype(params):
        for factored in [True, False]:
            part: List[int] = []
            for k in device_part:
                if (grads[k].dim() > 1) == factored:
                    part.append(k)
            if len(part) == 0:
                continue
            p = take(params, part)
            g = take(grads, part)
            steps = take(state_steps, part)
            if first and eps1 is None:
                eps = _machine_epsilon(p[0].dtype)  # kept for the next parts, as torch
            first = False
            if maximize:
                g = torch._foreach_neg(g)
            torch._foreach_add_(steps, 1.0)
            one_minus_beta2_ts: List[float] = []
            alphas: List[float] = []
            for k in range(len(p)):
                step = float(steps[k].item())
                one_minus_beta2_ts.append(step**beta2_decay)
                rho_t = min(lr, 1 / (step**0.5))
                alphas.append(max(eps2, float(torch.linalg.vector_norm(p[k]).item()) / (p[k].numel() ** 0.5)) * rho_t)
            if weight_decay != 0:
                torch._foreach_mul_(p, 1 - lr * weight_decay)
            var_estimates: List[Tensor] = []
            if factored:
                rows: List[Tensor] = []
                cols: List[Tensor] = []
                for k in part:
                    row = row_vars[k]
                    col = col_vars[k]
                    assert row is not None and col is not None
                    rows.append(row)
                    cols.append(col)
                row_means: List[Tensor] = []
                col_means: List[Tensor] = []
                last: List[float] = []
                second: List[float] = []
                for grad in g:
                    row_means.append(torch.linalg.vector_norm(grad, dim=[-1], keepdim=True))
                    col_means.append(torch.linalg.vector_norm(grad, dim=[-2], keepdim=True))
                    last.append(float(grad.size(-1)))
                    second.append(float(grad.size(-2)))
                torch._foreach_mul_(row_means, row_means)
                torch._foreach_div_(row_means, scalar_list(last))
                torch._foreach_lerp_(rows, row_means, scalar_list(one_minus_beta2_ts))
                torch._foreach_mul_(col_means, col_means)
                torch._foreach_div_(col_means, scalar_list(second))
                torch._foreach_lerp_(cols, col_means, scalar_list(one_minus_beta2_ts))
                row_var_means: List[Tensor] = []
                for k in range(len(rows)):
                    var_estimates.append(rows[k] @ cols[k])
                    row_var_means.append(rows[k].mean(dim=-2, keepdim=True))
                torch._foreach_clamp_min_(row_var_means, eps)
                torch._foreach_div_(var_estimates, row_var_means)
            else:
                variance_list: List[Tensor] = []
                for k in part:
                    v = variances[k]
                    assert v is not None
                    variance_list.append(v)
                grads_squared = torch._foreach_mul(g, g)
                torch._foreach_lerp_(variance_list, grads_squared, scalar_list(one_minus_beta2_ts))
                for v in variance_list:
                    var_estimates.append(v.clone())
            torch._foreach_clamp_min_(var_estimates, eps * eps)
            torch._foreach_rsqrt_(var_estimates)
            torch._foreach_mul_(var_estimates, g)
            scales: List[float] = []
            for k in range(len(var_estimates)):
                update = var_estimates[k]
                scales.append(
                    -alphas[k] / max(1.0, float(torch.linalg.vector_norm(update).item()) / ((update.numel() ** 0.5) * d))
                )
            torch._foreach_mul_(var_estimates, scalar_list(scales))
            torch._foreach_add_(p, var_estimates)


@_docs.fill
@_methods.with_shared_methods
class Adafactor:
    r"""Adafactor, as ``torch.optim.Adafactor``, with gradients passed in; eager or TorchScript.

    .. math::
       \begin{aligned}
       &\textbf{input}: \gamma \text{ (lr)}, \tau \text{ (beta2\_decay)}, \theta_0,
            \epsilon_1, \epsilon_2 \text{ (eps)}, d \text{ (clipping threshold)}, \lambda \text{ (weight decay)}\\
       &\textbf{initialize}: R_0 \leftarrow 0,\ C_0 \leftarrow 0 \text{ (factors)},\
            \widehat V_0 \leftarrow 0 \text{ (second moment of a vector)}\\
       &\textbf{for}\ t = 1, 2, \ldots:\\
       &\quad G_t \leftarrow \pm\nabla_\theta f_t(\theta_{t-1});\quad
            \widehat\beta_{2,t} \leftarrow 1 - t^{\tau};\quad \rho_t \leftarrow \min(\gamma, 1/\sqrt t)\\
       &\quad \alpha_t \leftarrow \max(\epsilon_2, \mathrm{RMS}(\theta_{t-1}))\,\rho_t;\quad
            \theta_t \leftarrow \theta_{t-1} - \gamma\lambda\theta_{t-1}\\
       &\quad \textbf{if}\ \dim G_t > 1:\ R_t \leftarrow \widehat\beta_{2,t} R_{t-1}
            + (1 - \widehat\beta_{2,t})\,\mathrm{mean}_{-1}(G_t^2),\quad
            C_t \leftarrow \widehat\beta_{2,t} C_{t-1} + (1 - \widehat\beta_{2,t})\,\mathrm{mean}_{-2}(G_t^2),\\
       &\quad\qquad \widehat V_t \leftarrow R_t C_t / \max(\mathrm{mean}_{-2}(R_t), \epsilon_1)\\
       &\quad \textbf{else}:\ \widehat V_t \leftarrow \widehat\beta_{2,t}\widehat V_{t-1}
            + (1 - \widehat\beta_{2,t}) G_t^2\\
       &\quad U_t \leftarrow G_t / \max(\sqrt{\widehat V_t}, \epsilon_1);\quad
            \widehat U_t \leftarrow U_t / \max(1, \mathrm{RMS}(U_t) / d);\quad
            \theta_t \leftarrow \theta_t - \alpha_t \widehat U_t
       \end{aligned}

    A parameter of two or more dimensions keeps only its row and column factors over its last
    two dimensions (memory of one row and one column per matrix); one of fewer a full second
    moment. As torch (and unlike the paper), ``lr`` caps the relative step size and scales the
    decoupled weight decay, ``eps1`` applies to the variance estimate and the update, and the
    factors are means (not sums) of squared gradients.

    Sources: Shazeer and Stern, "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost",
    ICML 2018 (https://arxiv.org/abs/1804.04235); reference code ``torch/optim/_adafactor.py``
    (torch 2.13).

    Args:
        {_params_doc}
        lr: maximum relative step size and weight-decay coefficient, >= 0 (default 1e-2).
        beta2_decay: decay rate of beta2, <= 0 (default -0.8).
        eps: ``(eps1, eps2)`` (default ``(None, 1e-3)``): eps1 >= 0 stabilises the
            denominators (None: ``torch.finfo`` of the first stepped parameter's dtype, kept
            for the rest of that group's step, as torch); eps2 >= 0 is the least parameter
            scale. Held as ``eps1``, ``eps2`` by :meth:`hyperparameters` (None as -inf).
        d: clipping threshold of the update's RMS, >= 1 (default 1.0).
        weight_decay: decoupled weight-decay coefficient, >= 0 (default 0).
        foreach: ``True`` multi-tensor (``torch._foreach_*``); ``False`` or ``None``
            single-tensor, as torch (which defaults to single-tensor for Adafactor, even on
            CUDA), unless ``fused`` says otherwise (default None).
        maximize: maximise instead of minimising (default False).
        fused: ``True`` the op library's group step (``torch.ops.gilfree_optim.group_step``:
            torch's single-tensor step in C++, the same results to the bit; CPU and CUDA,
            float32, float64, bfloat16, float16), ``False`` never, ``None`` (default) with
            ``foreach`` None: the group step when every parameter is a dense floating-point
            tensor on a device it takes, else torch's choice.

    ``foreach``, ``maximize`` (keyword-only in torch) and ``fused``
    {_keyword_only_doc}
    ``fused`` (last) is not an argument of torch's class.

    State per parameter, as torch keeps it: ``'step'`` (0-dim float32 on the CPU), then for a
    parameter of two or more dimensions ``'row_var'`` (shape ``p.shape[:-1] + (1,)``) and
    ``'col_var'`` (shape ``p.shape[:-2] + (1,) + p.shape[-1:]``), else ``'variance'`` (like
    the parameter); of the parameter's dtype and device.

    {_tensor_doc}

    Raises:
        ValueError: invalid hyperparameters (torch's conditions and messages:
            ``"Learning rate should be >= 0 but is: -1.0"``, ``"beta2_decay should be <= 0 but
            is: ..."``, ``"epsilon1 should be >= 0 but is: ..."``, ``"epsilon2 ..."``,
            ``"Clipping threshold d should be >= 1 but is: ..."``, ``"weight_decay should be >= 0
            but is: ..."``), an empty, non-leaf, sparse, complex or repeated parameter.
        RuntimeError: ``fused`` with ``foreach`` or with a parameter it cannot step; at
            ``step``, a sparse gradient (``"Adafactor does not support sparse gradients"``),
            before any change.
        TypeError: (eagerly) a hyperparameter of the wrong type, or a malformed ``params``.
    """

    def __init__(
        self, params: List[Tensor], lr: float = 1e-2, beta2_decay: float = -0.8,
        eps: Tuple[Optional[float], float] = (None, 1e-3), d: float = 1.0, weight_decay: float = 0.0,
        foreach: Optional[bool] = None, maximize: bool = False, fused: Optional[bool] = None,
    ) -> None:
        eps1 = eps[0]
        if eps1 is not None and not 0.0 <= eps1:  # -inf included: it stands for None below
            raise ValueError("epsilon1 should be >= 0 but is: " + str(eps1))
        hparams: Dict[str, float] = {
            "lr": lr, "beta2_decay": beta2_decay, "eps1": -math.inf if eps1 is None else eps1, "eps2": eps[1],
            "d": d, "weight_decay": weight_decay,
        }
        options: Dict[str, Optional[bool]] = {"foreach": foreach, "maximize": maximize, "fused": fused}
        self._s = self._new_state(params, hparams, options, "adafactor")
        self._init_groups()

    def _check(self, h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
        if not 0.0 <= h["lr"]:
            raise ValueError("Learning rate should be >= 0 but is: " + str(h["lr"]))
        if not 0.0 >= h["beta2_decay"]:
            raise ValueError("beta2_decay should be <= 0 but is: " + str(h["beta2_decay"]))
        if h["eps1"] != -math.inf and not 0.0 <= h["eps1"]:
            raise ValueError("epsilon1 should be >= 0 but is: " + str(h["eps1"]))
        if not 0.0 <= h["eps2"]:
            raise ValueError("epsilon2 should be >= 0 but is: " + str(h["eps2"]))
        if not 1.0 <= h["d"]:
            raise ValueError("Clipping threshold d should be >= 1 but is: " + str(h["d"]))
        if not 0.0 <= h["weight_decay"]:
            raise ValueError("weight_decay should be >= 0 but is: " + str(h["weight_decay"]))

    def _group_step(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
        s = self._s
        # keys (by the parameter's number of dimensions), initial values: csrc/steps/adafactor.cpp
        s.make_state(g, indices, grads)
        row_vars: List[Optional[Tensor]] = []
        col_vars: List[Optional[Tensor]] = []
        variances: List[Optional[Tensor]] = []
        steps: List[Tensor] = []
        for i in indices:
            state = s.state[i]
            steps.append(state["step"])
            row_vars.append(state.get("row_var"))
            col_vars.append(state.get("col_var"))
            variances.append(state.get("variance"))
        h = s.hparams[g]
        eps1: Optional[float] = None if h["eps1"] == -math.inf else h["eps1"]
        adafactor(
            s.params_of(g, indices), grads, row_vars, col_vars, variances, steps, s.flag(g, "foreach"), False,
            d=h["d"], lr=h["lr"], beta2_decay=h["beta2_decay"], weight_decay=h["weight_decay"], eps1=eps1,
            eps2=h["eps2"], maximize=s.flag(g, "maximize"),
        )

    def _sparse_error(self, h: Dict[str, float], impl: str) -> Optional[str]:
        return "Adafactor does not support sparse gradients"
