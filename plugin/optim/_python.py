"""The Python local optimizer (:class:`plugin.optim.PythonLocalOptimizer`, torch's
``_LocalOptimizer``): the owners' side of a :class:`plugin.optim.DistributedOptimizer` over a
``torch.optim.Optimizer`` subclass with no functional counterpart (a user's own,
``torch.optim.LBFGS``, a subclass of ``torch.optim.Adam`` that overrides ``step``...) or a
built-in optimizer in a configuration the native local optimizer does not cover
(``torch.optim.Adam(foreach=True)``); and the :class:`PythonStepWarning` the caller gives once
per class. The caller reaches it by the Python functions of ``plugin/optim/_local.py``.
"""
import copy
import threading
import warnings
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

import functional_optim
from functional_optim.configuration import TUPLE_HYPERPARAMETERS, check_group_index, copy_tensors

from .. import ops
from ._adapter import StepAdapter

__all__ = ["PythonLocalOptimizer", "PythonStepWarning", "uses_python_step", "warn_once"]


class PythonStepWarning(UserWarning):
    """Warned once per optimizer class (``warnings.warn``, on the caller, when the first
    :class:`~plugin.optim.DistributedOptimizer` of the class is built) whose steps run in
    Python on the owners and hold their GIL: the class has no functional counterpart, or the
    native local optimizers do not cover its configuration (``foreach=True``, RMSprop on
    CUDA, ...), or TorchScript did not compile a registered class. Filter it with
    ``warnings.filterwarnings("ignore", category=PythonStepWarning)``.

    Args:
        message (str): names the class and why it steps in Python, says that its steps hold
            the owners' GIL, and what would step it without.

    Raises nothing: it is a warning category.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)


_WARNED: set = set()
_WARNED_LOCK = threading.Lock()


def uses_python_step(optimizer_class: Any) -> bool:
    """Whether ``optimizer_class`` steps in Python whatever its configuration: True for a
    ``torch.optim.Optimizer`` subclass that has no functional counterpart, False for a
    registered class (native or TorchScript, as its owners decide); raises the registry's
    ``KeyError`` (extended) for anything else."""
    try:
        functional_optim.functional_optimizer_for(optimizer_class)
        return False
    except KeyError as e:
        if isinstance(optimizer_class, type) and issubclass(optimizer_class, torch.optim.Optimizer):
            return True
        raise KeyError(f"{e.args[0]}; and it is not a torch.optim.Optimizer subclass, which would step in Python")


def warn_once(optimizer_class: type, reason: str, stacklevel: int) -> None:
    """The :class:`PythonStepWarning` for ``optimizer_class``, the first time only; ``reason``
    says why it steps in Python."""
    with _WARNED_LOCK:
        if optimizer_class in _WARNED:
            return
        _WARNED.add(optimizer_class)
    module = optimizer_class.__module__
    name = optimizer_class.__qualname__ if module in ("__main__", "__mp_main__") else f"{module}.{optimizer_class.__qualname__}"
    if reason == "it has no functional counterpart":
        advice = (f"To step it without the GIL, use one of the fourteen built-in optimizers, or write a "
                  f"functional_optim-style class for it (see the 'Functional optimizers' page) and register it on "
                  f"every worker before building the optimizer (it then steps as TorchScript, where torch still "
                  f"compiles it): functional_optim.register_functional_optimizer({optimizer_class.__qualname__}, "
                  f"YourFunctionalClass)")
    else:
        advice = ("The native local optimizers step the fused kernels: the default foreach=None, fused=None (or "
                  "fused=True) with dense floating-point parameters on the CPU, or on CUDA for SGD, Adam, AdamW "
                  "and Adagrad")
    warnings.warn(
        f"{name} steps in Python on its owners because {reason}: each owner steps it as a torch.optim optimizer, "
        f"and its steps hold the owner's GIL (they wait for, and block, every other Python thread of the owner). "
        f"{advice}.",
        PythonStepWarning,
        stacklevel=stacklevel + 1,
    )


class PythonLocalOptimizer(StepAdapter):
    """One worker's share of a distributed optimizer that steps in Python: a
    ``torch.optim.Optimizer`` subclass, built and stepped on this worker (torch's
    ``_LocalOptimizer``). :class:`plugin.optim.DistributedOptimizer` builds one on each owner
    for a class with no functional counterpart, or a configuration the native local optimizer
    does not cover. Its steps hold the GIL (see :class:`PythonStepWarning`).

    A step reads the context's gradients (``plugin.ops.gradients_for``: the plugin engine's,
    or torch's), checks them (count, shape, dtype, device: ``ValueError``), then, holding the
    parameters' locks (the same per-parameter locks as :class:`~plugin.optim.NativeLocalOptimizer`,
    taken in the same global order, so a native and a Python optimizer that share a parameter
    never interleave on it), sets each parameter's ``.grad`` to its gradient (``None`` where it
    has none: the optimizer skips it, as ``torch.optim`` does), calls the optimizer's
    ``step()``, and puts back the ``.grad`` each parameter had before, also when the step
    raises. Code that reads ``.grad`` of these parameters on the owner during a step sees the
    context's gradient.

    A step that raises changes nothing: before the optimizer's ``step()``, the parameters'
    values, the optimizer's ``state`` and ``param_groups`` are copied (one copy of the
    parameters and the state per step), and restored if it raises. Attributes the optimizer
    keeps outside ``state`` and ``param_groups`` are not restored.

    Args:
        optimizer_class (type): a ``torch.optim.Optimizer`` subclass, built as
            ``optimizer_class(params, *args, **kwargs)``; it must make one parameter group.
        params (List[Tensor]): the parameters, on this worker: leaf tensors of any shape,
            dtype and device the optimizer supports.
        *args: the optimizer's positional arguments.
        **kwargs: its keyword arguments.

    Raises:
        ValueError: empty ``params``, or the optimizer made more than one parameter group.
        Exception: whatever ``optimizer_class`` raises (``ValueError("Invalid learning
            rate: -1")``), unchanged.

    Algorithm: torch's ``_LocalOptimizer`` (``torch/distributed/optim/optimizer.py``), with
    the per-parameter locks of the native path instead of one lock per process, rollback of
    a step that raises, and a two-phase step (:meth:`prepare_step`, :meth:`commit_step`)
    whose first phase runs the step and undoes it.
    """

    def __init__(self, optimizer_class: type, params: List[Tensor], *args: Any, **kwargs: Any) -> None:
        self._params = list(params)
        if not self._params:
            raise ValueError(f"{optimizer_class.__qualname__}: empty params")
        self.optimizer_class = optimizer_class
        self.optimizer = optimizer_class(self._params, *args, **kwargs)
        if len(self.optimizer.param_groups) != 1:
            raise ValueError(
                f"{optimizer_class.__qualname__} made {len(self.optimizer.param_groups)} parameter groups from a list "
                f"of parameters; a distributed optimizer has one"
            )
        self._lock = ops.new_step_lock(self._params)

    # --- steps ------------------------------------------------------------------------------

    def _try(self, gradients: List[Optional[Tensor]]) -> None:
        """:meth:`prepare_step`'s trial: under the locks, the optimizer's step with copies of
        ``gradients``, undone (the optimizer's own checks are not known, so its step runs twice)."""
        trial = [None if g is None else g.clone() for g in gradients]  # the trial cannot change them
        with ops._holding(self._lock):
            self._run(trial, keep=False)

    def _apply(self, gradients: List[Optional[Tensor]]) -> None:
        """The step of :meth:`commit_step`, :meth:`step_before`, :meth:`step`: :meth:`_run`
        keeping it; the caller holds the locks."""
        self._run(gradients, keep=True)

    def _run(self, gradients: List[Optional[Tensor]], keep: bool) -> None:
        """The optimizer's step with ``gradients`` in ``.grad``; the caller holds the locks.
        Undone if it raises, or when ``keep`` is False."""
        saved = self._snapshot()
        grads_before = [p.grad for p in self._params]
        try:
            for p, g in zip(self._params, gradients):
                p.grad = g
            self.optimizer.step()
        except BaseException:
            self._restore(saved)
            raise
        finally:
            for p, g in zip(self._params, grads_before):
                p.grad = g
        if not keep:
            self._restore(saved)

    def _snapshot(self) -> Tuple[List[Tensor], Any, List[Dict[str, Any]]]:
        keep_params = {id(p): p for p in self._params}  # the state's keys stay the parameters
        with torch.no_grad():
            values = [p.detach().clone() for p in self._params]
        state = copy.deepcopy(self.optimizer.state, dict(keep_params))
        groups = [copy.deepcopy(g, dict(keep_params)) for g in self.optimizer.param_groups]
        return values, state, groups

    def _restore(self, saved) -> None:
        values, state, groups = saved
        with torch.no_grad():
            for p, v in zip(self._params, values):
                p.copy_(v)
        self.optimizer.state = state
        for group, old in zip(self.optimizer.param_groups, groups):
            group.clear()
            group.update(old)

    # --- state and hyperparameters (DistributedOptimizer's, by RPC) --------------------------

    def state_dict(self) -> Dict[str, Any]:
        """The optimizer's ``state_dict()``, with copies of its tensors, taken under the
        parameters' locks (never halfway through a step).

        Returns:
            Dict[str, Any]: ``torch.optim``'s format, one parameter group.

        Raises:
            Exception: what the optimizer's ``state_dict()`` raises.
        """
        with ops._holding(self._lock):
            return copy.deepcopy(self.optimizer.state_dict())

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Loads a ``torch.optim``-format state dict of one group, under the parameters' locks.
        As on the native path, the saved group's keys that this optimizer's group does not
        have (a scheduler's ``'initial_lr'``) are ignored, and a key it lacks keeps its value.

        Args:
            state_dict (Dict[str, Any]): ``{'state': {i: {key: value}}, 'param_groups': [one group]}``.

        Raises:
            ValueError: not one group of this optimizer's size (``torch.optim``'s check), or a
                state tensor whose shape differs from the current state's tensor of that key.
                Nothing changes then.
        """
        groups = state_dict["param_groups"]
        if len(groups) != 1:
            raise ValueError("loaded state dict has a different number of parameter groups")
        with ops._holding(self._lock):
            current = self.optimizer.param_groups[0]
            group = {k: v for k, v in current.items() if k != "params"}
            group.update({k: v for k, v in groups[0].items() if k in group})
            group["params"] = groups[0]["params"]
            for i, entry in state_dict["state"].items():
                pos = list(groups[0]["params"]).index(i) if i in groups[0]["params"] else None
                if pos is None or pos >= len(self._params):
                    continue
                live = self.optimizer.state.get(self._params[pos], {})
                for key, value in entry.items():
                    if isinstance(value, Tensor) and isinstance(live.get(key), Tensor) and value.shape != live[key].shape:
                        raise ValueError(
                            f"state[{i}]['{key}'] has shape {list(value.shape)}; this optimizer's has "
                            f"{list(live[key].shape)}"
                        )
            self.optimizer.load_state_dict({"state": state_dict["state"], "param_groups": [group]})

    def torch_group(self) -> Dict[str, Any]:
        """The parameter group as :class:`plugin.optim.DistributedOptimizer`'s ``param_groups``
        shows it: the keys whose values are numbers (a 1-element floating-point Tensor as a copy
        of it, as ``torch.optim`` keeps a Tensor ``lr``), bools or ``None``, and tuples of them
        for torch's tuple keys (``'betas'``, ``'etas'``,
        ``'step_sizes'``, ``'ns_coefficients'``...); with the names of the numeric ones (tuples
        split, as the functional optimizers name them) and of the flags. Other keys stay on the owner only.

        Returns:
            Dict[str, Any]: ``{"group": {...}, "hparam_names": [...], "option_names": [...]}``.

        Raises nothing.
        """
        with ops._holding(self._lock):
            items = [(k, v) for k, v in self.optimizer.param_groups[0].items() if k != "params"]
            # a Tensor hyperparameter as a copy of it (what a scheduler changes in place)
            items = [(k, copy_tensors(v)) for k, v in items]
        group, hparams, options = {}, [], []
        for key, value in items:
            if _is_number(value):
                group[key] = value
                hparams.append(key)
            elif value is None or isinstance(value, bool):
                group[key] = value
                options.append(key)
            elif key in TUPLE_HYPERPARAMETERS and isinstance(value, (tuple, list)) and len(value) == len(
                TUPLE_HYPERPARAMETERS[key]
            ) and all(_is_number(v) for v in value):
                group[key] = tuple(value)
                hparams.extend(TUPLE_HYPERPARAMETERS[key])
        return {"group": group, "hparam_names": hparams, "option_names": options}

    def set_group(self, group: int, hparams: Dict[str, float], options: Dict[str, Optional[bool]]) -> None:
        """Writes hyperparameters (functional names: tuples split) and flags into group
        ``group``, under the parameters' locks; used from the next step on. A number replaces
        an ``int`` as an ``int`` when it is whole, and is written into a 0-dim tensor in place.
        Not validated (``torch.optim`` does not validate writes to ``param_groups`` either).
        The signature of every optimizer's ``set_group`` (``functional_optim``'s state protocol,
        :class:`~plugin.optim.NativeLocalOptimizer`).

        Args:
            group (int): the param group, from 0 (the owner's optimizer has one: 0).
            hparams (Dict[str, float]): numeric values by name (``'lr'``, ``'beta1'``...).
            options (Dict[str, Optional[bool]]): flags by name.

        Raises:
            ValueError: no such group, or a name the group does not have; nothing changes then.
        """
        with ops._holding(self._lock):
            check_group_index(group, len(self.optimizer.param_groups))
            group = self.optimizer.param_groups[group]
            updates: Dict[str, Any] = {}
            for name, value in hparams.items():
                key = next((k for k, parts in TUPLE_HYPERPARAMETERS.items() if name in parts and k in group), None)
                if key is not None:
                    current = list(updates.get(key, group[key]))
                    k = TUPLE_HYPERPARAMETERS[key].index(name)
                    current[k] = _like(current[k], value)
                    updates[key] = tuple(current)
                elif name in group and name != "params":
                    updates[name] = _like(group[name], value)
                else:
                    raise ValueError(f"{self.optimizer_class.__qualname__} has no hyperparameter '{name}'")
            for name, value in options.items():
                if name not in group or name == "params":
                    raise ValueError(f"{self.optimizer_class.__qualname__} has no option '{name}'")
                updates[name] = value
            for name, value in updates.items():
                if isinstance(group[name], Tensor) and not isinstance(value, Tensor):
                    group[name].fill_(value)
                else:
                    group[name] = value

    def set_hyperparameter(self, group: int, name: str, value: float) -> None:
        """Sets one numeric hyperparameter (``'lr'``, ``'beta1'``...) of group ``group``, as
        :meth:`set_group` (``set_hyperparameter(0, "lr", 0.01)``: every optimizer's signature).

        Args:
            group (int): the param group, from 0.
            name (str): the name (parts of tuples as ``'beta1'``, ``'beta2'``...).
            value (float): the new value.

        Raises:
            ValueError: no such group, or the group has no such hyperparameter.
        """
        self.set_group(group, {name: value}, {})


def _is_number(value: Any) -> bool:
    """A hyperparameter's value: a Python number (not a bool) or a 1-element floating-point Tensor."""
    if isinstance(value, Tensor):
        return value.numel() == 1 and value.is_floating_point()
    return isinstance(value, (int, float)) and not isinstance(value, bool)



def _like(current: Any, value: float) -> Any:
    """``value`` in the form of the group's current value (an int stays an int when whole)."""
    if isinstance(current, int) and not isinstance(current, bool) and float(value).is_integer():
        return int(value)
    return value
