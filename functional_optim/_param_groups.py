"""Eager-only helpers: parse torch-style ``params`` arguments and keep torch-style ``param_groups``.

None of this is compiled by TorchScript. An optimizer constructed eagerly calls :func:`parse`
(from a ``@torch.jit.unused`` method) to accept a list of tensors or of param-group dicts, and
:func:`attach` to give itself a ``param_groups`` list like ``torch.optim``'s. Writing into one of
those dicts (``opt.param_groups[0]['lr'] = 0.01``, as learning-rate schedulers do) goes through the
optimizer's ``set_group`` protocol method, so the value is validated, takes effect at the next
step and is visible to TorchScript methods; the dicts are rewritten whenever the optimizer's
hyperparameters change by any route.
"""
import math
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch
from torch import Tensor

from . import _kernels, ops
from ._state import (
    CHOICE_HYPERPARAMETERS, INT_HYPERPARAMETERS, OPTIONAL_HYPERPARAMETERS, TUPLE_HYPERPARAMETERS, torch_value,
    holds_tensor, tuple_parts,
)
from ._validation import check_params, choice_index, tensor_number

__all__ = ["parse", "attach", "add_param_group", "ParamGroup", "TensorRules"]

_PART_TO_TUPLE = {part: key for key, parts in TUPLE_HYPERPARAMETERS.items() for part in parts}


class TensorRules:
    """What :func:`split_values` needs to read Tensor hyperparameters with torch's rules
    (:func:`functional_optim._validation.tensor_number`): the optimizer's name (None: only
    the size is checked), the group's ``foreach`` flag, whether the values are constructor
    arguments. ``tensors`` receives each Tensor-holding value under torch's name, as given
    (a Tensor, or a pair holding one)."""

    def __init__(self, optimizer: Optional[str], foreach: Optional[bool], in_constructor: bool) -> None:
        self.optimizer = optimizer
        self.foreach = foreach
        self.in_constructor = in_constructor
        self.tensors: Dict[str, Any] = {}


def _as_float(
    name: str, value: Any, rules: Optional[TensorRules] = None, index: Optional[int] = None,
    part: Optional[str] = None,
) -> float:
    """The typed value of torch's hyperparameter ``name`` (``part``: the typed name of its
    ``index``-th part, for a tuple): a number, a 1-element Tensor (torch's rules), and where
    torch takes them None (:data:`~functional_optim._state.OPTIONAL_HYPERPARAMETERS`: -inf) or a
    string (:data:`~functional_optim._state.CHOICE_HYPERPARAMETERS`: its number)."""
    typed = name if part is None else part
    if typed in OPTIONAL_HYPERPARAMETERS:
        if value is None:
            return -math.inf
        if part is not None and not isinstance(value, Tensor) and value == -math.inf:
            # in torch's form (a part of its tuple) -inf would read as None
            raise ValueError(f"'{name}'[{index}] must be None or a number above -inf, got -inf")
    if (value is None or isinstance(value, str)) and typed in CHOICE_HYPERPARAMETERS:
        choices, what = CHOICE_HYPERPARAMETERS[typed]
        return choice_index(value, list(choices), what)
    if isinstance(value, Tensor):
        if rules is None:
            rules = TensorRules(None, None, False)
        return tensor_number(rules.optimizer, name, value, index, rules.foreach, rules.in_constructor)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"hyperparameter '{name}' must be a number or a 1-element Tensor, got {type(value).__name__}")
    if typed in INT_HYPERPARAMETERS and not float(value).is_integer():
        raise TypeError(f"hyperparameter '{name}' must be an int, got {value!r}")
    return float(value)



def _as_option(name: str, value: Any) -> Optional[bool]:
    if value is None or isinstance(value, bool):
        return value
    raise TypeError(f"option '{name}' must be True, False or None, got {type(value).__name__}")


def split_values(
    values: Dict[str, Any], hparam_names: Iterable[str], option_names: Iterable[str],
    rules: Optional[TensorRules] = None,
) -> Tuple[Dict[str, float], Dict[str, Optional[bool]], Dict[str, Any]]:
    """Sort torch-named group values into numeric hyperparameters, options and other keys.

    Tuples (``betas``, ``etas``, ``step_sizes``, ``ns_coefficients``, Adafactor's ``eps``) are
    split into their parts. A hyperparameter may be a 1-element Tensor (shape ``[]`` or ``[1]``,
    any dtype and device; a tuple may hold them): its current value is taken, after torch's checks
    (``rules``; without them only the size is checked), and the value as given is put into
    ``rules.tensors``. Values torch keeps as an int, None or a string become floats (see
    :func:`_as_float`).

    Args:
        values (Dict[str, Any]): torch-named values (a param group without ``'params'``).
        hparam_names, option_names (Iterable[str]): the optimizer's functional names.
        rules (Optional[TensorRules]): torch's rules for Tensor values.

    Returns:
        Tuple: the hyperparameters (functional names, floats), the options, the other keys.

    Raises:
        TypeError: a value of the wrong form (a tuple of the wrong length, a flag that is not a
            bool or None, a hyperparameter that is neither a number nor a Tensor).
        ValueError, RuntimeError: a Tensor that torch's rules refuse.
    """
    hparam_names = set(hparam_names)
    option_names = set(option_names)
    hparams: Dict[str, float] = {}
    options: Dict[str, Optional[bool]] = {}
    extras: Dict[str, Any] = {}
    for key, value in values.items():
        parts = tuple_parts(key, hparam_names)
        if parts is not None:
            if not isinstance(value, (tuple, list)) or len(value) != len(parts):
                raise TypeError(f"'{key}' must be a tuple of {len(parts)} values, got {value!r}")
            for k, part in enumerate(parts):
                hparams[part] = _as_float(key, value[k], rules, k, part)
            if rules is not None and holds_tensor(value):
                rules.tensors[key] = value
        elif key in hparam_names:
            hparams[key] = _as_float(key, value, rules)
            if rules is not None and isinstance(value, Tensor):
                rules.tensors[key] = value
        elif key in option_names:
            options[key] = _as_option(key, value)
        else:
            extras[key] = value
    return hparams, options, extras


def parse(
    params: Any, defaults: Dict[str, float], default_options: Dict[str, Optional[bool]],
    optimizer: Optional[str] = None, default_tensors: Optional[Dict[str, Any]] = None,
) -> Tuple[
    List[List[Tensor]], List[Dict[str, float]], List[Dict[str, Optional[bool]]], List[Dict[str, Any]],
    List[Dict[str, Any]],
]:
    """Read a torch-style ``params`` argument.

    Args:
        params: an iterable of tensors or of ``(name, tensor)`` pairs (``model.named_parameters()``:
            the names go into the group's ``'param_names'``, as in torch), or of dicts with a
            ``'params'`` entry (a tensor or a list of either) and any hyperparameters to override
            for that group, named as in ``torch.optim`` (``'betas': (0.9, 0.99)``).
        defaults: the constructor's numeric hyperparameters (halves of pairs as separate names).
        default_options: the constructor's flags.
        optimizer: the optimizer's name, for torch's rules on Tensor values
            (:func:`functional_optim._validation.tensor_number`).
        default_tensors: the constructor's Tensor-holding hyperparameters under torch's names,
            as given (a group that does not set its own shares them, as in torch).

    Returns:
        The groups' parameters, numeric hyperparameters, options, any other keys found in the
        dicts (kept only in the eager ``param_groups``), and each group's Tensor-holding
        hyperparameters under torch's names.

    Raises:
        TypeError: ``params`` is a single tensor, a group's params are a set, an element is not
            a tensor, or a hyperparameter is neither a number nor a Tensor.
        ValueError: ``params`` is empty; some but not all of a group's parameters are named, or
            some groups are named and others not (torch's messages); a Tensor hyperparameter
            that torch refuses (see ``tensor_number``).
        RuntimeError: a Tensor ``lr`` in a group with ``foreach=True`` (Adam, AdamW; torch's
            message).
    """
    if isinstance(params, Tensor):
        raise TypeError(
            "params argument given to the optimizer should be an iterable of Tensors or dicts, "
            "but got " + torch.typename(params)
        )
    groups_in = list(params)
    _kernels.load()  # (ImportError naming the op library's file when it is missing)
    ops.check_param_count(len(groups_in))
    if not isinstance(groups_in[0], dict):
        groups_in = [{"params": groups_in}]
    groups: List[List[Tensor]] = []
    hparams: List[Dict[str, float]] = []
    options: List[Dict[str, Optional[bool]]] = []
    extras: List[Dict[str, Any]] = []
    tensors: List[Dict[str, Any]] = []
    default_tensors = default_tensors or {}
    for group in groups_in:
        if not isinstance(group, dict):
            raise TypeError(f"param groups must all be dicts, got {type(group).__name__}")
        if "params" not in group:
            raise ValueError("a param group dict needs a 'params' entry")
        group_params = group["params"]
        if isinstance(group_params, Tensor):
            group_params = [group_params]
        elif isinstance(group_params, set):
            raise TypeError(
                "optimizer parameters need to be organized in ordered collections, but the "
                "ordering of tensors in sets will change between runs. Please use a list instead."
            )
        group_params = list(group_params)
        # named parameters, (name, tensor) pairs (torch >= 2.6): the names go into the group's
        # 'param_names', with torch's errors for partly named groups and mixed groups
        names = [p[0] for p in group_params if isinstance(p, tuple)]
        if names:
            if len(names) != len(group_params):
                raise ValueError("all optimizer params should be with/without names. Some param names are missing")
            group_params = [p[1] for p in group_params]
        if groups and bool(names) != ("param_names" in extras[0]):
            raise ValueError(
                "all optimizer param groups should be with/without names. "
                f"cannot add param group {'with names' if names else 'without names'} to the optimizer"
            )
        for p in group_params:
            if not isinstance(p, Tensor):
                raise TypeError(
                    "optimizer can only optimize Tensors, but one of the params is " + torch.typename(p)
                )
        values = {k: v for k, v in group.items() if k != "params"}
        rules = TensorRules(optimizer, values.get("foreach", default_options.get("foreach")), False)
        h, o, x = split_values(values, defaults.keys(), default_options.keys(), rules)
        if names:
            x = {"param_names": names, **x}
        groups.append(group_params)
        hparams.append({**defaults, **h})
        options.append({**default_options, **o})
        extras.append(x)
        own = {k: v for k, v in default_tensors.items() if k not in values}
        if optimizer in ("adam", "adamw") and rules.foreach and own:
            # the constructor's Tensors, in a group that sets foreach=True: torch's step-time error
            for key, value in own.items():
                for index, v in enumerate(value if isinstance(value, tuple) else (value,)):
                    if isinstance(v, Tensor):
                        tensor_number(optimizer, key, v, index, True, False)
        tensors.append({**own, **rules.tensors})
    return groups, hparams, options, extras, tensors


class WriteThroughDict(dict):
    """A dict whose ``update`` and ``setdefault`` go through ``__setitem__`` (dict's own skip
    it), so a subclass that checks or forwards writes in ``__setitem__`` sees every one (the
    param-group dicts of this package's optimizers and of the plugin's DistributedOptimizer).

    Args:
        *args: as for ``dict`` (the initial items, stored without ``__setitem__``).
        **kwargs: as for ``dict`` (the initial items, stored without ``__setitem__``).

    Raises nothing itself.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)

    def update(self, *args: Any, **kwargs: Any) -> None:
        """``dict.update``, each item through ``__setitem__``.

        Args:
            *args: as for ``dict.update``.
            **kwargs: as for ``dict.update``.

        Raises:
            Exception: what ``__setitem__`` raises for an item (the earlier ones stay set).
        """
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: str, default: Any = None) -> Any:
        """``dict.setdefault`` through ``__setitem__``.

        Args:
            key (str): the key.
            default (Any): its value when missing.

        Returns:
            Any: the key's value.

        Raises:
            Exception: what ``__setitem__`` raises.
        """
        if key not in self:
            self[key] = default
        return self[key]


class ParamGroup(WriteThroughDict):
    """One entry of an eager optimizer's ``param_groups``: a dict like torch's, kept in sync.

    Keys: ``'params'`` (the group's tensors; read-only) and every hyperparameter and flag of the
    ``torch.optim`` class under torch's name and in torch's form (pairs as tuples). Assigning
    one of those keys calls the optimizer's ``set_group``: the value is validated (an invalid
    value raises and changes nothing) and is used from the next step on. Other keys (such as a
    scheduler's ``'initial_lr'``) are stored as in a plain dict.

    A hyperparameter given as a Tensor (``'lr'``, ``'betas'`` holding Tensors...) is kept as
    that Tensor, the same object, as torch keeps it; the optimizer reads its value before each
    step, so changing it in place (``group['lr'].fill_(0.01)``, as the LR schedulers do for a
    Tensor lr) takes effect at the next step. Assigning a number unbinds it.
    """

    def __init__(
        self, optimizer: Any, index: int, params: List[Tensor], extras: Dict[str, Any],
        tensors: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__()
        self._optimizer = optimizer
        self._index = index
        dict.__setitem__(self, "params", params)
        self._bind(tensors or {})
        self._refresh()
        for key, value in extras.items():
            dict.__setitem__(self, key, value)

    def _bind(self, tensors: Dict[str, Any]) -> None:
        """Make the optimizer follow the Tensors of ``tensors`` (torch's names, values as given:
        a Tensor or a pair holding some; ``GroupedState.bind_tensor``); validated by the caller."""
        core = self._optimizer._s
        for key, value in tensors.items():
            parts = tuple_parts(key, core.hparams[self._index])
            if parts is None:
                core.bind_tensor(self._index, key, value)
            else:
                for part, v in zip(parts, value):
                    if isinstance(v, Tensor):
                        core.bind_tensor(self._index, part, v)

    def _refresh(self) -> None:
        core = self._optimizer._s
        hparams = core.hparams[self._index]
        bound = core.tensor_hparams[self._index]
        # a Tensor hyperparameter shows as the Tensor itself (the same object), as torch keeps it;
        # the others in torch's form (an int, None, a string where torch keeps one)
        shown = {name: bound.get(name, torch_value(name, value)) for name, value in hparams.items()}
        for name, value in shown.items():
            key = _PART_TO_TUPLE.get(name)
            if key is None:
                dict.__setitem__(self, name, value)
            else:
                dict.__setitem__(self, key, tuple(shown[part] for part in TUPLE_HYPERPARAMETERS[key]))
        for name, value in core.options[self._index].items():
            dict.__setitem__(self, name, value)

    def __setitem__(self, key: str, value: Any) -> None:
        if key == "params":
            raise ValueError("the parameters of a functional_optim param group cannot be replaced")
        core = self._optimizer._s
        options = core.options[self._index]
        rules = TensorRules(core.name, value if key == "foreach" else options.get("foreach"), False)
        h, o, x = split_values({key: value}, core.hparams[self._index].keys(), options.keys(), rules)
        if h or o:
            self._optimizer.set_group(self._index, h, o)  # validates, unbinds, calls _refresh()
            if rules.tensors:
                self._bind(rules.tensors)
                self._refresh()
        else:
            dict.__setitem__(self, key, value)

    def __delitem__(self, key: str) -> None:
        if key == "params" or key in self._optimizer._s.options[self._index] or key in self._optimizer._s.hparams[self._index]:
            raise KeyError(f"'{key}' cannot be removed from a functional_optim param group")
        dict.__delitem__(self, key)


def attach(
    optimizer: Any, groups: List[List[Tensor]], extras: List[Dict[str, Any]],
    tensors: Optional[List[Dict[str, Any]]] = None,
) -> List[ParamGroup]:
    """Build ``optimizer.param_groups`` (also reachable from its state container); each group's
    Tensor hyperparameters (``tensors[g]``, torch's names) are bound to the optimizer."""
    tensors = tensors or [{} for _ in groups]
    param_groups = [ParamGroup(optimizer, g, list(groups[g]), extras[g], tensors[g]) for g in range(len(groups))]
    optimizer._s.param_groups = param_groups
    return param_groups


def add_param_group(optimizer: Any, param_group: Any) -> None:
    """Add a param group to an eager optimizer, as ``torch.optim.Optimizer.add_param_group``
    (see the optimizers' ``add_param_group``); the values it does not set are the
    constructor's (a Tensor among them shared, as in torch)."""
    if not isinstance(param_group, dict):
        raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
    if "params" not in param_group:
        raise KeyError("params")
    hparams, options, tensors = optimizer._defaults
    groups, group_hparams, group_options, extras, group_tensors = parse(
        [param_group], hparams, options, optimizer._s.name, tensors
    )
    check_params(groups[0])
    named = "param_names" in extras[0]
    if named != ("param_names" in optimizer.param_groups[0]):
        raise ValueError(
            "all optimizer param groups should be with/without names. "
            f"cannot add param group {'with names' if named else 'without names'} to the optimizer"
        )
    core = optimizer._s
    core.add_group(groups[0], group_hparams[0], group_options[0])
    g = core.num_groups() - 1
    try:
        optimizer.set_group(g, group_hparams[0], group_options[0])  # torch's checks of the values
        group = ParamGroup(optimizer, g, list(groups[0]), extras[0], group_tensors[0])
    except BaseException:
        core.pop_group()
        raise
    optimizer.param_groups.append(group)

