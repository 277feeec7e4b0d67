"""Calls of the library's native RPC functions from Python.

The op library defines, when it loads, one function per op that other workers call by RPC
(``gilfree_rpc.<op>``, a graph of one call of ``gilfree_rpc::<op>``, in torch's process-wide
compilation unit; ``plugin/csrc/rpc/rpc_functions.h``). torch's RPC runs such a function on the
callee's RPC thread, natively, without the GIL. :func:`call` sends one with torch's own
``rpc.rpc_async``, which converts the arguments by the function's schema (so ``{}`` is a
typed empty dict and ``1`` a float where the op takes a float). :func:`call_recorded` is the
caller's half of a call recorded in a distributed autograd context (the callee's half is the
op's, ``plugin/csrc/rpc/recorded_call.h``): the remote modules' forward and the lookups both
send theirs by it.

torch internal relied on: the functions live in ``torch.jit._state._python_cu`` (the unit
torch's RPC agent looks a call's function up in), whose ``find_function`` returns them as
``torch.jit.ScriptFunction`` objects; ``rpc.rpc_async`` sends a ``ScriptFunction`` as a
TorchScript call by its qualified name. No TorchScript is compiled. Checked on torch 2.11,
2.13 and 2.14.1.
"""
import functools
from typing import Any, Callable, List, Optional, Tuple

import torch
import torch.distributed.rpc as rpc
from torch import Tensor

from . import ops
from ._errors import raise_on_worker, relay

__all__ = ["call", "call_recorded", "function"]


@functools.lru_cache(maxsize=None)
def function(op: str) -> Any:
    """The RPC function of the op ``gilfree_rpc::<op>`` (a ``torch.jit.ScriptFunction``).

    Raises:
        KeyError: ``op`` has no RPC function (``plugin/csrc/rpc/rpc_functions.cpp`` lists them).
    """
    import torch.jit._state

    found = torch.jit._state._python_cu.find_function("gilfree_rpc." + op)
    if found is None:
        raise KeyError(f"the op gilfree_rpc::{op} has no RPC function (plugin/csrc/rpc/rpc_functions.cpp)")
    return found


def call(worker: str, op: str, args: tuple, timeout: float = rpc.constants.UNSET_RPC_TIMEOUT) -> torch.futures.Future:
    """Calls the op ``gilfree_rpc::<op>`` on ``worker`` with ``args`` by its RPC function,
    from this thread outside any distributed autograd context (torch would attach autograd
    metadata to a call sent from inside one, and the callee would create the context).

    Args:
        worker (str): the callee's worker name.
        op (str): an op of ``plugin/csrc/rpc/rpc_functions.cpp``'s list.
        args (tuple): its arguments, converted by its schema.
        timeout (float): seconds; the RPC timeout by default.

    Returns:
        torch.futures.Future: completes with the op's result on ``worker``, or with its error
        (the callee's message, the RPC timeout, or the transport's error); read the kind of a
        failure with ``plugin.ops._failure_kind``.

    Raises:
        KeyError: ``op`` has no RPC function. RuntimeError: an argument does not fit the op's
        schema, or RPC is not running. ValueError: an argument is or holds a nested tensor
        (``torch.nested``, either layout), which torch's RPC cannot send: its serializer aborts
        this process (torch 2.13), so nothing is sent.
    """
    for i, arg in enumerate(args):
        for t in arg if isinstance(arg, (list, tuple)) else (arg,):
            if isinstance(t, Tensor) and t.is_nested:
                raise ValueError(f"gilfree_rpc::{op} to {worker!r}: argument {i} is or holds a nested tensor (layout "
                                 f"{t.layout}), which torch's RPC cannot send")
    fn = function(op)
    previous = ops._swap_current_context(-1)
    try:
        return rpc.rpc_async(worker, fn, args=args, timeout=timeout)
    finally:
        ops._swap_current_context(previous)


def call_recorded(worker: str, callee: int, op: str, context_id: Optional[int], tensors: List[Tensor],
                  args: Callable[[int, int, List[bool]], tuple],
                  unpack: Callable[[Any], Tuple[List[Tensor], List[bool], int]],
                  finish: Callable[[List[Tensor]], Any], *, label: str, prefix: str, what: str,
                  record_label: Optional[str] = None) -> torch.futures.Future:
    """Calls the op ``gilfree_rpc::<op>`` on ``worker`` by :func:`call`, recorded in a distributed
    autograd context: the caller's half of a recorded native call, begun before the call is sent
    (``ops._begin_call``) and recorded when its answer arrives (``ops._record_call``).

    Args:
        worker (str): the callee's worker name.
        callee (int): its worker id (``rpc.get_worker_info(worker).id``).
        op (str): an op of ``plugin/csrc/rpc/rpc_functions.cpp``'s list that records its side.
        context_id (Optional[int]): the context to record the call in; -1 for this thread's
            current one when grad mode is on; None to record nothing (nothing is begun).
        tensors (List[Tensor]): the request's tensors that may require grad (any dtype, shape
            and device); those that do are recorded under the request's autograd_message_id.
        args (Callable[[int, int, List[bool]], tuple]): ``(context id, autograd_message_id,
            mask) -> the op's arguments``, the ids -1 when there is nothing to record, ``mask``
            per tensor of ``tensors``, whether it is recorded.
        unpack (Callable[[Any], Tuple[List[Tensor], List[bool], int]]): the op's answer ->
            ``(answer tensors, which of them require grad, the answer's autograd_message_id)``.
        finish (Callable[[List[Tensor]], Any]): the recorded answer tensors -> the future's result.
        label (str): the call's name in the caller's messages: a ``context_id`` that is not an
            int or not live (``"<label>: ..."``), and ``ops._record_call``'s unless
            ``record_label`` is given.
        prefix (str): the caller's API, the start of the messages that name the owner
            (:func:`plugin._errors.raise_on_worker`).
        what (str): what the call does, in those messages.
        record_label (Optional[str]): the call's name in ``ops._record_call``'s messages; ``label``
            by default.

    Returns:
        torch.futures.Future: completes with ``finish``'s result, or with an error: the
        callee's, raised again naming it (``"<prefix>: <what> failed on owner '<worker>': ..."``,
        of the type the callee raised); ``ops._record_call``'s ``RuntimeError`` (the context
        released here before the answer arrived: nothing recorded, the callee told); or what
        ``unpack`` or ``finish`` raised.

    Raises:
        TypeError: ``context_id`` is not an int or None.
        RuntimeError: ``context_id`` is not a live context on this worker (nothing is sent);
            the request could not be sent (naming ``worker``, as the future's errors); RPC is
            not running.
    """
    ctx, message_id = -1, -1
    if context_id is not None:
        if not isinstance(context_id, int) or isinstance(context_id, bool):
            raise TypeError(f"{label}: context_id must be an int or None, got {type(context_id).__name__}")
        # the callee becomes a worker the context knows (its release reaches the callee)
        ctx, message_id = ops._begin_call(label, context_id, callee, [t.requires_grad for t in tensors])
    mask = [t.requires_grad for t in tensors] if message_id >= 0 else [False] * len(tensors)
    sent = [t for t, marked in zip(tensors, mask) if marked]
    try:
        answer = call(worker, op, args(ctx, message_id, mask))
    except Exception as error:  # noqa: BLE001 (raised again, naming the owner)
        raise_on_worker(worker, what, error, prefix)

    def recorded(value: Any) -> Any:
        outputs, requires_grad, answer_id = unpack(value)
        return finish(ops._record_call(label if record_label is None else record_label, ctx, message_id, sent, answer_id,
                                       callee, outputs, requires_grad))

    return relay(answer, worker, what, prefix, recorded)
