r"""AdamW: Adam with decoupled weight decay (``torch.optim.AdamW``).

Algorithm: Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019
(https://arxiv.org/abs/1711.05101), on top of Kingma & Ba 2015. Reference implementation:
``torch/optim/adamw.py`` (torch 2.13), which is ``torch.optim.Adam`` with
``decoupled_weight_decay=True``; the single-tensor, multi-tensor and fused implementations are
those of :mod:`functional_optim.adam` (``torch._fused_adamw_`` for the fused path).
"""
from typing import Dict, List, Optional, Tuple

from torch import Tensor

from . import _docs, _methods
from .adam import Adam, adam

__all__ = ["AdamW", "adamw"]


@_docs.fill
def adamw(
    params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor], exp_avg_sqs: List[Tensor],
    max_exp_avg_sqs: List[Tensor], state_steps: List[Tensor], foreach: Optional[bool] = None,
    fused: Optional[bool] = None, *, amsgrad: bool, beta1: float, beta2: float, lr: float,
    weight_decay: float, eps: float, maximize: bool,
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

    {_functional_raises_doc}

    Algorithm: Loshchilov & Hutter 2019 (https://arxiv.org/abs/1711.05101) on Kingma & Ba
    2015; reference code ``torch/optim/adamw.py`` (torch 2.13).
    """
    adam(
        params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, foreach, fused,
        amsgrad=amsgrad, beta1=beta1, beta2=beta2, lr=lr, weight_decay=weight_decay, eps=eps,
        maximize=maximize, decoupled_weight_decay=True,
    )


@_docs.fill
@_methods.with_shared_methods
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
        {_params_doc}
        lr: learning rate, >= 0 (default 1e-3).
        betas: moment decay rates, each in [0, 1) (default (0.9, 0.999)).
        eps: denominator term, >= 0 (default 1e-8).
        weight_decay: decoupled decay rate per unit of lr, >= 0 (default 1e-2).
        amsgrad: use AMSGrad (default False).
        {_common_args_doc}
        {_capturable_doc}

    ``maximize`` ... ``fused``
    {_keyword_only_doc}
    Each param group also has ``decoupled_weight_decay`` (always True here, as in torch).

    State per parameter: as :class:`~functional_optim.adam.Adam`.

    {_tensor_doc}

    {_raises_doc}
    """

    def __init__(
        self, params: List[Tensor], lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, maximize: bool = False,
        foreach: Optional[bool] = None, capturable: bool = False, differentiable: bool = False,
        fused: Optional[bool] = None,
    ) -> None:
        hparams: Dict[str, float] = {
            "lr": lr, "beta1": betas[0], "beta2": betas[1], "eps": eps, "weight_decay": weight_decay,
        }
        options: Dict[str, Optional[bool]] = {
            "amsgrad": amsgrad, "maximize": maximize, "foreach": foreach, "capturable": capturable,
            "differentiable": differentiable, "fused": fused, "decoupled_weight_decay": True,
        }
        self._s = self._new_state(params, hparams, options, "adamw")
        self._init_groups()

    _check = Adam._check
    _group_step = Adam._group_step
    _sparse_error = Adam._sparse_error
