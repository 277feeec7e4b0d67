"""gilfree-rpc: GIL-free distributed autograd and optimizers over ``torch.distributed.rpc``.

Importing this package loads the op library that registers ``torch.ops.dist_engine`` and
compiles the TorchScript functions that peers call during a distributed backward pass, so
every worker taking part in one must import it.
"""
from ._library import load_library as _load_library

_load_library()

from . import ops  # noqa: E402
from . import _handlers  # noqa: E402
from . import autograd  # noqa: E402

_handlers.register()

# The TorchScript functions that a DistributedOptimizer's caller runs on owners by RPC
# (gradient clipping's norms, say) must be compiled on every worker before it is called.
from . import optim  # noqa: E402,F401

__all__ = ["autograd", "ops"]
