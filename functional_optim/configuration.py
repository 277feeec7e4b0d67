"""What code that runs an optimizer's steps itself needs of an optimizer of this package, as
public functions, so that it reads no private attribute of it.

The plugin's native local optimizers (``plugin/optim/_native.py``) keep an optimizer of this
package for everything but the steps (its values, their checks, loading and saving state: the
class's own code) and run its steps in C++, without the GIL, with the op library's group step
(the one the class's default implementation runs, ``csrc/group_step.h``) on state they hold
there. What they read and change of the optimizer goes through here:

* :func:`optimizer_name`, :func:`step_plans`, :func:`not_fused`, :func:`implementation`,
  :func:`dense_error`: what a group step needs of each group, and which groups run it;
* :func:`set_group`: a group's values set at once, Tensors followed, validated first;
* :func:`check_group`: a group's values checked as the class's ``set_group`` checks them;
* :func:`group_update`: a group's values updated with ``torch.optim``-named values (a saved
  param group, a scheduler's write), checked;
* :func:`torch_group`, :func:`torch_state_dict`, :func:`state_entry`, :func:`tuple_parts`,
  :func:`torch_value`: the ``torch.optim`` format of values and state;
* :func:`holds_tensor`, :func:`copy_tensors`: a group value that is or holds a Tensor, and its
  copy;
* :func:`check_gradients`: the check every step makes of its gradients (count, shape, dtype,
  device), with this package's messages (the op library's ``check_gradients``, which the
  native local optimizers call from C++).
"""
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from . import _kernels, _validation
from ._validation import check_group_index
from ._param_groups import TensorRules, split_values
from ._state import TUPLE_HYPERPARAMETERS, choose_impl, copy_tensors, holds_tensor, torch_value, tuple_parts

__all__ = [
    "StepPlan", "optimizer_name", "step_plans", "not_fused", "implementation", "dense_error", "set_group",
    "check_group", "group_update", "tensor_value", "torch_group", "torch_state_dict", "state_entry",
    "check_gradients", "split_values", "TUPLE_HYPERPARAMETERS", "tuple_parts", "torch_value", "holds_tensor",
    "copy_tensors", "check_group_index",
]


class StepPlan(NamedTuple):
    """A parameter group's values as its group step takes them (:func:`step_plans` makes it).
    A named tuple: its arguments, in order, are its fields, read by the same names.

    Raises nothing: a named tuple.

    Args:
        names (List[str]), values (List[float]): the group's hyperparameters (functional names,
            pairs split) then each flag that is set (1.0 or 0.0), as the ops take them
            (``torch.ops.gilfree_optim.group_step``'s ``names``, ``values``).
        tensor_names (List[str]), tensor_values (List[Tensor]): the hyperparameters given as
            1-element Tensors (the Tensor objects the group follows: shape ``[]`` or ``[1]``, any
            floating dtype, any device): the group step reads their values when it runs.
        sparse_error (Optional[str]): the ``RuntimeError`` message for a sparse gradient in the
            group (torch's), or None where it takes sparse COO gradients.
        implementation (str): what the group's steps run: ``"fused"`` (the op library's group
            step), ``"foreach"`` or ``"single"``.
    """

    names: List[str]
    values: List[float]
    tensor_names: List[str]
    tensor_values: List[Tensor]
    sparse_error: Optional[str]
    implementation: str


def optimizer_name(optimizer: Any) -> str:
    """The name of ``optimizer``'s optimizer in the op library (``"adam"``, ``"sparse_adam"``...):
    its group step is ``torch.ops.gilfree_optim.group_step(name, ...)``.

    Args:
        optimizer: an eager instance of one of this package's optimizer classes.

    Returns:
        str: the name.

    Raises nothing.
    """
    return optimizer._s.name


def step_plans(optimizer: Any) -> List[StepPlan]:
    """Each parameter group's values as its group step takes them, now.

    Args:
        optimizer: an eager instance of one of this package's optimizer classes.

    Returns:
        List[StepPlan]: one per group, new lists (the Tensor hyperparameters themselves).

    Raises nothing.
    """
    s = optimizer._s
    s.sync_tensor_hparams()
    return [
        StepPlan(list(s.op_names[g]), list(s.op_values[g]), list(s.tensor_hparams[g].keys()),
                 list(s.tensor_hparams[g].values()), s.sparse_errors[g], s.impl[g])
        for g in range(s.num_groups())
    ]


def dense_error(optimizer: Any) -> Optional[str]:
    """The ``RuntimeError`` message for a dense gradient (``torch.optim.SparseAdam``'s).

    Args:
        optimizer: an eager instance of one of this package's optimizer classes.

    Returns:
        Optional[str]: the message, or None for an optimizer that takes dense gradients.

    Raises nothing.
    """
    return optimizer._s.dense_error


def implementation(optimizer: Any, group: int, options: Dict[str, Optional[bool]]) -> str:
    """What group ``group`` of ``optimizer`` would run with flags ``options`` (its whole set of
    flags): ``"fused"``, ``"foreach"`` or ``"single"``, chosen as the class chooses (explicit
    flags first; with ``foreach`` and ``fused`` unset, the fused implementation where every
    parameter is a dense floating-point tensor on a device it takes).

    Args:
        optimizer: an eager instance of one of this package's optimizer classes.
        group (int): a param group, from 0.
        options (Dict[str, Optional[bool]]): flags by name.

    Returns:
        str: the implementation.

    Raises:
        ValueError: no such group.
        ImportError: ``fused=True`` and the op library cannot be loaded (naming the file).
        RuntimeError: ``fused=True`` with a parameter the fused implementation does not take
            (torch's message).
    """
    optimizer._s.check_group(group)
    return optimizer._s.choose_group_impl(group, options)


def not_fused(optimizer: Any) -> Optional[str]:
    """Why some parameter group of ``optimizer`` does not run the fused implementation, in words.

    Args:
        optimizer: an eager instance of one of this package's optimizer classes.

    Returns:
        Optional[str]: ``"foreach=True"``, ``"no fused implementation for RMSprop on cuda"``...
        (naming the group when there are several); None when every group runs it.

    Raises nothing.
    """
    s = optimizer._s
    class_name = type(optimizer).__name__
    many = s.num_groups() > 1
    for g in range(s.num_groups()):
        if s.impl[g] == "fused":
            continue
        o = s.options[g]
        if o.get("foreach") is True:
            reason = "foreach=True"
        elif o.get("fused") is False:
            reason = "fused=False"
        elif o.get("foreach") is False:
            reason = "foreach=False"
        else:
            devices = _kernels.fused_devices(s.name)
            reason = "the op library with the fused implementations is not available"
            for p in s.cache_params[g]:
                if not devices:
                    break
                if p.device.type not in devices:
                    reason = f"no fused implementation for {class_name} on {p.device.type}"
                    break
                if not _kernels.fused_dtype(p.dtype):
                    reason = f"no fused implementation for parameters of dtype {p.dtype}"
                    break
            error = _kernels.default_error()
            if not devices and error:
                reason += f" ({error})"
        return f"{reason} (param group {g})" if many else reason
    return None


def set_group(optimizer: Any, group: int, hyperparameters: Dict[str, float], options: Dict[str, Optional[bool]],
              tensor_hyperparameters: Optional[Dict[str, Tensor]] = None) -> None:
    """Sets several values of one group of ``optimizer`` at once, validated together first with
    the class's own checks (torch's messages); nothing changes when they fail. As the class's
    ``set_group``, and Tensors to follow too.

    Args:
        optimizer: an eager instance of one of this package's optimizer classes.
        group (int): the param group, from 0.
        hyperparameters (Dict[str, float]): numbers by functional name (``lr``, ``beta1``...); a
            number replaces a Tensor the name followed.
        options (Dict[str, Optional[bool]]): flags by name; ``None`` only for ``foreach`` and
            ``fused``.
        tensor_hyperparameters (Dict[str, Tensor]): Tensors to follow, by functional name: one
            element each (shape ``[]`` or ``[1]``), any dtype and device, read before every
            step, as ``torch.optim`` reads a Tensor ``lr``.

    Raises:
        ValueError: no such group or name, an invalid value (torch's messages).
        RuntimeError: ``fused`` with ``foreach`` (torch's message), or a Tensor value torch
            refuses with the group's flags.
    """
    s = optimizer._s
    tensors = dict(tensor_hyperparameters or {})
    s.check_group(group)
    for name in tensors:
        if name not in s.hparams[group]:
            raise ValueError(f"unknown hyperparameter '{name}'; this optimizer has {list(s.hparams[group])}")
    foreach = options.get("foreach", s.options[group].get("foreach"))
    read = {name: tensor_value(type(optimizer), name, value, foreach) for name, value in tensors.items()}
    optimizer.set_group(group, dict(hyperparameters, **read), options)
    for name, value in tensors.items():
        s.bind_tensor(group, name, value)
    s.refresh_param_group(group)


def check_group(functional_class: type, hyperparameters: Dict[str, float],
                options: Dict[str, Optional[bool]]) -> Optional[str]:
    """Checks a whole group's values as the class's ``set_group`` does, without an instance.

    Args:
        functional_class (type): one of this package's optimizer classes.
        hyperparameters (Dict[str, float]), options (Dict[str, Optional[bool]]): the group's
            values by functional name.

    Returns:
        Optional[str]: the group's ``RuntimeError`` message for a sparse gradient with its
        fused implementation (None: it takes sparse COO gradients).

    Raises:
        ValueError: an invalid value (torch's message).
        RuntimeError: ``fused`` together with ``foreach`` (torch's message).
    """
    functional_class._check(None, hyperparameters, options)
    _validation.check_options(options)
    no_params: List[Tensor] = []
    impl = choose_impl(no_params, options.get("foreach"), options.get("fused"))
    return functional_class._sparse_error(None, hyperparameters, impl)


def group_update(functional_class: type, hyperparameters: Dict[str, float], options: Dict[str, Optional[bool]],
                 values: Dict[str, Any]) -> Tuple[Dict[str, float], Dict[str, Optional[bool]], Dict[str, Any]]:
    """A group's values updated with ``values`` under ``torch.optim``'s names (a saved param
    group: pairs as tuples, 1-element Tensors allowed; keys the optimizer does not know are
    ignored, as ``torch.optim`` ignores them), checked as ``load_state_dict`` checks them.

    Args:
        functional_class (type): one of this package's optimizer classes.
        hyperparameters (Dict[str, float]), options (Dict[str, Optional[bool]]): the group's
            current values, functional names.
        values (Dict[str, Any]): the new values, torch's names.

    Returns:
        Tuple: the updated hyperparameters and options (functional names; only those
        ``values`` names, a Tensor's current value), and the Tensor-holding values as given, by
        torch's name.

    Raises:
        TypeError, ValueError, RuntimeError: as the class's ``load_state_dict`` for the same
            values (torch's rules for Tensor values included).
    """
    rules = TensorRules(functional_class.__name__.lower(), values.get("foreach", options.get("foreach")), False)
    updates_h, updates_o, _ = split_values(values, hyperparameters.keys(), options.keys(), rules)
    check_group(functional_class, dict(hyperparameters, **updates_h), dict(options, **updates_o))
    return {k: float(v) for k, v in updates_h.items()}, updates_o, rules.tensors


def tensor_value(functional_class: type, name: str, value: Tensor, foreach: Optional[bool]) -> float:
    """The current value of hyperparameter ``name`` (functional name) given as a 1-element
    Tensor, after ``torch.optim``'s checks for such a Tensor (Adam's and AdamW's Tensor ``lr``
    and betas with ``foreach=True``...).

    Args:
        functional_class (type): one of this package's optimizer classes.
        name (str): the hyperparameter's functional name.
        value (Tensor): one element (shape ``[]`` or ``[1]``), any dtype and device.
        foreach (Optional[bool]): the group's ``foreach`` flag.

    Returns:
        float: the element's value.

    Raises:
        ValueError, RuntimeError: torch's messages.
    """
    return _validation.tensor_number(functional_class.__name__.lower(), name, value, None, foreach, False)


def torch_group(hyperparameters: Dict[str, float], options: Dict[str, Optional[bool]]) -> Dict[str, Any]:
    """A group's values under ``torch.optim``'s names and forms: tuples joined where the
    optimizer has their parts (:func:`tuple_parts`), ints, None and strings where torch keeps
    them (Muon's ``ns_steps``, Adafactor's ``eps1``, Muon's ``adjust_lr_fn``).

    Args:
        hyperparameters (Dict[str, float]), options (Dict[str, Optional[bool]]): functional names.

    Returns:
        Dict[str, Any]: a new dict, torch's names (``'betas': (0.9, 0.999)``...).

    Raises nothing.
    """
    group: Dict[str, Any] = {}
    for name, value in hyperparameters.items():
        for key, parts in TUPLE_HYPERPARAMETERS.items():
            if name in parts:
                group[key] = tuple(torch_value(part, hyperparameters[part]) for part in parts)
                break
        else:
            group[name] = torch_value(name, value)
    group.update(options)
    return group


def torch_state_dict(name: str, state: Dict[int, Dict[str, Tensor]], groups: List[Dict[str, Any]]) -> Dict[str, Any]:
    """A state dict in the format of the ``torch.optim`` class of optimizer ``name``.

    Args:
        name (str): the optimizer's name (:attr:`Configuration.name`).
        state (Dict[int, Dict[str, Tensor]]): per-parameter state by flat index (not copied).
        groups (List[Dict[str, Any]]): the param groups, torch-named, with their ``'params'``.

    Returns:
        Dict[str, Any]: ``{'state': ..., 'param_groups': groups}``; ``torch.optim.SparseAdam``
        keeps each ``'step'`` (a 0-dim tensor here: any dtype, device and shape of the other
        state tensors) as a Python int, and so does this for ``"sparse_adam"``.

    Raises nothing.
    """
    entries = {int(i): dict(entry) for i, entry in state.items()}
    if name == "sparse_adam":
        for entry in entries.values():
            if "step" in entry:
                entry["step"] = int(entry["step"].item())
    return {"state": entries, "param_groups": groups}


def state_entry(index: Any, entry: Dict[str, Any]) -> Dict[str, Tensor]:
    """One parameter's entry of a ``torch.optim`` state dict (``index``: its key there) with
    every value a Tensor (an old-style number ``'step'`` or ``'mu_product'`` becomes a 0-dim
    tensor of the default dtype on the CPU, as ``load_state_dict`` converts it).

    Args:
        index: the entry's key in the state dict (for messages).
        entry (Dict[str, Any]): the parameter's state (tensors of any shape, dtype, device).

    Returns:
        Dict[str, Tensor]: a new dict; the tensors given are not copied.

    Raises:
        ValueError: another value that is not a tensor (its index and key named).
    """
    converted: Dict[str, Tensor] = {}
    for key, value in entry.items():
        if not isinstance(value, Tensor):
            if key != "step" and key != "mu_product":
                raise ValueError(f"state[{index}]['{key}'] is not a tensor: {value!r}")
            value = torch.tensor(float(value))
        converted[key] = value
    return converted


def check_gradients(params: List[Tensor], gradients: List[Optional[Tensor]]) -> None:
    """The check a step makes of its gradients, with this package's messages: one per
    parameter (None skips one), each of its parameter's shape, dtype and device (dense or
    sparse COO).

    Args:
        params (List[Tensor]): the parameters.
        gradients (List[Optional[Tensor]]): one per parameter, or None.

    Raises:
        ValueError: the wrong number, or a gradient that does not fit (naming its index).
    """
    n = len(params)
    no_sparse_error: List[Optional[str]] = [None]
    _validation.check_gradients(params, gradients, [0, n], no_sparse_error, [params], [list(range(n))])
