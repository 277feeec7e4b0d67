"""The TorchScript local optimizer (:class:`plugin.optim.ScriptLocalOptimizer`), for functional
classes users register. Nothing here is scripted until such a class is used: torch is retiring
TorchScript (torch 2.14 warns on every ``torch.jit.script`` call; later releases raise), and where
it no longer compiles, the distributed optimizer steps such a class in Python instead.
"""
import threading
import warnings
from typing import Any, List, Optional

import torch
from torch import Tensor
from torch.distributed.rpc import RRef

import functional_optim
from functional_optim.scripting import OptimizerModule, script, script_class

from .. import ops
from ._adapter import StepAdapter
from ._status import APPLIED, LATE

__all__ = ["ScriptLocalOptimizer", "scripted_functions", "interface_type"]


class ScriptLocalOptimizer(torch.nn.Module, StepAdapter):
    """One worker's share of a distributed optimizer, as a ScriptModule (TorchScript, optional).

    Holds the worker's parameters and a ``functional_optim``-style optimizer over them (in the
    submodule ``optimizer``, a :class:`functional_optim.OptimizerModule`). Build it with
    :meth:`create`, which scripts it; then ``step(context_id)`` runs as TorchScript, without
    the GIL. :class:`plugin.optim.DistributedOptimizer` builds one on each owner only for a
    functional class registered by the user; the fourteen built-in optimizers step natively
    (:class:`plugin.optim.NativeLocalOptimizer`), with the same results and locks and no TorchScript.

    Concurrency: every parameter has one lock in its process, held in C++
    (``torch.classes.gilfree_rpc.StepLock``), shared with the native and Python local
    optimizers: steps of local optimizers that share a parameter never interleave on it and
    never deadlock; waiting does not hold the GIL; an error in a step releases the locks.

    Args:
        optimizer_class (type): a ``functional_optim`` class or a class the registry maps to
            one (:func:`functional_optim.functional_optimizer_for`).
        params (List[Tensor]): the parameters, on this worker: leaf tensors of any shape, and
            any dtype and device the optimizer supports.
        *args: the optimizer's positional hyperparameters, as for ``torch.optim``.
        **kwargs: its keyword hyperparameters (``lr=...``, ``betas=...``).

    Raises:
        KeyError: ``optimizer_class`` has no functional counterpart.
        ValueError: empty ``params`` or invalid hyperparameters (the optimizer's messages).

    Algorithm: torch's ``_ScriptLocalOptimizer`` (``torch/distributed/optim/optimizer.py``),
    with the gradients read on the C++ side (``torch.ops.gilfree_rpc.gradients_for``), steps
    serialized by per-parameter locks, and a two-phase step (:meth:`prepare_step`,
    :meth:`commit_step`) for steps over several owners.
    """

    _applied: torch.jit.Final[int]
    _late: torch.jit.Final[int]

    def __init__(self, optimizer_class: type, params: List[Tensor], *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self._applied, self._late = APPLIED, LATE
        functional_class = functional_optim.functional_optimizer_for(optimizer_class)
        self._params = list(params)
        self.optimizer = OptimizerModule(functional_class(self._params, *args, **kwargs))
        self._lock = ops.new_step_lock(self._params)

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
            RuntimeError: TorchScript cannot compile the optimizer class, or torch no longer
                compiles TorchScript (``torch.jit.script`` raises).
        """
        module = cls(optimizer_class, params, *args, **kwargs)
        with _COMPILE_LOCK:  # TorchScript does not compile from several threads at once
            script_class(type(module.optimizer.optim))
            return script(module)

    def _try(self, gradients: List[Optional[Tensor]]) -> None:
        """:meth:`prepare_step`'s trial: none (a functional optimizer's step checks what
        ``check_gradients`` checks)."""
        pass

    def _apply(self, gradients: List[Optional[Tensor]]) -> None:
        """The optimizer's step on ``gradients``; the caller holds the locks."""
        self.optimizer.step(gradients)

    def forward(self, context_id: int) -> None:
        """The same as :meth:`step`: calling the module steps it.

        Args:
            context_id (int): a distributed autograd context id.

        Raises:
            RuntimeError: as :meth:`step`.
        """
        self.step(context_id)


_COMPILE_LOCK = threading.Lock()
_FUNCTIONS: dict = {}


def scripted_functions() -> dict:
    """The TorchScript functions by which a caller steps an owner's :class:`ScriptLocalOptimizer`
    (by the native op names they stand for: ``_optimizer_step``, ``_optimizer_prepare``,
    ``_optimizer_commit``), compiled on first use, on the caller and on
    every owner that builds one (an RPC names a TorchScript function by its qualified name,
    which the callee must have compiled). They run on the owner without the GIL.

    Raises:
        RuntimeError: torch no longer compiles TorchScript.
    """
    with _COMPILE_LOCK:
        if not _FUNCTIONS:
            _FUNCTIONS.update(_compile())
        return _FUNCTIONS


def _compile() -> dict:
    global _Interface
    with warnings.catch_warnings():
        # torch 2.13 deprecates torch.jit.interface along with torch.jit.script (functional_optim.scripting.script)
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.interface`? is deprecated")
        _Interface = torch.jit.interface(_LocalOptimizerInterface)
    return {
        "_optimizer_step": script(_step),
        "_optimizer_prepare": script(_prepare),
        "_optimizer_commit": script(_commit),
    }


class _LocalOptimizerInterface(torch.nn.Module):
    """The TorchScript type of a scripted :class:`ScriptLocalOptimizer` (for ``RRef[...]``)."""

    def step_before(self, context_id: int, deadline_ms: int) -> int: pass
    def prepare_step(self, context_id: int, lease_ms: int) -> int: pass
    def commit_step(self, token: int, deadline_ms: int) -> int: pass


# The interface type, made by _compile (torch.jit.interface); the functions below name it.
_Interface: Any = None


def _step(local_optimizer: RRef[_Interface], context_id: int, version: int, deadline_ms: int) -> int:
    return local_optimizer.local_value().step_before(context_id, deadline_ms)


def _prepare(local_optimizer: RRef[_Interface], context_id: int, lease_ms: int) -> int:
    return local_optimizer.local_value().prepare_step(context_id, lease_ms)


def _commit(local_optimizer: RRef[_Interface], token: int, deadline_ms: int) -> int:
    return local_optimizer.local_value().commit_step(token, deadline_ms)


def interface_type() -> Any:
    """The TorchScript interface type of a scripted ScriptLocalOptimizer (compiles on first use)."""
    scripted_functions()
    return _Interface
