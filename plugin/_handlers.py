"""TorchScript functions that peers call by RPC during a distributed backward pass.

The engine (plugin/csrc/transport.cpp) addresses these functions by their qualified
names, which ``register()`` hands to it. Every worker compiles them when it imports
``plugin``, so that an RPC naming them finds them; they run as TorchScript on the
RPC thread, without the GIL. Each is the scripted form of the op's wrapper in
``plugin/ops.py``, whose compiled graph calls the op directly.
"""
from functional_optim._jit import script

from . import ops

# Called with async execution: the RPC is answered when the returned future completes.
receive_gradients = script(ops._receive_gradients)
reachability = script(ops._reachability)
abort_pass = script(ops._abort_pass)


def register() -> None:
    """Tells the engine the qualified names of the handler functions."""
    ops._register_handlers(
        receive_gradients.qualified_name,
        reachability.qualified_name,
        abort_pass.qualified_name,
    )
