"""Finds and loads the op library that registers ``torch.ops.gilfree_rpc`` (with
``functional_optim.library``, the one loader of both packages' libraries).

The library is a plain shared object with no Python bindings: loading it with
``torch.ops.load_library`` runs its ``TORCH_LIBRARY`` registrations, which makes the ops
visible to eager Python and TorchScript alike.
"""
import os

from functional_optim.library import load_op_library

# Set it to the path of a library built elsewhere (the CMake build, say) to load that one.
# (functional_optim's library, with the group steps and kernels, has its own: GILFREE_OPTIM_LIBRARY.)
LIBRARY_ENV_VAR = "GILFREE_RPC_LIBRARY"


def load_library() -> str:
    """Loads the op library once per process and returns its path.

    Raises:
        ImportError: the file is missing or cannot be loaded; the message names the file,
            the torch version it was built against and the one running.
    """
    return load_op_library("gilfree-rpc", os.path.dirname(os.path.abspath(__file__)), LIBRARY_ENV_VAR, b"gilfree-rpc")
