"""An optimizer's configuration as public values, for code that runs its steps itself.

The plugin's native local optimizers (``plugin/optim/_native.py``) keep an optimizer's
parameters, values and state in C++ and step them with the op library's group step (the one
the classes' default implementation runs, ``csrc/group_step.h``). What they need of this
package is here, so that they read no private attribute of it:

* :func:`configure`: a configuration as the class's constructor validates and parses it
  (torch's rules and messages), as a :class:`Configuration`;
* :func:`check_group`: a group's values checked as the class's ``set_group`` checks them;
* :func:`group_update`: a group's values updated with ``torch.optim``-named values (a saved
  param group, a scheduler's write), checked;
* :func:`torch_group`, :func:`torch_state_dict`, :func:`state_entry`, :func:`tuple_parts`,
  :func:`torch_value`: the ``torch.optim`` format of values and state;
* :func:`check_gradients`: the check every step makes of its gradients (count, shape, dtype,
  device), with this package's messages.
"""
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from . import _kernels, _validation
from ._param_groups import TensorRules, split_values
from ._state import DENSE_GRADIENT_ERROR, TUPLE_HYPERPARAMETERS, choose_impl, torch_value, tuple_parts

__all__ = [
    "Configuration", "configure", "check_group", "group_update", "tensor_value", "torch_group", "torch_state_dict", "state_entry",
    "check_gradients", "split_values", "TUPLE_HYPERPARAMETERS", "tuple_parts", "torch_value",
]


class Configuration(NamedTuple):
    """A functional optimizer's configuration (:func:`configure` makes it). A named tuple: its
    arguments, in order, are its fields, read by the same names.

    Raises nothing: a named tuple.

    Args:
        name (str): the optimizer's name in the op library (``"adam"``, ``"sparse_adam"``...):
            its group step is ``torch.ops.gilfree_optim.group_step(name, ...)``.
        groups (List[List[Tensor]]): the parameters given (the tensors themselves), group
            after group; flat indices number them in this order.
        hyperparameters (List[Dict[str, float]]): each group's numbers by functional name
            (pairs split: ``beta1``, ``beta2``); a Tensor hyperparameter's current value.
        options (List[Dict[str, Optional[bool]]]): each group's flags.
        tensor_hyperparameters (List[Dict[str, Tensor]]): each group's hyperparameters given as
            1-element Tensors, by functional name (the given Tensor objects): a step reads their
            value first.
        extras (List[Dict[str, Any]]): each group's other keys (``'param_names'``...).
        implementations (List[str]): each group's implementation: ``"fused"`` (the op
            library's group step), ``"foreach"`` or ``"single"``.
        not_fused (Optional[str]): why some group does not run the fused implementation, in
            words (``"foreach=True"``, ``"no fused implementation for RMSprop on cuda"``...);
            None when every group does.
        sparse_errors (List[Optional[str]]): each group's ``RuntimeError`` message for a sparse
            gradient with its fused implementation (None: it takes sparse COO gradients).
        dense_error (Optional[str]): the message for a dense gradient (SparseAdam's), or None.
        state (Dict[int, Dict[str, Tensor]]): the state ``torch.optim`` creates at
            construction (Adagrad's ``'step'``, a 0-dim float32 tensor, and ``'sum'``, of its
            parameter's shape, dtype and device), by flat index; made once, for the given
            parameters.
    """

    name: str
    groups: List[List[Tensor]]
    hyperparameters: List[Dict[str, float]]
    options: List[Dict[str, Optional[bool]]]
    tensor_hyperparameters: List[Dict[str, Tensor]]
    extras: List[Dict[str, Any]]
    implementations: List[str]
    not_fused: Optional[str]
    sparse_errors: List[Optional[str]]
    dense_error: Optional[str]
    state: Dict[int, Dict[str, Tensor]]


def configure(functional_class: type, params: Any, *args: Any, **kwargs: Any) -> Configuration:
    """The configuration ``functional_class(params, *args, **kwargs)`` makes.

    Args:
        functional_class (type): one of this package's optimizer classes (``functional_optim.Adam``).
        params: as for the class: a list of tensors or of param-group dicts (or an iterator).
        *args: the class's hyperparameters and flags, by position.
        **kwargs: the class's hyperparameters and flags, by name.

    Returns:
        Configuration: see there.

    Raises:
        Exception: what the class's constructor raises (torch's types and messages).
    """
    opt = functional_class(list(params) if not isinstance(params, (list, tuple, Tensor, dict)) else params, *args, **kwargs)
    s = opt._s
    extras = []
    for g, group in enumerate(opt.param_groups):
        known = torch_group(s.hparams[g], s.options[g])
        extras.append({k: v for k, v in group.items() if k != "params" and k not in known})
    sparse_errors = [check_group(functional_class, s.hparams[g], s.options[g]) for g in range(s.num_groups())]
    return Configuration(
        name=s.name, groups=[list(group) for group in s.cache_params], hyperparameters=[dict(h) for h in s.hparams],
        options=[dict(o) for o in s.options], tensor_hyperparameters=[dict(t) for t in s.tensor_hparams],
        extras=extras, implementations=list(s.impl), not_fused=_not_fused(s, functional_class.__name__),
        sparse_errors=sparse_errors, dense_error=DENSE_GRADIENT_ERROR if s.name == "sparse_adam" else None,
        state={i: dict(entry) for i, entry in s.get_state().items()},
    )


def _not_fused(s: Any, class_name: str) -> Optional[str]:
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
