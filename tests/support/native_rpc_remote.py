"""The audit of the native RPC functions that take tensors or indices from another worker
(tests/auth/test_native_rpc_fuzz.py): what the callee holds (parameters with gradients in
a context, native local optimizers over them), and the malformed requests, built on the caller.

``Target`` is made on worker0 against an owner (worker1): a dense parameter ``dense`` (4 x 5,
float32, an Adam optimizer over it) and a sparse one ``table`` (6 x 3, float32, an Adagrad
optimizer over it), both with gradients of a backward pass of the plugin's engine in a context
that stays open; and, in a second open context, a send function on the owner whose next edge is
``table`` itself (torch's RPC answered the parameter), for ``_receive_gradients``.
"""
from typing import Any, Dict, List

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
from torch import Tensor
from torch._C._distributed_rpc import _invoke_rpc_torchscript

import plugin.autograd
from plugin import _rpc_functions, ops
from plugin.optim import DistributedOptimizer
from tests.support import optim_remote

DENSE_SHAPE = (4, 5)
TABLE_SHAPE = (6, 3)


def param_itself(name: str) -> Tensor:
    """The parameter itself as the answer of an RPC: its send function's next edge is the leaf."""
    return optim_remote.PARAMS[name]


def unsafe_sparse(indices: List[List[int]], values: Tensor, size) -> Tensor:
    """A sparse COO tensor whose indices may lie outside `size` (torch checks nothing here)."""
    return torch.sparse_coo_tensor(torch.tensor(indices, dtype=torch.int64), values, size, check_invariants=False)


class Target:
    """What a malformed request is aimed at, on `owner` (see the module)."""

    def __init__(self, owner: str = "worker1", prefix: str = "audit"):
        self.owner = owner
        self.dense_name, self.table_name = f"{prefix}_dense", f"{prefix}_table"
        self.dense = rpc.rpc_sync(owner, optim_remote.make_param, args=(self.dense_name, DENSE_SHAPE, 3, torch.float32))
        self.table = rpc.rpc_sync(owner, optim_remote.make_param, args=(self.table_name, TABLE_SHAPE, 4, torch.float32))
        self.adam = DistributedOptimizer(torch.optim.Adam, [self.dense], lr=0.01)
        self.adagrad = DistributedOptimizer(torch.optim.Adagrad, [self.table], lr=0.01)
        self.adam_handle = self.adam._owners[owner].handle
        self.adagrad_handle = self.adagrad._owners[owner].handle
        assert self.adam_handle >= 0 and self.adagrad_handle >= 0  # native local optimizers
        # (_new_context makes the context this thread's current one, so that the RPCs below are
        # recorded in it; afterwards none is current, and the context stays open)
        self.context_id = dist_autograd._new_context()._context_id()
        try:
            x = torch.ones(1, requires_grad=True)
            y = rpc.rpc_sync(owner, optim_remote.use_param, args=(x, self.dense_name))
            z = rpc.rpc_sync(owner, optim_remote.use_param_sparse, args=(torch.tensor([0, 2, 2]), self.table_name))
            plugin.autograd.backward(self.context_id, [y.sum() + z.sum()])
        finally:
            ops._swap_current_context(-1)
        # a second context, in which the owner answered `table` itself: its only send function
        # there, whose next edge is the leaf (what _receive_gradients is sent for)
        self.receive_context_id = dist_autograd._new_context()._context_id()
        try:
            self.table_answer = rpc.rpc_sync(owner, param_itself, args=(self.table_name,))
        finally:
            ops._swap_current_context(-1)
        (self.table_message_id,) = dist_autograd._retrieve_context(self.receive_context_id)._recv_functions()
        self.pass_ids = iter(range(1 << 40, 1 << 41))  # fresh pass ids (worker0's, as an engine makes them)

    def release(self):
        dist_autograd._release_context(self.context_id)
        dist_autograd._release_context(self.receive_context_id)

    def call(self, op: str, *args: Any) -> torch.futures.Future:
        return self.call_with_timeout(rpc.get_rpc_timeout(), op, *args)

    def call_with_timeout(self, timeout: float, op: str, *args: Any) -> torch.futures.Future:
        """The op's native RPC function on the owner, as a peer sends it: with async execution
        for an op that returns a Future (``_receive_gradients``: the engine's transport sends it
        so; ``plugin._rpc_functions.call`` does not, and the answer would be a Future torch
        cannot pickle). torch internal: ``_invoke_rpc_torchscript``, what ``rpc.rpc_async``
        calls for a ScriptFunction (its last argument: async execution)."""
        if op != "_receive_gradients":
            return _rpc_functions.call(self.owner, op, args, timeout=timeout)
        previous = ops._swap_current_context(-1)
        try:
            return _invoke_rpc_torchscript(self.owner, "gilfree_rpc." + op, args, {}, timeout, True)
        finally:
            ops._swap_current_context(previous)

    def receive(self, grads: List[Tensor], message_id=None, context_id=None, pass_id=None, reached=None, steps=(),
                smart=False, timeout: float = 10.0) -> torch.futures.Future:
        """``_receive_gradients`` for the send function of `table`'s answer in the receive context
        (by default; `reached`: that send function)."""
        return self.call_with_timeout(
            timeout, "_receive_gradients",
            self.receive_context_id if context_id is None else context_id,
            next(self.pass_ids) if pass_id is None else pass_id,
            self.table_message_id if message_id is None else message_id,
            grads, False, smart, [self.table_message_id] if reached is None else list(reached), list(steps))

    def alive(self) -> bool:
        """Whether the owner answers (a native builtin op, no GIL there), within 10 s."""
        try:
            return rpc.rpc_sync(self.owner, torch.add, args=(torch.ones(1), 1), timeout=10).item() == 2
        except Exception:  # noqa: BLE001
            return False

    def steps_still_work(self) -> Dict[str, Any]:
        """A step of each optimizer in the context: its error text, or None (applied)."""
        outcome = {}
        for name, handle in (("adam", self.adam_handle), ("adagrad", self.adagrad_handle)):
            try:
                self.call("_optimizer_step", handle, self.context_id, -1, -1).wait()
                outcome[name] = None
            except Exception as e:  # noqa: BLE001
                outcome[name] = str(e)
        return outcome
