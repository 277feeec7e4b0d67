r"""AdamW: Adam with decoupled weight decay (``torch.optim.AdamW``).

Algorithm: Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019
(https://arxiv.org/abs/1711.05101), on top of Kingma & Ba 2015. Reference implementation:
``torch/optim/adamw.py`` (torch 2.13), which is ``torch.optim.Adam`` with
``decoupled_weight_decay=True``; the single-tensor, multi-tensor and fused implementations are
those of :mod:`functional_optim.adam` (``torch._fused_adamw_`` for the fused path).
"""
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import _methods, _validation
from ._state import GroupedState, commit_group
from .adam import adam, adam_group_step, check_adam_hyperparameters

__all__ = ["AdamW", "adamw"]


def _sparse_error() -> str:
    return "Adam does not support sparse gradients, please consider SparseAdam instead"


def adamw(
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
) -> None:
    r"""Functional AdamW: :func:`functional_optim.adam.adam` with ``decoupled_weight_decay=True``.

    Same arguments, shapes, dtypes and devices as :func:`~functional_optim.adam.adam` (and as
    ``torch.optim.adamw.adamw``).

    Args:
        params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps: as for
            :func:`~functional_optim.adam.adam`.
        foreach, fused: the implementation, as for :func:`~functional_optim.adam.adam`
            (``fused`` calls ``torch._fused_adamw_``).
        amsgrad, beta1, beta2, lr, weight_decay, eps, maximize: as in :class:`AdamW`
            (``weight_decay`` is the decoupled decay rate per unit of ``lr``).

    Raises:
        RuntimeError: inputs whose lengths, shapes, dtypes or devices do not match (from the
            aten ops; the class checks its inputs before calling this).

    Algorithm: Loshchilov & Hutter 2019 (https://arxiv.org/abs/1711.05101) on Kingma & Ba
    2015; reference code ``torch/optim/adamw.py`` (torch 2.13).
    """
    adam(
        params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, foreach, fused,
        amsgrad=amsgrad, beta1=beta1, beta2=beta2, lr=lr, weight_decay=weight_decay, eps=eps,
        maximize=maximize, decoupled_weight_decay=True,
    )


class AdamW:
    r"""AdamW, as ``torch.optim.AdamW``, with gradients passed in; eager or TorchScript.

    .. math::
       \begin{aligned}
       &\textbf{for}\ t = 1, 2, \ldots:\\
       &\quad g_t \leftarrow \pm\nabla_\theta f_t(\theta_{t-1}),\quad
            \theta_{t-1} \leftarrow \theta_{t-1} - \gamma\lambda\theta_{t-1}\\
       &\quad m_t \leftarrow \beta_1 m_{t-1} + (1-\beta_1) g_t,\quad v_t \leftarrow \beta_2 v_{t-1} + (1-\beta_2) g_t^2\\
       &\quad \hat v_t \leftarrow \max(v^{max}_{t-1}, v_t)/(1-\beta_2^t)\ (\textit{amsgrad})
            \ \textbf{else}\ v_t/(1-\beta_2^t)\\
       &\quad \theta_t \leftarrow \theta_{t-1} - \gamma\, \frac{m_t/(1-\beta_1^t)}{\sqrt{\hat v_t} + \epsilon}
       \end{aligned}

    Sources: Loshchilov & Hutter 2019 (https://arxiv.org/abs/1711.05101); Kingma & Ba 2015;
    reference code ``torch/optim/adamw.py``.

    Args:
        params: a list of tensors, or (eagerly only) of torch-style param-group dicts.
            Floating-point, dense, real, leaf tensors of any shape on CPU or CUDA; each at most once.
        lr: learning rate, >= 0 (default 1e-3).
        betas: moment decay rates, each in [0, 1) (default (0.9, 0.999)).
        eps: denominator term, >= 0 (default 1e-8).
        weight_decay: decoupled decay rate per unit of lr, >= 0 (default 1e-2).
        amsgrad: use AMSGrad (default False).
        maximize: maximise instead of minimising (default False).
        foreach: True multi-tensor, False single-tensor, None torch's default (default None).
        capturable, differentiable: must be False.
        fused: True uses ``torch._fused_adamw_`` (CPU/CUDA, float16/bfloat16/float32/float64)
            (default None = not fused).

    ``maximize`` ... ``fused`` are keyword-only in torch; here they are positional-or-keyword
    (TorchScript does not compile keyword-only arguments with defaults). Pass them by keyword.
    Each param group also has ``decoupled_weight_decay`` (always True here, as in torch).

    State per parameter: as :class:`~functional_optim.adam.Adam`.

    Raises:
        ValueError, RuntimeError, TypeError: as :class:`~functional_optim.adam.Adam`.
    """

    def __init__(
        self,
        params: List[Tensor],
        lr: float = 1e-3,
        betas: Tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        maximize: bool = False,
        foreach: Optional[bool] = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: Optional[bool] = None,
    ) -> None:
        hparams: Dict[str, float] = {
            "lr": lr, "beta1": betas[0], "beta2": betas[1], "eps": eps, "weight_decay": weight_decay,
        }
        options: Dict[str, Optional[bool]] = {
            "amsgrad": amsgrad, "maximize": maximize, "foreach": foreach, "capturable": capturable,
            "differentiable": differentiable, "fused": fused, "decoupled_weight_decay": True,
        }
        if not torch.jit.is_scripting():
            hparams, options = self._eager_defaults(hparams, options)
        check_adam_hyperparameters(hparams, options)
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
                    adam_group_step(self._s, g, indices[g], grads[g])

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
                adam_group_step(self._s, self._s.group_of[i], [i], [grad])

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
        check_adam_hyperparameters(h, o)
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
