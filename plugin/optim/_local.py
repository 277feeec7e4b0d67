"""The owners' side of a :class:`~plugin.optim.DistributedOptimizer`: which local optimizer an
owner builds, and the Python functions by which the caller reaches the Python and TorchScript
kinds (the native kind needs none: its ops have native RPC functions).

Each owner builds its local optimizer itself (:func:`build`, run by RPC, in Python, once):

* **native** (:class:`~plugin.optim.LocalOptimizer`) for the eleven built-in optimizers whenever
  every parameter group steps through a fused kernel, which is their default for dense
  floating-point parameters (every optimizer on the CPU; SGD, Adam, AdamW and Adagrad on CUDA):
  the steps and every other call run in C++, without the owner's GIL;
* **torchscript** (:class:`~plugin.optim.ScriptLocalOptimizer`) for a functional class the user
  registered, where torch still compiles TorchScript;
* **python** (:class:`~plugin.optim.PythonLocalOptimizer`) otherwise: a ``torch.optim`` class
  with no functional counterpart, a built-in optimizer in a configuration the fused kernels do
  not cover (``foreach=True``, ``fused=False``, RMSprop on CUDA, ...; stepped as the matching
  ``torch.optim`` class), or a registered class TorchScript did not compile. These steps hold
  the owner's GIL; the caller warns once per class, naming why (:class:`PythonStepWarning`).
"""
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.distributed.rpc as rpc
from torch import Tensor

import functional_optim
from functional_optim import _validation
from functional_optim._param_groups import TensorRules, split_values
from functional_optim.state_protocol import _torch_group

from .. import ops
from ._native import LocalOptimizer, state_entry_as_tensors
from ._python import PythonLocalOptimizer
from ._scripted import ScriptLocalOptimizer, interface_type, scripted_functions

__all__ = [
    "Built", "build", "builtin_torch_class", "function_for", "state_dict_of", "group_of", "native_state",
    "check_group_values", "checked_group_update",
]


def builtin_torch_class(functional_class: type) -> Optional[type]:
    """The ``torch.optim`` class of one of the eleven built-in functional optimizers (``None`` for
    any other class)."""
    return _BUILTIN.get(functional_class)


_BUILTIN: Dict[type, type] = {
    functional_optim.SGD: torch.optim.SGD,
    functional_optim.Adam: torch.optim.Adam,
    functional_optim.AdamW: torch.optim.AdamW,
    functional_optim.Adagrad: torch.optim.Adagrad,
    functional_optim.RMSprop: torch.optim.RMSprop,
    functional_optim.Adamax: torch.optim.Adamax,
    functional_optim.Adadelta: torch.optim.Adadelta,
    functional_optim.Rprop: torch.optim.Rprop,
    functional_optim.NAdam: torch.optim.NAdam,
    functional_optim.SparseAdam: torch.optim.SparseAdam,
    functional_optim.RAdam: torch.optim.RAdam,
}


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
    return builtin_torch_class(functional_class) if functional_class is not None else None


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
    elif builtin_torch_class(functional_class) is not None:
        reason = LocalOptimizer.why_not_native(functional_class, params, *args, **kwargs)
        if reason is None:
            local = LocalOptimizer(functional_class, params, *args, **kwargs)
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
    python_class = _python_class(optimizer_class, functional_class)
    local = PythonLocalOptimizer(python_class, params, *args, **kwargs)
    return Built("python", rpc.RRef(local), -1, False, reason)


# --- the Python and TorchScript kinds' functions, by the native op each stands for ---------


def _step(rref: Any, context_id: int) -> None:
    rref.local_value().step(context_id)


def _prepare(rref: Any, context_id: int, lease_ms: int) -> int:
    return rref.local_value().prepare_step(context_id, lease_ms)


def _commit(rref: Any, token: int) -> None:
    rref.local_value().commit_step(token)


def _drop(rref: Any, token: int) -> bool:
    return rref.local_value().drop_step(token)


def _state(rref: Any) -> Dict[str, Any]:
    return rref.local_value().state_dict()


def _load_state(rref: Any, state_dict: Dict[str, Any]) -> None:
    rref.local_value().load_state_dict(state_dict)


def _hyperparameters(rref: Any) -> Dict[str, Any]:
    return rref.local_value().torch_group()


def _set_group(rref: Any, hparams: Dict[str, float], options: Dict[str, Optional[bool]]) -> None:
    rref.local_value().set_group(hparams, options)


# The scripted local optimizer's state and hyperparameters, in Python on its owner (holding
# the parameters' locks): these calls are rare, and its steps are TorchScript.
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


def _script_set_group(rref: Any, hparams: Dict[str, float], options: Dict[str, Optional[bool]]) -> None:
    module = rref.local_value()
    with ops._holding(module._lock):
        try:
            for group in range(len(module.optimizer.param_group_indices())):
                module.optimizer.set_group(group, hparams, options)
        except torch.jit.Error as e:
            # TorchScript raises every error as torch.jit.Error; give back the ValueError that
            # the optimizer raised (its validation runs before it changes anything)
            text = str(e)
            marker = "builtins.ValueError: "
            if marker in text:
                raise ValueError(text[text.rindex(marker) + len(marker):].strip().splitlines()[0]) from None
            raise


_PYTHON = {
    "_optimizer_step": _step, "_optimizer_prepare": _prepare, "_optimizer_commit": _commit,
    "_optimizer_drop": _drop, "_optimizer_state": _state, "_optimizer_load_state": _load_state,
    "_optimizer_hyperparameters": _hyperparameters, "_optimizer_set_group": _set_group,
}
_SCRIPT_PYTHON = {
    "_optimizer_state": _script_state, "_optimizer_load_state": _script_load_state,
    "_optimizer_hyperparameters": _script_hyperparameters, "_optimizer_set_group": _script_set_group,
}


def function_for(kind: str, op: str) -> Any:
    """The function that stands for the native op ``op`` with a local optimizer of ``kind``
    (``"python"`` or ``"torchscript"``); it takes the local optimizer's RRef first, then the
    op's arguments after the handle."""
    if kind == "python":
        return _PYTHON[op]
    if op in _SCRIPT_PYTHON:
        return _SCRIPT_PYTHON[op]
    return scripted_functions()[op]


# --- the native kind's answers, in the caller's terms ---------------------------------------


def group_of(hparams: List[Dict[str, float]], options: List[Dict[str, Optional[bool]]]) -> Dict[str, Any]:
    """The first parameter group under ``torch.optim``'s names (pairs as tuples), with the
    functional names of its numeric hyperparameters and flags (what
    :class:`~plugin.optim._param_groups.DistributedParamGroup` reads)."""
    return {"group": _torch_group(dict(hparams[0]), dict(options[0])), "hparam_names": list(hparams[0]),
            "option_names": list(options[0])}


def state_dict_of(raw: Tuple[Dict[int, Dict[str, Tensor]], List[Dict[str, float]], List[Dict[str, Optional[bool]]]],
                  num_params: int, int_steps: bool = False) -> Dict[str, Any]:
    """A native local optimizer's ``_optimizer_state`` answer as a ``torch.optim`` state dict of
    one group over its ``num_params`` parameters; ``int_steps``: each ``'step'`` as a Python int
    (``torch.optim.SparseAdam``'s format)."""
    state, hparams, options = raw
    group = _torch_group(dict(hparams[0]), dict(options[0]))
    group["params"] = list(range(num_params))
    entries = {int(i): dict(entry) for i, entry in state.items()}
    if int_steps:
        for entry in entries.values():
            if "step" in entry:
                entry["step"] = int(entry["step"].item())
    return {"state": entries, "param_groups": [group]}


def native_state(local_state: Dict[int, Dict[str, Any]]) -> Dict[int, Dict[str, Tensor]]:
    """A ``torch.optim`` state dict's ``'state'`` (local indices) as a native local optimizer
    loads it: every value a Tensor (an old-style number ``'step'`` or ``'mu_product'`` becomes
    a 0-dim tensor, as ``functional_optim.load_state_dict`` converts it).

    Raises:
        ValueError: another value that is not a tensor (its index and key named).
    """
    return {int(i): state_entry_as_tensors(i, entry) for i, entry in local_state.items()}


def check_group_values(optimizer_class: type, hparams: Dict[str, float], options: Dict[str, Optional[bool]]) -> None:
    """The checks a functional optimizer's ``set_group`` makes on a whole group's values, without
    an instance: the class's own (``_check``: torch's messages) and the shared flags'.

    Raises:
        ValueError: an invalid value (torch's message).
        RuntimeError: ``fused`` together with ``foreach`` (torch's message).
    """
    functional_class = functional_optim.functional_optimizer_for(optimizer_class)
    functional_class._check(None, hparams, options)
    _validation.check_options(options)


def checked_group_update(optimizer_class: type, hparams: Dict[str, float], options: Dict[str, Optional[bool]],
                         values: Dict[str, Any]) -> Tuple[List[Dict[str, float]], List[Dict[str, Optional[bool]]]]:
    """A native local optimizer's group (``hparams``, ``options``: functional names) updated with
    ``values`` (torch's names, as a saved ``param_groups`` entry holds them; keys the optimizer
    does not know are ignored, as ``torch.optim`` ignores them), checked as ``set_group`` and
    ``functional_optim.load_state_dict`` check them; returned as one-group lists.

    Raises:
        TypeError, ValueError, RuntimeError: as ``functional_optim.load_state_dict`` for the same
            values (torch's rules for Tensor values included).
    """
    functional_class = functional_optim.functional_optimizer_for(optimizer_class)
    rules = TensorRules(functional_class.__name__.lower(), values.get("foreach", options.get("foreach")), False)
    updates_h, updates_o, _ = split_values(values, hparams.keys(), options.keys(), rules)
    new_hparams = dict(hparams, **updates_h)
    new_options = dict(options, **updates_o)
    check_group_values(optimizer_class, new_hparams, new_options)
    return [new_hparams], [new_options]
