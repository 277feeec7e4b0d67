"""The methods of the optimizer classes, written once.

TorchScript classes cannot inherit, so each optimizer class is decorated with
:func:`with_shared_methods`, which binds these functions into the class (``Adam.step is
_methods.step``); TorchScript compiles them as methods of each class that holds them. What
differs between the optimizers is reached through three hooks that each class defines:

* ``_check(h, o)``: validate a group's hyperparameters ``h`` and options ``o`` (raise with
  torch's messages); the flags every optimizer shares (``foreach``, ``fused``, ``capturable``,
  ``differentiable``) are checked after it, here
  (:func:`functional_optim._validation.check_options`);
* ``_sparse_error(h, impl) -> Optional[str]``: the ``RuntimeError`` message for a sparse
  gradient in a group with hyperparameters ``h`` whose flags ask for implementation ``impl``
  (torch's rule: ``"fused"`` only for ``fused=True``; a group that runs fused by default steps
  sparse gradients with ``GroupedState.sparse_impl``), or ``None`` when such a group takes
  sparse gradients;
* ``_group_step(g, indices, grads, sparse)``: update the parameters ``indices`` of group ``g``
  with its single-tensor or foreach implementation (called under ``torch.no_grad()``, after
  every check has passed; a group whose implementation is ``"fused"`` runs the op library's
  group step instead, ``GroupedState.group_step``, called here for every class).

The constructor of each class builds its dicts of hyperparameters and options and then calls
``self._s = self._new_state(params, hparams, options, name)`` (``name``: its group step's name
in the op library, ``csrc/steps/<name>.cpp``) and ``self._init_groups()``. The rest of
the state protocol (see :mod:`functional_optim.state_protocol`) and the eager-only conveniences
live here too.
"""
import copy
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import _validation, state_protocol
from ._state import GroupedState, holds_tensor

__all__ = [
    "with_shared_methods", "step", "step_param", "set_group", "param_group_indices",
    "hyperparameters", "options", "set_hyperparameter", "set_option", "get_state", "set_state",
    "state_dict", "load_state_dict", "add_param_group", "eager_defaults", "eager_parse", "eager_attach", "eager_repr",
]


def _new_state(
    self, params: List[Tensor], hparams: Dict[str, float], options: Dict[str, Optional[bool]], name: str
) -> GroupedState:
    """The constructor's checks and parsing: the state container for ``params``.

    ``hparams`` and ``options`` are the constructor's arguments (pairs split). Eagerly, numbers
    are coerced and Tensor values read (:func:`eager_defaults`) and ``params`` may be
    torch-style param-group dicts (:func:`eager_parse`); under TorchScript it is one list of
    tensors, one group, and the hyperparameters are numbers.
    """
    if not torch.jit.is_scripting():
        hparams, options = self._eager_defaults(hparams, options, name)
    self._check(hparams, options)
    _validation.check_options(options)
    groups: List[List[Tensor]] = [params]
    group_hparams: List[Dict[str, float]] = [hparams]
    group_options: List[Dict[str, Optional[bool]]] = [options]
    if not torch.jit.is_scripting():
        groups, group_hparams, group_options = self._eager_parse(params, hparams, options, name)
    return GroupedState(groups, group_hparams, group_options, name)


def _init_groups(self) -> None:
    """The constructor's end, once ``self._s`` exists: validate and install every group's values
    (:meth:`set_group`), and eagerly create ``param_groups``."""
    for g in range(self._s.num_groups()):
        self.set_group(g, self._s.hparams[g], self._s.options[g])
    if not torch.jit.is_scripting():
        self._eager_attach()


def step(self, gradients: List[Optional[Tensor]]) -> None:
    """Update every parameter whose gradient is not None, in place.

    Args:
        gradients (List[Optional[Tensor]]): one entry per parameter in flat order (group after
            group): a tensor of the parameter's shape, dtype and device (dense; sparse COO only
            for the optimizers whose class says they take it), or ``None`` to skip that
            parameter (its state is untouched, as in torch when ``.grad`` is None).

    Raises:
        ValueError: wrong number of gradients, or a gradient whose shape, dtype or device
            differs from its parameter's (``"gradients[3]: expected shape [4, 5], ..."``: the
            message names the index).
        RuntimeError: a sparse gradient that its group does not take (torch's message).

    Nothing is modified when it raises.
    """
    indices, grads, sparse = self._s.check_gradients(gradients)
    self._s.sync_tensor_hparams()
    with torch.no_grad():
        for g in range(len(indices)):
            if len(indices[g]) > 0:
                self._step_group(g, indices[g], grads[g], sparse[g])


def _step_group(self, g: int, indices: List[int], grads: List[Tensor], sparse: bool) -> None:
    """Update the parameters ``indices`` of group ``g`` (under ``no_grad``, after every check):
    the op library's group step for a fused group, the class's ``_group_step`` otherwise."""
    if self._s.impl[g] == "fused":
        self._s.group_step(g, indices, grads)
    else:
        self._group_step(g, indices, grads, sparse)


def step_param(self, param: Tensor, grad: Optional[Tensor]) -> None:
    """Update one parameter with its group's hyperparameters; ``grad=None`` does nothing.

    Args:
        param (Tensor): one of the optimizer's parameters: the tensor object given at
            construction (found by identity, not by value).
        grad (Optional[Tensor]): its gradient, a tensor of the parameter's shape, dtype and
            device (dense; sparse COO only where :meth:`step` takes it); ``None`` leaves the
            parameter and its state untouched.

    Raises:
        ValueError: ``param`` is not a parameter of this optimizer, or ``grad``'s shape, dtype
            or device differs from the parameter's.
        RuntimeError: ``grad`` is sparse and its group does not take sparse gradients (torch's
            message).

    Nothing is modified when it raises.
    """
    i = self._s.find(param)
    if grad is not None:
        self._s.check_gradient(i, grad)
        self._s.sync_tensor_hparams()
        with torch.no_grad():
            self._step_group(self._s.group_of[i], [i], [grad], grad.is_sparse)


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
    self._check(h, o)
    _validation.check_options(o)
    impl = self._s.choose_group_impl(group, o)
    sparse_impl = self._s.flags_impl(group, o)
    names = list(hyperparameters.keys())
    self._s.check_tensor_foreach(group, o, names)
    self._s.unbind_tensors(group, names)  # a number replaces a Tensor hyperparameter
    self._s.commit(group, h, o, impl, sparse_impl, self._sparse_error(h, sparse_impl))


def param_group_indices(self) -> List[List[int]]:
    """The flat parameter indices of each group (group ``g`` is ``param_groups[g]``).

    Returns:
        List[List[int]]: for each group, the flat indices of its parameters. Parameters are
        numbered group after group, in the order they were given: the numbering of
        ``torch.optim``'s ``state_dict``.

    Raises nothing.
    """
    return self._s.group_indices()


def hyperparameters(self) -> List[Dict[str, float]]:
    """Copies of each group's numeric hyperparameters, named as in the functional form.

    Returns:
        List[Dict[str, float]]: one new dict per group. Pairs are split: ``betas`` ->
        ``beta1``, ``beta2``; ``etas`` -> ``etaminus``, ``etaplus``; ``step_sizes`` ->
        ``step_size_min``, ``step_size_max``. Values are Python floats in the units of the
        constructor's arguments.

    Raises nothing.
    """
    return self._s.hyperparameters()


def options(self) -> List[Dict[str, Optional[bool]]]:
    """Copies of each group's flags.

    Returns:
        List[Dict[str, Optional[bool]]]: one new dict per group, with torch's names
        (``maximize``, ``foreach``, ``fused``, ``amsgrad``, ...). ``foreach`` and ``fused`` may
        be ``None``: torch's default choice of implementation.

    Raises nothing.
    """
    return self._s.get_options()


def set_hyperparameter(self, group: int, name: str, value: float) -> None:
    """Set one numeric hyperparameter of one group, used from the next step on.

    The new value is validated like the constructor's argument (torch's conditions and
    messages); when it is invalid, nothing changes.

    Args:
        group (int): index of the parameter group, from 0 (as in ``param_groups``).
        name (str): a name that :meth:`hyperparameters` lists (``"lr"``, ``"beta1"``, ...).
        value (float): the new value, in the units of the constructor's argument.

    Raises:
        ValueError: no such group or name, or an invalid value (``torch.jit.Error`` with the
            same message when called from TorchScript).
    """
    options: Dict[str, Optional[bool]] = {}
    self.set_group(group, {name: value}, options)


def set_option(self, group: int, name: str, value: Optional[bool]) -> None:
    """Set one flag of one group, used from the next step on; nothing changes when it raises.

    Args:
        group (int): index of the parameter group, from 0.
        name (str): a name that :meth:`options` lists (``"maximize"``, ``"foreach"``, ...).
        value (Optional[bool]): the new value; ``None`` is allowed for ``foreach`` and
            ``fused`` only (torch's default choice).

    Raises:
        ValueError: no such group or name, ``None`` for another flag, or a value the
            constructor rejects (``capturable=True``, ``differentiable=True``).
        RuntimeError: ``fused`` together with ``foreach``, or ``fused`` for a parameter that is
            not floating point (torch's messages).
    """
    hparams: Dict[str, float] = {}
    self.set_group(group, hparams, {name: value})


def get_state(self) -> Dict[int, Dict[str, Tensor]]:
    """Per-parameter state keyed by flat index, as ``torch.optim`` keeps it.

    Returns:
        Dict[int, Dict[str, Tensor]]: for each parameter that has stepped, a new dict with
        torch's keys (Adam: ``'step'``, ``'exp_avg'``, ``'exp_avg_sq'``, ...). Each tensor has
        torch's shape, dtype and device for its key: most are like the parameter (same shape,
        dtype and device); ``'step'`` is a 0-dim tensor, float32 on the CPU (on the
        parameter's device for fused groups). The tensors are the optimizer's own, not copies
        (as in ``torch.optim``'s ``state_dict``).

    Raises nothing.
    """
    return self._s.get_state()


def set_state(self, state: Dict[int, Dict[str, Tensor]]) -> None:
    """Replace all per-parameter state with copies of ``state``.

    Tensors are cast as ``torch.optim.Optimizer.load_state_dict`` casts them: ``'step'`` keeps
    its dtype and device (float32 on the parameter's device in a fused group); every other
    tensor moves to the parameter's device, and takes its dtype when the parameter is floating
    point. Parameters missing from ``state`` start afresh at their next step.

    Args:
        state (Dict[int, Dict[str, Tensor]]): flat index -> ``{key: tensor}``, as
            :meth:`get_state` returns it; each tensor of the shape the optimizer keeps it with
            (its parameter's, 0-dim for ``'step'``; a key the optimizer does not keep may also
            be 0-dim).

    Raises:
        ValueError: an index that is not a parameter, or a tensor of another shape than the
            optimizer keeps it with. Nothing changes when it raises.
    """
    self._s.set_state(state)



@torch.jit.unused
def state_dict(self) -> Dict[str, Any]:
    """Eager only: the state in the matching ``torch.optim`` class's ``state_dict`` format.

    Besides what the protocol gives (:func:`functional_optim.state_protocol.state_dict`), each
    group carries the extra keys of ``param_groups`` (e.g. a scheduler's ``'initial_lr'``), as
    torch's does.

    Returns:
        Dict[str, Any]: ``{'state': {flat index: {key: Tensor}}, 'param_groups': [...]}``; the
        state tensors are the optimizer's own (shapes, dtypes and devices as
        :meth:`get_state`), not copies.

    Raises nothing.
    """
    result = state_protocol.state_dict(self)
    if self._s.name == "sparse_adam":  # torch.optim.SparseAdam keeps 'step' as a Python int
        for entry in result["state"].values():
            if "step" in entry:
                entry["step"] = int(entry["step"].item())
    for group, packed in zip(self.param_groups, result["param_groups"]):
        params = packed.pop("params")
        for key, value in group.items():
            # other keys, and Tensor hyperparameters as the group holds them (the Tensor
            # objects, as torch.optim's state_dict has them)
            if (key not in packed and key != "params") or holds_tensor(value):
                packed[key] = value
        packed["params"] = params
    return result


@torch.jit.unused
def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
    """Eager only: load a state dict saved from the matching ``torch.optim`` class or from this
    class (see :func:`functional_optim.state_protocol.load_state_dict`); extra group keys such
    as ``'initial_lr'`` go into ``param_groups``.

    Args:
        state_dict (Dict[str, Any]): ``{'state': ..., 'param_groups': ...}`` in
            ``torch.optim``'s format; state tensors are copied and cast to each parameter's
            dtype and device (see :meth:`set_state`).

    Raises:
        ValueError: a different number of groups or of parameters in a group, invalid
            hyperparameters, or a state tensor whose shape does not fit its parameter. The
            optimizer is left as it was.
    """
    from ._param_groups import TensorRules, split_values

    for g, saved in enumerate(state_dict["param_groups"][: self._s.num_groups()]):
        # torch's rules for saved Tensor values (Adam's Tensor lr with foreach=True, which
        # torch.optim refuses at its next step), before anything changes
        values = {k: v for k, v in saved.items() if k != "params"}
        rules = TensorRules(self._s.name, values.get("foreach", self._s.options[g].get("foreach")), False)
        split_values(values, self._s.hparams[g].keys(), self._s.options[g].keys(), rules)
    bound = [dict(d) for d in self._s.tensor_hparams]
    try:
        state_protocol.load_state_dict(self, state_dict)
    except BaseException:
        # the protocol puts the numbers back; put the Tensors they came from back too
        for g, tensors in enumerate(bound):
            for name, value in tensors.items():
                self._s.bind_tensor(g, name, value)
            self.param_groups[g]._refresh()
        raise
    for group, saved in zip(self.param_groups, state_dict["param_groups"]):
        for key, value in saved.items():
            # saved names replace the current ones, as in torch.optim (kept when none are saved)
            if key not in group or key == "param_names":
                dict.__setitem__(group, key, list(value) if key == "param_names" else value)
        # saved Tensor hyperparameters are followed as copies (torch.optim deep-copies the
        # saved groups); the values were checked and set by the protocol's load
        tensors = {
            k: copy.deepcopy(v) for k, v in saved.items()
            if k != "params" and holds_tensor(v) and k in group and k not in ("param_names",)
        }
        if tensors:
            group._bind(tensors)
            group._refresh()


@torch.jit.unused
def add_param_group(self, param_group: Dict[str, Any]) -> None:
    """Eager only: add a parameter group, as ``torch.optim.Optimizer.add_param_group``.

    Args:
        param_group (Dict[str, Any]): ``{'params': ..., <hyperparameters>}`` as a group of the
            constructor's ``params``: ``'params'`` a Tensor or a list of Tensors or of
            ``(name, Tensor)`` pairs (``named_parameters()``: the names go into the group's
            ``'param_names'``, as in torch); the values it does not set are the constructor's.
            Its parameters are numbered after the existing ones (flat indices, as in torch's
            ``state_dict``); their state starts at their first step.

    Raises:
        TypeError: ``param_group`` is not a dict (torch's message), its params are a set, or a
            value is of the wrong type.
        KeyError: no ``'params'`` entry (as torch).
        ValueError: some but not all parameters named, a named group added to an optimizer
            without names or the reverse, a parameter already optimized, a non-leaf parameter
            (torch's messages), or invalid values. Nothing changes when it raises.
        RuntimeError: as the constructor (``fused`` with parameters it cannot step...).
    """
    from ._param_groups import add_param_group as add

    add(self, param_group)


@torch.jit.unused
def eager_defaults(
    self, hparams: Dict[str, float], options: Dict[str, Optional[bool]], name: str
) -> Tuple[Dict[str, float], Dict[str, Optional[bool]]]:
    """Eager only: coerce constructor arguments (ints to floats) and read Tensor values, with
    torch's checks and in torch's order: the Tensor checks of ``lr``, the range checks
    (``_check``), then, for Adam and AdamW, those of ``betas``
    (:func:`functional_optim._validation.check_tensor_betas`). The Tensor-holding values are
    kept (a tuple whole, under torch's name) for :func:`eager_parse` (every group that does not set its own shares them, as in
    torch)."""
    from ._param_groups import TensorRules, split_values
    from ._state import TUPLE_HYPERPARAMETERS

    rules = TensorRules(name, options.get("foreach"), True)
    original = {**hparams, **options}
    h, o, _ = split_values(original, hparams.keys(), options.keys(), rules)
    if "beta1" in h:
        self._check(h, o)
        # the constructor's betas as given (the classes pass them as beta1, beta2)
        _validation.check_tensor_betas(name, (hparams["beta1"], hparams["beta2"]), options.get("foreach"))
    for key, parts in TUPLE_HYPERPARAMETERS.items():
        if parts[0] not in h:
            continue
        # a tuple holding Tensors is kept whole, under torch's name (the classes pass its parts)
        given = tuple(hparams[part] for part in parts)
        if any(isinstance(v, Tensor) for v in given):
            if name in ("adam", "adamw") and key == "betas":  # torch.optim.Adam keeps betas squeezed to 0-dim
                given = tuple(b.squeeze() if isinstance(b, Tensor) and b.dim() != 0 else b for b in given)
            rules.tensors[key] = given
        for part in parts:
            rules.tensors.pop(part, None)
    self._tensor_defaults = rules.tensors
    return h, o


@torch.jit.unused
def eager_parse(
    self, params: List[Tensor], hparams: Dict[str, float], options: Dict[str, Optional[bool]], name: str
) -> Tuple[List[List[Tensor]], List[Dict[str, float]], List[Dict[str, Optional[bool]]]]:
    """Eager only: accept a list of tensors or of torch-style param-group dicts (whose values
    may be Tensors, read with torch's rules)."""
    from ._param_groups import parse

    groups, group_hparams, group_options, self._extras, self._tensors = parse(
        params, hparams, options, name, self._tensor_defaults
    )
    self._defaults = (hparams, options, self._tensor_defaults)  # for add_param_group
    del self._tensor_defaults
    return groups, group_hparams, group_options


@torch.jit.unused
def eager_attach(self) -> None:
    """Eager only: create the torch-style ``param_groups`` list and bind each group's Tensor
    hyperparameters."""
    from ._param_groups import attach

    self.param_groups = attach(self, self._s.cache_params, self._extras, self._tensors)
    del self._extras
    del self._tensors


@torch.jit.unused
def eager_repr(self) -> str:
    lines = [f"{type(self).__name__} ("]
    for g, group in enumerate(getattr(self, "param_groups", [])):
        lines.append(f"Parameter Group {g}")
        lines.extend(f"    {k}: {v}" for k, v in sorted(group.items()) if k != "params")
    return "\n".join(lines + [")"])


# Compiled by TorchScript as methods of each optimizer class: each is bound under its own name
# (TorchScript leaves out a function bound under another name).
_COMPILED = (
    _new_state, _init_groups, step, _step_group, step_param, set_group, param_group_indices, hyperparameters,
    options, set_hyperparameter, set_option, get_state, set_state,
)
# Eager only (``@torch.jit.unused``): bound under these names.
_EAGER = {
    "state_dict": state_dict, "load_state_dict": load_state_dict, "add_param_group": add_param_group, "_eager_defaults": eager_defaults,
    "_eager_parse": eager_parse, "_eager_attach": eager_attach, "__repr__": eager_repr,
}
_HOOKS = ("_check", "_group_step", "_sparse_error")


def with_shared_methods(cls: type) -> type:
    """Class decorator: bind this module's methods into the optimizer class ``cls``.

    Args:
        cls (type): a TorchScript-compatible optimizer class that defines ``__init__`` and the
            hooks ``_check``, ``_group_step`` and ``_sparse_error`` (see the module docstring),
            and none of the shared methods.

    Returns:
        type: ``cls`` itself, with the shared methods as attributes.

    Raises:
        TypeError: ``cls`` lacks a hook or defines a shared method itself.
    """
    missing = [name for name in _HOOKS if name not in vars(cls)]
    if missing:
        raise TypeError(f"{cls.__name__} must define {missing}")
    shared = {fn.__name__: fn for fn in _COMPILED}
    shared.update(_EAGER)
    clash = sorted(name for name in shared if name in vars(cls))
    if clash:
        raise TypeError(f"{cls.__name__} defines {clash}, which with_shared_methods binds")
    for name, fn in shared.items():
        setattr(cls, name, fn)
    return cls
