"""The owners' side of a :class:`~plugin.optim.DistributedOptimizer`: which local optimizer an
owner builds (:func:`build`, run by RPC, once: native where the registry maps the class to a
``functional_optim`` class whose fused implementation every param group runs; TorchScript for a
functional class the user registered, where torch still compiles it; Python otherwise, with the
reason), and the Python functions by which the caller reaches each kind (their adapters to
``_owners.Owner``: the steps of the Python and TorchScript kinds, and every kind's state and
values; the native kind's steps have native RPC functions).
"""
from typing import Any, Dict, List, NamedTuple, Optional

import torch
import torch.distributed.rpc as rpc
from torch import Tensor

import functional_optim
from functional_optim import configuration

from .. import ops
from ._native import NativeLocalOptimizer
from ._python import PythonLocalOptimizer
from ._scripted import ScriptLocalOptimizer, _commit, _prepare, _step, interface_type, scripted_functions

__all__ = ["Built", "build", "prepare_caller", "function_for", "group_of", "check_group_update", "check_group"]


class Built(NamedTuple):
    """What :func:`build` sends back to the caller."""

    kind: str  # "native", "python" or "torchscript"
    rref: Any  # the local optimizer (its lifetime is this RRef's)
    handle: int  # the native local optimizer's handle, -1 for the others
    accepts_sparse: bool  # whether it takes sparse gradients (native only)
    reason: Optional[str]  # why it steps in Python (None when it does not)


def _python_class(optimizer_class: type, functional_class: Optional[type]) -> Optional[type]:
    """The ``torch.optim.Optimizer`` subclass a Python local optimizer can step for
    ``optimizer_class`` (``None`` when there is none)."""
    if isinstance(optimizer_class, type) and issubclass(optimizer_class, torch.optim.Optimizer):
        return optimizer_class
    return functional_optim.torch_optimizer_for(functional_class) if functional_class is not None else None


def build(optimizer_class: type, params_rref: List[Any], args: tuple, kwargs: dict) -> Built:
    """Runs on an owner, by RPC (Python, once): builds its local optimizer over the tensors
    ``params_rref`` hold (owned here) and returns how to reach it.

    Raises:
        TypeError: an RRef that does not hold a Tensor.
        Exception: what the optimizer's constructor raises (invalid hyperparameters).
    """
    params = []
    for i, rref in enumerate(params_rref):
        value = rref.local_value()
        if not isinstance(value, Tensor):
            raise TypeError(f"params_rref[{i}] refers to a {type(value).__name__}, not a Tensor")
        params.append(value)
    try:
        functional_class = functional_optim.functional_optimizer_for(optimizer_class)
    except KeyError:
        functional_class = None
    reason: Optional[str] = None
    if functional_class is None:
        reason = "it has no functional counterpart"
    elif functional_optim.torch_optimizer_for(functional_class) is not None:
        local, reason = NativeLocalOptimizer.build(functional_class, params, *args, **kwargs)
        if local is not None:
            return Built("native", rpc.RRef(local), local.handle, local.accepts_sparse(), None)
    else:  # a functional class the user registered: TorchScript, where torch still compiles it
        try:
            module = ScriptLocalOptimizer.create(optimizer_class, params, *args, **kwargs)
            scripted_functions()
            return Built("torchscript", rpc.RRef(module, interface_type()), -1, False, None)
        except Exception as e:  # noqa: BLE001 (TorchScript gone, or the class does not compile)
            if _python_class(optimizer_class, functional_class) is None:
                raise
            reason = f"TorchScript did not compile its functional class here ({type(e).__name__}: {e})"
    local = PythonLocalOptimizer(_python_class(optimizer_class, functional_class), params, *args, **kwargs)
    return Built("python", rpc.RRef(local), -1, False, reason)


def prepare_caller(optimizer_class: type) -> None:
    """Runs on the caller before any owner builds: where an owner may build a TorchScript local
    optimizer (a functional class the user registered), compiles the TorchScript functions and
    the interface type here too, so that the RRef typed with that interface which the owner
    sends back can be read here (torch's DistributedOptimizer compiles its interface at import).
    Where TorchScript does not compile here, nothing: the owners step the class in Python."""
    try:
        functional_class = functional_optim.functional_optimizer_for(optimizer_class)
    except KeyError:
        return
    if functional_optim.torch_optimizer_for(functional_class) is None:
        try:
            scripted_functions()
        except Exception:  # noqa: BLE001 (TorchScript gone here: the owners fall back to Python as well)
            pass


# --- the adapters: the Python and TorchScript kinds' functions, by the native op each stands for
# (the steps are _scripted's functions, which run as Python here: TorchScript compiles them only
# for the TorchScript kind)


def _drop(rref: Any, token: int) -> bool:
    return ops._drop_step(token)


def _state(rref: Any) -> Dict[str, Any]:
    return rref.local_value().state_dict()


def _load_state(rref: Any, state_dict: Dict[str, Any]) -> None:
    rref.local_value().load_state_dict(state_dict)


def _hyperparameters(rref: Any) -> Dict[str, Any]:
    return rref.local_value().torch_group()


def _set_group(rref: Any, hparams: Dict[str, float], options: Dict[str, Optional[bool]]) -> None:
    rref.local_value().set_group(0, hparams, options)


# The TorchScript kind's state and values, in Python on its owner under the parameters' locks
# (rare calls): through its optimizer's state protocol, which the ScriptModule's submodule
# forwards (functional_optim.state_protocol), in the Python kind's forms. An error raised in
# TorchScript reaches the caller as its type (plugin/_errors.py reads "builtins.ValueError").
def _script_state(rref: Any) -> Dict[str, Any]:
    module = rref.local_value()
    with ops._holding(module._lock):
        state = functional_optim.state_dict(module.optimizer)
        # copies: the reply is serialized after the lock is released
        state["state"] = {i: {k: v.clone() for k, v in s.items()} for i, s in state["state"].items()}
        return state


def _script_load_state(rref: Any, state_dict: Dict[str, Any]) -> None:
    module = rref.local_value()
    with ops._holding(module._lock):
        functional_optim.load_state_dict(module.optimizer, state_dict)


def _script_hyperparameters(rref: Any) -> Dict[str, Any]:
    module = rref.local_value()
    with ops._holding(module._lock):
        return group_of(module.optimizer.hyperparameters(), module.optimizer.options())


def _script_set_group(rref: Any, hparams: Dict[str, Any], options: Dict[str, Optional[bool]]) -> None:
    module = rref.local_value()
    with ops._holding(module._lock):  # (TorchScript takes numbers: a Tensor's value)
        module.optimizer.set_group(0, {name: float(value) for name, value in hparams.items()}, options)


# The native kind's state and values, in Python on its owner (its NativeLocalOptimizer keeps them with
# functional_optim's optimizer; its steps are native RPC functions). A change answers whether it
# now takes sparse gradients (Adagrad's weight_decay, SGD's fused flag change it).
def _native_state(rref: Any) -> Dict[str, Any]:
    return rref.local_value().state_dict()


def _native_load_state(rref: Any, state_dict: Dict[str, Any]) -> bool:
    local = rref.local_value()
    local.load_state_dict(state_dict)
    return local.accepts_sparse()


def _native_hyperparameters(rref: Any) -> Dict[str, Any]:
    local = rref.local_value()
    return group_of(local.hyperparameters(), local.options(), local.tensor_hyperparameters())


def _native_set_group(rref: Any, hparams: Dict[str, Any], options: Dict[str, Optional[bool]]) -> bool:
    local = rref.local_value()
    tensors = {name: value for name, value in hparams.items() if isinstance(value, Tensor)}
    numbers = {name: value for name, value in hparams.items() if not isinstance(value, Tensor)}
    local.set_group(0, numbers, options, tensors)
    return local.accepts_sparse()


_PYTHON = {
    "_optimizer_step": _step, "_optimizer_prepare": _prepare, "_optimizer_commit": _commit,
    "_optimizer_drop": _drop, "_optimizer_state": _state, "_optimizer_load_state": _load_state,
    "_optimizer_hyperparameters": _hyperparameters, "_optimizer_set_group": _set_group,
}
_TORCHSCRIPT = dict(_PYTHON, _optimizer_state=_script_state, _optimizer_load_state=_script_load_state,
                    _optimizer_hyperparameters=_script_hyperparameters, _optimizer_set_group=_script_set_group)
_NATIVE = {"_optimizer_state": _native_state, "_optimizer_load_state": _native_load_state,
           "_optimizer_hyperparameters": _native_hyperparameters, "_optimizer_set_group": _native_set_group}


def function_for(kind: str, op: str) -> Any:
    """The Python function that stands for the native op ``op`` with a local optimizer of
    ``kind``: for ``"python"`` and ``"torchscript"`` every op (the TorchScript kind's steps are
    TorchScript functions, its state and values Python functions that reach its optimizer's
    state protocol), for ``"native"`` the state and values ones (its steps are native RPC
    functions); it takes the local optimizer's RRef first, then the op's arguments after the
    handle."""
    if kind == "native":
        return _NATIVE[op]
    if kind == "torchscript" and op in ("_optimizer_step", "_optimizer_prepare", "_optimizer_commit"):
        return scripted_functions()[op]
    return (_TORCHSCRIPT if kind == "torchscript" else _PYTHON)[op]


# --- a native owner's answers, in the caller's terms ----------------------------------------


def group_of(hparams: List[Dict[str, float]], options: List[Dict[str, Optional[bool]]],
             tensors: Optional[List[Dict[str, Tensor]]] = None) -> Dict[str, Any]:
    """The first parameter group under ``torch.optim``'s names (tuples joined; a hyperparameter
    followed as a Tensor, in ``tensors``, as that Tensor), with the functional names of its
    numeric hyperparameters and flags (what :class:`~plugin.optim._param_groups.DistributedParamGroup`
    reads)."""
    bound = tensors[0] if tensors else {}
    shown = {name: bound.get(name, value) for name, value in hparams[0].items()}
    return {"group": configuration.torch_group(shown, dict(options[0])), "hparam_names": list(hparams[0]),
            "option_names": list(options[0])}


def check_group_update(optimizer_class: type, hparams: Dict[str, float], options: Dict[str, Optional[bool]],
                       values: Dict[str, Any]) -> None:
    """Checks a native local optimizer's group (functional names) updated with ``values``
    (torch's names) as ``load_state_dict`` checks them (the caller's check before anything is
    sent; each owner's ``functional_optim`` optimizer checks again).

    Raises:
        TypeError, ValueError, RuntimeError: as ``functional_optim``'s ``load_state_dict``.
    """
    functional_class = functional_optim.functional_optimizer_for(optimizer_class)
    configuration.group_update(functional_class, hparams, options, values)


def check_group(optimizer_class: type, hparams: Dict[str, float], options: Dict[str, Optional[bool]]) -> None:
    """Checks a native local optimizer's new group values (functional names) as its
    ``set_group`` checks them (raising its errors; the caller's check before anything is sent)."""
    functional_class = functional_optim.functional_optimizer_for(optimizer_class)
    configuration.check_group(functional_class, hparams, options)
