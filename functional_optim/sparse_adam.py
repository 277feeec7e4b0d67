r"""SparseAdam: class and functional form (a fused CPU kernel that touches only the rows present,
and a composite path with torch's ops for other devices and layouts).

Algorithm: Adam (Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015,
https://arxiv.org/abs/1412.6980) masked to the entries a sparse gradient holds. Reference
implementation: ``torch/optim/sparse_adam.py`` and ``sparse_adam`` in
``torch/optim/_functional.py`` (torch 2.13), whose results these functions reproduce.
"""
import math
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import _docs, _methods, _validation
from ._state import fused_step, no_fresh

__all__ = ["SparseAdam", "sparse_adam"]


def add_sparse_(dense: Tensor, sparse: Tensor, alpha: float = 1.0) -> None:
    """``dense.add_(sparse, alpha=alpha)``, also where ``dense`` has a storage offset (a view into
    a larger tensor): torch 2.13's CPU kernel for a coalesced (or one-entry) sparse tensor of no
    dense dimension (``add_dense_sparse_worker_non_hybrid_cpu``: a 1-D parameter's row-sparse
    gradient, or one sparse in every dimension) counts the offset twice and writes outside
    the storage. There the entries (distinct) are added with ``index_put_(accumulate=True)``:
    each element plus ``alpha * value``, the product in the tensor's dtype, as torch's kernel
    computes it."""
    if (
        dense.device.type == "cpu" and dense.storage_offset() != 0 and sparse.sparse_dim() == dense.dim()
        and (sparse.is_coalesced() or sparse._nnz() == 1)
    ):
        values = sparse._values()
        if alpha != 1.0:
            values = values * torch.tensor(alpha, dtype=values.dtype)
        indices: List[Optional[Tensor]] = []
        for row in sparse._indices().unbind(0):
            indices.append(row)
        dense.index_put_(indices, values.to(dense.dtype), accumulate=True)
        return
    dense.add_(sparse, alpha=alpha)


def _sparse_adam_composite(
    param: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step: float, eps: float, beta1: float,
    beta2: float, lr: float, maximize: bool,
) -> None:
    """torch's ``sparse_adam`` for one parameter (its ops in its order), counter already counted."""
    if maximize:
        grad = -grad
    grad = grad.coalesce()  # the update is non-linear so indices must be unique
    grad_indices = grad._indices()
    grad_values = grad._values()
    if grad_values.numel() == 0:
        return
    size = grad.size()
    old_exp_avg_values = exp_avg.sparse_mask(grad)._values()
    exp_avg_update_values = grad_values.sub(old_exp_avg_values).mul_(1 - beta1)
    add_sparse_(exp_avg, torch.sparse_coo_tensor(grad_indices, exp_avg_update_values, size))
    old_exp_avg_sq_values = exp_avg_sq.sparse_mask(grad)._values()
    exp_avg_sq_update_values = grad_values.pow(2).sub_(old_exp_avg_sq_values).mul_(1 - beta2)
    add_sparse_(exp_avg_sq, torch.sparse_coo_tensor(grad_indices, exp_avg_sq_update_values, size))
    numer = exp_avg_update_values.add_(old_exp_avg_values)
    exp_avg_sq_update_values.add_(old_exp_avg_sq_values)
    denom = exp_avg_sq_update_values.sqrt_().add_(eps)
    bias_correction1 = 1 - beta1**step
    bias_correction2 = 1 - beta2**step
    step_size = lr * math.sqrt(bias_correction2) / bias_correction1
    add_sparse_(param, torch.sparse_coo_tensor(grad_indices, -step_size * numer.div_(denom), size))


def sparse_adam(
    params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor], exp_avg_sqs: List[Tensor],
    state_steps: List[Tensor], fused: Optional[bool] = None, *, eps: float, beta1: float, beta2: float,
    lr: float, maximize: bool,
) -> None:
    r"""Functional SparseAdam: update ``params`` and their moments in place, one step, touching only
    the entries each sparse gradient holds.

    The results of ``torch.optim._functional.sparse_adam``, with one difference of form: the
    step counters are 0-dim tensors counted here (torch's function takes Python ints that its
    class has counted). Compiles with TorchScript.

    Args:
        params: dense parameters, any shapes, floating dtypes, CPU or CUDA.
        grads: one sparse COO gradient per parameter, same shape, dtype and device, coalesced or
            not (duplicate indices are summed, as ``Tensor.coalesce``); one without entries
            changes nothing but its step counter (as torch).
        exp_avgs, exp_avg_sqs: first and second moment estimates, like ``params``.
        state_steps: 0-dim step counters (float32/float64, on the CPU), incremented by one here.
        fused: ``True`` or ``None`` the op library's group step (``csrc/steps/sparse_adam.cpp``:
            the fused CPU kernel ``torch.ops.gilfree_optim.sparse_adam_``, one pass over the
            touched rows, parallel over rows, for contiguous CPU parameters; torch's composite
            ops for the others); ``False`` torch's composite ops here (the reference).
        eps, beta1, beta2, lr, maximize: as in :class:`SparseAdam`.

    Raises:
        RuntimeError: a dense gradient (torch's message), or inputs whose lengths, shapes,
            dtypes or devices do not match (the class checks these before calling this).

    Algorithm: Kingma & Ba 2015, masked; reference code ``sparse_adam`` in
    ``torch/optim/_functional.py`` (torch 2.13).
    """
    for grad in grads:
        if not grad.is_sparse:
            raise RuntimeError("SparseAdam does not support dense gradients, please consider Adam instead")
    if (fused is None or fused) and len(params) > 0:
        fused_step(
            "sparse_adam", params, grads, [state_steps, exp_avgs, exp_avg_sqs], no_fresh(len(params)),
            ["lr", "beta1", "beta2", "eps", "maximize"], [lr, beta1, beta2, eps, 1.0 if maximize else 0.0],
        )
        return
    for i in range(len(params)):
        state_steps[i].add_(1)
        _sparse_adam_composite(
            params[i], grads[i], exp_avgs[i], exp_avg_sqs[i], float(state_steps[i].item()), eps, beta1, beta2, lr,
            maximize,
        )


@_docs.fill
@_methods.with_shared_methods
class SparseAdam:
    r"""SparseAdam, as ``torch.optim.SparseAdam``, with gradients passed in; eager or TorchScript.

    Adam masked to the entries a sparse gradient holds: only those entries of the parameter and
    of its moments change (for ``nn.Embedding(sparse=True)``, the rows looked up).

    .. math::
       \begin{aligned}
       &\textbf{for}\ t = 1, 2, \ldots,\ \text{for each entry } j \text{ of } g_t:\\
       &\quad g \leftarrow \pm g_{t,j},\quad m_j \leftarrow m_j + (1-\beta_1)(g - m_j),\quad
            v_j \leftarrow v_j + (1-\beta_2)(g^2 - v_j)\\
       &\quad \theta_j \leftarrow \theta_j - \gamma\,\frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t}\,
            \frac{m_j}{\sqrt{v_j} + \epsilon}
       \end{aligned}

    Sources: Kingma & Ba 2015 (https://arxiv.org/abs/1412.6980); reference code
    ``torch/optim/sparse_adam.py`` (torch 2.13).

    Args:
        params: a list of tensors, or (eagerly only) of torch-style param-group dicts. Dense,
            floating-point, real, leaf tensors of any shape on CPU or CUDA; each at most once.
        lr: learning rate, > 0 (default 1e-3).
        betas: decay rates of the moment estimates, each in [0, 1) (default (0.9, 0.999)).
        eps: added to the denominator, > 0 (default 1e-8).
        maximize: maximize the objective (default False).

    Gradients (``step``): sparse COO tensors only (``nn.Embedding(sparse=True)`` makes them),
    coalesced or not, like their parameters in shape, dtype and device. A dense gradient raises
    torch's ``RuntimeError("SparseAdam does not support dense gradients, please consider Adam
    instead")`` before anything changes. On the CPU, contiguous float32, float64, bfloat16 and
    float16 parameters are stepped by one fused kernel (``torch.ops.gilfree_optim.sparse_adam_``)
    that reads and writes only the rows present; elsewhere by torch's composite ops.

    State per parameter, created at its first step (as torch): ``'step'``, ``'exp_avg'``,
    ``'exp_avg_sq'`` (the last two like the parameter). :meth:`get_state` holds ``'step'`` as a
    0-dim float32 tensor (the protocol's type); ``state_dict()`` gives it as a Python int, as
    torch's SparseAdam does, and ``load_state_dict`` takes either.

    {_tensor_doc}

    Raises:
        ValueError: torch's messages: ``"Invalid learning rate: 0.0"`` (``lr <= 0``),
            ``"Invalid epsilon value: ..."`` (``eps <= 0``), ``"Invalid beta parameter at index
            i: ..."``, ``"Sparse params at indices [[g, i]]: SparseAdam requires dense parameter
            tensors"``, ``"Complex params at indices [[g, i]]: SparseAdam does not support
            complex parameters"``; an empty, non-leaf or repeated parameter.
        RuntimeError: at ``step``, a dense gradient (torch's message), before any change.
        TypeError: (eagerly) a hyperparameter that is neither a number nor a Tensor, or a
            malformed ``params``.
    """

    def __init__(
        self, params: List[Tensor], lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
        maximize: bool = False,
    ) -> None:
        hparams: Dict[str, float] = {"lr": lr, "beta1": betas[0], "beta2": betas[1], "eps": eps}
        options: Dict[str, Optional[bool]] = {"maximize": maximize}
        self._s = self._new_state(params, hparams, options, "sparse_adam")
        self._init_groups()

    def _check(self, h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
        # torch.optim.SparseAdam's conditions: lr and eps strictly positive
        if not 0.0 < h["lr"]:
            raise ValueError("Invalid learning rate: " + str(h["lr"]))
        if not 0.0 < h["eps"]:
            raise ValueError("Invalid epsilon value: " + str(h["eps"]))
        _validation.check_betas(h["beta1"], h["beta2"])

    def _group_step(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
        s = self._s
        h = s.hparams[g]
        lists = s.prepare_state(g, indices, grads)  # keys, initial values: csrc/steps/sparse_adam.cpp
        sparse_adam(
            lists["param"], grads, lists["exp_avg"], lists["exp_avg_sq"], lists["step"], False, eps=h["eps"],
            beta1=h["beta1"], beta2=h["beta2"], lr=h["lr"], maximize=s.flag(g, "maximize"),
        )

    def _sparse_error(self, h: Dict[str, float], impl: str) -> Optional[str]:
        return None
