"""Calls of the library's native RPC functions from Python.

The op library defines, when it loads, one function per op that other workers call by RPC
(``gilfree_rpc.<op>``, a graph of one call of ``gilfree_rpc::<op>``, in torch's process-wide
compilation unit; ``plugin/csrc/rpc/rpc_functions.h``). torch's RPC runs such a function on the
callee's RPC thread, natively, without the GIL. :func:`call` sends one with torch's own
``rpc.rpc_async``, which converts the arguments by the function's schema (so ``{}`` is a
typed empty dict and ``1`` a float where the op takes a float).

torch internal relied on: the functions live in ``torch.jit._state._python_cu`` (the unit
torch's RPC agent looks a call's function up in), whose ``find_function`` returns them as
``torch.jit.ScriptFunction`` objects; ``rpc.rpc_async`` sends a ``ScriptFunction`` as a
TorchScript call by its qualified name. No TorchScript is compiled. Checked on torch 2.11,
2.13 and 2.14.1.
"""
import functools
from typing import Any

import torch
import torch.distributed.rpc as rpc

from . import ops

__all__ = ["call", "function"]


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
        schema, or RPC is not running.
    """
    fn = function(op)
    previous = ops._swap_current_context(-1)
    try:
        return rpc.rpc_async(worker, fn, args=args, timeout=timeout)
    finally:
        ops._swap_current_context(previous)
