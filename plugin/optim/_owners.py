"""The caller's side of the distributed optimizer's RPCs: one :class:`Owner` per worker that
holds a local optimizer, the fan-out to all of them (send, wait, name who failed), and the
time bounds every multi-owner call shares (the lease of a prepared step, a step's deadline).

An owner's local optimizer is one of three kinds, chosen on the owner when it is built
(:mod:`plugin.optim._local`):

* ``"native"``: a :class:`~plugin.optim.LocalOptimizer`, C++ behind an RRef; the caller calls
  its ops by their native RPC functions (``plugin/csrc/rpc/rpc_functions.h``): the owner answers
  on an RPC thread without its GIL and without TorchScript;
* ``"python"``: a :class:`~plugin.optim.PythonLocalOptimizer`, called by Python functions
  (the owner's GIL);
* ``"torchscript"``: a :class:`~plugin.optim.ScriptLocalOptimizer`, called by TorchScript
  functions (``plugin/optim/_scripted.py``): for functional classes registered by users.

Every method of :class:`Owner` returns a ``torch.futures.Future`` at once; :func:`gather`
waits for a set of them and sorts the outcomes. A failure's kind (``ops._failure_kind``:
the RPC timed out, the owner could not be reached, or the owner raised) is read from the
future itself, never from its message.
"""
import time
from collections import OrderedDict
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.distributed.rpc as rpc

from .. import _rpc_functions, ops
from . import _local
from .._errors import raise_on_worker, remote_error_summary

__all__ = [
    "Owner", "Failure", "gather", "raise_failures", "wait_all", "lease_ms", "deadline_ms", "outside_autograd_context",
]


# --- time bounds ----------------------------------------------------------------------------


def _finite_timeout() -> Optional[float]:
    """The RPC timeout in seconds, or None when it is infinite (0) or too long to bound a step
    by (300 s or more)."""
    timeout = rpc.get_rpc_timeout()
    return timeout if 0 < timeout < 300 else None


def lease_ms() -> int:
    """How long an owner keeps a prepared step: twice the RPC timeout (10 minutes when the
    timeout is infinite), so a commit sent as soon as every owner prepared arrives in time, and
    a caller that dies between the phases holds nothing for longer."""
    timeout = _finite_timeout()
    return int(2000 * timeout) if timeout is not None else 600_000


def deadline_ms() -> int:
    """The deadline of an owner's part of a step sent now: half the RPC timeout from now, in
    milliseconds since the Unix epoch on the system clock (the owners compare it with theirs);
    -1 (none) when the timeout is infinite. An owner that reaches its locks later applies
    nothing, so one frozen past it and then resumed cannot apply a step its caller already
    reported as failed; the caller, which waits up to the whole timeout, hears of it first."""
    timeout = _finite_timeout()
    return time.time_ns() // 1_000_000 + int(500 * timeout) if timeout is not None else -1


# --- sending --------------------------------------------------------------------------------


class outside_autograd_context:
    """``with outside_autograd_context():`` sends Python and TorchScript RPCs from this thread
    with no current distributed autograd context.

    torch attaches autograd metadata to every such RPC sent from inside a context, tensors or
    not, and the receiver then creates the context if it does not know it: a step sent from
    inside ``with dist_autograd.context()`` after the owner released that context would recreate
    it there, empty (and leave it behind). Nothing the optimizer sends belongs to the autograd
    graph. (Native calls, ``ops._call_function``, never carry autograd metadata.)
    """

    def __enter__(self):
        self._previous = ops._swap_current_context(-1)

    def __exit__(self, *exc):
        ops._swap_current_context(self._previous)


def send_python(worker: str, fn: Any, args: tuple) -> torch.futures.Future:
    """``rpc.rpc_async(worker, fn, args)`` outside any distributed autograd context."""
    with outside_autograd_context():
        return rpc.rpc_async(worker, fn, args=args)


class Owner:
    """One owner's local optimizer, as its caller reaches it.

    Args:
        name (str): the owner's worker name.
        kind (str): ``"native"``, ``"python"`` or ``"torchscript"`` (see the module).
        rref (RRef): the local optimizer, held on the owner (its lifetime is the RRef's).
        handle (int): a native local optimizer's handle on its owner (``-1`` for the others).
        accepts_sparse (bool): whether the local optimizer takes sparse gradients (native only;
            decides whether a checked step covers a pass that found sparse gradients).

    Raises nothing itself; its futures complete with the owner's errors.
    """

    def __init__(self, name: str, kind: str, rref: Any, handle: int = -1, accepts_sparse: bool = False) -> None:
        self.name = name
        self.kind = kind
        self.rref = rref
        self.handle = handle
        self.accepts_sparse = accepts_sparse

    def __repr__(self) -> str:
        return f"Owner({self.name!r}, {self.kind})"

    # Each call: the native op's name and arguments, or the Python/TorchScript function of
    # plugin/optim/_local.py's table (its second argument is the local optimizer's RRef).
    def _call(self, op: str, *args: Any) -> torch.futures.Future:
        if self.kind == "native":
            return _rpc_functions.call(self.name, op, (self.handle,) + args)
        return send_python(self.name, _local.function_for(self.kind, op), (self.rref,) + args)

    def step(self, context_id: int) -> torch.futures.Future:
        """The local optimizer's ``step(context_id)``."""
        return self._call("_optimizer_step", context_id)

    def prepare(self, context_id: int, lease: int) -> torch.futures.Future:
        """Phase 1 of a two-phase step; the future's value is the token."""
        return self._call("_optimizer_prepare", context_id, lease)

    def commit(self, token: int) -> torch.futures.Future:
        """Phase 2: applies the prepared step ``token``."""
        return self._call("_optimizer_commit", token)

    def drop(self, token: int) -> torch.futures.Future:
        """Forgets the prepared step ``token``."""
        return self._call("_optimizer_drop", token)

    def step_checked(self, context_id: int, version: int, deadline: int) -> torch.futures.Future:
        """A native owner's part of a checked step; the future's value is its status (0 applied,
        1 the gradients changed since the backward pass checked them, 2 the deadline passed)."""
        assert self.kind == "native"
        return self._call("_optimizer_step_checked", context_id, version, deadline)

    def state(self) -> torch.futures.Future:
        """The local optimizer's state: a native one's ``(state, hparams, options)`` (see
        ``_local.state_dict_of``), the others' ``torch.optim``-format state dict (local
        indices), its tensors copies."""
        return self._call("_optimizer_state")

    def load_state(self, *args: Any) -> torch.futures.Future:
        """Loads state: a native one's ``(state, hparams, options)`` (checked by the caller), the
        others' ``torch.optim``-format state dict of one group (local indices)."""
        return self._call("_optimizer_load_state", *args)

    def hyperparameters(self) -> torch.futures.Future:
        """A native one's ``(hparams, options)``, each group's hyperparameters (functional names)
        and flags; the others' ``_local.group_of`` form of its group."""
        return self._call("_optimizer_hyperparameters")

    def set_group(self, hparams: Dict[str, float], options: Dict[str, Optional[bool]]) -> torch.futures.Future:
        """Sets hyperparameters (functional names) and flags of the local optimizer's group."""
        if self.kind == "native":
            return self._call("_optimizer_set_group", 0, hparams, options, {})
        return self._call("_optimizer_set_group", hparams, options)


# --- waiting --------------------------------------------------------------------------------


class Failure(NamedTuple):
    """An owner's failed call: its name, the error, and the error's kind (``"timeout"``: no
    answer within the RPC timeout; ``"unreachable"``: the connection to it failed; ``"error"``:
    it raised)."""

    owner: str
    error: BaseException
    kind: str


def gather(futures: "OrderedDict[str, torch.futures.Future]") -> Tuple["OrderedDict[str, Any]", List[Failure]]:
    """Waits for every owner's future (so that none is left running); returns the results of
    those that succeeded, by owner, and the failures, in the owners' order."""
    results: "OrderedDict[str, Any]" = OrderedDict()
    failures: List[Failure] = []
    for owner, fut in futures.items():
        try:
            results[owner] = fut.wait()
        except Exception as e:  # noqa: BLE001 (re-raised by the caller, naming the owner)
            failures.append(Failure(owner, e, ops._failure_kind(fut)))
    return results, failures


def raise_failures(failures: List[Failure], what: str, detail: str = "", as_type: Optional[type] = None,
                   prefix: str = "DistributedOptimizer"):
    """Raises the first owner's error, of its exception type (or ``as_type``), naming it and
    every other owner that failed, followed by ``detail``."""
    first = failures[0]
    others = "".join(f"; also failed on owner {f.owner!r}: {remote_error_summary(f.error)}" for f in failures[1:])
    raise_on_worker(first.owner, what, first.error, prefix, others + detail, as_type)


def wait_all(futures: "OrderedDict[str, torch.futures.Future]", what: str,
             prefix: str = "DistributedOptimizer") -> "OrderedDict[str, Any]":
    """:func:`gather`, then :func:`raise_failures` when any owner failed."""
    results, failures = gather(futures)
    if failures:
        raise_failures(failures, what, prefix=prefix)
    return results
