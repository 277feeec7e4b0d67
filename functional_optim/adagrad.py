r"""Adagrad: class and functional form, whose one body holds the single-tensor, multi-tensor
and fused implementations.

Algorithm: Duchi, Hazan & Singer, "Adaptive Subgradient Methods for Online Learning and
Stochastic Optimization", JMLR 12 (2011). Reference implementation: ``torch/optim/adagrad.py``
(torch 2.13), including its sparse-gradient path.
"""
from typing import Dict, List, Optional

import torch
from torch import Tensor

from . import _docs, _methods, _validation
from .sparse_adam import add_sparse_
from ._state import choose_impl, foreach_gradients, fused_step, no_fresh, scalar_list

__all__ = ["Adagrad", "adagrad"]


def _make_sparse(grad: Tensor, grad_indices: Tensor, values: Tensor) -> Tensor:
    return torch.sparse_coo_tensor(grad_indices, values, grad.size())


@_docs.fill
def adagrad(
    params: List[Tensor], grads: List[Tensor], state_sums: List[Tensor], state_steps: List[Tensor],
    foreach: Optional[bool] = None, fused: Optional[bool] = None, *, lr: float, weight_decay: float,
    lr_decay: float, eps: float, has_sparse_grad: bool, maximize: bool,
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
        foreach: the implementation, as for :func:`functional_optim.adam.adam`.
        {_functional_fused_doc}
        lr, weight_decay, lr_decay, eps, maximize: as in :class:`Adagrad`.
        has_sparse_grad: whether any gradient is sparse.

    Raises:
        RuntimeError: sparse gradients with ``weight_decay`` or with ``fused`` (torch's messages;
            the :class:`Adagrad` class checks this before changing anything).

    Algorithm: Duchi, Hazan & Singer, JMLR 2011; reference code ``torch/optim/adagrad.py``
    (torch 2.13).
    """
    impl = choose_impl(params, foreach, fused)
    if len(params) > 0 and impl == "fused":
        if has_sparse_grad:
            raise RuntimeError("`fused` does not support sparse grad or complex param")
        fused_step(
            "adagrad", params, grads, [state_steps, state_sums], no_fresh(len(params)),
            ["lr", "lr_decay", "weight_decay", "eps", "maximize"], [lr, lr_decay, weight_decay, eps, 1.0 if maximize else 0.0],
        )
    elif len(params) > 0 and impl == "foreach" and not has_sparse_grad:
        # (as torch: foreach kernels do not take sparse tensors, so such a group goes one by one)
        torch._foreach_add_(state_steps, 1.0)
        grads = foreach_gradients(params, grads, weight_decay, maximize)
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
    elif impl != "fused":
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
                add_sparse_(state_sum, _make_sparse(grad, grad_indices, grad_values.pow(2)))
                std = state_sum.sparse_mask(grad)
                std_values = std._values().sqrt_().add_(eps)
                add_sparse_(param, _make_sparse(grad, grad_indices, grad_values / std_values), -clr)
            else:
                state_sum.addcmul_(grad, grad, value=1)
                std = state_sum.sqrt().add_(eps)
                param.addcdiv_(grad, std, value=-clr)


@_docs.fill
@_methods.with_shared_methods
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
        {_params_doc}
        lr: learning rate, >= 0 (default 1e-2).
        lr_decay: learning-rate decay per step, >= 0 (default 0).
        weight_decay: L2 penalty, >= 0 (default 0).
        initial_accumulator_value: starting value of the sums, >= 0 (default 0). As in torch,
            every parameter's sum starts from the constructor's value; a param group's own
            ``initial_accumulator_value`` is recorded but not used.
        eps: denominator term, >= 0 (default 1e-10).
        {_common_args_doc}

    ``maximize``, ``differentiable``, ``fused``
    {_keyword_only_doc}

    Sparse (COO) gradients are accepted as torch accepts them: not with ``weight_decay != 0``
    and not with ``fused=True``. A sparse gradient of a contiguous CPU parameter is stepped by
    the fused sparse kernel (``torch.ops.gilfree_optim.sparse_adagrad_``: coalesced once, then
    only the rows present are read and written), torch's arithmetic with IEEE square roots
    (torch's CPU ``sqrt`` is not always correctly rounded: results agree with torch's to rounding).

    State per parameter, created at construction for every parameter (as torch): ``'step'``
    (0-dim, float32 on the CPU, or on the parameter's device when fused) and ``'sum'`` (like the
    parameter).

    {_tensor_doc}

    {_raises_doc}
    """

    def __init__(
        self, params: List[Tensor], lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0, eps: float = 1e-10, foreach: Optional[bool] = None,
        maximize: bool = False, differentiable: bool = False, fused: Optional[bool] = None,
    ) -> None:
        hparams: Dict[str, float] = {
            "lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": weight_decay,
            "initial_accumulator_value": initial_accumulator_value,
        }
        options: Dict[str, Optional[bool]] = {
            "foreach": foreach, "maximize": maximize, "differentiable": differentiable, "fused": fused,
        }
        self._s = self._new_state(params, hparams, options, "adagrad")
        # As torch, every sum starts from the constructor's value (not the group's): the state's
        # values (csrc/steps/adagrad.cpp) take it from here.
        self._s.constructor_values = {"initial_accumulator_value": float(initial_accumulator_value)}
        self._init_groups()
        s = self._s
        for g in range(s.num_groups()):  # torch creates Adagrad's state at construction
            indices = s.full_indices[g]
            with torch.no_grad():  # (the parameters may require grad; the state must not)
                s.make_state(g, indices, s.params_of(g, indices))  # (no gradient yet: the state is made like the parameter)
            s.pack(g)

    def _check(self, h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
        _validation.check_values(h, ["lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"])

    def _group_step(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
        s = self._s
        h = s.hparams[g]
        lists = s.prepare_state(g, indices, grads)  # keys, initial values: csrc/steps/adagrad.cpp
        impl = s.sparse_impl[g] if sparse else s.impl[g]
        adagrad(
            lists["param"], grads, lists["sum"], lists["step"], impl == "foreach", False, lr=h["lr"],
            weight_decay=h["weight_decay"], lr_decay=h["lr_decay"], eps=h["eps"], has_sparse_grad=sparse,
            maximize=s.flag(g, "maximize"),
        )

    def _sparse_error(self, h: Dict[str, float], impl: str) -> Optional[str]:
        if h["weight_decay"] != 0:
            return "weight_decay option is not compatible with sparse gradients"
        if impl == "fused":
            return "`fused` does not support sparse grad or complex param"
        return None
