"""Loads the fused CPU optimizer kernels: the ops ``torch.ops.gilfree_optim.<name>_``.

The kernels live in this package's own op library, ``functional_optim/_C*.so``, built from
``functional_optim/csrc`` (``fused_optim.h`` and one ``cpu/fused_<name>.cpp`` per optimizer,
compiled once per instruction set; schemas in ``csrc/ops.cpp``), in the op namespace
``gilfree_optim``; ``$GILFREE_OPTIM_LIBRARY`` names another build of it (the CMake build, say).
Loading is ``torch.ops.load_library``. The ``plugin`` package's library has none of these
kernels: its native local optimizers call them through the dispatcher, after importing this
package.

The ops must be registered before a function that calls them is scripted: this module loads
the library when it is imported, and every optimizer's functional form has a branch that
calls its op, so scripting any optimizer needs the library (without it TorchScript reports an
unknown ``gilfree_optim`` op). Eagerly the package imports without it, but every step checks
its gradients with the library's op (``check_gradients``, the one check the plugin's native
local optimizers make too), so a step then raises an ``ImportError`` that names the file looked
for, whatever the implementation (and ``fused=True`` raises it at construction): no silent
fallback.

Which kernels an optimizer's fused implementation runs is decided in one place, its group
step (``csrc/steps/<name>.cpp``): torch's fused kernels for SGD, Adam, AdamW and Adagrad (their
results equal ``torch.optim``'s ``fused=True`` step to the bit, on the CPU and on CUDA; like ours,
they agree with its default single-tensor step to rounding, not to the bit: checked on torch
2.13, ``tests/functional_optim/test_fused_parity.py``; ours are faster on many small tensors:
``scripts/bench_optim.py --kernels``), this package's for the others.
"""
import os
from typing import List, Optional

import torch

from . import ops
from .library import load_op_library

__all__ = [
    "LIBRARY_ENV_VAR", "load", "available", "fused_dtype",
    "fused_devices", "op_for",
]

# A library built elsewhere (the CMake build, say) to load instead of the package's own.
LIBRARY_ENV_VAR = "GILFREE_OPTIM_LIBRARY"


def fused_dtype(dtype: torch.dtype) -> bool:
    """Whether the fused kernels (ours and torch's) take parameters of ``dtype``: float32,
    float64, bfloat16 or float16, as the op library says (``torch.ops.gilfree_optim.fused_dtype``,
    the one list of them); eagerly False when the op library is not loaded. Compiled by
    TorchScript (which needs the library loaded anyway)."""
    if not torch.jit.is_scripting():
        if not eager_available():
            return False
    return ops.fused_dtype(dtype)


def fused_devices(name: str) -> List[str]:
    """The device types whose parameters the fused implementation of optimizer ``name`` takes:
    those of its group step in the op library (``torch.ops.gilfree_optim.group_step_devices``:
    ``["cpu", "cuda"]`` where it calls torch's fused kernels, ``["cpu"]`` where it calls this
    package's), ``[]`` for a name without one, and eagerly also when the op library is not
    loaded. Compiled by TorchScript (which needs the library loaded anyway)."""
    if not torch.jit.is_scripting():
        if not eager_available():
            return []
    return ops.group_step_devices(name)


_state = {"path": None, "error": None}


def load() -> str:
    """Loads the op library once per process (registering ``torch.ops.gilfree_optim``).

    Returns:
        The library's path.

    Raises:
        ImportError: the library is missing, fails to load, or lacks the group steps (built
            from older sources); the message names the file.
    """
    if _state["path"] is not None:
        return _state["path"]
    if _state["error"] is not None:
        raise ImportError(_state["error"])
    try:
        path = load_op_library("functional_optim", os.path.dirname(os.path.abspath(__file__)), LIBRARY_ENV_VAR,
                               b"gilfree-optim")
        if not hasattr(torch.ops.gilfree_optim, "group_step"):
            raise ImportError(
                f"functional_optim: the op library {path} has no group steps "
                f"(torch.ops.gilfree_optim); rebuild it from this source tree"
            )
    except ImportError as e:
        _state["error"] = str(e)
        raise
    _state["path"] = path
    return path


def available() -> bool:
    """Whether the fused CPU kernels can be used (loads the library on the first call)."""
    try:
        load()
    except ImportError:
        return False
    return True


@torch.jit.unused
def eager_available() -> bool:
    """:func:`available`, callable from code that TorchScript compiles (eagerly only)."""
    return available()


@torch.jit.unused
def eager_load() -> None:
    """:func:`load`, callable from code that TorchScript compiles (eagerly only)."""
    load()


def op_for(name: str):
    """This package's kernel ``torch.ops.gilfree_optim.<name>_`` (``name``: ``"rmsprop"``,
    ``"sparse_adam"``..., the kernels of ``csrc/cpu``), for tests and benchmarks that call a
    kernel alone. A step does not go through here: an optimizer's group step
    (``csrc/steps/<name>.cpp``) calls its kernel from C++. The optimizers with a kernel of
    torch's (SGD, Adam, AdamW, Adagrad: ``torch._fused_<name>_``) have none here, but for
    SGD's and Adagrad's sparse-gradient kernels (``"sparse_sgd"``, ``"sparse_adagrad"``).

    Raises:
        ValueError: no kernel of that name.
        ImportError: the op library cannot be loaded (see :func:`load`).
    """
    load()
    try:
        return getattr(torch.ops.gilfree_optim, name + "_")
    except AttributeError:
        raise ValueError(f"functional_optim: no fused kernel named {name!r}") from None


def default_error() -> Optional[str]:
    """Why the kernels are unavailable (``None`` when loaded or not tried yet)."""
    return _state["error"]


# Register the ops at import (when the library is there), so that TorchScript can compile the
# functions that call them; a failure is kept and raised by load() where a kernel is needed.
available()
