r"""Adagrad: class, functional form and its single-tensor, multi-tensor and fused implementations.

Algorithm: Duchi, Hazan & Singer, "Adaptive Subgradient Methods for Online Learning and
Stochastic Optimization", JMLR 12 (2011). Reference implementation: ``torch/optim/adagrad.py``
(torch 2.13), including its sparse-gradient path.
"""
from typing import Dict, List, Optional

import torch
from torch import Tensor

from . import _methods, _validation
from ._state import GroupedState, choose_impl, commit_group, device_dtype_splits, flag, new_step, scalar_list, take

__all__ = ["Adagrad", "adagrad"]


def _make_sparse(grad: Tensor, grad_indices: Tensor, values: Tensor) -> Tensor:
    return torch.sparse_coo_tensor(grad_indices, values, grad.size())


def _single_tensor_adagrad(
    params: List[Tensor],
    grads: List[Tensor],
    state_sums: List[Tensor],
    state_steps: List[Tensor],
    *,
    lr: float,
    weight_decay: float,
    lr_decay: float,
    eps: float,
    has_sparse_grad: bool,
    maximize: bool,
) -> None:
    for i in range(len(params)):
        param = params[i]
        state_sum = state_sums[i]
        step_t = state_steps[i]
        step_t.add_(1)
        step = float(step_t.item())
        grad = grads[i] if not maximize else -grads[i]
        if weight_decay != 0:
            if grad.is_sparse:
                raise RuntimeError("weight_decay option is not compatible with sparse gradients")
            grad = grad.add(param, alpha=weight_decay)
        clr = lr / (1 + (step - 1) * lr_decay)
        if grad.is_sparse:
            grad = grad.coalesce()  # the update is non-linear so indices must be unique
            grad_indices = grad._indices()
            grad_values = grad._values()
            state_sum.add_(_make_sparse(grad, grad_indices, grad_values.pow(2)))
            std = state_sum.sparse_mask(grad)
            std_values = std._values().sqrt_().add_(eps)
            param.add_(_make_sparse(grad, grad_indices, grad_values / std_values), alpha=-clr)
        else:
            state_sum.addcmul_(grad, grad, value=1)
            std = state_sum.sqrt().add_(eps)
            param.addcdiv_(grad, std, value=-clr)


def _multi_tensor_adagrad(
    params: List[Tensor],
    grads: List[Tensor],
    state_sums: List[Tensor],
    state_steps: List[Tensor],
    *,
    lr: float,
    weight_decay: float,
    lr_decay: float,
    eps: float,
    has_sparse_grad: bool,
    maximize: bool,
) -> None:
    if len(params) == 0:
        return
    if has_sparse_grad:
        # As torch: foreach kernels do not take sparse tensors, so such a group goes one by one.
        _single_tensor_adagrad(
            params, grads, state_sums, state_steps, lr=lr, weight_decay=weight_decay,
            lr_decay=lr_decay, eps=eps, has_sparse_grad=True, maximize=maximize,
        )
        return
    if maximize:
        grads = torch._foreach_neg(grads)
    torch._foreach_add_(state_steps, 1.0)
    if weight_decay != 0:
        if maximize:
            torch._foreach_add_(grads, params, alpha=weight_decay)
        else:
            grads = torch._foreach_add(grads, params, alpha=weight_decay)
    minus_clr: List[float] = []
    for step_t in state_steps:
        minus_clr.append(-lr / (1 + (float(step_t.item()) - 1) * lr_decay))
    torch._foreach_addcmul_(state_sums, grads, grads, value=1)
    std = torch._foreach_sqrt(state_sums)
    torch._foreach_add_(std, eps)
    if weight_decay != 0 or maximize:
        torch._foreach_mul_(grads, scalar_list(minus_clr))
        numerator = grads
    else:
        numerator = torch._foreach_mul(grads, scalar_list(minus_clr))
    torch._foreach_addcdiv_(params, numerator, std)


def _fused_adagrad(
    params: List[Tensor],
    grads: List[Tensor],
    state_sums: List[Tensor],
    state_steps: List[Tensor],
    *,
    lr: float,
    weight_decay: float,
    lr_decay: float,
    eps: float,
    has_sparse_grad: bool,
    maximize: bool,
) -> None:
    if len(params) == 0:
        return
    if has_sparse_grad:
        raise RuntimeError("`fused` does not support sparse grad or complex param")
    torch._foreach_add_(state_steps, 1.0)
    torch._fused_adagrad_(
        params, grads, state_sums, state_steps, lr=lr, lr_decay=lr_decay,
        weight_decay=weight_decay, eps=eps, maximize=maximize,
    )


def adagrad(
    params: List[Tensor],
    grads: List[Tensor],
    state_sums: List[Tensor],
    state_steps: List[Tensor],
    foreach: Optional[bool] = None,
    fused: Optional[bool] = None,
    *,
    lr: float,
    weight_decay: float,
    lr_decay: float,
    eps: float,
    has_sparse_grad: bool,
    maximize: bool,
) -> None:
    r"""Functional Adagrad: update ``params`` and their sums in place, one step.

    Same arguments and results as ``torch.optim.adagrad.adagrad`` (``has_sparse_grad`` is
    keyword-only and required here). Compiles with TorchScript, multi-tensor and fused included.

    Args:
        params: parameters, any shapes, floating dtypes, CPU or CUDA.
        grads: gradients like ``params``; sparse COO allowed (not with ``fused`` nor with
            ``weight_decay != 0``).
        state_sums: running sums of squared gradients, like ``params``.
        state_steps: 0-dim step counters (float32 on the parameter's device when fused),
            incremented here.
        foreach, fused: the implementation; None/None picks torch's default. ``fused=True``
            needs all tensors on one device.
        lr, weight_decay, lr_decay, eps, maximize: as in :class:`Adagrad`.
        has_sparse_grad: whether any gradient is sparse.

    Raises:
        RuntimeError: sparse gradients with ``weight_decay`` or with ``fused`` (torch's messages;
            the :class:`Adagrad` class checks this before changing anything).

    Algorithm: Duchi, Hazan & Singer, JMLR 2011; reference code ``torch/optim/adagrad.py``
    (torch 2.13).
    """
    if fused is None and foreach is None:
        foreach = choose_impl(params, None, None) == "foreach"
    if fused is not None and fused:
        _fused_adagrad(
            params, grads, state_sums, state_steps, lr=lr, weight_decay=weight_decay,
            lr_decay=lr_decay, eps=eps, has_sparse_grad=has_sparse_grad, maximize=maximize,
        )
    elif foreach is not None and foreach:
        _multi_tensor_adagrad(
            params, grads, state_sums, state_steps, lr=lr, weight_decay=weight_decay,
            lr_decay=lr_decay, eps=eps, has_sparse_grad=has_sparse_grad, maximize=maximize,
        )
    else:
        _single_tensor_adagrad(
            params, grads, state_sums, state_steps, lr=lr, weight_decay=weight_decay,
            lr_decay=lr_decay, eps=eps, has_sparse_grad=has_sparse_grad, maximize=maximize,
        )


def _sparse_error() -> str:
    return ""


def check_adagrad_hyperparameters(h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
    """torch's checks for Adagrad (``"Invalid lr_decay value: ..."`` etc.)."""
    _validation.check_lr(h["lr"])
    _validation.check_non_negative(h["lr_decay"], "lr_decay")
    _validation.check_non_negative(h["weight_decay"], "weight_decay")
    _validation.check_non_negative(h["initial_accumulator_value"], "initial_accumulator_value")
    _validation.check_non_negative(h["eps"], "epsilon")
    _validation.check_impl_flags(o["foreach"], o["fused"], False, flag(o, "differentiable"))


def _init_adagrad_state(s: GroupedState, i: int, initial_accumulator_value: float) -> None:
    state = s.state[i]
    p = s.params[i]
    if "step" not in state:
        state["step"] = new_step(p, s.impl[s.group_of[i]] == "fused")
    if "sum" not in state:
        state["sum"] = torch.full_like(p, initial_accumulator_value, memory_format=torch.preserve_format)


def adagrad_group_step(
    s: GroupedState, g: int, indices: List[int], grads: List[Tensor], has_sparse_grad: bool,
    initial_accumulator_value: float,
) -> None:
    """Step the parameters ``indices`` (all in group ``g``) of an Adagrad optimizer."""
    h = s.hparams[g]
    o = s.options[g]
    if s.needs_init(g, indices):
        for i in indices:
            _init_adagrad_state(s, i, initial_accumulator_value)
    lists = s.state_lists(g, indices, ["step", "sum"])
    params = s.cache_params[g] if s.is_full(g, indices) else s.params_at(indices)
    for part in device_dtype_splits(s, g, params):
        adagrad(
            take(params, part),
            take(grads, part),
            take(lists["sum"], part),
            take(lists["step"], part),
            foreach=s.impl[g] == "foreach",
            fused=s.impl[g] == "fused",
            lr=h["lr"],
            weight_decay=h["weight_decay"],
            lr_decay=h["lr_decay"],
            eps=h["eps"],
            has_sparse_grad=has_sparse_grad,
            maximize=flag(o, "maximize"),
        )


class Adagrad:
    r"""Adagrad, as ``torch.optim.Adagrad``, with gradients passed in; eager or TorchScript.

    .. math::
       \begin{aligned}
       &\textbf{input}: \gamma \text{ (lr)}, \theta_0, \lambda \text{ (weight decay)},
            \tau \text{ (initial accumulator value)}, \eta \text{ (lr decay)}, \epsilon\\
       &\textbf{initialize}: s_0 \leftarrow \tau\\
       &\textbf{for}\ t = 1, 2, \ldots:\\
       &\quad g_t \leftarrow \pm\nabla_\theta f_t(\theta_{t-1}),\quad
            \tilde\gamma \leftarrow \gamma / (1 + (t-1)\eta)\\
       &\quad \textbf{if}\ \lambda \ne 0:\ g_t \leftarrow g_t + \lambda\theta_{t-1}\\
       &\quad s_t \leftarrow s_{t-1} + g_t^2,\quad
            \theta_t \leftarrow \theta_{t-1} - \tilde\gamma\, g_t / (\sqrt{s_t} + \epsilon)
       \end{aligned}

    Sources: Duchi, Hazan & Singer, JMLR 2011; reference code ``torch/optim/adagrad.py``.

    Args:
        params: a list of tensors, or (eagerly only) of torch-style param-group dicts.
            Floating-point, dense, real, leaf tensors on CPU or CUDA; each at most once.
        lr: learning rate, >= 0 (default 1e-2).
        lr_decay: learning-rate decay per step, >= 0 (default 0).
        weight_decay: L2 penalty, >= 0 (default 0).
        initial_accumulator_value: starting value of the sums, >= 0 (default 0). As in torch,
            every parameter's sum starts from the constructor's value; a param group's own
            ``initial_accumulator_value`` is recorded but not used.
        eps: denominator term, >= 0 (default 1e-10).
        foreach: True multi-tensor, False single-tensor, None torch's default (default None).
        maximize: maximise instead of minimising (default False).
        differentiable: must be False.
        fused: True uses ``torch._fused_adagrad_`` (CPU/CUDA, float16/bfloat16/float32/float64)
            (default None = not fused).

    ``maximize``, ``differentiable``, ``fused`` are keyword-only in torch; here they are
    positional-or-keyword (TorchScript does not compile keyword-only arguments with defaults).

    Sparse (COO) gradients are accepted as torch accepts them: not with ``weight_decay != 0``
    and not with ``fused=True``.

    State per parameter, created at construction for every parameter (as torch): ``'step'``
    (0-dim, float32 on the CPU, or on the parameter's device when fused) and ``'sum'`` (like the
    parameter).

    Raises:
        ValueError: invalid hyperparameters (torch's messages), an empty, non-leaf, sparse,
            complex or repeated parameter, ``differentiable=True``.
        RuntimeError: ``fused`` with ``foreach`` or a non-floating parameter; at ``step``, a
            sparse gradient with weight decay or in a fused group (before any change).
        TypeError: (eagerly) a Tensor hyperparameter or a malformed ``params``.
    """

    def __init__(
        self,
        params: List[Tensor],
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        foreach: Optional[bool] = None,
        maximize: bool = False,
        differentiable: bool = False,
        fused: Optional[bool] = None,
    ) -> None:
        hparams: Dict[str, float] = {
            "lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": weight_decay,
            "initial_accumulator_value": initial_accumulator_value,
        }
        options: Dict[str, Optional[bool]] = {
            "foreach": foreach, "maximize": maximize, "differentiable": differentiable, "fused": fused,
        }
        if not torch.jit.is_scripting():
            hparams, options = self._eager_defaults(hparams, options)
        check_adagrad_hyperparameters(hparams, options)
        self._initial_accumulator_value: float = hparams["initial_accumulator_value"]
        groups: List[List[Tensor]] = [params]
        group_hparams: List[Dict[str, float]] = [hparams]
        group_options: List[Dict[str, Optional[bool]]] = [options]
        if not torch.jit.is_scripting():
            groups, group_hparams, group_options = self._eager_parse(params, hparams, options)
        self._s = GroupedState(groups, group_hparams, group_options)
        for g in range(len(groups)):
            self.set_group(g, group_hparams[g], group_options[g])
        for i in range(len(self._s.params)):
            _init_adagrad_state(self._s, i, self._initial_accumulator_value)
        if not torch.jit.is_scripting():
            self._eager_attach()

    def _check_sparse(self, g: int, sparse: bool) -> None:
        if sparse:
            if self._s.hparams[g]["weight_decay"] != 0:
                raise RuntimeError("weight_decay option is not compatible with sparse gradients")
            if self._s.impl[g] == "fused":
                raise RuntimeError("`fused` does not support sparse grad or complex param")

    def step(self, gradients: List[Optional[Tensor]]) -> None:
        """Update every parameter whose gradient is not None, in place.

        Args:
            gradients: one entry per parameter in flat order: a tensor of the parameter's shape,
                dtype and device (dense or sparse COO), or None to skip it.

        Raises:
            ValueError: wrong number of gradients, or a gradient whose shape, dtype or device
                differs from its parameter's (the message names the index).
            RuntimeError: a sparse gradient with weight decay or in a fused group (torch's
                messages). Nothing is modified when it raises.
        """
        indices, grads, sparse = self._s.check_gradients(gradients, _sparse_error())
        for g in range(len(indices)):
            self._check_sparse(g, sparse[g])
        with torch.no_grad():
            for g in range(len(indices)):
                if len(indices[g]) > 0:
                    adagrad_group_step(self._s, g, indices[g], grads[g], sparse[g], self._initial_accumulator_value)

    def step_param(self, param: Tensor, grad: Optional[Tensor]) -> None:
        """Update one parameter with its group's hyperparameters; ``grad=None`` does nothing.

        Args:
            param (Tensor): one of the optimizer's parameters: the tensor object given at
                construction (found by identity, not by value).
            grad (Optional[Tensor]): its gradient, a dense or sparse COO tensor of the parameter's shape, dtype
                and device; ``None`` leaves the parameter and its state untouched.

        Raises:
            ValueError: ``param`` is not a parameter of this optimizer, or ``grad``'s shape, dtype
                or device differs from the parameter's.
            RuntimeError: ``grad`` is sparse and the group has weight decay or is fused (torch's messages).

        Nothing is modified when it raises.
        """
        i = self._s.find(param)
        if grad is not None:
            _validation.check_one_gradient(i, param, grad, _sparse_error())
            g = self._s.group_of[i]
            self._check_sparse(g, grad.is_sparse)
            with torch.no_grad():
                adagrad_group_step(self._s, g, [i], [grad], grad.is_sparse, self._initial_accumulator_value)

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
        check_adagrad_hyperparameters(h, o)
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
