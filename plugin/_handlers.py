"""TorchScript functions that peers call by RPC during a distributed backward pass.

The engine (plugin/csrc/transport.cpp) addresses these functions by their qualified
names, which ``register()`` hands to it. Every worker compiles them when it imports
``plugin``, so that an RPC naming them finds them; they run as TorchScript on the
RPC thread, without the GIL.
"""
from typing import List

import torch
from torch import Tensor

from functional_optim._jit import script


def _receive_gradients(
    context_id: int,
    pass_id: int,
    autograd_message_id: int,
    grads: List[Tensor],
    retain_graph: bool,
    smart: bool,
    reached: List[int],
) -> torch.futures.Future[int]:
    # Called with async execution: the RPC is answered when the future completes.
    return torch.ops.dist_engine._receive_gradients(
        context_id, pass_id, autograd_message_id, grads, retain_graph, smart, reached
    )


def _reachability(context_id: int) -> List[int]:
    return torch.ops.dist_engine._reachability(context_id)


def _abort_pass(context_id: int, pass_id: int) -> str:
    return torch.ops.dist_engine._abort_pass(context_id, pass_id)


receive_gradients = script(_receive_gradients)
reachability = script(_reachability)
abort_pass = script(_abort_pass)


def register() -> None:
    """Tells the engine the qualified names of the handler functions."""
    torch.ops.dist_engine._register_handlers(
        receive_gradients.qualified_name,
        reachability.qualified_name,
        abort_pass.qualified_name,
    )
