r"""ASGD (averaged stochastic gradient descent): class and functional form, whose one body holds the
single-tensor and multi-tensor implementations (torch has no fused ASGD kernel; the default one
is this package's, ``torch.ops.gilfree_optim.asgd_``).

Algorithm: Polyak and Juditsky, "Acceleration of Stochastic Approximation by Averaging",
SIAM J. Control Optim. 30(4), 838-855 (1992), https://doi.org/10.1137/0330046. Reference
implementation: ``torch/optim/asgd.py`` (torch 2.13).
"""
from typing import Dict, List, Optional

import torch
from torch import Tensor

from . import _docs, _methods, _validation
from ._state import choose_impl, foreach_gradients, fused_step, no_fresh

__all__ = ["ASGD", "asgd"]


@_docs.fill
def asgd(
    params: List[Tensor], grads: List[Tensor], axs: List[Tensor], mus: List[Tensor], etas: List[Tensor],
    state_steps: List[Tensor], foreach: Optional[bool] = None, fused: Optional[bool] = None, *,
    lambd: float, lr: float, t0: float, alpha: float, weight_decay: float, maximize: bool,
) -> None:
    r"""Functional ASGD: update ``params`` and their state in place, one step.

    {_functional_intro_doc}

    Args:
        {_functional_args_doc}
        {_functional_fused_doc}
        axs: the averaged parameters, like ``params``.
        mus, etas: 0-dim tensors per parameter, the averaging weight and the step size of its
            next step (any floating dtype; on the parameter's device, on the CPU for ``fused``);
            rewritten from the new step count.
        lambd, lr, t0, alpha, weight_decay, maximize: as in :class:`ASGD`.

    {_functional_raises_doc}

    Algorithm: Polyak and Juditsky 1992; reference code ``torch/optim/asgd.py`` (torch 2.13).
    """
    impl = choose_impl(params, foreach, fused)
    if impl == "single":
        for i in range(len(params)):
            param = params[i]
            grad = grads[i] if not maximize else -grads[i]
            mu = mus[i]
            ax = axs[i]
            eta = etas[i]
            state_steps[i].add_(1)
            if weight_decay != 0:
                grad = grad.add(param, alpha=weight_decay)
            eta_value = float(eta.item())
            param.mul_(1 - lambd * eta_value)  # decay term
            param.add_(grad, alpha=-eta_value)
            # averaging (ax follows param while mu is 1), chosen without a branch on mu's value,
            # which torch.compile cannot take
            ax.copy_(torch.where(mu != 1, ax + param.sub(ax).mul_(mu), param))
            step_t = state_steps[i]
            if torch.compiler.is_compiling():  # no host read: the formula on a float64 tensor
                step = step_t.to(torch.float64)
                eta.copy_((torch.reciprocal(torch.pow(1 + lambd * lr * step, alpha)) * lr).to(step_t.dtype))
            else:  # torch's, in Python floats
                eta.copy_(torch.as_tensor(lr / ((1 + lambd * lr * float(step_t.item())) ** alpha)))
            mu.copy_(_next_mu(step_t, t0))
    elif len(params) > 0 and impl == "foreach":
        torch._foreach_add_(state_steps, 1.0)
        grads = foreach_gradients(params, grads, weight_decay, maximize)
        # param * (1 - lambd * eta) - eta * grad, as param - eta * (grad + lambd * param)
        intermediate = torch._foreach_add(grads, params, alpha=lambd)
        torch._foreach_addcmul_(params, intermediate, etas, value=-1)
        intermediate = torch._foreach_sub(params, axs)
        torch._foreach_addcmul_(axs, intermediate, mus)
        new_etas: List[Tensor] = []
        new_mus: List[Tensor] = []
        for step_t in state_steps:
            new_etas.append(torch.reciprocal(torch.pow(1 + lambd * lr * step_t, alpha)) * lr)
            new_mus.append(_next_mu(step_t, t0))
        torch._foreach_copy_(etas, new_etas)
        torch._foreach_copy_(mus, new_mus)
    elif len(params) > 0:
        fused_step(
            "asgd", params, grads, [state_steps, etas, mus, axs], no_fresh(len(params)),
            ["lr", "lambd", "alpha", "t0", "weight_decay", "maximize"],
            [lr, lambd, alpha, t0, weight_decay, 1.0 if maximize else 0.0],
        )


def _next_mu(step_t: Tensor, t0: float) -> Tensor:
    """The averaging weight after step ``step_t`` (a 0-dim tensor), ``1 / max(1, t - t0)``,
    computed in float64 on ``step_t``'s device as torch computes it in Python floats, then
    rounded to the step's dtype, the default dtype, as torch's ``torch.as_tensor`` of that
    float rounds it: the same value, without reading the step on the host (which
    torch.compile cannot trace)."""
    return torch.reciprocal(torch.clamp(step_t.to(torch.float64) - t0, min=1.0)).to(step_t.dtype)


@_docs.fill
@_methods.with_shared_methods
class ASGD:
    r"""Averaged stochastic gradient descent, as ``torch.optim.ASGD``, with gradients passed in;
    eager or TorchScript.

    .. math::
       \begin{aligned}
       &\textbf{input}: \gamma \text{ (lr)}, \theta_0, \lambda \text{ (lambd)}, \alpha \text{ (alpha)},
            t_0 \text{ (t0)}, \omega \text{ (weight decay)}\\
       &\textbf{initialize}: \eta_0 \leftarrow \gamma,\ \mu_0 \leftarrow 1,\ \bar\theta_0 \leftarrow 0
            \text{ (ax)}\\
       &\textbf{for}\ t = 1, 2, \ldots:\\
       &\quad g_t \leftarrow \pm\nabla_\theta f_t(\theta_{t-1});\quad
            \textbf{if}\ \omega \ne 0:\ g_t \leftarrow g_t + \omega\theta_{t-1}\\
       &\quad \theta_t \leftarrow (1 - \lambda\eta_{t-1})\theta_{t-1} - \eta_{t-1} g_t\\
       &\quad \bar\theta_t \leftarrow \bar\theta_{t-1} + \mu_{t-1}(\theta_t - \bar\theta_{t-1})
            \quad (\bar\theta_t \leftarrow \theta_t \text{ while } \mu_{t-1} = 1)\\
       &\quad \eta_t \leftarrow \gamma / (1 + \lambda\gamma t)^\alpha,\quad
            \mu_t \leftarrow 1 / \max(1, t - t_0)
       \end{aligned}

    The parameters follow SGD with a decaying step size; ``'ax'`` holds their running average
    from step ``t0`` on (before it, the latest parameters), the estimate whose convergence
    Polyak and Juditsky prove.

    Sources: Polyak and Juditsky, "Acceleration of Stochastic Approximation by Averaging",
    SIAM J. Control Optim. 30(4), 1992; reference code ``torch/optim/asgd.py`` (torch 2.13).

    Args:
        {_params_doc}
        lr: learning rate, the first step size, >= 0 (default 1e-2).
        lambd: decay term (default 1e-4).
        alpha: power of the step size's decay (default 0.75).
        t0: the step from which the average starts (default 1e6).
        weight_decay: L2 penalty, >= 0 (default 0).
        foreach: ``True`` multi-tensor (``torch._foreach_*``), ``False`` single-tensor, ``None``
            the default implementation (default None).
        maximize: maximise instead of minimising (default False).
        differentiable: must be False (the step runs under ``torch.no_grad()``).
        {_capturable_doc}
        fused: ``True`` this package's fused CPU kernel (``torch.ops.gilfree_optim.asgd_``: one
            pass over parameter, gradient and ``ax`` per step, float32, float64, bfloat16 or
            float16 parameters, the last two with float32 math), ``False`` never, ``None``
            (default) with ``foreach`` None: fused for dense floating-point CPU parameters,
            else torch's choice. Results equal the single-tensor step's up to rounding.

    The argument order is torch's; ``fused`` (last) is not an argument of torch's class.

    State per parameter, as torch keeps it: ``'step'``, ``'eta'``, ``'mu'`` (0-dim, float32, or
    float64 when that is the default dtype, on the parameter's device) and ``'ax'`` (like the
    parameter).

    {_tensor_doc}

    {_raises_doc}
    """

    def __init__(
        self, params: List[Tensor], lr: float = 1e-2, lambd: float = 1e-4, alpha: float = 0.75, t0: float = 1e6,
        weight_decay: float = 0.0, foreach: Optional[bool] = None, maximize: bool = False,
        differentiable: bool = False, capturable: bool = False, fused: Optional[bool] = None,
    ) -> None:
        hparams: Dict[str, float] = {"lr": lr, "lambd": lambd, "alpha": alpha, "t0": t0, "weight_decay": weight_decay}
        options: Dict[str, Optional[bool]] = {
            "foreach": foreach, "maximize": maximize, "differentiable": differentiable, "capturable": capturable,
            "fused": fused,
        }
        self._s = self._new_state(params, hparams, options, "asgd")
        self._init_groups()

    def _check(self, h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
        _validation.check_values(h, ["lr", "weight_decay"])

    def _group_step(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
        s = self._s
        h = s.hparams[g]
        lists = s.prepare_state(g, indices, grads)  # keys, initial values: csrc/steps/asgd.cpp
        asgd(
            lists["param"], grads, lists["ax"], lists["mu"], lists["eta"], lists["step"], s.impl[g] == "foreach", False,
            lambd=h["lambd"], lr=h["lr"], t0=h["t0"], alpha=h["alpha"], weight_decay=h["weight_decay"],
            maximize=s.flag(g, "maximize"),
        )

    def _sparse_error(self, h: Dict[str, float], impl: str) -> Optional[str]:
        return "ASGD does not support sparse gradients"
