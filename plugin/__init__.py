"""gilfree-rpc: GIL-free distributed autograd and optimizers over ``torch.distributed.rpc``.

Importing this package loads the op library that registers ``torch.ops.gilfree_rpc`` and
the functions other workers call by RPC (the engine's messages, the distributed
optimizer's steps, gradient clipping; ``plugin/csrc/rpc/rpc_functions.h``), which run natively,
without the GIL and without TorchScript. Every worker taking part in a backward pass or an
optimizer step must import it (or load the library).
"""
from ._library import load_library as _load_library

_load_library()

from . import ops  # noqa: E402
from . import autograd  # noqa: E402
from . import optim  # noqa: E402,F401
from . import embedding  # noqa: E402,F401

__all__ = ["autograd", "embedding", "ops"]
