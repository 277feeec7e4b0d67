r"""Rprop: class and functional form, whose one body holds the single-tensor and multi-tensor
implementations (torch has no fused Rprop kernel).

Algorithm: Riedmiller & Braun, "A Direct Adaptive Method for Faster Backpropagation Learning:
The RPROP Algorithm", IEEE ICNN 1993. Reference implementation: ``torch/optim/rprop.py``
(torch 2.13).
"""
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import _docs, _methods, _validation
from ._state import choose_impl, fused_step, no_fresh

__all__ = ["Rprop", "rprop"]


@_docs.fill
def rprop(
    params: List[Tensor], grads: List[Tensor], prevs: List[Tensor], step_sizes: List[Tensor],
    state_steps: List[Tensor], foreach: Optional[bool] = None,
    fused: Optional[bool] = None, *,
    step_size_min: float, step_size_max: float, etaminus: float, etaplus: float, maximize: bool,
) -> None:
    r"""Functional Rprop: update ``params`` and their state in place, one step.

    {_functional_intro_doc}

    Args:
        {_functional_args_doc}
        {_functional_fused_doc}
        prevs: the previous step's (masked) gradients; step_sizes: per-element step sizes in
            parameter units (both like ``params``).
        step_size_min, step_size_max, etaminus, etaplus, maximize: as in :class:`Rprop`.

    {_functional_raises_doc}

    Algorithm: Riedmiller & Braun, IEEE ICNN 1993; reference code ``torch/optim/rprop.py``
    (torch 2.13).
    """
    impl = choose_impl(params, foreach, fused)
    if impl == "single":
        for i in range(len(params)):
            param = params[i]
            grad = grads[i] if not maximize else -grads[i]
            prev = prevs[i]
            step_size = step_sizes[i]
            state_steps[i].add_(1)
            sign = grad.mul(prev).sign()
            sign.masked_fill_(sign.gt(0), etaplus)
            sign.masked_fill_(sign.lt(0), etaminus)
            sign.masked_fill_(sign.eq(0), 1)
            step_size.mul_(sign).clamp_(step_size_min, step_size_max)
            # for dir < 0, dfdx = 0; for dir >= 0, dfdx = dfdx
            grad = grad.clone(memory_format=torch.preserve_format)
            grad.masked_fill_(sign.eq(etaminus), 0)
            param.addcmul_(grad.sign(), step_size, value=-1)
            prev.copy_(grad)
    elif len(params) > 0 and impl == "foreach":
        torch._foreach_add_(state_steps, 1.0)
        signs = torch._foreach_mul(grads, prevs)
        if maximize:
            torch._foreach_neg_(signs)
        # prevs ends up holding this step's (masked) gradients, so use its memory for them.
        torch._foreach_copy_(prevs, grads)
        if maximize:
            torch._foreach_neg_(prevs)
        torch._foreach_sign_(signs)
        for sign in signs:
            sign.masked_fill_(sign.gt(0), etaplus)
            sign.masked_fill_(sign.lt(0), etaminus)
            sign.masked_fill_(sign.eq(0), 1)
        torch._foreach_mul_(step_sizes, signs)
        for step_size in step_sizes:
            step_size.clamp_(step_size_min, step_size_max)
        for i in range(len(prevs)):
            prevs[i].masked_fill_(signs[i].eq(etaminus), 0)
        grad_signs: List[Tensor] = []
        for grad in prevs:
            grad_signs.append(grad.sign())
        torch._foreach_addcmul_(params, grad_signs, step_sizes, value=-1)
    elif len(params) > 0:
        fused_step(
            "rprop", params, grads, [state_steps, prevs, step_sizes], no_fresh(len(params)),
            ["step_size_min", "step_size_max", "etaminus", "etaplus", "maximize"],
            [step_size_min, step_size_max, etaminus, etaplus, 1.0 if maximize else 0.0],
        )


@_docs.fill
@_methods.with_shared_methods
class Rprop:
    r"""Rprop (resilient backpropagation), as ``torch.optim.Rprop``; eager or TorchScript.

    .. math::
       \begin{aligned}
       &\textbf{input}: \theta_0, \eta_0 \text{ (lr)}, \eta_{+}, \eta_{-} \text{ (etas)},
            \Gamma_{max}, \Gamma_{min} \text{ (step sizes)}\\
       &\textbf{initialize}: g^0_{prev} \leftarrow 0,\ \eta_0 \leftarrow \text{lr}\\
       &\textbf{for}\ t = 1, 2, \ldots:\\
       &\quad g_t \leftarrow \pm\nabla_\theta f_t(\theta_{t-1})\\
       &\quad \textbf{for each element } i:\ \eta^i_t \leftarrow
            \min(\eta^i_{t-1}\eta_{+}, \Gamma_{max})\ \text{if}\ g^i_t g^i_{t-1} > 0;\
            \max(\eta^i_{t-1}\eta_{-}, \Gamma_{min}),\ g^i_t \leftarrow 0\ \text{if}\ < 0;\
            \eta^i_{t-1}\ \text{otherwise}\\
       &\quad \theta_t \leftarrow \theta_{t-1} - \eta_t\, \mathrm{sign}(g_t),\quad g_{prev} \leftarrow g_t
       \end{aligned}

    Sources: Riedmiller & Braun, IEEE ICNN 1993; reference code ``torch/optim/rprop.py``.

    Args:
        {_params_doc}
        lr: initial step size in parameter units, >= 0 (default 1e-2); only read when a
            parameter's state is created, as in torch.
        etas: (etaminus, etaplus) with 0 < etaminus < 1 < etaplus (default (0.5, 1.2)).
        step_sizes: (min, max) allowed step sizes (default (1e-6, 50)).
        {_common_args_doc}
        {_capturable_doc}

    ``capturable`` ... ``differentiable``
    {_keyword_only_doc}
    {_fused_extra_doc}

    State per parameter: ``'step'`` (0-dim float32 on the CPU), ``'prev'``, ``'step_size'``
    (like the parameter).

    {_tensor_doc}

    {_raises_doc}
    """

    def __init__(
        self, params: List[Tensor], lr: float = 1e-2, etas: Tuple[float, float] = (0.5, 1.2),
        step_sizes: Tuple[float, float] = (1e-6, 50.0), capturable: bool = False,
        foreach: Optional[bool] = None, maximize: bool = False, differentiable: bool = False, fused: Optional[bool] = None,
    ) -> None:
        hparams: Dict[str, float] = {
            "lr": lr, "etaminus": etas[0], "etaplus": etas[1],
            "step_size_min": step_sizes[0], "step_size_max": step_sizes[1],
        }
        options: Dict[str, Optional[bool]] = {
            "foreach": foreach, "maximize": maximize, "differentiable": differentiable, "capturable": capturable,
            "fused": fused,
        }
        self._s = self._new_state(params, hparams, options, "rprop")
        self._init_groups()

    def _check(self, h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
        _validation.check_values(h, ["lr", "etas"])

    def _group_step(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
        s = self._s
        h = s.hparams[g]
        lists = s.prepare_state(g, indices, grads)  # keys, initial values: csrc/steps/rprop.cpp
        rprop(
            lists["param"], grads, lists["prev"], lists["step_size"], lists["step"], s.impl[g] == "foreach", False,
            step_size_min=h["step_size_min"], step_size_max=h["step_size_max"], etaminus=h["etaminus"],
            etaplus=h["etaplus"], maximize=s.flag(g, "maximize"),
        )

    def _sparse_error(self, h: Dict[str, float], impl: str) -> Optional[str]:
        return "Rprop does not support sparse gradients"
