"""Loads the fused CPU optimizer kernels: the ops ``torch.ops.gilfree_optim.<name>_``.

The kernels live in the project's op library (built from ``plugin/csrc``: ``fused_optim.h``
and one ``cpu/fused_<name>.cpp`` per optimizer, compiled once per instruction set; schemas in
``plugin/csrc/ops.cpp``), in their own
op namespace, ``gilfree_optim``, apart from the engine's ``dist_engine`` ops.
``functional_optim`` must not import the ``plugin`` package (``plugin`` imports
``functional_optim``), so this module finds the library file itself: ``$GILFREE_RPC_LIBRARY``
when set, else the ``_C*.so`` next to the ``plugin`` package, located with
``importlib.util.find_spec`` (which reads the package's location without running it).
Loading is ``torch.ops.load_library``; when ``plugin`` loads the same file too, the second load
is a no-op (one ``dlopen`` of one path).

The ops must be registered before a function that calls them is scripted: this module loads
the library when it is imported, and every optimizer's functional form has a branch that
calls its op, so scripting any optimizer needs the library (without it TorchScript reports an
unknown ``gilfree_optim`` op). Eagerly, a missing library makes the default implementation
fall back to torch's choice and turns ``fused=True`` into an ``ImportError`` that names the
file looked for, not into a silent fallback.

Which CPU kernel ``fused=True`` runs for the optimizers that have both torch's and ours is
decided in one place, :func:`torch_kernel_on_cpu`.
"""
import glob
import importlib.machinery
import importlib.util
import os
from typing import List, Optional

import torch

__all__ = [
    "LIBRARY_ENV_VAR", "library_in", "find_library", "load", "available", "OPTIMIZERS", "TORCH_FUSED",
    "FUSED_DTYPES", "torch_kernel_on_cpu", "fused_devices",
]

# Same variable as plugin._library: a library built elsewhere (the CMake build, say).
LIBRARY_ENV_VAR = "GILFREE_RPC_LIBRARY"

# The optimizers with a fused CPU kernel here: op torch.ops.gilfree_optim.<name>_.
OPTIMIZERS: List[str] = [
    "sgd", "adam", "adamw", "adagrad", "rmsprop", "adamax", "adadelta", "rprop", "nadam", "radam",
]

# The optimizers for which torch has fused kernels (``torch._fused_<name>_``, CPU and CUDA).
TORCH_FUSED: List[str] = ["sgd", "adam", "adamw", "adagrad"]

# The parameter dtypes every fused kernel takes (ours and torch's).
FUSED_DTYPES: List[torch.dtype] = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def fused_dtype(dtype: torch.dtype) -> bool:
    """Whether the fused kernels take parameters of ``dtype`` (:data:`FUSED_DTYPES`; TorchScript)."""
    return dtype == torch.float32 or dtype == torch.float64 or dtype == torch.bfloat16 or dtype == torch.float16


def torch_kernel_on_cpu(name: str) -> bool:
    """THE choice of fused CPU kernel, one row per optimizer that has both: whether
    ``fused=True`` on CPU runs torch's kernel (``torch._fused_<name>_``) rather than ours
    (``torch.ops.gilfree_optim.<name>_``). The optimizers of :data:`OPTIMIZERS` that are not
    in :data:`TORCH_FUSED` always run ours; on CUDA only torch's kernels exist.

    torch's for all four. In ``scripts/bench_optim.py --kernels``
    (results/bench_optim_kernels.json) both kernels run at the memory-bandwidth floor on one
    16M-element tensor (ours 0.94x to 0.98x torch's time, 1 and 2 threads), and ours takes
    0.34x to 0.72x torch's time on 400 tensors of 4,096 elements (it spreads all the tensors'
    elements over the threads in one parallel loop where torch's steps one tensor after
    another). torch's kernels are kept because their results equal torch.optim's default
    single-tensor step to the bit, which users (and the parity tests against torch) rely on;
    ours agree to rounding.

    Compiled by TorchScript (a table written as code: TorchScript reads no Python globals).
    """
    return name == "sgd" or name == "adam" or name == "adamw" or name == "adagrad"


def fused_devices(name: str) -> List[str]:
    """The device types on which ``fused=True`` can step optimizer ``name``: ``["cpu", "cuda"]``
    where torch has a kernel, ``["cpu"]`` where only ours exists. Compiled by TorchScript."""
    if name in ["sgd", "adam", "adamw", "adagrad"]:
        return ["cpu", "cuda"]
    return ["cpu"]


_state = {"path": None, "error": None}


def library_in(folders: List[str]) -> Optional[str]:
    """The op library file to load: ``$GILFREE_RPC_LIBRARY`` when set, else the first
    ``_C<extension suffix>`` file in ``folders``; ``None`` when there is none.

    Shared with ``plugin._library`` (``plugin`` may import ``functional_optim``, not the
    other way round), which raises its own error when this returns ``None``.

    Raises nothing.
    """
    override = os.environ.get(LIBRARY_ENV_VAR)
    if override:
        return override
    for folder in folders:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            candidates = glob.glob(os.path.join(folder, "_C" + suffix))
            if candidates:
                return candidates[0]
    return None


def find_library() -> str:
    """Path of the op library: ``$GILFREE_RPC_LIBRARY`` or ``<plugin package>/_C*.so``.

    Raises:
        ImportError: no library file was found (the plugin was not built).
    """
    spec = importlib.util.find_spec("plugin")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    path = library_in(folders)
    if path is None:
        raise ImportError(
            f"functional_optim: no op library (_C*.so) found in {folders or 'the plugin package'} and "
            f"${LIBRARY_ENV_VAR} is not set; the fused CPU kernels need it (build it with "
            f"`pip install --no-build-isolation -e .`)"
        )
    return path


def load() -> str:
    """Loads the op library once per process (registering ``torch.ops.gilfree_optim``).

    Returns:
        The library's path.

    Raises:
        ImportError: the library is missing, fails to load, or lacks the ``gilfree_optim`` ops
            (built from older sources); the message names the file.
    """
    if _state["path"] is not None:
        return _state["path"]
    if _state["error"] is not None:
        raise ImportError(_state["error"])
    try:
        path = find_library()
        try:
            torch.ops.load_library(path)
        except (OSError, RuntimeError) as e:
            reason = f"{e}: {e.__cause__}" if e.__cause__ is not None else str(e)
            raise ImportError(f"functional_optim: failed to load the op library {path}: {reason}") from e
        if not hasattr(torch.ops.gilfree_optim, "adam_"):
            raise ImportError(
                f"functional_optim: the op library {path} has no fused optimizer kernels "
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
    """The fused op ``torch.ops.gilfree_optim.<name>_`` (``name`` in :data:`OPTIMIZERS`).

    Raises:
        ValueError: unknown optimizer name.
        ImportError: the op library cannot be loaded (see :func:`load`).
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"functional_optim: no fused kernel named {name!r}; known: {OPTIMIZERS}")
    load()
    return getattr(torch.ops.gilfree_optim, name + "_")


def default_error() -> Optional[str]:
    """Why the kernels are unavailable (``None`` when loaded or not tried yet)."""
    return _state["error"]


# Register the ops at import (when the library is there), so that TorchScript can compile the
# functions that call them; a failure is kept and raised by load() where a kernel is needed.
available()
