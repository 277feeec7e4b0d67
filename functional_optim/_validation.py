"""Input checks shared by all optimizers, written so that TorchScript can compile them.

Every check here raises before the optimizer touches a parameter or its state, so a call that
fails leaves everything as it was. Messages for invalid hyperparameters are the ones
``torch.optim`` uses (e.g. ``"Invalid learning rate: -1.0"``); eagerly they match torch's text
exactly, and in TorchScript numbers are printed the TorchScript way (``-1.`` instead of ``-1.0``).
Inside TorchScript any of these errors reaches Python as ``torch.jit.Error`` (an ``Exception``)
whose message contains ``"builtins.ValueError: <message>"``.

The last section (:func:`tensor_number`, :func:`check_tensor_betas`) is eager only: torch's
rules for hyperparameters given as Tensors, which an eager constructor or param group reads
into numbers (TorchScript code takes numbers).
"""
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import _kernels, ops

__all__ = [
    "dtype_name",
    "describe",
    "check_group_index",
    "check_gradients",
    "check_one_gradient",
    "check_params",
    "check_sparse_adam_params",
    "check_muon_params",
    "check_lr",
    "check_non_negative",
    "check_betas",
    "check_impl_flags",
    "check_fused_params",
    "check_values",
    "check_options",
    "choice_index",
    "check_choice",
    "tensor_number",
    "check_tensor_betas",
]


def check_group_index(group: int, num_groups: int) -> None:
    """Raises ``ValueError`` unless ``group`` indexes one of ``num_groups`` parameter groups.

    Args:
        group (int): the index asked for (groups are numbered from 0, as ``param_groups``).
        num_groups (int): how many groups the optimizer has.

    Raises:
        ValueError: ``"parameter group <group> does not exist (the optimizer has <n> groups)"``.
    """
    if group < 0 or group >= num_groups:
        raise ValueError(
            "parameter group " + str(group) + " does not exist (the optimizer has " + str(num_groups) + " groups)"
        )


def dtype_name(dtype: torch.dtype) -> str:
    """Return ``"torch.float32"``-style names (TorchScript prints dtypes as numbers): the op
    library's (``ops.dtype_name``), which its checks' messages use too."""
    return ops.dtype_name(dtype)


def describe(t: Tensor) -> str:
    """``"shape [4, 5], dtype torch.float32, device cpu"`` for a tensor: the op library's
    (``ops.describe_tensor``), as its gradient checks describe one."""
    return ops.describe_tensor(t)


def check_one_gradient(
    index: int, param: Tensor, grad: Tensor, sparse_error: Optional[str], dense_error: Optional[str] = None
) -> None:
    """Check that ``grad`` can be the gradient of ``param``: :func:`check_gradients` for one.

    Args:
        index: the flat parameter index, used in the message (``"gradients[3]: ..."``).
        param: the parameter.
        grad: its gradient: a dense or sparse COO tensor of the parameter's shape, dtype and
            device; sparse only when ``sparse_error`` is None, dense only when ``dense_error``
            is None.
        sparse_error: the message of the ``RuntimeError`` raised for a sparse gradient (the text
            torch uses, e.g. ``"Adam does not support sparse gradients, ..."``), or ``None`` when
            the parameter's group accepts sparse gradients.
        dense_error: the message of the ``RuntimeError`` raised for a dense gradient
            (SparseAdam's), or ``None``.

    Raises:
        ValueError: not a dense or sparse COO tensor, or shape, dtype or device differ, naming
            the index and both descriptions.
        RuntimeError: ``grad`` is sparse and its group does not take sparse gradients, or dense
            where ``dense_error`` is set.
    """
    gradients: List[Optional[Tensor]] = [grad]
    _check([param], gradients, [0, 1], [sparse_error], dense_error, index)


def _check(
    params: List[Tensor], gradients: List[Optional[Tensor]], offsets: List[int], sparse_errors: List[Optional[str]],
    dense_error: Optional[str], first_index: int,
) -> None:
    """The op library's check (``gilfree_optim::check_gradients``): raised by the op eagerly
    (and under torch.compile), answered by ``gradient_error`` and raised here in TorchScript
    (where an op's error would lose its type)."""
    if torch.jit.is_scripting():
        kind, message = ops.gradient_error(params, gradients, offsets, sparse_errors, dense_error, first_index)
        if kind == "ValueError":
            raise ValueError(message)
        if kind != "":
            raise RuntimeError(message)
    else:
        _kernels.eager_load()  # ImportError naming the library file when it is missing
        ops.check_gradients(params, gradients, offsets, sparse_errors, dense_error, first_index)


def check_gradients(
    params: List[Tensor],
    gradients: List[Optional[Tensor]],
    offsets: List[int],
    sparse_errors: List[Optional[str]],
    groups: List[List[Tensor]],
    group_indices: List[List[int]],
    dense_error: Optional[str] = None,
) -> Tuple[List[List[int]], List[List[Tensor]], List[bool]]:
    """Validate a ``step`` call's gradients and sort the present ones by parameter group.

    The check is the op library's (``gilfree_optim::check_gradients``, ``gradient_error`` in
    TorchScript: ``csrc/gradient_check.cpp``), the one the plugin's native local optimizers make too: every
    gradient a dense (strided) or sparse COO tensor of its parameter's shape, dtype and device,
    sparse only in a group that takes sparse gradients, dense only without ``dense_error``;
    the first gradient that fails raises, before anything is sorted.

    Args:
        params: the optimizer's parameters, flat, in group order.
        gradients: one entry per parameter; ``None`` skips that parameter.
        offsets: group ``g`` holds the flat indices ``offsets[g] <= i < offsets[g + 1]``.
        sparse_errors: for each group, its ``sparse_error`` (see :func:`check_one_gradient`).
        groups: the parameters of each group (``params[offsets[g]:offsets[g + 1]]``).
        group_indices: ``list(range(offsets[g], offsets[g + 1]))`` for each group, made once by
            the caller; returned (not copied) for a group whose gradients are all present, so
            neither the caller nor the receiver may modify these lists.
        dense_error: the message for a dense gradient (SparseAdam's), or ``None``.

    Returns:
        For each group: the flat indices of the parameters that have a gradient, those
        gradients, and whether any of them is sparse.

    Raises:
        ValueError: ``len(gradients) != len(params)``, or a gradient that does not fit its
            parameter (the message names the index).
        RuntimeError: a sparse gradient in a group that does not take them, or a dense one
            where ``dense_error`` is set.
        ImportError: eagerly, the op library cannot be loaded (naming the file).

    Every step pays for the sorting loop, and TorchScript pays per interpreted instruction, so
    it carries no variables (no ``break``, no flags: a group's sparse gradients are counted in
    a list) and a group with a gradient for every parameter gets ``group_indices[g]``.
    """
    _check(params, gradients, offsets, sparse_errors, dense_error, 0)
    indices: List[List[int]] = []
    grads: List[List[Tensor]] = []
    sparse: List[bool] = []
    for g in range(len(offsets) - 1):
        start = offsets[g]
        end = offsets[g + 1]
        group_gradients = gradients if start == 0 else gradients[start:end]
        group_grads: List[Tensor] = []
        sparse_seen: List[bool] = []
        for k in range(end - start):
            grad = group_gradients[k]
            if grad is not None:
                if grad.is_sparse:
                    sparse_seen.append(True)
                group_grads.append(grad)
        if len(group_grads) == end - start:
            indices.append(group_indices[g])
        else:
            present: List[int] = []
            for k in range(end - start):
                if group_gradients[k] is not None:
                    present.append(start + k)
            indices.append(present)
        grads.append(group_grads)
        sparse.append(len(sparse_seen) > 0)
    return indices, grads, sparse


def check_params(params: List[Tensor]) -> None:
    """Check a parameter list the way ``torch.optim.Optimizer`` does.

    Raises:
        ValueError: a parameter that is not a leaf
            (``"can't optimize a non-leaf Tensor"``); a sparse or complex parameter (not
            supported). Duplicates are checked where the parameter index is built.
    """
    for i in range(len(params)):
        p = params[i]
        if not (p.is_leaf or p.retains_grad):
            raise ValueError("can't optimize a non-leaf Tensor")
        if p.is_sparse:
            raise ValueError("params[" + str(i) + "]: sparse parameters are not supported")
        if p.is_complex():
            raise ValueError(
                "params[" + str(i) + "]: complex parameters are not supported by functional_optim"
            )


def check_sparse_adam_params(group: int, params: List[Tensor]) -> None:
    """``torch.optim.SparseAdam``'s checks of group ``group``'s parameters (its messages, with
    ``[group, index]`` pairs), made before :func:`check_params`.

    Raises:
        ValueError: ``"Sparse params at indices [[0, 1]]: SparseAdam requires dense parameter
            tensors"``; ``"Complex params at indices [[0, 1]]: SparseAdam does not support
            complex parameters"``.
    """
    sparse_at: List[List[int]] = []
    complex_at: List[List[int]] = []
    for i in range(len(params)):
        if params[i].is_sparse:
            sparse_at.append([group, i])
        if params[i].is_complex():
            complex_at.append([group, i])
    if len(sparse_at) > 0:
        raise ValueError(
            "Sparse params at indices " + str(sparse_at) + ": SparseAdam requires dense parameter tensors"
        )
    if len(complex_at) > 0:
        raise ValueError(
            "Complex params at indices " + str(complex_at) + ": SparseAdam does not support complex parameters"
        )


def check_muon_params(params: List[Tensor]) -> None:
    """``torch.optim.Muon``'s check of its parameters (its constructor's; here also for a group
    added later, whose step torch refuses only when it comes, after the groups before it).

    Raises:
        ValueError: ``"Muon only supports 2D parameters whereas we found a parameter with size:
            torch.Size([5])"``.
    """
    for p in params:
        if p.dim() != 2:
            raise ValueError(
                "Muon only supports 2D parameters whereas we found a parameter with size: torch.Size("
                + str(list(p.shape)) + ")"
            )


def check_lr(lr: float) -> None:
    """Raise ``ValueError("Invalid learning rate: {lr}")`` unless ``lr >= 0``."""
    if not 0.0 <= lr:
        raise ValueError("Invalid learning rate: " + str(lr))


def check_non_negative(value: float, what: str) -> None:
    """Raise ``ValueError("Invalid {what} value: {value}")`` unless ``value >= 0`` (NaN fails)."""
    if not 0.0 <= value:
        raise ValueError("Invalid " + what + " value: " + str(value))


def check_betas(beta1: float, beta2: float) -> None:
    """Raise torch's ``"Invalid beta parameter at index i: ..."`` unless ``0 <= beta < 1``."""
    if not 0.0 <= beta1 < 1.0:
        raise ValueError("Invalid beta parameter at index 0: " + str(beta1))
    if not 0.0 <= beta2 < 1.0:
        raise ValueError("Invalid beta parameter at index 1: " + str(beta2))


def check_impl_flags(
    foreach: Optional[bool], fused: Optional[bool], capturable: bool, differentiable: bool
) -> None:
    """Check the implementation flags every optimizer shares.

    Raises:
        RuntimeError: ``fused`` and ``foreach`` both True, or ``fused`` with ``differentiable``
            (torch's messages).
        ValueError: ``capturable=True`` (CUDA-graph capture is not supported: our step reads
            ``step`` on the host) or ``differentiable=True`` (autograd through the step is not
            supported: the step runs under ``torch.no_grad()``).
    """
    if fused is not None and fused:
        if differentiable:
            raise RuntimeError("`fused` does not support `differentiable`")
        if foreach is not None and foreach:
            raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
    if capturable:
        raise ValueError("capturable=True is not supported by functional_optim")
    if differentiable:
        raise ValueError("differentiable=True is not supported by functional_optim")


def check_fused_params(params: List[Tensor], devices: List[str]) -> None:
    """Raise torch's ``RuntimeError`` unless every parameter is floating point on one of
    ``devices`` (``["cpu", "cuda"]`` for torch's kernels, ``["cpu"]`` where only ours exist)."""
    for p in params:
        if not (p.is_floating_point() and p.device.type in devices):
            quoted: List[str] = []
            for d in devices:
                quoted.append("'" + d + "'")
            raise RuntimeError(
                "`fused=True` requires all the params to be floating point Tensors of supported devices: ["
                + ", ".join(quoted) + "] but " + dtype_name(p.dtype) + " and " + p.device.type
            )


def check_values(h: Dict[str, float], names: List[str]) -> None:
    """torch's checks of the hyperparameters ``names``, in that order (torch's order).

    ``lr`` >= 0 (``"Invalid learning rate: ..."``); ``betas`` (``beta1``, ``beta2``) each in
    [0, 1); ``rho`` in [0, 1]; ``etas`` with 0 < ``etaminus`` < 1 < ``etaplus``; every other name
    >= 0 (``"Invalid <name> value: ..."``, with ``eps`` named ``epsilon``). NaN fails each.

    Raises:
        ValueError: the first value that fails, with torch's message.
    """
    for name in names:
        if name == "lr":
            check_lr(h["lr"])
        elif name == "betas":
            check_betas(h["beta1"], h["beta2"])
        elif name == "eps":
            check_non_negative(h["eps"], "epsilon")
        elif name == "rho":
            if not 0.0 <= h["rho"] <= 1.0:
                raise ValueError("Invalid rho value: " + str(h["rho"]))
        elif name == "etas":
            if not 0.0 < h["etaminus"] < 1.0 < h["etaplus"]:
                raise ValueError("Invalid eta values: " + str(h["etaminus"]) + ", " + str(h["etaplus"]))
        else:
            check_non_negative(h[name], name)


def choice_index(value: Optional[str], choices: List[str], what: str) -> float:
    """A hyperparameter that is None or one of ``choices`` as the typed dicts hold it: 0 for None,
    ``k + 1`` for ``choices[k]`` (as ``functional_optim._state.CHOICE_HYPERPARAMETERS`` lists them).

    Raises:
        ValueError: another string: ``"<what> <value> is not supported"`` (torch.optim.Muon's
            message for its ``adjust_lr_fn``).
    """
    if value is None:
        return 0.0
    for k in range(len(choices)):
        if choices[k] == value:
            return float(k + 1)
    raise ValueError(what + " " + value + " is not supported")


def check_choice(value: float, count: int, what: str) -> None:
    """Raise ``ValueError`` unless ``value`` is a typed choice (0, or 1 to ``count``; see
    :func:`choice_index`), naming ``what``."""
    if not (value == 0.0 or (value >= 1.0 and value <= count and value == float(int(value)))):
        raise ValueError(
            what + " must be 0 (None) or the number of one of its " + str(count) + " choices, got " + str(value)
        )


def option(options: Dict[str, Optional[bool]], name: str) -> Optional[bool]:
    """``options[name]``, or ``None`` when the optimizer has no such flag."""
    if name in options:
        return options[name]
    return None


def check_options(options: Dict[str, Optional[bool]]) -> None:
    """:func:`check_impl_flags` on a group's flags (a missing flag counts as unset)."""
    capturable = option(options, "capturable")
    differentiable = option(options, "differentiable")
    check_impl_flags(
        option(options, "foreach"), option(options, "fused"), capturable is not None and capturable,
        differentiable is not None and differentiable,
    )


# ------------------------------------------------------------------ eager only: Tensor values

# torch.optim.Adam and AdamW refuse Tensor hyperparameters with foreach=True (without
# capturable=True, which functional_optim does not support); the other classes take them.
_NO_TENSOR_FOREACH = ("adam", "adamw")
_FOREACH_MESSAGE = " as a Tensor is not supported for capturable=False and foreach=True"


def tensor_number(
    optimizer: Optional[str], key: str, value: Any, index: Optional[int], foreach: Optional[bool],
    in_constructor: bool,
) -> float:
    """Eager only: the number that a Tensor hyperparameter holds now, after torch's checks.

    torch 2.13 types ``lr`` (every class), ``betas`` (Adam, AdamW) and ``weight_decay`` (SGD)
    as ``float | Tensor``, and its steps also take a one-element Tensor for the others' betas
    and most other values; functional_optim takes a one-element Tensor for any numeric
    hyperparameter, with torch's checks where torch has them (below).

    Args:
        optimizer: the optimizer's name (``"adam"``...), or None where the class is not known
            here (a value sent to another process, checked there): then only the size is checked.
        key: torch's name of the hyperparameter (``"lr"``, ``"betas"``, ``"weight_decay"``).
        value: a Tensor with one element (shape ``[]`` or ``[1]``...), any dtype and device
            (read with ``.item()``: a device sync for a CUDA tensor).
        index: the position in a pair (``betas[0]``), else None.
        foreach: the group's ``foreach`` flag.
        in_constructor: the value is a constructor argument (torch checks those in
            ``__init__``) rather than a param-group value (torch checks those at ``step``).

    Returns:
        float: ``float(value.item())``.

    Raises:
        ValueError: ``lr`` with more than one element (``"Tensor lr must be 1-element"``); for
            ``Adam``/``AdamW``, a constructor's Tensor ``lr`` with ``foreach=True``
            (``"lr as a Tensor is not supported for capturable=False and foreach=True"``), a
            param group's Tensor beta with ``foreach=True`` (``"beta1 as a Tensor ..."``).
        RuntimeError: a param group's Tensor ``lr`` with ``foreach=True`` (``Adam``/``AdamW``,
            torch's step-time error); a Tensor other than ``lr`` with more than one element
            (``"Boolean value of Tensor with more than one value is ambiguous"``, what torch's
            range check raises).
    """
    if optimizer is not None:
        if optimizer in _NO_TENSOR_FOREACH and foreach:
            if key == "lr":
                if in_constructor:
                    raise ValueError("lr" + _FOREACH_MESSAGE)
                raise RuntimeError("lr" + _FOREACH_MESSAGE)
            if key == "betas" and not in_constructor:  # (the constructor checks betas later)
                raise ValueError(f"beta{index + 1}" + _FOREACH_MESSAGE)
    if value.numel() != 1:
        if key == "lr":
            raise ValueError("Tensor lr must be 1-element")
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return float(value.item())


def check_tensor_betas(optimizer: str, betas: Any, foreach: Optional[bool]) -> None:
    """Eager only: ``torch.optim.Adam``'s and ``AdamW``'s constructor checks of ``betas``
    that follow the range checks (no check for the other classes).

    Raises:
        ValueError: ``"betas must be either both floats or both Tensors"`` (ints included, as
            torch); ``"betas[i] as a Tensor is not supported for capturable=False and
            foreach=True"``.
    """
    if optimizer not in _NO_TENSOR_FOREACH:
        return
    from torch import Tensor as _Tensor

    both_floats = isinstance(betas[0], float) and isinstance(betas[1], float)
    both_tensors = isinstance(betas[0], _Tensor) and isinstance(betas[1], _Tensor)
    if not (both_floats or both_tensors):
        raise ValueError("betas must be either both floats or both Tensors")
    if both_tensors and foreach:
        raise ValueError("betas[0]" + _FOREACH_MESSAGE)
