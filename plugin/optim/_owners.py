"""The caller's side of the distributed optimizer's RPCs: one interface to every owner's
local optimizer, the fan-out to all of them (send, wait, name who failed), the one deadline
rule, and the status table of the step protocols (``_status.py``, the op library's).

:class:`Owner` presents the three kinds of local optimizer (``_local.py``) alike: the caller
never branches on the kind, only on :attr:`Owner.native` (native ones answer the steps by
native RPC functions, without the owner's GIL, and can step inside the backward pass and in one
round trip on gradients the engine's pass vouched for). State and values go to a Python
function on the owner for every kind (``_local.function_for``). Every method returns a ``torch.futures.Future`` at
once; :func:`gather` waits for a set of them and sorts the outcomes. A failure's kind
(``ops._failure_kind``: timeout, unreachable, raised) is read from the future, never from its
message.
"""
import time
from collections import OrderedDict
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.distributed.rpc as rpc

from .. import _rpc_functions, ops
from .._errors import raise_on_worker, remote_error_summary
from . import _local
from ._status import APPLIED, CHANGED, LATE, NOT_REACHED, REFUSED

__all__ = [
    "Owner", "Failure", "gather", "raise_failures", "wait_all", "lease_ms", "deadline_ms", "send_python",
    "check_rrefs", "owners_of", "check_context",
    "APPLIED", "CHANGED", "LATE", "REFUSED", "NOT_REACHED", "STATUS_TEXT",
]

# What the caller's error says of an owner's status other than APPLIED.
STATUS_TEXT = {
    CHANGED: "the context's gradients there changed after the backward pass checked them (another backward pass of "
             "the context, started elsewhere or from another thread); nothing was applied there",
    LATE: "the step reached that owner's locks after its deadline (the owner was frozen or overloaded); nothing was "
          "applied there",
    REFUSED: "its optimizer refused the gradients; nothing was applied there",
}


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
    """THE deadline rule of every step that applies (one round trip, phase 2, inside the
    backward pass): half the RPC timeout from now, in milliseconds since the Unix epoch on the
    system clock (the owners compare it with theirs); -1 (none) when the timeout is infinite.
    An owner that reaches its locks later applies nothing (LATE), so one frozen past it and
    then resumed cannot apply a step its caller already reported as failed; the caller, which
    waits up to the whole timeout, hears of it first."""
    timeout = _finite_timeout()
    return time.time_ns() // 1_000_000 + int(500 * timeout) if timeout is not None else -1


# --- the caller's checks ------------------------------------------------------------------


def check_rrefs(rrefs: List[Any], prefix: str) -> None:
    """Raises ``TypeError`` ("``prefix``[i] is a ..., not an RRef") for the first item that is
    not an RRef."""
    for i, rref in enumerate(rrefs):
        if not isinstance(rref, rpc.PyRRef):
            raise TypeError(f"{prefix}[{i}] is a {type(rref).__name__}, not an RRef")


def owners_of(rrefs: List[Any]) -> "OrderedDict[str, List[int]]":
    """The positions in ``rrefs`` by owner name, owners in order of first parameter."""
    by_owner: "OrderedDict[str, List[int]]" = OrderedDict()
    for i, rref in enumerate(rrefs):
        by_owner.setdefault(rref.owner().name, []).append(i)
    return by_owner


def check_context(context_id: int, prefix: str, advice: str) -> None:
    """Raises unless ``context_id`` is a live context on this worker, as torch's
    DistributedOptimizer.step checks (owners skip a context they do not know, so the caller is
    where a released one is caught); the message begins with ``prefix`` and tells to
    ``advice`` inside the context's ``with`` block (the op's text, the library's one:
    :func:`plugin.ops._check_context`)."""
    ops._check_context(prefix, context_id, advice)


# --- sending --------------------------------------------------------------------------------


def send_python(worker: str, fn: Any, args: tuple) -> torch.futures.Future:
    """``rpc.rpc_async(worker, fn, args)`` from this thread outside any distributed autograd
    context: torch attaches autograd metadata to every RPC sent from inside one, and the
    receiver would create the context if it does not know it (a step sent after the owner
    released the context would recreate it there, empty). Nothing the optimizer sends belongs
    to the autograd graph. (Native calls, ``_rpc_functions.call``, do the same.)"""
    previous = ops._swap_current_context(-1)
    try:
        return rpc.rpc_async(worker, fn, args=args)
    finally:
        ops._swap_current_context(previous)


class Owner:
    """One owner's local optimizer, as its caller reaches it.

    Args:
        name (str): the owner's worker name.
        kind (str): ``"native"``, ``"python"`` or ``"torchscript"`` (see the module).
        rref (RRef): the local optimizer, held on the owner (its lifetime is the RRef's).
        handle (int): a native local optimizer's handle on its owner (``-1`` for the others).
        accepts_sparse (bool): whether the local optimizer takes sparse gradients (decides
            whether the backward pass can vouch for a pass that found sparse ones).

    Raises nothing itself; its futures complete with the owner's errors.
    """

    def __init__(self, name: str, kind: str, rref: Any, handle: int = -1, accepts_sparse: bool = False) -> None:
        self.name = name
        self.kind = kind
        self.rref = rref
        self.handle = handle
        self.accepts_sparse = accepts_sparse

    @property
    def native(self) -> bool:
        """Whether it steps inside the backward pass and on vouched-for gradients (a native
        local optimizer: the engine's check of the gradients is its own check)."""
        return self.handle >= 0

    def __repr__(self) -> str:
        return f"Owner({self.name!r}, {self.kind})"

    def _call(self, op: str, *args: Any) -> torch.futures.Future:
        if self.native and op in _NATIVE_STEP_OPS:
            return _rpc_functions.call(self.name, op, (self.handle,) + args)
        return send_python(self.name, _local.function_for(self.kind, op), (self.rref,) + args)

    # The protocols. Each step's future completes with a status of the table (_status.py).
    def step(self, context_id: int, version: int, deadline: int) -> torch.futures.Future:
        """One round trip: the owner reads the context's gradients (``version`` -1) or those
        the backward pass checked (``version``: its version of them), checks them, applies
        them before ``deadline``."""
        return self._call("_optimizer_step", context_id, version, deadline)

    def prepare(self, context_id: int, lease: int) -> torch.futures.Future:
        """Phase 1: reads, checks and keeps the gradients for ``lease`` ms; the value is a token."""
        return self._call("_optimizer_prepare", context_id, lease)

    def commit(self, token: int, deadline: int) -> torch.futures.Future:
        """Phase 2: applies the prepared step ``token`` before ``deadline``."""
        return self._call("_optimizer_commit", token, deadline)

    def drop(self, token: int) -> torch.futures.Future:
        """Forgets the prepared step ``token``."""
        return self._call("_optimizer_drop", token)

    # State and values, in one form for every kind, in Python on the owner: a torch.optim state
    # dict of one group (local indices), and the group's values by functional name. A native
    # owner answers a change with whether its local optimizer now takes sparse gradients.
    def state(self) -> torch.futures.Future:
        """The local optimizer's ``torch.optim``-format state dict (copies of its tensors;
        local indices)."""
        return self._call("_optimizer_state")

    def load_state(self, state_dict: Dict[str, Any]) -> torch.futures.Future:
        """Loads a ``torch.optim``-format state dict of one group (local indices)."""
        return self._call("_optimizer_load_state", state_dict)

    def hyperparameters(self) -> torch.futures.Future:
        """The group's values: ``_local.group_of``'s form."""
        return self._call("_optimizer_hyperparameters")

    def set_group(self, hparams: Dict[str, float], options: Dict[str, Optional[bool]]) -> torch.futures.Future:
        """Sets hyperparameters (functional names) and flags of the local optimizer's group."""
        return self._call("_optimizer_set_group", hparams, options)


# The ops a native owner answers by native RPC functions (no GIL there): the steps.
_NATIVE_STEP_OPS = ("_optimizer_step", "_optimizer_prepare", "_optimizer_commit", "_optimizer_drop")


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
