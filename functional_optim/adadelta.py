r"""Adadelta: class, functional form and its single-tensor and multi-tensor implementations
(torch has no fused Adadelta kernel).

Algorithm: Zeiler, "ADADELTA: An Adaptive Learning Rate Method" (2012),
https://arxiv.org/abs/1212.5701. Reference implementation: ``torch/optim/adadelta.py`` (torch 2.13).
"""
from typing import Dict, List, Optional

import torch
from torch import Tensor

from . import _methods, _validation
from ._state import GroupedState, choose_impl, commit_group, flag, new_step

__all__ = ["Adadelta", "adadelta"]


def _single_tensor_adadelta(
    params: List[Tensor],
    grads: List[Tensor],
    square_avgs: List[Tensor],
    acc_deltas: List[Tensor],
    state_steps: List[Tensor],
    *,
    lr: float,
    rho: float,
    eps: float,
    weight_decay: float,
    maximize: bool,
) -> None:
    for i in range(len(params)):
        param = params[i]
        square_avg = square_avgs[i]
        acc_delta = acc_deltas[i]
        state_steps[i].add_(1)
        grad = grads[i] if not maximize else -grads[i]
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)
        square_avg.mul_(rho).addcmul_(grad, grad, value=1 - rho)
        std = square_avg.add(eps).sqrt_()
        delta = acc_delta.add(eps).sqrt_()
        delta.div_(std).mul_(grad)
        acc_delta.mul_(rho).addcmul_(delta, delta, value=1 - rho)
        param.add_(delta, alpha=-lr)


def _multi_tensor_adadelta(
    params: List[Tensor],
    grads: List[Tensor],
    square_avgs: List[Tensor],
    acc_deltas: List[Tensor],
    state_steps: List[Tensor],
    *,
    lr: float,
    rho: float,
    eps: float,
    weight_decay: float,
    maximize: bool,
) -> None:
    if len(params) == 0:
        return
    torch._foreach_add_(state_steps, 1.0)
    if maximize:
        grads = torch._foreach_neg(grads)
    if weight_decay != 0:
        if maximize:
            torch._foreach_add_(grads, params, alpha=weight_decay)
        else:
            grads = torch._foreach_add(grads, params, alpha=weight_decay)
    torch._foreach_mul_(square_avgs, rho)
    torch._foreach_addcmul_(square_avgs, grads, grads, value=1 - rho)
    std = torch._foreach_add(square_avgs, eps)
    torch._foreach_sqrt_(std)
    deltas = torch._foreach_add(acc_deltas, eps)
    torch._foreach_sqrt_(deltas)
    torch._foreach_div_(deltas, std)
    torch._foreach_mul_(deltas, grads)
    torch._foreach_mul_(acc_deltas, rho)
    torch._foreach_addcmul_(acc_deltas, deltas, deltas, value=1 - rho)
    torch._foreach_add_(params, deltas, alpha=-lr)


def adadelta(
    params: List[Tensor],
    grads: List[Tensor],
    square_avgs: List[Tensor],
    acc_deltas: List[Tensor],
    state_steps: List[Tensor],
    foreach: Optional[bool] = None,
    *,
    lr: float,
    rho: float,
    eps: float,
    weight_decay: float,
    maximize: bool,
) -> None:
    r"""Functional Adadelta: update ``params`` and their state in place, one step.

    Same arguments and results as ``torch.optim.adadelta.adadelta`` (without ``capturable``,
    ``differentiable`` and complex support). Compiles with TorchScript, multi-tensor included.

    Args:
        params: parameters, any shapes, floating dtypes, CPU or CUDA.
        grads: dense gradients like ``params``.
        square_avgs: running averages of squared gradients; acc_deltas: running averages of
            squared updates (both like ``params``).
        state_steps: 0-dim step counters, incremented here.
        foreach: True multi-tensor, False single-tensor, None torch's default.
        lr, rho, eps, weight_decay, maximize: as in :class:`Adadelta`.

    Raises:
        RuntimeError: inputs whose lengths, shapes, dtypes or devices do not match (from the
            aten ops; the class checks its inputs before calling this).

    Algorithm: Zeiler 2012 (https://arxiv.org/abs/1212.5701); reference code
    ``torch/optim/adadelta.py`` (torch 2.13).
    """
    if foreach is None:
        foreach = choose_impl(params, None, None) == "foreach"
    if foreach:
        _multi_tensor_adadelta(
            params, grads, square_avgs, acc_deltas, state_steps, lr=lr, rho=rho, eps=eps,
            weight_decay=weight_decay, maximize=maximize,
        )
    else:
        _single_tensor_adadelta(
            params, grads, square_avgs, acc_deltas, state_steps, lr=lr, rho=rho, eps=eps,
            weight_decay=weight_decay, maximize=maximize,
        )


def _sparse_error() -> str:
    return "Adadelta does not support sparse gradients"


def check_adadelta_hyperparameters(h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
    """torch's checks for Adadelta."""
    _validation.check_lr(h["lr"])
    if not 0.0 <= h["rho"] <= 1.0:
        raise ValueError("Invalid rho value: " + str(h["rho"]))
    _validation.check_non_negative(h["eps"], "epsilon")
    _validation.check_non_negative(h["weight_decay"], "weight_decay")
    _validation.check_impl_flags(o["foreach"], None, flag(o, "capturable"), flag(o, "differentiable"))


def adadelta_group_step(s: GroupedState, g: int, indices: List[int], grads: List[Tensor]) -> None:
    """Step the parameters ``indices`` (all in group ``g``) of an Adadelta optimizer."""
    h = s.hparams[g]
    o = s.options[g]
    if s.needs_init(g, indices):
        for i in indices:
            state = s.state[i]
            p = s.params[i]
            if "step" not in state:
                state["step"] = new_step(p, False)
            for key in ["square_avg", "acc_delta"]:
                if key not in state:
                    state[key] = torch.zeros_like(p, memory_format=torch.preserve_format)
    lists = s.state_lists(g, indices, ["step", "square_avg", "acc_delta"])
    params = s.cache_params[g] if s.is_full(g, indices) else s.params_at(indices)
    adadelta(
        params, grads, lists["square_avg"], lists["acc_delta"], lists["step"],
        foreach=s.impl[g] == "foreach", lr=h["lr"], rho=h["rho"], eps=h["eps"],
        weight_decay=h["weight_decay"], maximize=flag(o, "maximize"),
    )


class Adadelta:
    r"""Adadelta, as ``torch.optim.Adadelta``, with gradients passed in; eager or TorchScript.

    .. math::
       \begin{aligned}
       &\textbf{input}: \gamma \text{ (lr)}, \theta_0, \rho \text{ (decay)}, \lambda \text{ (weight decay)}, \epsilon\\
       &\textbf{initialize}: v_0 \leftarrow 0 \text{ (square avg)},\ u_0 \leftarrow 0 \text{ (accumulate variables)}\\
       &\textbf{for}\ t = 1, 2, \ldots:\\
       &\quad g_t \leftarrow \pm\nabla_\theta f_t(\theta_{t-1});\quad
            \textbf{if}\ \lambda \ne 0:\ g_t \leftarrow g_t + \lambda\theta_{t-1}\\
       &\quad v_t \leftarrow \rho v_{t-1} + (1-\rho) g_t^2,\quad
            \Delta x_t \leftarrow \frac{\sqrt{u_{t-1} + \epsilon}}{\sqrt{v_t + \epsilon}} g_t\\
       &\quad u_t \leftarrow \rho u_{t-1} + (1-\rho)\Delta x_t^2,\quad \theta_t \leftarrow \theta_{t-1} - \gamma\Delta x_t
       \end{aligned}

    Sources: Zeiler 2012 (https://arxiv.org/abs/1212.5701); reference code ``torch/optim/adadelta.py``.

    Args:
        params: a list of tensors, or (eagerly only) of torch-style param-group dicts.
            Floating-point, dense, real, leaf tensors on CPU or CUDA; each at most once.
        lr: coefficient scaling delta before it is applied, >= 0 (default 1.0).
        rho: decay of the running averages, in [0, 1] (default 0.9).
        eps: added inside the square roots, >= 0 (default 1e-6).
        weight_decay: L2 penalty, >= 0 (default 0).
        foreach: True multi-tensor, False single-tensor, None torch's default (default None).
        capturable, differentiable: must be False.
        maximize: maximise instead of minimising (default False).

    ``capturable``, ``maximize``, ``differentiable`` are keyword-only in torch; here they are
    positional-or-keyword (TorchScript does not compile keyword-only arguments with defaults).

    State per parameter: ``'step'`` (0-dim float32 on the CPU), ``'square_avg'``,
    ``'acc_delta'`` (like the parameter).

    Raises:
        ValueError: invalid hyperparameters (torch's messages), an empty, non-leaf, sparse,
            complex or repeated parameter, ``capturable``/``differentiable`` True.
        RuntimeError: at ``step``, a sparse gradient (torch's message), before any change.
        TypeError: (eagerly) a Tensor hyperparameter or a malformed ``params``.
    """

    def __init__(
        self,
        params: List[Tensor],
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        foreach: Optional[bool] = None,
        capturable: bool = False,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        hparams: Dict[str, float] = {"lr": lr, "rho": rho, "eps": eps, "weight_decay": weight_decay}
        options: Dict[str, Optional[bool]] = {
            "maximize": maximize, "capturable": capturable, "foreach": foreach, "differentiable": differentiable,
        }
        if not torch.jit.is_scripting():
            hparams, options = self._eager_defaults(hparams, options)
        check_adadelta_hyperparameters(hparams, options)
        groups: List[List[Tensor]] = [params]
        group_hparams: List[Dict[str, float]] = [hparams]
        group_options: List[Dict[str, Optional[bool]]] = [options]
        if not torch.jit.is_scripting():
            groups, group_hparams, group_options = self._eager_parse(params, hparams, options)
        self._s = GroupedState(groups, group_hparams, group_options)
        for g in range(len(groups)):
            self.set_group(g, group_hparams[g], group_options[g])
        if not torch.jit.is_scripting():
            self._eager_attach()

    def step(self, gradients: List[Optional[Tensor]]) -> None:
        """Update every parameter whose gradient is not None, in place.

        Args:
            gradients: one entry per parameter in flat order: a dense tensor of the parameter's
                shape, dtype and device, or None to skip it.

        Raises:
            ValueError: wrong number of gradients, or a gradient whose shape, dtype or device
                differs from its parameter's (the message names the index).
            RuntimeError: a sparse gradient (torch's message). Nothing is modified when it raises.
        """
        indices, grads, sparse = self._s.check_gradients(gradients, _sparse_error())
        with torch.no_grad():
            for g in range(len(indices)):
                if len(indices[g]) > 0:
                    adadelta_group_step(self._s, g, indices[g], grads[g])

    def step_param(self, param: Tensor, grad: Optional[Tensor]) -> None:
        """Update one parameter with its group's hyperparameters; ``grad=None`` does nothing.

        Args:
            param (Tensor): one of the optimizer's parameters: the tensor object given at
                construction (found by identity, not by value).
            grad (Optional[Tensor]): its gradient, a dense tensor of the parameter's shape, dtype
                and device; ``None`` leaves the parameter and its state untouched.

        Raises:
            ValueError: ``param`` is not a parameter of this optimizer, or ``grad``'s shape, dtype
                or device differs from the parameter's.
            RuntimeError: ``grad`` is sparse (torch's message).

        Nothing is modified when it raises.
        """
        i = self._s.find(param)
        if grad is not None:
            _validation.check_one_gradient(i, param, grad, _sparse_error())
            with torch.no_grad():
                adadelta_group_step(self._s, self._s.group_of[i], [i], [grad])

    def set_group(self, group: int, hyperparameters: Dict[str, float], options: Dict[str, Optional[bool]]) -> None:
        """Change several values of one group at once, used from the next step on.

        All new values are validated together, with the constructor's conditions and torch's
        messages, before any is set.

        Args:
            group (int): index of the parameter group, from 0.
            hyperparameters (Dict[str, float]): new numeric values by the names
                :meth:`hyperparameters` lists (pairs split: ``beta1``, ``beta2``, ...); may be empty.
            options (Dict[str, Optional[bool]]): new flags by the names :meth:`options` lists;
                may be empty.

        Raises:
            ValueError: no such group or name, or invalid values (as the constructor).
            RuntimeError: ``fused`` together with ``foreach``, or ``fused`` for a parameter that is
                not floating point (torch's messages).
        """
        h = self._s.updated_hparams(group, hyperparameters)
        o = self._s.updated_options(group, options)
        check_adadelta_hyperparameters(h, o)
        commit_group(self._s, group, h, o)

    param_group_indices = _methods.param_group_indices
    hyperparameters = _methods.hyperparameters
    options = _methods.options
    set_hyperparameter = _methods.set_hyperparameter
    set_option = _methods.set_option
    get_state = _methods.get_state
    set_state = _methods.set_state
    state_dict = _methods.state_dict
    load_state_dict = _methods.load_state_dict
    _eager_defaults = _methods.eager_defaults
    _eager_parse = _methods.eager_parse
    _eager_attach = _methods.eager_attach
    __repr__ = _methods.eager_repr
