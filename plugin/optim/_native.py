"""The native local optimizer: an owner's share of a :class:`~plugin.optim.DistributedOptimizer`,
stepped in C++ (``torch.classes.gilfree_rpc.LocalOptimizer``, ``plugin/csrc/optim/local_optimizer.h``)
through ``functional_optim``'s group steps, without the GIL and without TorchScript.

:class:`LocalOptimizer` takes the configuration as ``functional_optim.configuration.configure``
validates and parses it, builds the C++ object from it and keeps only that. Its methods call
the C++ object's ops by its handle (``plugin.ops``): the same ops another worker calls by RPC
(``plugin/csrc/rpc/rpc_functions.cpp``). Nothing here names a particular optimizer or calls
``torch.jit``.
"""
import copy
import inspect
from typing import Any, Dict, List, Optional, Tuple

from torch import Tensor

import functional_optim
from functional_optim import configuration

from .. import ops

__all__ = ["LocalOptimizer"]


def _given_flags(functional_class: type, params: Any, args: tuple, kwargs: dict) -> Optional[str]:
    """Why the class or its flags rule the native local optimizer out before it is built: a class
    the registry does not map from ``torch.optim``, or ``"differentiable=True"`` or
    ``"capturable=True"`` given (arguments, or a param group)."""
    if functional_optim.torch_optimizer_for(functional_class) is None:
        return "a functional class registered by the user"
    try:
        bound = inspect.signature(functional_class.__init__).bind(None, params, *args, **kwargs).arguments
    except TypeError:
        return None
    groups = [g for g in params if isinstance(g, dict)] if isinstance(params, (list, tuple)) else []
    for flag in ("differentiable", "capturable"):
        if bound.get(flag) or any(g.get(flag) for g in groups):
            return f"{flag}=True"
    return None


class LocalOptimizer:
    """One worker's share of a distributed optimizer, stepped natively (C++).

    Holds a C++ ``torch.classes.gilfree_rpc.LocalOptimizer`` over ``params``, reached by its
    :attr:`handle` (unique in the process); it lives as long as this object. Every call that
    reads or writes the parameters, their state or the hyperparameters holds the parameters'
    locks (per parameter, shared with every local optimizer of this process, waited for without
    the GIL); the steps run without the GIL and without TorchScript, locally and when another
    worker calls the same ops by RPC.

    Results are bitwise those of the ``functional_optim`` eager instance built with the same
    arguments: a group's step is the op library's group step of the optimizer
    (``torch.ops.gilfree_optim.group_step``, ``functional_optim/csrc/steps/<name>.cpp``), the
    one that instance's default implementation runs, with the same state (keys, dtypes,
    devices, created at a parameter's first step), the same checks and messages. Algorithms:
    ``torch.optim``'s (the class of the same name). Sparse (COO) gradients are taken where the
    ``functional_optim`` class takes them.

    Args:
        functional_class (type): a ``functional_optim`` class with a fused implementation (the
            registry's: ``functional_optim.Adam``, ...).
        params: the parameters on this worker, as for ``torch.optim``: a list of leaf tensors
            (any shape; float32, float64, bfloat16 or float16; on a device the optimizer's fused
            implementation takes) or of param-group dicts.
        *args: the optimizer's positional hyperparameters, as for the class (numbers or
            1-element Tensors, which the steps follow).
        **kwargs: its keyword hyperparameters, likewise.

    Raises:
        ValueError: a configuration without the fused implementation everywhere
            (:meth:`why_not_native` says why), or what the class's constructor raises (invalid
            hyperparameters, empty ``params``: torch's messages).
        TypeError, RuntimeError: what the class's constructor raises.
    """

    def __init__(self, functional_class: type, params: Any, *args: Any, **kwargs: Any) -> None:
        reason = self._init(functional_class, params, args, kwargs)
        if reason is not None:
            raise ValueError(f"LocalOptimizer: {functional_class.__name__} cannot step natively here: {reason}")

    @classmethod
    def build(cls, functional_class: type, params: Any, *args: Any, **kwargs: Any) -> Tuple[Optional["LocalOptimizer"], Optional[str]]:
        """A local optimizer, or why there is none, configuring once.

        Args:
            functional_class (type), params, *args, **kwargs: as for the constructor.

        Returns:
            Tuple[Optional[LocalOptimizer], Optional[str]]: the optimizer and ``None``, or
            ``None`` and :meth:`why_not_native`'s words.

        Raises:
            Exception: what the class's constructor raises (invalid hyperparameters...).
        """
        local = cls.__new__(cls)
        reason = local._init(functional_class, params, args, kwargs)
        return (local, None) if reason is None else (None, reason)

    def _init(self, functional_class: type, params: Any, args: tuple, kwargs: dict) -> Optional[str]:
        """Configures once and builds the C++ object; or builds nothing and returns why not."""
        reason = _given_flags(functional_class, params, args, kwargs)
        config = configuration.configure(functional_class, params, *args, **kwargs)
        reason = reason or config.not_fused
        if reason is not None:
            return reason
        self._class = functional_class
        self._name = config.name
        self._indices: List[List[int]] = []
        start = 0
        for group in config.groups:
            self._indices.append(list(range(start, start + len(group))))
            start += len(group)
        self._tensors: List[Dict[str, Tensor]] = [dict(t) for t in config.tensor_hyperparameters]
        self._extras: List[Dict[str, Any]] = [dict(e) for e in config.extras]
        self._object = ops.new_local_optimizer(
            config.name, config.groups, config.hyperparameters, config.options, config.tensor_hyperparameters,
            config.sparse_errors, config.dense_error, config.state,
        )
        self._handle: int = self._object.handle()
        return None

    @staticmethod
    def why_not_native(functional_class: type, params: Any, *args: Any, **kwargs: Any) -> Optional[str]:
        """Why :class:`LocalOptimizer` cannot step this configuration, in words; ``None`` when it can.

        It can when ``functional_class`` has a fused implementation and every param group runs
        it: ``functional_optim``'s default for dense floating-point parameters on a device the
        implementation takes (every optimizer on the CPU; SGD, Adam, AdamW and Adagrad on
        CUDA), or ``fused=True``. Arguments the constructor rejects give ``None``, so that the
        constructor raises its own error.

        Args:
            functional_class (type), params, *args, **kwargs: as for the constructor (``params``
                a list, not an iterator, when the caller uses it again).

        Returns:
            Optional[str]: ``None``, or a reason such as ``"foreach=True"``, ``"fused=False"``,
            ``"differentiable=True"``, ``"no fused implementation for RMSprop on cuda"``.

        Raises nothing.
        """
        reason = _given_flags(functional_class, params, args, kwargs)
        if reason is not None:
            return reason
        try:
            return configuration.configure(functional_class, params, *args, **kwargs).not_fused
        except Exception:  # noqa: BLE001 (the constructor raises it again, with its message)
            return None

    @property
    def handle(self) -> int:
        """The C++ object's handle in this process's registry (what the ops take first)."""
        return self._handle

    @property
    def name(self) -> str:
        """The optimizer's name in the op library (``"adam"``...)."""
        return self._name

    def accepts_sparse(self) -> bool:
        """Whether every param group takes sparse (COO) gradients.

        Returns:
            bool: True for SGD and Adagrad unless a group has ``fused=True`` (Adagrad: or
            ``weight_decay != 0``), and SparseAdam; False for the others.

        Raises nothing for a live optimizer.
        """
        return ops._optimizer_accepts_sparse(self._handle)

    # --- steps ------------------------------------------------------------------------------

    def step(self, context_id: int) -> None:
        """Applies the gradients of distributed autograd context ``context_id`` on this worker
        (the plugin engine's, or torch's when only its engine ran); a parameter without one is
        skipped, and so is every parameter when this worker does not know the context.

        Args:
            context_id (int): a distributed autograd context id whose backward pass has ended.

        Raises:
            ValueError: a gradient whose shape, dtype or device differs from its parameter's
                (``functional_optim``'s message, naming the index). Nothing changes then.
            RuntimeError: a sparse gradient the optimizer does not take (torch's message).
        """
        ops._optimizer_step(self._handle, context_id, -1, -1)

    def step_gradients(self, gradients: List[Optional[Tensor]]) -> None:
        """Applies ``gradients`` under the same locks as :meth:`step`.

        Args:
            gradients (List[Optional[Tensor]]): one per parameter, flat order (group after
                group): a tensor of the parameter's shape, dtype and device (sparse COO where
                the optimizer takes it), or ``None`` to skip that parameter.

        Raises:
            ValueError: wrong number of gradients, or one whose shape, dtype or device differs
                from its parameter's (``functional_optim``'s messages). Nothing changes then.
            RuntimeError: a sparse gradient the group does not take (torch's message).
        """
        ops._optimizer_step_gradients(self._handle, gradients)

    # --- state and values ---------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """The state in the matching ``torch.optim`` class's format, under the locks.

        Returns:
            Dict[str, Any]: ``{'state': {flat index: {key: Tensor}}, 'param_groups': [...]}``:
            torch's keys, shapes, dtypes and devices, copies; each group with torch's names
            (tuples joined), a Tensor hyperparameter as the Tensor it follows, the group's
            other keys (``'param_names'``, a scheduler's ``'initial_lr'``) and ``'params'`` last.

        Raises nothing for a live optimizer.
        """
        state, hparams, options = ops._optimizer_state(self._handle)
        groups = []
        for g, indices in enumerate(self._indices):
            packed = configuration.torch_group(dict(hparams[g]), dict(options[g]))
            shown = {name: self._tensors[g].get(name, value) for name, value in hparams[g].items()}
            for key, value in configuration.torch_group(shown, {}).items():
                if isinstance(value, Tensor) or (isinstance(value, tuple) and any(isinstance(v, Tensor) for v in value)):
                    packed[key] = value
            for key, value in self._extras[g].items():
                packed.setdefault(key, value)
            packed["params"] = list(indices)
            groups.append(packed)
        return configuration.torch_state_dict(self._name, state, groups)

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Loads a ``torch.optim``-format state dict (saved from this class, the eager
        ``functional_optim`` class or the ``torch.optim`` class), as ``functional_optim``'s
        ``load_state_dict`` does: parameters matched by position, state tensors copied and cast
        to each parameter's device and dtype, each group's saved hyperparameters and flags set
        (saved Tensors followed as copies), other saved keys kept in the group.

        Args:
            state_dict (Dict[str, Any]): ``{'state': {index: {key: Tensor}}, 'param_groups':
                [...]}``; each state tensor 0-dim or of its parameter's shape, any dtype and
                device (copied and cast).

        Raises:
            ValueError: a different number of groups or parameters (torch's messages), invalid
                values (torch's messages), a non-tensor state value, an index or shape that does
                not fit. Nothing changes then.
            RuntimeError: flags that would take a group off the fused implementation, or
                ``fused`` with ``foreach`` (torch's message).
        """
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self._indices):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g) != len(s["params"]) for g, s in zip(self._indices, saved_groups)):
            raise ValueError(
                "loaded state dict contains a parameter group that doesn't match the size of optimizer's group"
            )
        id_map = {}
        for saved, indices in zip(saved_groups, self._indices):
            id_map.update(zip(saved["params"], indices))
        new_state = {id_map[i]: configuration.state_entry(i, e) for i, e in state_dict["state"].items() if i in id_map}
        current_h, current_o = self._values()
        updates_h, updates_o, errors, bound = [], [], [], []
        for g, saved in enumerate(saved_groups):
            values = {k: v for k, v in saved.items() if k != "params"}
            h, o, tensors = configuration.group_update(self._class, current_h[g], current_o[g], values)
            errors.append(configuration.check_group(self._class, dict(current_h[g], **h), dict(current_o[g], **o)))
            updates_h.append(h)
            updates_o.append(o)
            bound.append(_functional_names({k: copy.deepcopy(v) for k, v in tensors.items()}))
        ops._optimizer_load_state(self._handle, new_state, updates_h, updates_o, errors)
        for g, saved in enumerate(saved_groups):
            for name in updates_h[g]:
                self._tensors[g].pop(name, None)
            if bound[g]:
                ops._optimizer_set_group(self._handle, g, {}, {}, bound[g], errors[g])
                self._tensors[g].update(bound[g])
            known = configuration.torch_group(current_h[g], current_o[g])
            for key, value in saved.items():
                if key != "params" and key not in known and (key not in self._extras[g] or key == "param_names"):
                    self._extras[g][key] = list(value) if key == "param_names" else value

    def hyperparameters(self) -> List[Dict[str, float]]:
        """Each group's numeric hyperparameters.

        Returns:
            List[Dict[str, float]]: one new dict per group, functional names (tuples split:
            ``beta1``, ``beta2``...), a Tensor hyperparameter's value read now.

        Raises nothing for a live optimizer.
        """
        return self._values()[0]

    def options(self) -> List[Dict[str, Optional[bool]]]:
        """Each group's flags.

        Returns:
            List[Dict[str, Optional[bool]]]: one new dict per group (``maximize``, ``foreach``,
            ``fused``, ...; ``foreach`` and ``fused`` may be None).

        Raises nothing for a live optimizer.
        """
        return self._values()[1]

    def set_group(self, group: int, hparams: Dict[str, Any], options: Dict[str, Optional[bool]],
                  tensor_hparams: Optional[Dict[str, Tensor]] = None) -> None:
        """Sets several values of one group at once, from the next step on, validated together
        first with the class's own checks (torch's messages); nothing changes when they fail.

        Args:
            group (int): the param group, from 0.
            hparams (Dict[str, float]): numbers by functional name (``lr``, ``beta1``...); a
                number replaces a Tensor the name followed.
            options (Dict[str, Optional[bool]]): flags by name; ``None`` only for ``foreach``
                and ``fused``.
            tensor_hparams (Dict[str, Tensor]): Tensors to follow, by functional name: one
                element each (shape ``[]`` or ``[1]``), any dtype and device, read with
                ``.item()`` before every step, as ``torch.optim`` reads a Tensor ``lr``.

        Raises:
            ValueError: no such group or name, an invalid value (torch's messages).
            RuntimeError: ``fused`` with ``foreach`` (torch's message), or flags that would take
                the group off the fused implementation (``foreach=True``, ``fused=False``...).
        """
        tensors = dict(tensor_hparams or {})
        n = len(self._indices)
        if not 0 <= group < n:
            raise ValueError(f"parameter group {group} does not exist (the optimizer has {n} groups)")
        current_h, current_o = self._values()
        for name in list(hparams) + list(tensors):
            if name not in current_h[group]:
                raise ValueError(f"unknown hyperparameter '{name}'; this optimizer has {list(current_h[group])}")
        for name, value in options.items():
            if name not in current_o[group]:
                raise ValueError(f"unknown option '{name}'; this optimizer has {list(current_o[group])}")
            if value is None and name not in ("foreach", "fused"):
                raise ValueError(f"option '{name}' must be True or False, not None")
        numbers = {k: float(v) for k, v in hparams.items()}
        foreach = options.get("foreach", current_o[group].get("foreach"))
        read = {k: configuration.tensor_value(self._class, k, v, foreach) for k, v in tensors.items()}
        error = configuration.check_group(self._class, dict(current_h[group], **numbers, **read),
                                           dict(current_o[group], **options))
        ops._optimizer_set_group(self._handle, group, numbers, dict(options), tensors, error)
        for name in numbers:
            self._tensors[group].pop(name, None)
        self._tensors[group].update(tensors)

    def set_hyperparameter(self, group: int, name: str, value: float) -> None:
        """:meth:`set_group` of one number (``set_hyperparameter(0, "lr", 0.01)``).

        Args:
            group (int): the param group, from 0.
            name (str): a functional name (``lr``, ``beta1``, ...).
            value (float): the new value, in the units of the constructor's argument.

        Raises:
            ValueError: no such group or name, or an invalid value (torch's messages).
        """
        self.set_group(group, {name: value}, {})

    # --- helpers ----------------------------------------------------------------------------

    def _values(self) -> Tuple[List[Dict[str, float]], List[Dict[str, Optional[bool]]]]:
        hparams, options = ops._optimizer_hyperparameters(self._handle)
        return [dict(h) for h in hparams], [dict(o) for o in options]

    def __repr__(self) -> str:
        return f"LocalOptimizer({self._class.__name__}, handle={self._handle})"


def _functional_names(tensors: Dict[str, Any]) -> Dict[str, Tensor]:
    """Tensor hyperparameters under torch's names (a tuple may hold them) as functional names."""
    out: Dict[str, Tensor] = {}
    for key, value in tensors.items():
        parts = configuration.TUPLE_HYPERPARAMETERS.get(key)
        if parts is None or not isinstance(value, (tuple, list)):
            out[key] = value
        else:
            for half, v in zip(parts, value):
                if isinstance(v, Tensor):
                    out[half] = v
    return out
