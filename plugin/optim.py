"""The distributed optimizer: steps of ``functional_optim`` optimizers run as TorchScript on
the workers that own the parameters, without the GIL.

:class:`DistributedOptimizer` takes RRefs to parameters spread over workers, groups them by
owner and builds one :class:`ScriptLocalOptimizer` on each owner: a ScriptModule holding a
``functional_optim`` optimizer and the owner's parameters. ``step(context_id)`` asks every owner,
by RPC, to run its module's ``step(context_id)``, which reads the context's gradients on the
C++ side (``torch.ops.dist_engine.gradients_for``: from the plugin's engine, or from torch's
distributed autograd when torch ran the backward) and applies them, all in TorchScript.
"""
import threading
import warnings
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed.rpc as rpc
from torch import Tensor
from torch.distributed.rpc import RRef

import functional_optim
from functional_optim import _jit

from . import ops
from ._errors import raise_on_worker
from functional_optim.scripting import OptimizerModule, script_class

__all__ = ["DistributedOptimizer", "ScriptLocalOptimizer", "LocalOptimizerInterface"]


class LocalOptimizerInterface(torch.nn.Module):
    """The TorchScript type of a scripted :class:`ScriptLocalOptimizer` (for ``RRef[...]``).

    Raises nothing: it is a type, never instantiated.
    """

    def step(self, context_id: int) -> None:
        """Applies the gradients of distributed autograd context ``context_id`` (see
        :meth:`ScriptLocalOptimizer.step`).

        Args:
            context_id (int): a distributed autograd context known on this worker.

        Raises:
            RuntimeError: as :meth:`ScriptLocalOptimizer.step`.
        """
        pass


with warnings.catch_warnings():
    # torch 2.13 deprecates torch.jit.interface along with torch.jit.script (see _jit.py)
    warnings.filterwarnings("ignore", message=r".*torch\.jit\.interface`? is deprecated", category=DeprecationWarning)
    LocalOptimizerInterface = torch.jit.interface(LocalOptimizerInterface)


class ScriptLocalOptimizer(torch.nn.Module):
    """One worker's share of a distributed optimizer, as a ScriptModule.

    Holds the worker's parameters and a ``functional_optim`` optimizer over them (in the
    submodule ``optimizer``, a :class:`functional_optim.OptimizerModule`). Build it with
    :meth:`create`, which scripts it; then ``step(context_id)`` runs as TorchScript.

    Steps of local optimizers over the same parameters (say, one per trainer) are serialized
    by a lock shared between them, held in C++ (``torch.classes.dist_engine.StepLock``): two
    steps never interleave on a parameter, and waiting for the lock does not hold the GIL.
    Which step goes first is not specified.

    Implementation: as ``torch.optim`` chooses, except that Adam and AdamW use torch's fused
    kernel (``fused=True``) when neither ``foreach`` nor ``fused`` is given and the parameters
    are floating point on CPU or CUDA: serialized steps make the step's length the limit on an
    owner's steps per second, and the fused step is several times shorter on CPU. Its results
    equal the single-tensor step's up to rounding. Pass ``fused=False`` for torch's choice.

    Args:
        optimizer_class (type): a ``functional_optim`` class or a ``torch.optim`` class that
            the registry maps to one (:func:`functional_optim.functional_optimizer_for`).
        params (List[Tensor]): the parameters, on this worker: leaf tensors of any shape, and
            any dtype and device the optimizer supports.
        *args: the optimizer's positional hyperparameters, as for ``torch.optim``.
        **kwargs: its keyword hyperparameters (``lr=...``, ``betas=...``).

    Raises:
        KeyError: ``optimizer_class`` has no functional counterpart.
        ValueError: empty ``params`` or invalid hyperparameters (the optimizer's messages).

    Algorithm: torch's ``_ScriptLocalOptimizer`` (``torch/distributed/optim/optimizer.py``),
    here for every ``functional_optim`` optimizer, with the gradients read on the C++ side
    (``torch.ops.dist_engine.gradients_for``) and steps serialized by a ``StepLock``.
    """

    def __init__(self, optimizer_class: type, params: List[Tensor], *args: Any, **kwargs: Any) -> None:
        super().__init__()
        functional_class = functional_optim.functional_optimizer_for(optimizer_class)
        self._params = list(params)
        if functional_class in _FUSED_BY_DEFAULT and "fused" not in kwargs and "foreach" not in kwargs and all(
            p.dtype in _FUSED_DTYPES and p.device.type in ("cpu", "cuda") for p in self._params
        ):
            kwargs = dict(kwargs, fused=True)
        self.optimizer = OptimizerModule(functional_class(self._params, *args, **kwargs))
        self._lock = _shared_lock(self._params)

    @classmethod
    def create(cls, optimizer_class: type, params: List[Tensor], *args: Any, **kwargs: Any) -> torch.jit.ScriptModule:
        """Builds and scripts a local optimizer; returns the ScriptModule.

        Args:
            optimizer_class (type): as for the constructor.
            params (List[Tensor]): as for the constructor: this worker's parameters, leaf tensors
                of any shape, dtype and device the optimizer supports.
            *args: the optimizer's positional hyperparameters.
            **kwargs: its keyword hyperparameters.

        Returns:
            torch.jit.ScriptModule: the scripted :class:`ScriptLocalOptimizer`; call its
            ``step(context_id)`` from Python or TorchScript.

        Raises:
            KeyError: ``optimizer_class`` has no functional counterpart.
            ValueError: empty ``params`` or invalid hyperparameters.
            RuntimeError: TorchScript cannot compile the optimizer class.
        """
        module = cls(optimizer_class, params, *args, **kwargs)
        with _COMPILE_LOCK:  # TorchScript does not compile from several threads at once
            script_class(type(module.optimizer.optim))
            return _jit.script(module)

    @torch.jit.export
    def step(self, context_id: int) -> None:
        """Applies the gradients of distributed autograd context ``context_id`` on this worker.

        A parameter without a gradient in the context is skipped, as torch skips a ``None``
        ``.grad``. The optimizer validates the gradients first (shape, dtype, device, sparse
        support) and raises before changing any parameter or state.

        Args:
            context_id (int): a distributed autograd context known on this worker, whose backward
                pass (the plugin's or torch's) has ended.

        Raises:
            RuntimeError: the context id is unknown here, or the optimizer rejects a gradient.
        """
        gradients = ops.gradients_for(context_id, self._params)
        with self._lock:
            self.optimizer.step(gradients)

    @torch.jit.export
    def step_gradients(self, gradients: List[Optional[Tensor]]) -> None:
        """Applies ``gradients`` under the same lock as :meth:`step`.

        Args:
            gradients (List[Optional[Tensor]]): one per parameter, in the order given at
                construction: a tensor of the parameter's shape, dtype and device, or ``None`` to
                skip that parameter.

        Raises:
            ValueError: wrong number of gradients, or one whose shape, dtype or device differs
                from its parameter's (``torch.jit.Error`` once scripted). Nothing changes then.
            RuntimeError: a gradient the optimizer does not take (sparse, ...).
        """
        with self._lock:
            self.optimizer.step(gradients)

    def forward(self, context_id: int) -> None:
        """The same as :meth:`step`: calling the module steps it.

        Args:
            context_id (int): a distributed autograd context known on this worker.

        Raises:
            RuntimeError: as :meth:`step`.
        """
        self.step(context_id)


# Optimizers whose local step uses torch's fused kernel unless the caller chooses an
# implementation (foreach= or fused=): steps over the same parameters are serialized,
# so the step's length bounds an owner's steps per second. Adam and AdamW reject sparse
# gradients anyway; SGD and Adagrad, which take them (but not fused), keep torch's choice.
_FUSED_BY_DEFAULT = (functional_optim.Adam, functional_optim.AdamW)
_FUSED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_COMPILE_LOCK = threading.Lock()
_LOCKS_GUARD = threading.Lock()
_LOCKS: Dict[Tuple[int, ...], Any] = {}


def _shared_lock(params: List[Tensor]):
    """The StepLock of this parameter set, shared by every local optimizer over it."""
    key = tuple(sorted(p.data_ptr() for p in params))
    with _LOCKS_GUARD:
        lock = _LOCKS.get(key)
        if lock is None:
            lock = _LOCKS[key] = ops.new_step_lock()
        return lock


class _Held:
    """Holds a scripted local optimizer's StepLock from Python (for state_dict)."""

    def __init__(self, module):
        self._lock = module._lock

    def __enter__(self):
        self._lock.__enter__()

    def __exit__(self, *exc):
        self._lock.__exit__(None, None, None)


# --- run on the owners, by RPC ------------------------------------------------------------


def _new_local_optimizer(optimizer_class, params_rref, args, kwargs):
    params = []
    for i, rref in enumerate(params_rref):
        value = rref.local_value()
        if not isinstance(value, Tensor):
            raise TypeError(f"params_rref[{i}] refers to a {type(value).__name__}, not a Tensor")
        params.append(value)
    module = ScriptLocalOptimizer.create(optimizer_class, params, *args, **kwargs)
    return rpc.RRef(module, LocalOptimizerInterface)


def _local_step(local_optimizer: RRef[LocalOptimizerInterface], context_id: int) -> None:
    local_optimizer.local_value().step(context_id)


_local_step = _jit.script(_local_step)


def _local_state_dict(local_optimizer):
    module = local_optimizer.local_value()
    with _Held(module):
        state = functional_optim.state_dict(module.optimizer)
        # copies: the reply is serialized after the lock is released
        state["state"] = {i: {k: v.clone() for k, v in s.items()} for i, s in state["state"].items()}
        return state


def _local_load_state_dict(local_optimizer, state_dict):
    module = local_optimizer.local_value()
    with _Held(module):
        functional_optim.load_state_dict(module.optimizer, state_dict)


def _local_set_hyperparameter(local_optimizer, name, value):
    module = local_optimizer.local_value()
    with _Held(module):
        for group in range(len(module.optimizer.param_group_indices())):
            module.optimizer.set_hyperparameter(group, name, value)


def _wait_all(futures: "OrderedDict[str, torch.futures.Future]", what: str) -> Dict[str, Any]:
    """Waits for every owner's future (so none is left running), then raises the first
    error, of the owner's exception type, naming the owner."""
    results, errors = {}, []
    for owner, fut in futures.items():
        try:
            results[owner] = fut.wait()
        except Exception as e:  # noqa: BLE001 (re-raised below with the owner's name)
            errors.append((owner, e))
    if errors:
        owner, error = errors[0]
        raise_on_worker(owner, what, error, "DistributedOptimizer")
    return results


class DistributedOptimizer:
    """Runs a ``functional_optim`` optimizer on every worker that owns some of the parameters.

    Like ``torch.distributed.optim.DistributedOptimizer``, with these differences: every
    optimizer of ``functional_optim`` runs as TorchScript (there is no Python fallback, so no
    owner takes the GIL for a step, whatever the optimizer); gradients come from the plugin's
    engine (``plugin.autograd.backward``) or from torch's (``torch.distributed.autograd.backward``);
    and the optimizer state can be saved and restored with :meth:`state_dict` and
    :meth:`load_state_dict`.

    Concurrency: steps of distributed optimizers over the same parameters (one per trainer, say)
    are serialized on each owner; there is no ordering across owners, and no promise that a
    trainer's forward, backward and step run without other trainers' steps in between.

    Args:
        optimizer_class (type): a ``functional_optim`` class (``functional_optim.Adam``) or its
            ``torch.optim`` counterpart (``torch.optim.Adam``), or any class registered with
            :func:`functional_optim.register_functional_optimizer`.
        params_rref (List[RRef[Tensor]]): the parameters to optimize, local or remote, each an
            RRef to a Tensor (for instance ``module_rref.rpc_sync().parameter_rrefs()``).
        *args: the optimizer's positional hyperparameters, as for ``torch.optim``.
        **kwargs: its keyword hyperparameters (``lr=...``, ``betas=...``).

    Raises:
        TypeError: ``params_rref`` is empty or holds something that is not an RRef.
        KeyError: ``optimizer_class`` has no functional counterpart (the message lists those
            that have one).
        RuntimeError: building the local optimizer failed on an owner (invalid hyperparameters,
            an RRef that does not hold a Tensor, ...); the message names the owner.

    Algorithm: torch's DistributedOptimizer (``torch/distributed/optim/optimizer.py``) with the
    local optimizers as ScriptModules (torch's ``_ScriptLocalOptimizer``), here for every
    optimizer.
    """

    def __init__(self, optimizer_class: type, params_rref: List[RRef], *args: Any, **kwargs: Any) -> None:
        params_rref = list(params_rref)
        if not params_rref:
            raise TypeError("DistributedOptimizer: params_rref is empty")
        for i, rref in enumerate(params_rref):
            if not isinstance(rref, rpc.PyRRef):
                raise TypeError(f"DistributedOptimizer: params_rref[{i}] is a {type(rref).__name__}, not an RRef")
        functional_optim.functional_optimizer_for(optimizer_class)  # KeyError before any RPC

        by_owner: "OrderedDict[str, List[int]]" = OrderedDict()
        for i, rref in enumerate(params_rref):
            by_owner.setdefault(rref.owner().name, []).append(i)
        self._indices = by_owner
        futures = OrderedDict(
            (owner, rpc.rpc_async(owner, _new_local_optimizer,
                                  args=(optimizer_class, [params_rref[i] for i in indices], args, kwargs)))
            for owner, indices in by_owner.items()
        )
        self._local_optimizers: Dict[str, RRef] = _wait_all(futures, "building the local optimizer")

    @property
    def owners(self) -> List[str]:
        """Names of the workers that hold a local optimizer, in order of first parameter."""
        return list(self._local_optimizers)

    def _start_steps(self, context_id: int) -> "OrderedDict[str, torch.futures.Future]":
        return OrderedDict(
            (owner, rpc.rpc_async(owner, _local_step, args=(rref, context_id)))
            for owner, rref in self._local_optimizers.items()
        )

    def step_async(self, context_id: int) -> torch.futures.Future:
        """Starts :meth:`step` and returns at once.

        Args:
            context_id (int): the distributed autograd context whose gradients to apply.

        Returns:
            torch.futures.Future: completes with ``None`` when every owner has stepped, or with
            the first owner's error, named as :meth:`step` names it (raised by ``wait()``).

        Raises:
            RuntimeError: RPC is not running (raised at once; owners' errors go to the future).
        """
        futures = self._start_steps(context_id)
        done = torch.futures.Future()

        def finish(_):
            try:
                _wait_all(futures, f"step({context_id})")
                done.set_result(None)
            except Exception as e:  # noqa: BLE001 (handed to the future)
                done.set_exception(e)

        torch.futures.collect_all(list(futures.values())).then(finish)
        return done

    def step(self, context_id: int) -> None:
        """Applies the gradients of distributed autograd context ``context_id`` on every owner.

        Each owner reads its parameters' gradients in that context on its own side and steps
        its local optimizer as TorchScript. Waits for every owner.

        Args:
            context_id (int): the distributed autograd context whose gradients to apply (its
                backward pass must have ended).

        Raises:
            RuntimeError: a step failed on an owner (unknown context, a gradient the optimizer
                rejects, ...), named in the message. Each owner validates before it changes
                anything, so an owner is either fully stepped or untouched.
        """
        _wait_all(self._start_steps(context_id), f"step({context_id})")

    def state_dict(self) -> Dict[str, Any]:
        """Every owner's optimizer state in one ``torch.optim``-format dict.

        Returns:
            Dict[str, Any]: ``{'state': {i: {...}}, 'param_groups': [{..., 'params': [0, .., N-1]}]}``, where
            ``i`` is the position of the parameter in ``params_rref``: the dict a
            ``torch.optim`` optimizer over the same parameters, in the same order, would save.
            The tensors are copies, on the owners' devices.

        Raises:
            RuntimeError: an owner failed to answer, or the owners' hyperparameters differ.
        """
        futures = OrderedDict(
            (owner, rpc.rpc_async(owner, _local_state_dict, args=(rref,)))
            for owner, rref in self._local_optimizers.items()
        )
        local = _wait_all(futures, "state_dict()")
        state: Dict[int, Dict[str, Tensor]] = {}
        group: Optional[Dict[str, Any]] = None
        for owner, indices in self._indices.items():
            sd = local[owner]
            for local_index, entry in sd["state"].items():
                state[indices[local_index]] = entry
            owner_group = {k: v for k, v in sd["param_groups"][0].items() if k != "params"}
            if group is None:
                group = owner_group
            elif owner_group != group:
                raise RuntimeError(
                    f"DistributedOptimizer: the hyperparameters of owner {owner!r} differ from the others'"
                )
        total = sum(len(i) for i in self._indices.values())
        return {"state": dict(sorted(state.items())), "param_groups": [dict(group, params=list(range(total)))]}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restores a state saved by :meth:`state_dict` (or by a ``torch.optim`` optimizer over
        the same parameters in the same order) on every owner.

        Args:
            state_dict (Dict[str, Any]): ``{'state': {i: {key: Tensor}}, 'param_groups': [one group]}``
                with ``i`` the position in ``params_rref``; tensors are copied to each owner and
                cast to its parameter's dtype and device.

        Raises:
            ValueError: the dict does not have one parameter group of ``len(params_rref)``
                parameters. Checked before anything is sent.
            RuntimeError: an owner rejected its part (a tensor of the wrong shape, invalid
                hyperparameters), named in the message; that owner is left unchanged.
        """
        groups = state_dict.get("param_groups")
        total = sum(len(i) for i in self._indices.values())
        if not isinstance(groups, list) or len(groups) != 1:
            raise ValueError("DistributedOptimizer.load_state_dict: expected exactly one parameter group")
        if len(groups[0].get("params", ())) != total:
            raise ValueError(
                f"DistributedOptimizer.load_state_dict: the parameter group has {len(groups[0].get('params', ()))} "
                f"parameters, this optimizer {total}"
            )
        saved_ids = list(groups[0]["params"])
        hyper = {k: v for k, v in groups[0].items() if k != "params"}
        futures = OrderedDict()
        for owner, indices in self._indices.items():
            local_state = {
                n: state_dict["state"][saved_ids[i]] for n, i in enumerate(indices) if saved_ids[i] in state_dict["state"]
            }
            local_sd = {"state": local_state, "param_groups": [dict(hyper, params=list(range(len(indices))))]}
            futures[owner] = rpc.rpc_async(owner, _local_load_state_dict, args=(self._local_optimizers[owner], local_sd))
        _wait_all(futures, "load_state_dict()")

    def set_hyperparameter(self, name: str, value: float) -> None:
        """Sets a numeric hyperparameter (``"lr"``, ``"weight_decay"``, ...) on every owner,
        from the next step on; for learning-rate schedules.

        Args:
            name (str): a hyperparameter name of the optimizer (as its ``hyperparameters()`` lists).
            value (float): the new value, in the units of the constructor's argument.

        Raises:
            RuntimeError: an owner rejected the name or value (named in the message).
        """
        futures = OrderedDict(
            (owner, rpc.rpc_async(owner, _local_set_hyperparameter, args=(rref, name, float(value))))
            for owner, rref in self._local_optimizers.items()
        )
        _wait_all(futures, f"set_hyperparameter({name!r})")
