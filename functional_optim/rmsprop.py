r"""RMSprop: class and functional form, whose one body holds the single-tensor and multi-tensor
implementations (torch has no fused RMSprop kernel).

Algorithm: Hinton, "Neural Networks for Machine Learning", lecture 6e (2012); centered variant
from Graves, "Generating Sequences With Recurrent Neural Networks" (2013),
https://arxiv.org/abs/1308.0850. Reference implementation: ``torch/optim/rmsprop.py`` (torch 2.13).
"""
from typing import Dict, List, Optional

import torch
from torch import Tensor

from . import _docs, _methods, _validation
from ._state import choose_impl, foreach_gradients, fused_step, no_fresh

__all__ = ["RMSprop", "rmsprop"]


@_docs.fill
def rmsprop(
    params: List[Tensor], grads: List[Tensor], square_avgs: List[Tensor], grad_avgs: List[Tensor],
    momentum_buffer_list: List[Tensor], state_steps: List[Tensor], foreach: Optional[bool] = None,
    fused: Optional[bool] = None, *,
    lr: float, alpha: float, eps: float, weight_decay: float, momentum: float, centered: bool, maximize: bool,
) -> None:
    r"""Functional RMSprop: update ``params`` and their state in place, one step.

    {_functional_intro_doc}

    Args:
        {_functional_args_doc}
        {_functional_fused_doc}
        square_avgs: running averages of squared gradients, like ``params``.
        grad_avgs: running averages of gradients when ``centered`` (else empty).
        momentum_buffer_list: buffers when ``momentum > 0`` (else empty).
        lr, alpha, eps, weight_decay, momentum, centered, maximize: as in :class:`RMSprop`.

    {_functional_raises_doc}

    Algorithm: Hinton, lecture 6e (2012); centered: Graves 2013; reference code
    ``torch/optim/rmsprop.py`` (torch 2.13).
    """
    impl = choose_impl(params, foreach, fused)
    if impl == "single":
        for i in range(len(params)):
            param = params[i]
            grad = grads[i] if not maximize else -grads[i]
            square_avg = square_avgs[i]
            state_steps[i].add_(1)
            if weight_decay != 0:
                grad = grad.add(param, alpha=weight_decay)
            square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
            if centered:
                grad_avg = grad_avgs[i]
                grad_avg.lerp_(grad, 1 - alpha)
                avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()
            else:
                avg = square_avg.sqrt()
            avg = avg.add_(eps)
            if momentum > 0:
                buf = momentum_buffer_list[i]
                buf.mul_(momentum).addcdiv_(grad, avg)
                param.add_(buf, alpha=-lr)
            else:
                param.addcdiv_(grad, avg, value=-lr)
    elif len(params) > 0 and impl == "foreach":
        torch._foreach_add_(state_steps, 1.0)
        grads = foreach_gradients(params, grads, weight_decay, maximize)
        torch._foreach_mul_(square_avgs, alpha)
        torch._foreach_addcmul_(square_avgs, grads, grads, value=1 - alpha)
        if centered:
            torch._foreach_lerp_(grad_avgs, grads, 1 - alpha)
            avg = torch._foreach_addcmul(square_avgs, grad_avgs, grad_avgs, value=-1)
            torch._foreach_sqrt_(avg)
        else:
            avg = torch._foreach_sqrt(square_avgs)
        torch._foreach_add_(avg, eps)
        if momentum > 0:
            torch._foreach_mul_(momentum_buffer_list, momentum)
            torch._foreach_addcdiv_(momentum_buffer_list, grads, avg)
            torch._foreach_add_(params, momentum_buffer_list, alpha=-lr)
        else:
            torch._foreach_addcdiv_(params, grads, avg, value=-lr)
    elif len(params) > 0:
        columns = [state_steps, square_avgs]
        if momentum > 0:
            columns.append(momentum_buffer_list)
        if centered:
            columns.append(grad_avgs)
        fused_step(
            "rmsprop", params, grads, columns, no_fresh(len(params)),
            ["lr", "alpha", "eps", "weight_decay", "momentum", "centered", "maximize"],
            [lr, alpha, eps, weight_decay, momentum, 1.0 if centered else 0.0, 1.0 if maximize else 0.0],
        )


@_docs.fill
@_methods.with_shared_methods
class RMSprop:
    r"""RMSprop, as ``torch.optim.RMSprop``, with gradients passed in; eager or TorchScript.

    .. math::
       \begin{aligned}
       &\textbf{input}: \alpha \text{ (alpha)}, \gamma \text{ (lr)}, \theta_0, \lambda \text{ (weight decay)},
            \mu \text{ (momentum)}, \textit{centered}, \epsilon\\
       &\textbf{initialize}: v_0 \leftarrow 0,\ b_0 \leftarrow 0,\ g^{ave}_0 \leftarrow 0\\
       &\textbf{for}\ t = 1, 2, \ldots:\\
       &\quad g_t \leftarrow \pm\nabla_\theta f_t(\theta_{t-1});\quad
            \textbf{if}\ \lambda \ne 0:\ g_t \leftarrow g_t + \lambda\theta_{t-1}\\
       &\quad v_t \leftarrow \alpha v_{t-1} + (1-\alpha) g_t^2;\quad \tilde v_t \leftarrow v_t\\
       &\quad \textbf{if centered}:\ g^{ave}_t \leftarrow \alpha g^{ave}_{t-1} + (1-\alpha) g_t,\quad
            \tilde v_t \leftarrow \tilde v_t - (g^{ave}_t)^2\\
       &\quad \textbf{if}\ \mu > 0:\ b_t \leftarrow \mu b_{t-1} + g_t/(\sqrt{\tilde v_t} + \epsilon),\quad
            \theta_t \leftarrow \theta_{t-1} - \gamma b_t\\
       &\quad \textbf{else}\ \theta_t \leftarrow \theta_{t-1} - \gamma g_t/(\sqrt{\tilde v_t} + \epsilon)
       \end{aligned}

    Sources: Hinton, lecture 6e (2012); Graves 2013 (centered); reference code
    ``torch/optim/rmsprop.py``.

    Args:
        {_params_doc}
        lr: learning rate, >= 0 (default 1e-2).
        alpha: smoothing constant, >= 0 (default 0.99).
        eps: denominator term, >= 0 (default 1e-8).
        weight_decay: L2 penalty, >= 0 (default 0).
        momentum: momentum factor, >= 0 (default 0).
        centered: normalise by the estimated variance (default False).
        {_common_args_doc}
        {_capturable_doc}

    The argument order is torch's (all positional-or-keyword there too).

    State per parameter: ``'step'`` (0-dim float32 on the CPU), ``'square_avg'``, and
    ``'momentum_buffer'`` when momentum > 0, ``'grad_avg'`` when centered (like the parameter).

    {_tensor_doc}

    {_raises_doc}
    """

    def __init__(
        self, params: List[Tensor], lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
        weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False, capturable: bool = False,
        foreach: Optional[bool] = None, maximize: bool = False, differentiable: bool = False, fused: Optional[bool] = None,
    ) -> None:
        hparams: Dict[str, float] = {
            "lr": lr, "momentum": momentum, "alpha": alpha, "eps": eps, "weight_decay": weight_decay,
        }
        options: Dict[str, Optional[bool]] = {
            "centered": centered, "capturable": capturable, "foreach": foreach,
            "maximize": maximize, "differentiable": differentiable,
            "fused": fused,
        }
        self._s = self._new_state(params, hparams, options, "rmsprop")
        self._init_groups()

    def _check(self, h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
        _validation.check_values(h, ["lr", "eps", "momentum", "weight_decay", "alpha"])

    def _group_step(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
        h = self._s.hparams[g]
        momentum = h["momentum"]
        centered = self._s.flag(g, "centered")
        lists = self._s.prepare_state(g, indices, grads)  # keys, initial values: csrc/steps/rmsprop.cpp
        empty: List[Tensor] = []
        rmsprop(
            lists["param"], grads, lists["square_avg"], lists["grad_avg"] if centered else empty,
            lists["momentum_buffer"] if momentum > 0 else empty, lists["step"], self._s.impl[g] == "foreach", False,
            lr=h["lr"], alpha=h["alpha"], eps=h["eps"], weight_decay=h["weight_decay"], momentum=momentum,
            centered=centered, maximize=self._s.flag(g, "maximize"),
        )

    def _sparse_error(self, h: Dict[str, float], impl: str) -> Optional[str]:
        return "RMSprop does not support sparse gradients"
