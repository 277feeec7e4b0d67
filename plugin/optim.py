"""The distributed optimizer: steps of ``functional_optim`` optimizers run as TorchScript on
the workers that own the parameters, without the GIL.

:class:`DistributedOptimizer` takes RRefs to parameters spread over workers, groups them by
owner and builds one :class:`ScriptLocalOptimizer` on each owner: a ScriptModule holding a
``functional_optim`` optimizer and the owner's parameters. ``step(context_id)`` asks every owner,
by RPC, to run its module's ``step(context_id)``, which reads the context's gradients on the
C++ side (``torch.ops.dist_engine.gradients_for``: from the plugin's engine, or from torch's
distributed autograd when torch ran the backward) and applies them, all in TorchScript.
A ``torch.optim.Optimizer`` subclass that has no functional counterpart steps in Python on the
owners instead (:class:`PythonLocalOptimizer`, in ``plugin/_python_local_optim.py``).
"""
import random
import threading
import warnings
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
from torch import Tensor
from torch.distributed.rpc import RRef

import functional_optim
from functional_optim import _jit, _validation
from functional_optim._torch_face import TorchOptimizerFace

from . import _param_groups, _python_local_optim, ops
from ._clip import clip_grad_norm_
from ._errors import raise_on_worker, remote_error_summary
from functional_optim.scripting import OptimizerModule, script_class
from ._python_local_optim import PythonLocalOptimizer, PythonOwner, PythonStepWarning

__all__ = [
    "DistributedOptimizer", "ScriptLocalOptimizer", "LocalOptimizerInterface", "PythonLocalOptimizer",
    "PythonStepWarning", "clip_grad_norm_",
]


class LocalOptimizerInterface(torch.nn.Module):
    """The TorchScript type of a scripted :class:`ScriptLocalOptimizer` (for ``RRef[...]``): its
    methods are that class's, with the same docstrings.

    Raises nothing: it is a type, never instantiated.
    """

    # TorchScript interface declarations: signatures only, each body a `pass`
    def step(self, context_id: int) -> None: pass
    def prepare_step(self, context_id: int, lease_ms: int) -> int: pass
    def commit_step(self, token: int) -> None: pass
    def step_before(self, context_id: int, deadline_ms: int) -> None: pass
    def step_checked(self, context_id: int, version: int, deadline_ms: int) -> None: pass
    def chain_step(self, context_id: int, lease_ms: int, deadline_ms: int, timeout_s: float) -> None: pass
    def exchange_step(self, context_id: int, key: int, deadline_ms: int, timeout_s: float) -> None: pass
    def drop_step(self, token: int) -> bool: pass


with warnings.catch_warnings():
    # torch 2.13 deprecates torch.jit.interface along with torch.jit.script (see _jit.py)
    warnings.filterwarnings("ignore", message=r".*torch\.jit\.interface`? is deprecated", category=DeprecationWarning)
    LocalOptimizerInterface = torch.jit.interface(LocalOptimizerInterface)


class ScriptLocalOptimizer(torch.nn.Module):
    """One worker's share of a distributed optimizer, as a ScriptModule.

    Holds the worker's parameters and a ``functional_optim`` optimizer over them (in the
    submodule ``optimizer``, a :class:`functional_optim.OptimizerModule`). Build it with
    :meth:`create`, which scripts it; then ``step(context_id)`` runs as TorchScript.

    Concurrency: every parameter has one lock in its process, held in C++
    (``torch.classes.dist_engine.StepLock`` holds the locks of a parameter set). A step takes
    the locks of its parameters in one process-wide order, so steps of local optimizers that
    share a parameter (say, one per trainer, over overlapping parameter sets) never interleave
    on it and never deadlock; waiting does not hold the GIL; an error in a step releases the
    locks. Which of two waiting steps goes first is not specified. A parameter's lock is freed
    with the last local optimizer over it.

    Implementation: the optimizer's default (``foreach=None``, ``fused=None``): a fused kernel
    for dense floating-point parameters on CPU (every optimizer) or CUDA (torch's, for SGD,
    Adam, AdamW and Adagrad), else torch's choice; serialized steps make the step's length the
    limit on an owner's steps per second, and the fused step is several times shorter on CPU.
    Its results equal the single-tensor step's up to rounding. Pass ``fused=False`` for
    torch's choice.

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
    (``torch.ops.dist_engine.gradients_for``), steps serialized by per-parameter locks, and a
    two-phase step (:meth:`prepare_step`, :meth:`commit_step`) for steps over several owners.
    """

    # the owner after this one in a step over two owners (set by DistributedOptimizer)
    _next_owner: str
    _next: List[RRef[LocalOptimizerInterface]]
    _next_function: str
    # the other owners of a step over several owners (set by DistributedOptimizer)
    _peers: List[str]
    _verdict_function: str

    def __init__(self, optimizer_class: type, params: List[Tensor], *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self._next_owner = ""
        self._next = []
        self._next_function = _STEP_BEFORE_REMOTE
        self._peers = []
        self._verdict_function = _RECEIVE_VERDICT
        functional_class = functional_optim.functional_optimizer_for(optimizer_class)
        self._params = list(params)
        if functional_class in _FUSED_BY_DEFAULT and "fused" not in kwargs and "foreach" not in kwargs and all(
            p.dtype in _FUSED_DTYPES and p.device.type in ("cpu", "cuda") for p in self._params
        ):
            kwargs = dict(kwargs, fused=True)
        self.optimizer = OptimizerModule(functional_class(self._params, *args, **kwargs))
        self._lock = ops.new_step_lock(self._params)
        # what prepare_step checks (the checks the optimizer's step makes first)
        # for a class registered from elsewhere (no GroupedState): sparse gradients pass
        # prepare_step, and its own step still rejects them, on that owner only
        self._sparse_errors: List[Optional[str]] = [None]
        self._offsets = [0, len(self._params)]
        self._groups = [self._params]
        self._group_indices = [list(range(len(self._params)))]

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
            ``step(context_id)`` from Python or TorchScript. For a ``torch.optim.Optimizer``
            subclass that has no functional counterpart: a :class:`PythonLocalOptimizer`
            instead (the same ``step``, ``prepare_step``, ``commit_step``, ``drop_step`` and
            ``step_gradients``, run in Python, holding the GIL), after a
            :class:`PythonStepWarning` (once per class).

        Raises:
            KeyError: ``optimizer_class`` is neither registered nor a ``torch.optim.Optimizer``
                subclass.
            ValueError: empty ``params`` or invalid hyperparameters.
            RuntimeError: TorchScript cannot compile the optimizer class.
        """
        if _python_local_optim.uses_python_step(optimizer_class):
            _python_local_optim.warn_once(optimizer_class, stacklevel=2)
            return PythonLocalOptimizer(optimizer_class, params, *args, **kwargs)
        module = cls(optimizer_class, params, *args, **kwargs)
        with _COMPILE_LOCK:  # TorchScript does not compile from several threads at once
            script_class(type(module.optimizer.optim))
            return _jit.script(module)

    @torch.jit.export
    def step(self, context_id: int) -> None:
        """Applies the gradients of distributed autograd context ``context_id`` on this worker.

        A parameter without a gradient in the context is skipped, as torch skips a ``None``
        ``.grad``; so is every parameter when the context is not known on this worker (no
        backward pass of the context reached it; :class:`DistributedOptimizer` checks that the
        context exists on the calling worker). The optimizer validates the gradients first
        (shape, dtype, device, sparse support) and raises before changing any parameter or
        state. Holds the locks of the parameters (see the class) while it applies them.

        Args:
            context_id (int): a distributed autograd context id, whose backward pass (the
                plugin's or torch's) has ended.

        Raises:
            RuntimeError: the optimizer rejects a gradient (``torch.jit.Error`` once scripted).
        """
        gradients = ops.gradients_for(context_id, self._params)
        with self._lock:
            self.optimizer.step(gradients)

    @torch.jit.export
    def prepare_step(self, context_id: int, lease_ms: int) -> int:
        """Phase 1 of a step over several owners: reads the context's gradients of this
        worker's parameters (as :meth:`step`), validates them as the optimizer's step would,
        and keeps them (references, not copies) for :meth:`commit_step`. Changes nothing and
        takes no lock. A prepared step that is neither committed nor dropped within
        ``lease_ms`` is forgotten (its caller died or froze between the phases).

        Args:
            context_id (int): a distributed autograd context id.
            lease_ms (int): milliseconds, > 0, that the prepared step waits for its commit.

        Returns:
            int: a token for :meth:`commit_step` or :meth:`drop_step`.

        Raises:
            ValueError: a gradient whose shape, dtype or device differs from its parameter's
                (``torch.jit.Error`` once scripted).
            RuntimeError: a sparse gradient for an optimizer that does not take them.
        """
        gradients = ops.gradients_for(context_id, self._params)
        self._check_gradients(gradients)
        return ops._park_step(gradients, lease_ms)

    def _check_gradients(self, gradients: List[Optional[Tensor]]) -> None:
        """Raises what the optimizer's step would raise first for ``gradients``, changing nothing."""
        if hasattr(self.optimizer.optim, "_s"):
            # functional_optim's classes: the check their step makes first, with each group's
            # current rule for sparse gradients (it follows set_option, e.g. fused SGD)
            self.optimizer.optim._s.check_gradients(gradients)
        else:
            _validation.check_gradients(
                self._params, gradients, self._offsets, self._sparse_errors, self._groups, self._group_indices
            )

    @torch.jit.export
    def commit_step(self, token: int) -> None:
        """Phase 2: applies the gradients kept by :meth:`prepare_step`, under the parameters'
        locks (as :meth:`step`).

        Args:
            token (int): from :meth:`prepare_step` on this module.

        Raises:
            RuntimeError: the token is unknown or its lease expired (nothing is applied), or
                the optimizer rejects a gradient (hyperparameters changed in between).
        """
        gradients = ops._take_step(token)
        with self._lock:
            self.optimizer.step(gradients)

    @torch.jit.export
    def step_before(self, context_id: int, deadline_ms: int) -> None:
        """:meth:`step`, applied only if this worker holds the parameters' locks before
        ``deadline_ms`` on its system clock: the last owner's part of a step over two owners,
        whose first owner stops waiting for it a while after the deadline and then drops its
        own part. An owner frozen past the deadline, then resumed, applies nothing.

        Args:
            context_id (int): a distributed autograd context id.
            deadline_ms (int): milliseconds since the Unix epoch; -1: no deadline.

        Raises:
            ValueError: a gradient whose shape, dtype or device differs from its parameter's.
            RuntimeError: the optimizer rejects a gradient, or the deadline passed (nothing
                applied); ``torch.jit.Error`` once scripted.
        """
        self._apply_before(ops.gradients_for(context_id, self._params), deadline_ms)

    @torch.jit.export
    def step_checked(self, context_id: int, version: int, deadline_ms: int) -> None:
        """This owner's part of a step over several owners whose gradients the backward pass
        checked (every owner's fit its parameters): applies them, with no validation round
        before, if they are still those the pass checked (``version``) and if this worker holds
        the parameters' locks before ``deadline_ms`` on its system clock. The optimizer's own
        checks still run before it changes anything.

        Args:
            context_id (int): a distributed autograd context id.
            version (int): this worker's version of the context's gradients, as the backward
                pass reported it (``ops._checked_versions``).
            deadline_ms (int): milliseconds since the Unix epoch; -1: no deadline.

        Raises:
            RuntimeError: the gradients changed after the backward pass checked them (another
                backward pass of the context), or the deadline passed: nothing applied on this
                worker. ``torch.jit.Error`` once scripted.
            ValueError: a gradient whose shape, dtype or device differs from its parameter's
                (a parameter changed after the backward pass): nothing applied on this worker.
        """
        self._apply_before(ops._checked_gradients_for(context_id, self._params, version), deadline_ms)

    @torch.jit.export
    def chain_step(self, context_id: int, lease_ms: int, deadline_ms: int, timeout_s: float) -> None:
        """A step over this owner and the next one (set by :class:`DistributedOptimizer`), all
        or nothing, in one round trip from the caller: validates and keeps this owner's
        gradients (:meth:`prepare_step`), asks the next owner to step (:meth:`step_before`,
        which validates before it applies) and waits for it, then applies its own
        (:meth:`commit_step`), or drops them if the next owner failed. Waiting holds no
        thread and no lock. Without a next owner, the same as :meth:`step`.

        Args:
            context_id (int): a distributed autograd context id.
            lease_ms (int): milliseconds, > 0, that this owner keeps its gradients.
            deadline_ms (int): the next owner's deadline (see :meth:`step_before`); -1: none.
            timeout_s (float): seconds to wait for the next owner; <= 0: the RPC timeout.

        Raises:
            RuntimeError: this owner rejected a gradient (nothing applied anywhere); the next
                owner failed (the message starts with ``[chain] next owner '<name>' failed``,
                then its error; nothing applied here); or this owner failed to apply after
                the next one did (``[chain] commit failed after owner '<name>' applied``).
            ValueError: a gradient whose shape, dtype or device differs from its parameter's.
        """
        if len(self._next) == 0:
            self.step(context_id)
            return
        token = self.prepare_step(context_id, lease_ms)
        # by the agent's own send: TorchScript's rpc_async takes this process's GIL
        fut = ops._call_script(self._next_owner, self._next_function,
                               (self._next[0], context_id, deadline_ms), timeout_s)
        error = ops._error_of(fut).wait()
        if error is not None:
            self.drop_step(token)
            raise RuntimeError("[chain] next owner '" + self._next_owner + "' failed; nothing was applied on "
                               "this worker:\n" + error)
        error = ops._error_of(torch.jit._fork(self.commit_step, token)).wait()
        if error is not None:
            raise RuntimeError("[chain] commit failed after owner '" + self._next_owner + "' applied:\n" + error)

    @torch.jit.export
    def exchange_step(self, context_id: int, key: int, deadline_ms: int, timeout_s: float) -> None:
        """This owner's part of a step over several owners, all or nothing, in one round
        trip from the caller, who sends it to every owner at once under one ``key``: reads
        and validates this owner's gradients, gives its verdict (accepted, or rejected) to
        the other owners (set by :class:`DistributedOptimizer`) and learns theirs, owner to
        owner, then applies its gradients only if every other owner accepted, and only if it
        holds the parameters' locks before ``deadline_ms`` on its system clock. Waiting for
        the verdicts holds no thread and no lock. Without other owners, the same as
        :meth:`step`.

        Args:
            context_id (int): a distributed autograd context id.
            key (int): the step's key, the same on every owner and unique to the step.
            deadline_ms (int): milliseconds since the Unix epoch; -1: no deadline.
            timeout_s (float): seconds to wait for each other owner's verdict; <= 0: the RPC
                timeout.

        Raises:
            ValueError: a gradient whose shape, dtype or device differs from its parameter's
                (this owner rejected the step; nothing applied anywhere).
            RuntimeError: the optimizer rejects a gradient (as above); another owner
                rejected the step or did not answer in time (the message starts with
                ``[exchange] owner '<name>'``; nothing applied here); or the deadline passed
                (nothing applied here; the other owners may have applied). ``torch.jit.Error``
                once scripted.
        """
        gradients = ops.gradients_for(context_id, self._params)
        if len(self._peers) > 0:
            verdict = ops._reject_on_exit(key, self._peers, self._verdict_function, timeout_s)
            with verdict:  # the peers learn of a rejection at once
                self._check_gradients(gradients)
                verdict.accept()
            error = ops._exchange_verdicts(key, self._peers, self._verdict_function, None, timeout_s).wait()
            if error is not None:
                raise RuntimeError("[exchange] " + error + "; nothing was applied on this worker")
        self._apply_before(gradients, deadline_ms)

    def _apply_before(self, gradients: List[Optional[Tensor]], deadline_ms: int) -> None:
        # the last part of step_before and exchange_step: apply under the parameters' locks,
        # unless this owner got them at or after deadline_ms (its system clock; -1: none)
        with self._lock:
            if deadline_ms >= 0 and ops._wall_clock_ms() >= deadline_ms:
                raise RuntimeError(
                    "the step reached this owner's locks after its deadline (the owner was frozen or overloaded); "
                    "nothing was applied on this worker"
                )
            self.optimizer.step(gradients)

    @torch.jit.export
    def drop_step(self, token: int) -> bool:
        """Forgets a step prepared by :meth:`prepare_step` without applying it.

        Args:
            token (int): from :meth:`prepare_step`.

        Returns:
            bool: whether it was still prepared (False: unknown, already taken or expired).

        Raises nothing.
        """
        return ops._drop_step(token)

    @torch.jit.export
    def step_gradients(self, gradients: List[Optional[Tensor]]) -> None:
        """Applies ``gradients`` under the same locks as :meth:`step`.

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
            context_id (int): a distributed autograd context id.

        Raises:
            RuntimeError: as :meth:`step`.
        """
        self.step(context_id)


# Optimizers whose local step is forced to fused=True unless the caller chooses an
# implementation (foreach= or fused=). None is needed any more: every functional_optim class
# now runs a fused kernel by default (foreach=None, fused=None) for dense floating-point CPU
# parameters (and torch's CUDA kernel for SGD/Adam/AdamW/Adagrad), which is what owners want
# (their steps over the same parameters are serialized, so the step's length bounds an
# owner's steps per second), while steps with sparse gradients (SGD, Adagrad) keep torch's
# choice, which an explicit fused=True would reject.
_FUSED_BY_DEFAULT: tuple = ()
_FUSED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_COMPILE_LOCK = threading.Lock()


# The interface's methods are ScriptLocalOptimizer's: one docstring for both.
for _name in ("step", "prepare_step", "commit_step", "step_before", "step_checked", "chain_step", "exchange_step",
              "drop_step"):
    getattr(LocalOptimizerInterface, _name).__doc__ = getattr(ScriptLocalOptimizer, _name).__doc__
# PythonLocalOptimizer's drop_step is the same call (plugin/_python_local_optim.py)
PythonLocalOptimizer.drop_step.__doc__ = ScriptLocalOptimizer.drop_step.__doc__


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


def _local_prepare(local_optimizer: RRef[LocalOptimizerInterface], context_id: int, lease_ms: int) -> int:
    return local_optimizer.local_value().prepare_step(context_id, lease_ms)


def _local_commit(local_optimizer: RRef[LocalOptimizerInterface], token: int) -> None:
    local_optimizer.local_value().commit_step(token)


def _local_drop(local_optimizer: RRef[LocalOptimizerInterface], token: int) -> bool:
    return local_optimizer.local_value().drop_step(token)


def _step_before_remote(local_optimizer: RRef[LocalOptimizerInterface], context_id: int, deadline_ms: int) -> None:
    local_optimizer.local_value().step_before(context_id, deadline_ms)


def _local_step_checked(local_optimizer: RRef[LocalOptimizerInterface], context_id: int, version: int,
                        deadline_ms: int) -> None:
    local_optimizer.local_value().step_checked(context_id, version, deadline_ms)


def _local_chain(local_optimizer: RRef[LocalOptimizerInterface], context_id: int, lease_ms: int, deadline_ms: int,
                 timeout_s: float) -> None:
    local_optimizer.local_value().chain_step(context_id, lease_ms, deadline_ms, timeout_s)


def _local_exchange(local_optimizer: RRef[LocalOptimizerInterface], context_id: int, key: int, deadline_ms: int,
                    timeout_s: float) -> None:
    local_optimizer.local_value().exchange_step(context_id, key, deadline_ms, timeout_s)


def _link(local_optimizer, peers, next_owner=None, next_local_optimizer=None):
    """Runs on each owner of a step over several owners, once: the other owners, and (first
    of two owners only) the owner its chained steps go on to."""
    module = local_optimizer.local_value()
    module._peers = list(peers)
    if next_owner is not None:
        module._next_owner = next_owner
        module._next = [next_local_optimizer]


# TorchScript functions: an owner runs them without the GIL
_local_step = _jit.script(_local_step)
_local_prepare = _jit.script(_local_prepare)
_local_commit = _jit.script(_local_commit)
_local_drop = _jit.script(_local_drop)
_step_before_remote = _jit.script(_step_before_remote)
_local_chain = _jit.script(_local_chain)
_local_step_checked = _jit.script(_local_step_checked)
_local_exchange = _jit.script(_local_exchange)
# RPC handler between owners (async execution: answered with this owner's verdict)
_receive_verdict = _jit.script(ops._receive_verdict)
_RECEIVE_VERDICT = _receive_verdict.qualified_name  # what exchange_step calls on the other owners
_STEP_BEFORE_REMOTE = _step_before_remote.qualified_name  # what chain_step calls on the next owner


def _local_state_dict(local_optimizer):
    module = local_optimizer.local_value()
    with ops._holding(module._lock):
        state = functional_optim.state_dict(module.optimizer)
        # copies: the reply is serialized after the lock is released
        state["state"] = {i: {k: v.clone() for k, v in s.items()} for i, s in state["state"].items()}
        return state


def _local_load_state_dict(local_optimizer, state_dict):
    module = local_optimizer.local_value()
    with ops._holding(module._lock):
        functional_optim.load_state_dict(module.optimizer, state_dict)


def _local_set_hyperparameter(local_optimizer, name, value):
    module = local_optimizer.local_value()
    with ops._holding(module._lock):
        for group in range(len(module.optimizer.param_group_indices())):
            module.optimizer.set_hyperparameter(group, name, value)


# --- on the caller ---------------------------------------------------------------------------


class _OutsideAutogradContext:
    """Sends RPCs from this thread with no current distributed autograd context.

    torch attaches autograd metadata to every RPC sent from inside a context, tensors or
    not, and the receiver then creates the context if it does not know it: a step sent
    from inside ``with dist_autograd.context()`` after the owner released that context
    would recreate it there, empty (and leave it behind). Nothing the optimizer sends
    belongs to the autograd graph.
    """

    def __enter__(self):
        self._previous = ops._swap_current_context(-1)

    def __exit__(self, *exc):
        ops._swap_current_context(self._previous)


def _send(owner: str, fn, args) -> torch.futures.Future:
    if args and isinstance(args[0], PythonOwner):  # a Python local optimizer: fn's Python counterpart
        fn, args = _python_local_optim.counterpart(fn, args)
    with _OutsideAutogradContext():
        return rpc.rpc_async(owner, fn, args=args)


def _lease_ms() -> int:
    """How long an owner keeps a prepared step: twice the RPC timeout (10 minutes when
    the timeout is infinite), so a commit sent as soon as every owner prepared arrives
    in time, and a caller that dies between the phases holds nothing for longer."""
    timeout = rpc.get_rpc_timeout()
    return int(2000 * timeout) if 0 < timeout < 300 else 600_000


def _gather(futures: "OrderedDict[str, torch.futures.Future]"):
    """Waits for every owner's future (so none is left running); returns the results and
    the (owner, error) pairs."""
    results, errors = OrderedDict(), []
    for owner, fut in futures.items():
        try:
            results[owner] = fut.wait()
        except Exception as e:  # noqa: BLE001 (re-raised by the caller with the owner's name)
            errors.append((owner, e))
    return results, errors


def _raise_errors(errors, what: str, detail: str = "", as_type: Optional[type] = None):
    """Raises the first owner's error, of its exception type (or ``as_type``), naming it and
    every other owner that failed, followed by ``detail``."""
    owner, error = errors[0]
    others = "".join(f"; also failed on owner {o!r}: {remote_error_summary(e)}" for o, e in errors[1:])
    raise_on_worker(owner, what, error, "DistributedOptimizer", others + detail, as_type)


def _wait_all(futures: "OrderedDict[str, torch.futures.Future]", what: str) -> Dict[str, Any]:
    """Waits for every owner's future, then raises the first error (see _raise_errors)."""
    results, errors = _gather(futures)
    if errors:
        _raise_errors(errors, what)
    return results


class DistributedOptimizer(TorchOptimizerFace, torch.optim.Optimizer):
    """Runs an optimizer on every worker that owns some of the parameters.

    Like ``torch.distributed.optim.DistributedOptimizer``, with these differences: every
    optimizer of ``functional_optim``, and every class registered to one, runs as TorchScript,
    so no owner takes the GIL for a step; any other ``torch.optim.Optimizer`` subclass steps in
    Python on the owners (:class:`PythonLocalOptimizer`, as torch's ``_LocalOptimizer``),
    holding their GIL, with a :class:`PythonStepWarning` once per class and the same
    guarantees; gradients come from the plugin's
    engine (``plugin.autograd.backward``) or from torch's (``torch.distributed.autograd.backward``);
    the optimizer state can be saved and restored with :meth:`state_dict` and
    :meth:`load_state_dict`; and it is a ``torch.optim.Optimizer``, whose :attr:`param_groups`
    ``torch.optim.lr_scheduler`` classes read and write (what they write reaches every owner
    before the next step). :func:`clip_grad_norm_` clips its gradients across owners.

    Guarantees (details in the "Failures and guarantees" page of the documentation):

    * Steps of any local optimizers that share a parameter never interleave on it, whatever
      their parameter sets (one lock per parameter on each owner, taken in one global order);
      there is no ordering across owners, and no promise that a trainer's forward, backward
      and step run without other trainers' steps in between.
    * :meth:`step` and :meth:`step_async` apply the context's gradients on every owner or
      raise; a gradient that one owner rejects changes no owner (unless the gradients or
      parameters change between the backward pass and the step: then the error lists the
      owners that applied).
    * A step, :meth:`state_dict` or another call that an owner does not answer (dead or
      frozen) raises after the RPC timeout, naming that owner.

    Args:
        optimizer_class (type): a ``functional_optim`` class (``functional_optim.Adam``) or its
            ``torch.optim`` counterpart (``torch.optim.Adam``), or any class registered with
            :func:`functional_optim.register_functional_optimizer` (TorchScript); or any other
            ``torch.optim.Optimizer`` subclass (Python; the steps over several owners then
            run the two phases from the caller, never the chain of two owners or the owners' exchange).
        params_rref (List[RRef[Tensor]]): the parameters to optimize, local or remote, each an
            RRef to a Tensor (for instance ``module_rref.rpc_sync().parameter_rrefs()``).
        *args: the optimizer's positional hyperparameters, as for ``torch.optim``.
        **kwargs: its keyword hyperparameters (``lr=...``, ``betas=...``).

    Raises:
        TypeError: ``params_rref`` is empty or holds something that is not an RRef.
        KeyError: ``optimizer_class`` has no functional counterpart and is not a
            ``torch.optim.Optimizer`` subclass (the message lists the registered classes).
        Exception: building the local optimizer failed on an owner (invalid hyperparameters,
            an RRef that does not hold a Tensor, ...): the owner's exception type
            (``ValueError``, ``TypeError``...; ``RuntimeError`` when it cannot be rebuilt), its
            message, naming the owner.

    Algorithm: torch's DistributedOptimizer (``torch/distributed/optim/optimizer.py``) with the
    local optimizers as ScriptModules (torch's ``_ScriptLocalOptimizer``), here for every
    registered optimizer, and torch's ``_LocalOptimizer`` (:class:`PythonLocalOptimizer`) for
    the other ``torch.optim.Optimizer`` subclasses.
    """

    def __init__(self, optimizer_class: type, params_rref: List[RRef], *args: Any, **kwargs: Any) -> None:
        params_rref = list(params_rref)
        if not params_rref:
            raise TypeError("DistributedOptimizer: params_rref is empty")
        for i, rref in enumerate(params_rref):
            if not isinstance(rref, rpc.PyRRef):
                raise TypeError(f"DistributedOptimizer: params_rref[{i}] is a {type(rref).__name__}, not an RRef")
        python_step = _python_local_optim.uses_python_step(optimizer_class)  # KeyError before any RPC
        if python_step:
            _python_local_optim.warn_once(optimizer_class, stacklevel=2)
        new_local_optimizer = _python_local_optim._new_python_local_optimizer if python_step else _new_local_optimizer

        by_owner: "OrderedDict[str, List[int]]" = OrderedDict()
        for i, rref in enumerate(params_rref):
            by_owner.setdefault(rref.owner().name, []).append(i)
        self._indices = by_owner
        futures = OrderedDict(
            (owner, _send(owner, new_local_optimizer, (optimizer_class, [params_rref[i] for i in indices], args, kwargs)))
            for owner, indices in by_owner.items()
        )
        self._local_optimizers: Dict[str, RRef] = _wait_all(futures, "building the local optimizer")
        # the owners' RPC worker ids, for the check the backward pass made (see step)
        self._owner_ids = [rpc.get_worker_info(owner).id for owner in self._local_optimizers]
        # Python local optimizers (plugin/_python_local_optim.py) step by the two phases from the
        # caller, never by the chain of two owners or the owners' exchange (both call TorchScript
        # on the owners)
        self._python_step = python_step
        if python_step:
            self._local_optimizers = OrderedDict((o, PythonOwner(r)) for o, r in self._local_optimizers.items())
        if len(self._local_optimizers) >= 2 and not python_step:
            # every owner learns the others (see step); with two, the first one's chained
            # steps go on to the second
            owners = list(self._local_optimizers)
            links = OrderedDict()
            for i, (owner, rref) in enumerate(self._local_optimizers.items()):
                chain = (owners[1], self._local_optimizers[owners[1]]) if i == 0 and len(owners) == 2 else (None, None)
                links[owner] = _send(owner, _link, (rref, [o for o in owners if o != owner]) + chain)
            _wait_all(links, "building the local optimizer")
        self._init_torch_optimizer(params_rref)

    @property
    def owners(self) -> List[str]:
        """Names of the workers that hold a local optimizer, in order of first parameter."""
        return list(self._local_optimizers)

    def _check_context(self, context_id: int) -> None:
        """Raises unless ``context_id`` is a live context on this worker (as torch's step)."""
        try:
            dist_autograd._is_valid_context(context_id)  # what torch's DistributedOptimizer.step checks
        except RuntimeError as e:
            raise RuntimeError(
                f"DistributedOptimizer: step({context_id}): no distributed autograd context {context_id} on "
                f"this worker ({rpc.get_worker_info().name!r}): step inside the `with dist_autograd.context()` "
                f"block that created it"
            ) from e

    def _prepare(self, context_id: int, what: str) -> "OrderedDict[str, int]":
        """Phase 1 on every owner at once; on any failure drops what the others prepared
        and raises. Returns each owner's token."""
        lease = _lease_ms()
        futures = OrderedDict(
            (owner, _send(owner, _local_prepare, (rref, context_id, lease)))
            for owner, rref in self._local_optimizers.items()
        )
        tokens, errors = _gather(futures)
        if errors:
            for owner, token in tokens.items():  # not waited for: the lease bounds them anyway
                _send(owner, _local_drop, (self._local_optimizers[owner], token))
            _raise_errors(errors, what, "; no owner applied the step")
        return tokens

    def _commit(self, tokens: "OrderedDict[str, int]") -> "OrderedDict[str, torch.futures.Future]":
        return OrderedDict(
            (owner, _send(owner, _local_commit, (self._local_optimizers[owner], token)))
            for owner, token in tokens.items()
        )

    @staticmethod
    def _check_commits(futures: "OrderedDict[str, torch.futures.Future]", what: str) -> None:
        done, errors = _gather(futures)
        if errors:
            failed = [owner for owner, _ in errors]
            _raise_errors(
                errors, what,
                f"; the step was applied on owners {list(done)} and not confirmed on {failed} "
                f"(an owner that did not answer in time may still apply it)",
            )

    def step_async(self, context_id: int) -> torch.futures.Future:
        """Starts :meth:`step`; returns once every owner holds the step's gradients.

        Runs phase 1 of the step (see :meth:`step`) and waits for it: every owner has read
        and validated the context's gradients and keeps them, so the context may be released
        (the ``with`` block may exit) as soon as this returns. Phase 2, the update, runs after
        the return. Costs one round trip to the owners before returning; waits for no lock.

        Args:
            context_id (int): the distributed autograd context whose gradients to apply; it
                must be live on this worker until this returns.

        Returns:
            torch.futures.Future: completes with ``None`` when every owner has applied the
            step, or with the error :meth:`step` would raise (raised by ``wait()``).

        Raises:
            RuntimeError: ``context_id`` is not a live context on this worker, or RPC is not
                running (raised at once; owners' errors go to the future).
        """
        what = f"step({context_id})"
        self._check_context(context_id)
        done = torch.futures.Future()
        try:
            tokens = self._prepare(context_id, what)
        except Exception as e:  # noqa: BLE001 (handed to the future)
            done.set_exception(e)
            return done
        futures = self._commit(tokens)

        def finish(_):
            try:
                self._check_commits(futures, what)
                done.set_result(None)
            except Exception as e:  # noqa: BLE001 (handed to the future)
                done.set_exception(e)

        torch.futures.collect_all(list(futures.values())).then(finish)
        return done

    def step(self, context_id: int) -> None:
        """Applies the gradients of distributed autograd context ``context_id`` on every owner.

        Each owner reads its parameters' gradients in that context on its own side and steps
        its local optimizer as TorchScript, holding its parameters' locks (see
        :class:`ScriptLocalOptimizer`). A parameter without a gradient in the context is
        skipped, as in torch; an owner that no backward pass of the context reached skips
        all of its parameters.

        All or nothing: with several owners the step has two phases. Phase 1: read and
        validate the gradients, and keep them. Phase 2, only when every owner succeeded:
        apply them. A gradient that one owner rejects changes no owner. With one owner the
        two run in one round trip. When the plugin's engine ran the context's latest
        backward pass from this worker, phase 1 has been done already: each worker checked,
        as its part of the pass ended, that every gradient there fits its parameter (dense,
        the parameter's shape, dtype and device: what the optimizers check first) and told
        this worker. If the pass reached every owner and each found its gradients fit, the
        caller sends the step to every owner at once and each applies it (one round trip,
        the owners updating in parallel, each only before a deadline of half the RPC timeout
        on its system clock, and only if its gradients did not change since the check, else
        it refuses; :meth:`ScriptLocalOptimizer.step_checked`). An owner lost after the pass
        then leaves the others applied, named in the error. Otherwise (torch's engine ran the
        backward, a sparse gradient on an owner, an owner the pass did not reach or where the
        engine holds no gradient, a failed pass), phase 1 runs on the owners. With two
        owners, the caller sends one RPC: the first owner runs its phase 1, has the second
        owner validate and apply, then applies its own part or
        drops it (:meth:`ScriptLocalOptimizer.chain_step`; the second owner applies only
        before a deadline of half the RPC timeout on its system clock). With three or more,
        the caller sends the step to every owner at once; each validates, gives its verdict
        to the others and learns theirs, owner to owner, and applies only when all accepted
        (:meth:`ScriptLocalOptimizer.exchange_step`; before the same deadline): one round
        trip from the caller, the owners updating in parallel. An owner that dies or freezes
        between the phases makes the step raise, naming it and listing the owners that
        applied it (the "Failures and guarantees" page has the table).

        Args:
            context_id (int): the distributed autograd context whose gradients to apply: live
                on this worker (step inside its ``with`` block), its backward pass ended.

        Raises:
            RuntimeError: ``context_id`` is not a live context on this worker; or a step
                failed or did not answer within the RPC timeout on an owner (every such owner
                is named in the message, and whether other owners applied the step).
            ValueError: an owner rejected a gradient's shape, dtype or device (no owner changed;
                when some owners applied, a ``RuntimeError`` listing them instead).
        """
        what = f"step({context_id})"
        self._check_context(context_id)
        if len(self._local_optimizers) == 1:
            (owner, rref), = self._local_optimizers.items()
            _, errors = _gather(OrderedDict([(owner, _send(owner, _local_step, (rref, context_id)))]))
            if errors:
                timed_out = "no answer within the RPC timeout" in remote_error_summary(errors[0][1])
                _raise_errors(errors, what, "; it may still apply the step when it answers" if timed_out else "")
            return
        protocol, versions = self._choose_protocol(context_id)
        if protocol == "checked":
            self._checked_step(context_id, versions, what)
            return
        if protocol == "exchange":
            self._exchange_step(context_id, what)
            return
        if protocol == "chain" and len(self._local_optimizers) == 2:
            self._chain_step(context_id, what)
            return
        if self._forced_protocol == "one-phase":
            self._check_commits(OrderedDict(
                (owner, _send(owner, _local_step, (rref, context_id))) for owner, rref in self._local_optimizers.items()
            ), what)
            return
        self._check_commits(self._commit(self._prepare(context_id, what)), what)

    def _protocol(self, context_id: int) -> str:
        """How a step over several owners of ``context_id`` would make sure now that every
        owner accepts its gradients before any applies (see :meth:`step`)."""
        return self._choose_protocol(context_id)[0]

    def _choose_protocol(self, context_id: int) -> Tuple[str, List[int]]:
        """:meth:`_protocol`, and with ``"checked"`` each owner's version of the context's
        gradients as the backward pass reported them (``[]`` for a forced ``"checked"`` that
        the pass did not vouch for, and with any other protocol)."""
        if self._python_step:
            # the Python owners' own check: the step on copies (phase 1)
            return self._forced_protocol or "parallel", []
        if self._forced_protocol not in (None, "checked"):
            return self._forced_protocol, []
        versions = ops._checked_versions(context_id, self._owner_ids)
        if versions or self._forced_protocol == "checked":
            return "checked", versions
        return ("chain" if len(self._local_optimizers) == 2 else "exchange"), []

    def _checked_step(self, context_id: int, versions: List[int], what: str) -> None:
        """A step over several owners whose gradients the backward pass found to fit their
        parameters on every owner (``ops._checked_versions``): every owner applies at once,
        one round trip, with no validation round first, each only if its gradients are still
        those the pass checked (``versions``, in the order of the owners; ScriptLocalOptimizer.
        step_checked). Each applies only before a deadline, half the RPC timeout from now on its
        system clock, so that an owner frozen past it and then resumed applies nothing; the
        caller waits at most the RPC timeout."""
        timeout = rpc.get_rpc_timeout()
        deadline = ops._wall_clock_ms() + int(500 * timeout) if 0 < timeout < 300 else -1
        futures = OrderedDict()
        for i, (owner, rref) in enumerate(self._local_optimizers.items()):
            if versions:
                futures[owner] = _send(owner, _local_step_checked, (rref, context_id, versions[i], deadline))
            else:  # forced, for the tests: the same step without the check
                futures[owner] = _send(owner, _step_before_remote, (rref, context_id, deadline))
        applied, errors = _gather(futures)
        if not errors:
            return
        lost = [o for o, e in errors if any(
            s in remote_error_summary(e) for s in ("no answer within the RPC timeout", "connection to it was lost"))]
        refused = [o for o, _ in errors if o not in lost]
        if not applied and not lost:
            _raise_errors(errors, what, "; no owner applied the step")
        detail = f"; the step was applied on owners {list(applied)}"
        if refused:
            detail += f"; {refused} refused it (nothing applied there)"
        if lost:
            detail += (f" and not confirmed on {lost} (an owner that did not answer in time may have applied it "
                       f"before its deadline, half the RPC timeout after the step was sent, or before it died)")
        # when some owners changed: never the error type of a step that changed none
        _raise_errors(errors, what, detail, RuntimeError if applied else None)

    def _exchange_step(self, context_id: int, what: str) -> None:
        """A step over several owners in one round trip: every owner validates its part,
        exchanges verdicts with the others, owner to owner, and applies its part only when
        all accepted (ScriptLocalOptimizer.exchange_step). An owner applies only before a
        deadline, half the RPC timeout from now on the system clock, and waits for the
        others' verdicts three quarters of the timeout, so its answer, naming the owner that
        failed, comes before the caller's own timeout."""
        timeout = rpc.get_rpc_timeout()
        finite = 0 < timeout < 300
        deadline = ops._wall_clock_ms() + int(500 * timeout) if finite else -1
        key = random.getrandbits(63)  # one step's key on every owner
        args = (context_id, key, deadline, 0.75 * timeout if finite else 0.0)
        futures = OrderedDict(
            (owner, _send(owner, _local_exchange, (rref,) + args)) for owner, rref in self._local_optimizers.items()
        )
        applied, errors = _gather(futures)
        if not errors:
            return
        # an owner's own failure first; then those that only relay another owner's
        relayed = [(o, e) for o, e in errors if "[exchange] owner " in str(e)]
        own = [(o, e) for o, e in errors if "[exchange] owner " not in str(e)]
        late = [o for o, e in own if "no answer within the RPC timeout" in remote_error_summary(e)]
        lost = [o for o, e in own if "connection to it was lost" in remote_error_summary(e)]
        if applied:
            detail = (f"; the step was applied on owners {list(applied)} and not confirmed on {[o for o, _ in errors]}"
                      + (" (an owner that did not answer in time may have applied it before its deadline)"
                         if late or lost else ""))
        else:
            detail = "; no owner applied the step" + (
                f" (unless {late} applied it just before its deadline, half the RPC timeout after the step was "
                f"sent, and the answer was late)" if late else "")
        _raise_errors(own + relayed, what, detail)

    def _chain_step(self, context_id: int, what: str) -> None:
        """A step over two owners in one round trip: the first validates and keeps its part,
        asks the second to step (validate, then apply), then applies its own part, or drops it
        when the second failed (ScriptLocalOptimizer.chain_step). The second owner applies only
        before a deadline, half the RPC timeout from now on the system clock; the first waits
        for it three quarters of the timeout, so its answer, naming the owner that failed,
        comes before the caller's own timeout."""
        (first, first_rref), (second, _) = self._local_optimizers.items()
        timeout = rpc.get_rpc_timeout()
        finite = 0 < timeout < 300
        deadline = ops._wall_clock_ms() + int(500 * timeout) if finite else -1
        fut = _send(first, _local_chain, (first_rref, context_id, _lease_ms(), deadline, 0.75 * timeout if finite else 0.0))
        try:
            fut.wait()
        except Exception as e:  # noqa: BLE001 (re-raised naming the owner)
            text = str(e)
            if "[chain] next owner " in text:
                late = "no answer within the RPC timeout" in remote_error_summary(e)
                _raise_errors([(second, e)], what, "; no owner applied the step" + (
                    f" (unless {second!r} applied it just before its deadline, half the RPC timeout after the "
                    f"step was sent, and its answer was late)" if late else ""))
            if "[chain] commit failed after owner " in text:
                _raise_errors([(first, e)], what, f"; the step was applied on owners [{second!r}] and not "
                                                  f"confirmed on [{first!r}]")
            if "no answer within the RPC timeout" in remote_error_summary(e) or "connection to it was lost" in \
                    remote_error_summary(e):
                _raise_errors([(first, e)], what, f"; the step was applied on owners [] and not confirmed on "
                                                  f"[{first!r}, {second!r}] (an owner that did not answer in time "
                                                  f"may still apply it)")
            _raise_errors([(first, e)], what, "; no owner applied the step")

    # For scripts/bench_gil.py and the tests, to measure and test each way of stepping several
    # owners whatever the backward pass found: "one-phase" steps every owner in one round trip,
    # as if each were the only one, without the all-or-nothing guarantee; "parallel" runs the
    # phases from the caller (phase 1 on all owners, then the commits) as step_async does;
    # "chain" (two owners) and "exchange" are the steps used when the backward pass did not
    # check the gradients; "checked" skips the validation round as if it had.
    _forced_protocol: Optional[str] = None

    def state_dict(self) -> Dict[str, Any]:
        """Every owner's optimizer state in one ``torch.optim``-format dict.

        Returns:
            Dict[str, Any]: ``{'state': {i: {...}}, 'param_groups': [{..., 'params': [0, .., N-1]}]}``, where
            ``i`` is the position of the parameter in ``params_rref``: the dict a
            ``torch.optim`` optimizer over the same parameters, in the same order, would save.
            The tensors are copies, on the owners' devices.

        Raises:
            RuntimeError: an owner failed, or did not answer within the RPC timeout (named in
                the message; every owner is waited for, at most the RPC timeout), or the
                owners' hyperparameters differ.
        """
        futures = OrderedDict(
            (owner, _send(owner, _local_state_dict, (rref,)))
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
        for key, value in self._param_group_extras().items():  # a scheduler's 'initial_lr', ... as torch.optim saves them
            group.setdefault(key, value)
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
            futures[owner] = _send(owner, _local_load_state_dict, (self._local_optimizers[owner], local_sd))
        _wait_all(futures, "load_state_dict()")
        # torch.optim takes the saved group's keys wholesale: keep those the owners do not hold
        self._forget_param_groups(extras=hyper)

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
            (owner, _send(owner, _local_set_hyperparameter, (rref, name, float(value))))
            for owner, rref in self._local_optimizers.items()
        )
        _wait_all(futures, f"set_hyperparameter({name!r})")
        self._forget_param_groups()

    # --- the torch.optim.Optimizer face (for torch.optim.lr_scheduler); see _param_groups.py ---
    # (zero_grad, add_param_group, state and the state-dict hooks: functional_optim/_torch_face.py)

    _STATE_ERROR = "DistributedOptimizer keeps its state on the owners; read it with state_dict()"
    _ADD_PARAM_GROUP_ERROR = "DistributedOptimizer has one parameter group; add_param_group is not supported"
    _HOOKS_ERROR = "DistributedOptimizer does not run state_dict or load_state_dict hooks"
    _PICKLE_ERROR = "a DistributedOptimizer cannot be pickled; save its state_dict() instead"

    def _init_torch_optimizer(self, params_rref: List[RRef]) -> None:
        # What torch.optim.Optimizer.__init__ sets, except param_groups and defaults (properties
        # here: the owners hold them) and state (on the owners). Optimizer.__init__ itself cannot
        # run: it takes local leaf tensors.
        self._params_rref = list(params_rref)
        self._group: Optional[_param_groups.DistributedParamGroup] = None
        self._group_extras: Dict[str, Any] = {}
        self._defaults: Optional[Dict[str, Any]] = None
        self._init_hooks()  # step() runs torch's step hooks (register_step_pre_hook ...)

    @property
    def param_groups(self) -> List[Dict[str, Any]]:
        """The one parameter group, as ``torch.optim`` shows it; schedulers read and write it.

        A list of one dict (a ``dict`` subclass kept in step with the owners): ``'params'`` is the
        ``params_rref`` list; the hyperparameters and flags have ``torch.optim``'s names and forms
        (``'lr'``, ``'betas'`` as a tuple, ``'maximize'``...). Assigning one
        (``opt.param_groups[0]['lr'] = 0.01``, as ``torch.optim.lr_scheduler`` does) sends it to
        every owner and returns when all have it, so the next step uses it; other keys
        (``'initial_lr'``) stay here and go into :meth:`state_dict`. Read from the owners on
        first use (one RPC per owner).

        Raises:
            RuntimeError: an owner failed to answer (named), or the owners' values differ.
        """
        if self._group is None:
            fetched = _param_groups.fetch_group(self)
            if self._defaults is None:
                self._defaults = dict(fetched["group"])
            self._group = _param_groups.DistributedParamGroup(self, self._params_rref, fetched, self._group_extras)
        return [self._group]

    @property
    def defaults(self) -> Dict[str, Any]:
        """The optimizer's hyperparameters and flags as first read from the owners, under
        ``torch.optim``'s names (what ``torch.optim.Optimizer.defaults`` holds; ``OneCycleLR``
        and ``CyclicLR`` look for ``'momentum'`` or ``'betas'`` in it).

        Raises:
            RuntimeError: as :attr:`param_groups`.
        """
        if self._defaults is None:
            self.param_groups
        return self._defaults

    def _param_group_extras(self) -> Dict[str, Any]:
        # before the group is read from the owners, the keys of a loaded state dict (the
        # optimizer's own among them: callers give the owners' values precedence)
        return self._group.extras() if self._group is not None else dict(self._group_extras)

    def _forget_param_groups(self, extras: Optional[Dict[str, Any]] = None) -> None:
        """The owners' values changed by another route: read them again at the next use."""
        self._group_extras = self._param_group_extras() if extras is None else dict(extras)
        self._group = None

    def __repr__(self) -> str:
        group = "" if self._group is None else f", param_group={ {k: v for k, v in self._group.items() if k != 'params'} }"
        return f"DistributedOptimizer(owners={self.owners}{group})"
