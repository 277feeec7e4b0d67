"""The op library's ops, one typed function each: functional_optim's Python face of
``torch.ops.gilfree_optim`` (schemas in ``csrc/ops.cpp``).

The other modules call these functions, not ``torch.ops.gilfree_optim`` (the plugin's native
local optimizers call the same ops from C++, through the dispatcher). Each function calls its
op and does nothing more, so it behaves exactly as the op does. They compile with TorchScript
(the compiled graph calls the op itself) and trace under ``torch.compile`` (each op has a meta
kernel). A group's values go to the ops by name (``names``, ``values``: the hyperparameters,
then each flag that is set as 1.0 or 0.0; functional names).

This package's kernels (``torch.ops.gilfree_optim.<name>_``, ``csrc/cpu``), which the group
steps call for the optimizers torch has no fused kernel for, are reached by name with
:func:`functional_optim._kernels.op_for` (tests and benchmarks).
"""
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

__all__ = [
    "group_step", "group_step_packed", "new_state", "state_keys", "group_step_devices", "check_gradients",
    "gradient_error", "check_param_count", "param_count_error", "dtype_name", "describe_tensor", "fused_dtype",
    "hyperparameter_choices",
]


def group_step(
    optimizer: str, params: List[Tensor], grads: List[Tensor], state: List[Tensor], fresh: List[bool],
    names: List[str], values: List[float], tensor_names: List[str], tensor_values: List[Tensor],
) -> None:
    """The op ``gilfree_optim::group_step``: one step of one parameter group of ``optimizer``
    (``"adam"``...: ``csrc/steps/<optimizer>.cpp``), in place.

    Args:
        optimizer (str): the optimizer's name.
        params (List[Tensor]): the parameters (one device and dtype per kernel call is the op's
            business: any mix).
        grads (List[Tensor]): their gradients, checked by the caller (shape, dtype, device like
            the parameter; sparse COO only where the optimizer takes them).
        state (List[Tensor]): every parameter's state tensors, parameter after parameter, each
            in the order of its keys (:func:`state_keys`); all present.
        fresh (List[bool]): per parameter, whether its state was just made (:func:`new_state`).
        names, values: the group's values.
        tensor_names, tensor_values (List[Tensor]): the hyperparameters given as 1-element
            Tensors (any dtype, on the CPU), by name: a step that computes with one does so as
            torch does (SparseAdam's Tensor lr: in the Tensor's dtype).

    Raises:
        ValueError: an unknown optimizer, lists that do not fit, a value the step needs missing.
        RuntimeError: what a kernel raises.
    """
    torch.ops.gilfree_optim.group_step(optimizer, params, grads, state, fresh, names, values, tensor_names, tensor_values)


def group_step_packed(
    optimizer: str, params: List[Tensor], grads: List[Tensor], buffers: List[Tensor], layout: Tensor,
    fresh: List[bool], names: List[str], values: List[float], tensor_names: List[str], tensor_values: List[Tensor],
) -> None:
    """The op ``gilfree_optim::group_step_packed``: :func:`group_step` of a group whose state
    tensors are views of ``buffers`` (``GroupedState.pack``), in place.

    The op makes the state tensors from ``buffers`` and ``layout`` at its first call with them
    and keeps them while those tensors are alive and unchanged (it keeps no buffer alive), so
    that a step passes a few tensors instead of every state tensor.

    Args:
        optimizer, params, grads, fresh, names, values, tensor_names, tensor_values: as for
            :func:`group_step`.
        buffers (List[Tensor]): contiguous 1-D dense tensors (one per dtype of the state, on
            the CPU) holding the state, written in place.
        layout (Tensor): contiguous 1-D int64 on the CPU: per state tensor, in
            :func:`group_step`'s order, the index of its buffer, its offset there (elements),
            its number of dimensions and its sizes (the tensor is contiguous there).

    Raises:
        ValueError: a layout that does not fit the buffers, and what :func:`group_step` raises.
        RuntimeError: what a kernel raises.
    """
    torch.ops.gilfree_optim.group_step_packed(
        optimizer, params, grads, buffers, layout, fresh, names, values, tensor_names, tensor_values
    )


def new_state(optimizer: str, params: List[Tensor], grads: List[Tensor], names: List[str],
              values: List[float]) -> List[Tensor]:
    """The op ``gilfree_optim::new_state``: the state of each of ``params`` at its first step, as
    ``torch.optim`` creates it.

    Args:
        optimizer (str): the optimizer's name.
        params (List[Tensor]): the parameters (any shape, a floating dtype, any device the
            group step takes; meta tensors give meta state, for shapes).
        grads (List[Tensor]): their first gradients (SGD's momentum buffer is made like one).
        names, values: the group's values; ``fused`` given as 0.0 asks for the state of
            torch's single-tensor and foreach implementations (as torch makes it for a group
            whose ``fused`` is False).

    Returns:
        List[Tensor]: parameter after parameter, each in the order of its keys
        (:func:`state_keys`): ``'step'`` a 0-dim float32 tensor on the parameter's device (with
        ``fused`` 0.0: of torch's scalar dtype, float64 when that is the default dtype, on the
        CPU; ASGD's on the parameter's device and Adafactor's on the CPU, of that dtype, as
        torch keeps them), the others like the parameter (shape, dtype, device), or as the
        optimizer keeps them.

    Raises:
        ValueError: an unknown optimizer, lists that do not fit, a value it needs missing.
    """
    return torch.ops.gilfree_optim.new_state(optimizer, params, grads, names, values)


def state_keys(optimizer: str, dim: int, names: List[str], values: List[float]) -> List[str]:
    """The op ``gilfree_optim::state_keys``: ``torch.optim``'s state keys of a parameter.

    Args:
        optimizer (str): the optimizer's name.
        dim (int): the parameter's number of dimensions.
        names, values: the group's values.

    Returns:
        List[str]: the keys, in torch's order of creation.

    Raises:
        ValueError: an unknown optimizer, or a value it needs missing.
    """
    return torch.ops.gilfree_optim.state_keys(optimizer, dim, names, values)


def group_step_devices(optimizer: str) -> List[str]:
    """The op ``gilfree_optim::group_step_devices``.

    Args:
        optimizer (str): an optimizer's name.

    Returns:
        List[str]: the device types whose parameters its group step takes (``[]`` for a name
        without one).

    Raises nothing.
    """
    return torch.ops.gilfree_optim.group_step_devices(optimizer)


def fused_dtype(dtype: torch.dtype) -> bool:
    """The op ``gilfree_optim::fused_dtype``: whether the fused implementations (this
    package's kernels and torch's) take parameters of ``dtype`` (``csrc/fused_optim.h``: the one
    list of those dtypes).

    Args:
        dtype (torch.dtype): any dtype.

    Returns:
        bool: True for float32, float64, bfloat16 and float16.

    Raises nothing.
    """
    return torch.ops.gilfree_optim.fused_dtype(dtype)


def hyperparameter_choices() -> Dict[str, List[str]]:
    """The op ``gilfree_optim::hyperparameter_choices``: the hyperparameters that ``torch.optim``
    takes as None or one of some strings (Muon's ``adjust_lr_fn``), each with its strings in the
    order of their numbers (a group's values hold None as 0, the k-th string as k + 1): the group
    steps' own table (``csrc/steps/<name>.cpp``), read by ``_state.CHOICE_HYPERPARAMETERS``.

    Returns:
        Dict[str, List[str]]: hyperparameter name -> its strings
        (``{"adjust_lr_fn": ["original", "match_rms_adamw"]}``).

    Raises nothing.
    """
    return torch.ops.gilfree_optim.hyperparameter_choices()


def check_gradients(
    params: List[Tensor], gradients: List[Optional[Tensor]], offsets: List[int], sparse_errors: List[Optional[str]],
    dense_error: Optional[str], first_index: int = 0,
) -> None:
    """The op ``gilfree_optim::check_gradients``: the check every step makes of its gradients,
    before anything changes (``csrc/gradient_check.cpp``; :func:`gradient_error` is the same
    check, answering instead of raising).

    Args:
        params (List[Tensor]): the parameters, flat, group after group.
        gradients (List[Optional[Tensor]]): one per parameter (None skips one).
        offsets (List[int]): group ``g`` holds the flat indices ``offsets[g] <= i < offsets[g + 1]``
            (from 0 to ``len(params)``).
        sparse_errors (List[Optional[str]]): per group, the ``RuntimeError`` message for a sparse
            gradient (torch's text), or None where the group takes sparse COO gradients.
        dense_error (Optional[str]): the ``RuntimeError`` message for a dense gradient
            (SparseAdam's), or None.
        first_index (int): the flat index of ``params[0]`` in the messages (``gradients[i]``).

    Raises:
        ValueError: ``len(gradients) != len(params)``; a gradient that is not a dense or sparse
            COO tensor of its parameter's shape, dtype and device (naming its index and both
            descriptions: ``"gradients[3]: expected shape [4, 5], dtype torch.float32, device
            cpu (like its parameter); got ..."``); offsets that do not fit.
        RuntimeError: a sparse gradient in a group that does not take them, or a dense one where
            ``dense_error`` is set (the message given).
    """
    torch.ops.gilfree_optim.check_gradients(params, gradients, offsets, sparse_errors, dense_error, first_index)


def gradient_error(
    params: List[Tensor], gradients: List[Optional[Tensor]], offsets: List[int], sparse_errors: List[Optional[str]],
    dense_error: Optional[str], first_index: int = 0,
) -> Tuple[str, str]:
    """The op ``gilfree_optim::gradient_error``: :func:`check_gradients`' check, whose first
    failure it answers instead of raising it, for code that raises it itself (TorchScript: an
    op's error would reach the caller as a plain ``RuntimeError`` there; the plugin's native
    local optimizers call it from C++).

    Args:
        params, gradients, offsets, sparse_errors, dense_error, first_index: as for
            :func:`check_gradients` (tensors of any shape, dtype and device: the check compares
            each gradient's with its parameter's).

    Returns:
        Tuple[str, str]: ``("", "")`` when every gradient passes; else the Python exception type
        :func:`check_gradients` raises (``"ValueError"`` or ``"RuntimeError"``) and its message.

    Raises nothing.
    """
    return torch.ops.gilfree_optim.gradient_error(params, gradients, offsets, sparse_errors, dense_error, first_index)


def check_param_count(count: int) -> None:
    """The op ``gilfree_optim::check_param_count``: the check every optimizer makes of its
    number of parameters (the classes of this package, eagerly and in TorchScript, and the
    plugin's native local optimizers, from C++), with torch's message.

    Args:
        count (int): the number of parameters (or of param groups given).

    Raises:
        ValueError: ``count`` is 0 (``"optimizer got an empty parameter list"``).
    """
    torch.ops.gilfree_optim.check_param_count(count)


def param_count_error(count: int) -> str:
    """The op ``gilfree_optim::param_count_error``: :func:`check_param_count`'s check, whose
    message it answers instead of raising it, for code that raises it itself (TorchScript: an
    op's error would reach the caller as a plain ``RuntimeError`` there).

    Args:
        count (int): the number of parameters.

    Returns:
        str: ``""`` when ``count`` is above 0; else ``"optimizer got an empty parameter list"``
        (the ``ValueError`` message).

    Raises nothing.
    """
    return torch.ops.gilfree_optim.param_count_error(count)


def dtype_name(dtype: torch.dtype) -> str:
    """The op ``gilfree_optim::dtype_name``: a dtype as the checks' messages name it (the one
    table of those names, ``csrc/gradient_check.cpp``; TorchScript prints dtypes as numbers).

    Args:
        dtype (torch.dtype): any dtype.

    Returns:
        str: ``"torch.float32"``-style (``str(dtype)``'s) for the floating, complex, integer
        and bool dtypes; ``"dtype <name>"`` for another.

    Raises nothing.
    """
    return torch.ops.gilfree_optim.dtype_name(dtype)


def describe_tensor(t: Tensor) -> str:
    """The op ``gilfree_optim::describe_tensor``: a tensor as the checks' messages describe it.

    Args:
        t (Tensor): any tensor (any shape, dtype, device, layout; nested too): only its
            metadata is read.

    Returns:
        str: ``"shape [4, 5], dtype torch.float32, device cpu"``, with ``", sparse"`` for a
        sparse COO tensor and ``"shape (nested)"`` for a nested one.

    Raises nothing.
    """
    return torch.ops.gilfree_optim.describe_tensor(t)
