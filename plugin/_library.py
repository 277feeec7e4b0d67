"""Finds and loads the op library that registers ``torch.ops.dist_engine``.

The library is a plain shared object with no Python bindings: loading it with
``torch.ops.load_library`` runs its ``TORCH_LIBRARY`` registrations, which makes the ops
visible to eager Python and TorchScript alike.
"""
import os

import torch

from functional_optim import _kernels
from functional_optim._kernels import library_in

# Set it to the path of a library built elsewhere (the CMake build, say) to load that one.
# (functional_optim's library, with the fused kernels, has its own: GILFREE_OPTIM_LIBRARY.)
LIBRARY_ENV_VAR = "GILFREE_RPC_LIBRARY"

_HERE = os.path.dirname(os.path.abspath(__file__))


def built_against(path: str) -> str:
    """The torch version recorded in the library file at ``path`` (plugin/csrc/build_info.cpp),
    or ``"unknown"``; read from the file's bytes, so it works for a file the loader rejects."""
    return _kernels.built_against(path, b"gilfree-rpc")


def find_library() -> str:
    """Path of the op library to load: ``$GILFREE_RPC_LIBRARY`` or ``plugin/_C*.so``.

    Raises:
        ImportError: no library was found (the plugin was not built).
    """
    path = library_in([_HERE], LIBRARY_ENV_VAR)
    if path is None:
        raise ImportError(
            f"gilfree-rpc: no op library (_C*.so) in {_HERE}; build it with "
            f"`pip install --no-build-isolation -e .` (running torch {torch.__version__})"
        )
    return path


def load_library(path: str | None = None) -> str:
    """Loads the op library once per process and returns its path.

    Raises:
        ImportError: the file is missing or cannot be loaded; the message names the file,
            the torch version it was built against and the one running.
    """
    path = path or find_library()
    if _loaded.get(path):
        return path
    try:
        torch.ops.load_library(path)
    except (OSError, RuntimeError) as e:
        # torch.ops.load_library hides the loader's reason in __cause__.
        reason = f"{e}: {e.__cause__}" if e.__cause__ is not None else str(e)
        raise ImportError(
            f"gilfree-rpc: failed to load the op library {path} "
            f"(built against torch {built_against(path)}, running torch {torch.__version__}): {reason}. "
            f"Rebuild it against this torch with `pip install --no-build-isolation -e .`."
        ) from e
    _loaded[path] = True
    return path


_loaded: dict = {}
