r"""Muon: class and functional form. Its reference implementation is single-tensor (torch has no
multi-tensor Muon); the default one is the op library's group step (``csrc/steps/muon.cpp``:
torch's single-tensor step, its ATen ops in its order, the Newton-Schulz iteration in C++).

Algorithm: K. Jordan, "Muon: An optimizer for hidden layers in neural networks" (2024),
https://kellerjordan.github.io/posts/muon/; the "match_rms_adamw" learning-rate adjustment from
J. Liu et al., "Muon is Scalable for LLM Training" (2025), https://arxiv.org/abs/2502.16982.
Reference implementation: ``torch/optim/_muon.py`` (torch 2.13).
"""
import math
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import _docs, _methods, _validation, ops
from ._state import CHOICE_HYPERPARAMETERS, choose_impl, empty_names, empty_tensors, no_fresh

__all__ = ["Muon", "muon"]

# K. Jordan's coefficients and defaults, as torch.optim.Muon's (torch/optim/_muon.py)
EPS = 1e-7
DEFAULT_A = 3.4445
DEFAULT_B = -4.7750
DEFAULT_C = 2.0315
DEFAULT_NS_STEPS = 5


def zeropower_via_newtonschulz(
    grad: Tensor, ns_coefficients: Tuple[float, float, float], ns_steps: int, eps: float
) -> Tensor:
    """torch's ``_zeropower_via_newtonschulz``: ``ns_steps`` quintic Newton-Schulz iterations in
    bfloat16 that take ``grad`` (2-D) towards ``U V^T`` of its SVD ``U S V^T`` (singular values
    end up roughly in [0.5, 1.5], which K. Jordan found harmless); the result is bfloat16, of
    ``grad``'s shape.

    Raises:
        ValueError: ``ns_steps >= 100`` or ``grad`` not 2-D (torch's messages).
    """
    if ns_steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if len(grad.shape) != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")
    a, b, c = ns_coefficients
    ortho_grad = grad.to(torch.bfloat16)  # (grad itself when it is bfloat16, as torch)
    if grad.size(0) > grad.size(1):
        ortho_grad = ortho_grad.T
    ortho_grad.div_(torch.linalg.vector_norm(ortho_grad).clamp(min=eps))  # spectral norm at most 1
    for _ in range(ns_steps):
        gram_matrix = ortho_grad @ ortho_grad.T
        gram_update = torch.addmm(gram_matrix, gram_matrix, gram_matrix, beta=b, alpha=c)
        ortho_grad = torch.addmm(ortho_grad, gram_update, ortho_grad, beta=a)
    if grad.size(0) > grad.size(1):
        ortho_grad = ortho_grad.T
    return ortho_grad


def adjust_lr(lr: float, adjust_lr_fn: Optional[str], param_shape: List[int]) -> float:
    """torch's ``_adjust_lr``: ``lr`` times ``sqrt(max(1, A / B))`` (None or ``"original"``,
    K. Jordan's), ``0.2 * sqrt(max(A, B))`` (``"match_rms_adamw"``, Liu et al.'s) or 1, for a
    parameter of shape ``[A, B]``."""
    rows = param_shape[0]
    cols = param_shape[1]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        ratio = math.sqrt(max(1.0, rows / cols))
    elif adjust_lr_fn == "match_rms_adamw":
        ratio = 0.2 * math.sqrt(max(rows, cols))
    else:
        ratio = 1.0
    return lr * ratio


def _adjust_lr_choices() -> List[str]:
    """torch's choices of ``adjust_lr_fn``, in the order of their numbers: the op library's
    table (``csrc/steps/muon.cpp``), as ``_state.CHOICE_HYPERPARAMETERS`` read it at import
    (eagerly and under torch.compile), or from the op (TorchScript, which reads no global dict)."""
    if not torch.jit.is_scripting():
        return _eager_adjust_lr_choices()
    return ops.hyperparameter_choices()["adjust_lr_fn"]


@torch.jit.unused
def _eager_adjust_lr_choices() -> List[str]:
    """``_state.CHOICE_HYPERPARAMETERS``' choices of ``adjust_lr_fn`` (eager only)."""
    return list(CHOICE_HYPERPARAMETERS["adjust_lr_fn"][0])


def _adjust_lr_fn(index: float) -> Optional[str]:
    """The typed ``adjust_lr_fn`` (``_state.CHOICE_HYPERPARAMETERS``) as torch's value."""
    choices = _adjust_lr_choices()
    if index >= 1.0 and index <= len(choices):
        return choices[int(index) - 1]
    return None


@_docs.fill
def muon(
    params: List[Tensor], grads: List[Tensor], muon_momentum_bufs: List[Tensor], foreach: Optional[bool] = None,
    fused: Optional[bool] = None, *,
    lr: float, weight_decay: float, momentum: float, nesterov: bool, ns_coefficients: Tuple[float, float, float],
    ns_steps: int, eps: float, adjust_lr_fn: Optional[str],
) -> None:
    r"""Functional Muon: update ``params`` and their momentum buffers in place, one step.

    Same arguments and results as torch's ``torch.optim._muon.muon`` (without complex
    support). Compiles with TorchScript.

    Args:
        params: 2-D parameters, floating dtypes, CPU or CUDA.
        grads: one dense gradient per parameter, same shape, dtype and device.
        muon_momentum_bufs: the momentum buffers, like ``params``.
        foreach: must not be True (torch's ``RuntimeError``: there is no multi-tensor Muon).
        fused: ``True``: the op library's group step (``torch.ops.gilfree_optim.group_step``:
            the same ops in C++, to the bit). Else the single-tensor step.
        lr, weight_decay, momentum, nesterov, ns_coefficients, ns_steps, eps, adjust_lr_fn: as
            in :class:`Muon`.

    Raises:
        RuntimeError: ``foreach=True`` (``"Foreach is not supported for Muon yet"``).
        ValueError: a gradient that is not 2-D (``"Param gradient must be a 2D matrix"``),
            ``ns_steps >= 100``.

    Algorithm: K. Jordan 2024 (https://kellerjordan.github.io/posts/muon/), Liu et al. 2025
    (https://arxiv.org/abs/2502.16982); reference code ``torch/optim/_muon.py`` (torch 2.13).
    """
    if foreach is not None and foreach:
        raise RuntimeError("Foreach is not supported for Muon yet")
    if fused is not None and fused:
        if len(params) > 0:
            ops.group_step(
                "muon", params, grads, muon_momentum_bufs, no_fresh(len(params)),
                ["lr", "weight_decay", "momentum", "ns_a", "ns_b", "ns_c", "eps", "ns_steps", "adjust_lr_fn",
                 "nesterov"],
                [lr, weight_decay, momentum, ns_coefficients[0], ns_coefficients[1], ns_coefficients[2], eps,
                 float(ns_steps), _validation.choice_index(adjust_lr_fn, _adjust_lr_choices(), "Adjust learning rate function"),
                 1.0 if nesterov else 0.0],
                empty_names(), empty_tensors(),
            )
        return
    for i in range(len(params)):
        param = params[i]
        grad = grads[i]
        if grad.dim() != 2:
            raise ValueError("Param gradient must be a 2D matrix")
        buf = muon_momentum_bufs[i]
        buf.lerp_(grad, 1 - momentum)
        update = grad.lerp(buf, momentum) if nesterov else buf
        update = zeropower_via_newtonschulz(update, ns_coefficients, ns_steps, eps)
        adjusted_lr = adjust_lr(lr, adjust_lr_fn, param.shape)
        param.mul_(1 - lr * weight_decay)
        param.add_(update, alpha=-adjusted_lr)


@_docs.fill
@_methods.with_shared_methods
class Muon:
    r"""Muon (MomentUm Orthogonalized by Newton-Schulz), as ``torch.optim.Muon``, with gradients
    passed in; eager or TorchScript. For 2-D parameters (hidden layers' weight matrices); step the
    others (biases, embeddings, gains) with an optimizer such as AdamW.

    .. math::
       \begin{aligned}
       &\textbf{input}: \gamma \text{ (lr)}, \lambda \text{ (weight decay)}, \mu \text{ (momentum)},
            \textit{nesterov}, (a, b, c) \text{ (ns\_coefficients)}, \varepsilon, k \text{ (ns\_steps)}\\
       &\textbf{initialize}: B_0 \leftarrow 0 \text{ (momentum buffer)}\\
       &\textbf{for}\ t = 1, 2, \ldots:\\
       &\quad g_t \leftarrow \nabla_\theta f_t(\theta_{t-1});\quad
            B_t \leftarrow \mu B_{t-1} + (1 - \mu) g_t\\
       &\quad \widetilde B_t \leftarrow (1 - \mu) g_t + \mu B_t\ (\textit{nesterov})\ \textbf{else}\ B_t\\
       &\quad X_0 \leftarrow \widetilde B_t / \max(\lVert \widetilde B_t \rVert_F, \varepsilon)
            \text{ (bfloat16, transposed when taller than wide)}\\
       &\quad X_{j+1} \leftarrow a X_j + (b A_j + c A_j^2) X_j,\ A_j = X_j X_j^\top
            \quad (j < k);\quad O_t \leftarrow X_k\\
       &\quad \theta_t \leftarrow (1 - \gamma\lambda)\theta_{t-1} - \mathrm{AdjustLR}(\gamma; A, B)\, O_t
       \end{aligned}

    (torch's buffer is a lerp: ``B.lerp_(g, 1 - mu)``, the momentum form above.)
    ``AdjustLR`` for a parameter of shape ``[A, B]``: ``sqrt(max(1, A / B))`` (``adjust_lr_fn``
    None or ``"original"``, K. Jordan's), ``0.2 * sqrt(max(A, B))`` (``"match_rms_adamw"``,
    Moonshot's, which lets Muon reuse AdamW's lr and weight decay).

    Sources: K. Jordan, "Muon: An optimizer for hidden layers in neural networks" (2024),
    https://kellerjordan.github.io/posts/muon/ (the iteration and its coefficients); J. Liu et
    al., "Muon is Scalable for LLM Training" (2025), https://arxiv.org/abs/2502.16982; reference
    code ``torch/optim/_muon.py`` (torch 2.13).

    Args:
        params: a list of 2-D tensors, or (eagerly only) of torch-style param-group dicts
            (``{'params': [...], 'lr': ..., ...}``). Floating-point, dense, real, leaf tensors
            on CPU or CUDA; each at most once.
        lr: learning rate, >= 0 (default 1e-3).
        weight_decay: decoupled weight decay, >= 0 (default 0.1).
        momentum: momentum factor, >= 0 (default 0.95).
        nesterov: Nesterov momentum (default True).
        ns_coefficients: ``(a, b, c)`` of the Newton-Schulz polynomial (default
            ``(3.4445, -4.7750, 2.0315)``, K. Jordan's). Held as ``ns_a``, ``ns_b``, ``ns_c``
            by :meth:`hyperparameters`.
        eps: floor of the norm the iteration starts by dividing by (default 1e-7).
        ns_steps: number of Newton-Schulz iterations, an int < 100 (default 5).
        adjust_lr_fn: None, ``"original"`` or ``"match_rms_adamw"`` (default None, which is
            ``"original"``). Held as 0, 1, 2 by :meth:`hyperparameters`.
        fused: ``True`` the op library's group step (``torch.ops.gilfree_optim.group_step``:
            torch's ops in C++, the same results to the bit, the iteration without the
            interpreter; CPU and CUDA, float32, float64, bfloat16, float16), ``False`` the
            single-tensor step in Python, ``None`` (default): the group step when every
            parameter is a dense floating-point tensor on a device it takes.

    The argument order is torch's; ``fused`` (last) is not an argument of torch's class, which
    has no ``foreach``, ``maximize``, ``capturable`` or ``differentiable`` either.

    State per parameter, as torch keeps it: ``'momentum_buffer'`` (like the parameter); no
    step count. As torch 2.13, a bfloat16 parameter with ``nesterov=False`` has its buffer
    scaled in place by the iteration's first division (torch's ``grad.bfloat16()`` is the
    buffer itself then); functional_optim keeps that, for torch's results.

    {_tensor_doc}

    Raises:
        ValueError: a parameter that is not 2-D (torch's ``"Muon only supports 2D parameters
            whereas we found a parameter with size: torch.Size([5])"``, also for a param group
            added later, which torch takes and then refuses to step, after stepping the groups
            before it); invalid hyperparameters (torch's messages: ``"Learning rate
            should be >= 0 but is: -1.0"``, ``"momentum should be >= 0 ..."``, ``"weight decay
            should be >= 0 ..."``, ``"Adjust learning rate function ... is not supported"``;
            ``"Number of steps must be less than 100 for computational efficiency"``, which
            torch raises at the step, here at once), a whole ``ns_steps`` needed; an empty,
            non-leaf, sparse, complex or repeated parameter.
        RuntimeError: ``fused`` with a parameter it cannot step; at ``step``, a sparse gradient
            (``"Muon does not support sparse gradients"``), before any change.
        TypeError: (eagerly) a hyperparameter of the wrong type, or a malformed ``params``.
    """

    def __init__(
        self, params: List[Tensor], lr: float = 1e-3, weight_decay: float = 0.1, momentum: float = 0.95,
        nesterov: bool = True, ns_coefficients: Tuple[float, float, float] = (DEFAULT_A, DEFAULT_B, DEFAULT_C),
        eps: float = EPS, ns_steps: int = DEFAULT_NS_STEPS, adjust_lr_fn: Optional[str] = None,
        fused: Optional[bool] = None,
    ) -> None:
        if not torch.jit.is_scripting():
            _check_coefficients(ns_coefficients)
        hparams: Dict[str, float] = {
            "lr": lr, "weight_decay": weight_decay, "momentum": momentum, "ns_a": ns_coefficients[0],
            "ns_b": ns_coefficients[1], "ns_c": ns_coefficients[2], "eps": eps, "ns_steps": float(ns_steps),
            "adjust_lr_fn": _validation.choice_index(adjust_lr_fn, _adjust_lr_choices(), "Adjust learning rate function"),
        }
        options: Dict[str, Optional[bool]] = {"nesterov": nesterov, "fused": fused}
        self._s = self._new_state(params, hparams, options, "muon")  # 2-D only: check_muon_params
        self._init_groups()

    def _check(self, h: Dict[str, float], o: Dict[str, Optional[bool]]) -> None:
        if not 0.0 <= h["lr"]:
            raise ValueError("Learning rate should be >= 0 but is: " + str(h["lr"]))
        if not 0.0 <= h["momentum"]:
            raise ValueError("momentum should be >= 0 but is: " + str(h["momentum"]))
        if not 0.0 <= h["weight_decay"]:
            raise ValueError("weight decay should be >= 0 but is: " + str(h["weight_decay"]))
        _validation.check_choice(h["adjust_lr_fn"], len(_adjust_lr_choices()), "adjust_lr_fn")
        steps = h["ns_steps"]
        if not steps % 1.0 == 0.0:  # NaN and inf fail too
            raise ValueError("ns_steps must be a whole number, got " + str(steps))
        if steps >= 100:
            raise ValueError("Number of steps must be less than 100 for computational efficiency")

    def _group_step(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
        s = self._s
        for i in indices:  # torch's check, before anything changes
            if s.params[i].dim() != 2:
                raise ValueError("Param gradient must be a 2D matrix")
        lists = s.prepare_state(g, indices, grads)  # keys, initial values: csrc/steps/muon.cpp
        h = s.hparams[g]
        muon(
            lists["param"], grads, lists["momentum_buffer"], False, False, lr=h["lr"], weight_decay=h["weight_decay"],
            momentum=h["momentum"], nesterov=s.flag(g, "nesterov"), ns_coefficients=(h["ns_a"], h["ns_b"], h["ns_c"]),
            ns_steps=int(h["ns_steps"]), eps=h["eps"], adjust_lr_fn=_adjust_lr_fn(h["adjust_lr_fn"]),
        )

    def _sparse_error(self, h: Dict[str, float], impl: str) -> Optional[str]:
        return "Muon does not support sparse gradients"


@torch.jit.unused
def _check_coefficients(ns_coefficients: Tuple[float, float, float]) -> None:
    """Eager only: torch's check of ``ns_coefficients`` (made at its step), here at once."""
    if len(ns_coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
