"""gilfree-rpc: GIL-free distributed autograd and optimizers over ``torch.distributed.rpc``.

Importing this package loads the op library that registers ``torch.ops.dist_engine``.
"""
from ._library import load_library as _load_library

_load_library()
