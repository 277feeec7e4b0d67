"""Loading an op library: one loader for this package's library and the plugin's.

An op library is a plain shared object with no Python bindings: ``torch.ops.load_library``
runs its ``TORCH_LIBRARY`` registrations, which makes its ops visible to eager Python,
TorchScript and ``torch.compile`` alike. Each library records the torch it was built against
(``csrc/build_info.cpp``: the string ``"<marker> built against torch <version>"``), so that a
failed load says which torch to rebuild it for.
"""
import glob
import importlib.machinery
import os
import re
from typing import Dict, List, Optional

import torch

__all__ = ["library_in", "built_against", "load_op_library"]

_loaded: Dict[str, str] = {}


def library_in(folders: List[str], env_var: str) -> Optional[str]:
    """The op library file to load: ``$<env_var>`` when set (a build elsewhere, the CMake one
    say), else the first ``_C<extension suffix>`` file in ``folders``.

    Args:
        folders (List[str]): where a package's own build lies.
        env_var (str): the variable naming another build.

    Returns:
        Optional[str]: the path, or ``None`` when there is none.

    Raises nothing.
    """
    override = os.environ.get(env_var)
    if override:
        return override
    for folder in folders:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            candidates = glob.glob(os.path.join(folder, "_C" + suffix))
            if candidates:
                return candidates[0]
    return None


def built_against(path: str, marker: bytes) -> str:
    """The torch version recorded in the library file at ``path``; read from the file's bytes,
    so it works for a file the loader rejects.

    Args:
        path (str): the library file.
        marker (bytes): the library's build-info marker (``"<marker> built against torch <version>"``).

    Returns:
        str: the version, or ``"unknown"``.

    Raises nothing.
    """
    try:
        with open(path, "rb") as f:
            match = re.search(re.escape(marker) + rb" built against torch ([0-9A-Za-z.+_-]+)", f.read())
    except OSError:
        return "unknown"
    return match.group(1).decode() if match else "unknown"


def load_op_library(what: str, folder: str, env_var: str, marker: bytes) -> str:
    """Loads ``what``'s op library once per process (``$env_var`` or ``folder/_C*.so``) and
    returns its path.

    Args:
        what (str): the package, for messages (``"functional_optim"``, ``"gilfree-rpc"``).
        folder (str): where the package's own build lies.
        env_var (str): the variable naming another build.
        marker (bytes): the library's build-info marker (see :func:`built_against`).

    Returns:
        str: the path loaded.

    Raises:
        ImportError: no file, or it fails to load; the message names the file, the torch it was
            built against and the one running, and how to rebuild it.
    """
    path = library_in([folder], env_var)
    if path is None:
        raise ImportError(
            f"{what}: no op library (_C*.so) found in {folder} and ${env_var} is not set (running torch "
            f"{torch.__version__}); build it with `pip install --no-build-isolation -e .`"
        )
    if path in _loaded:
        return path
    try:
        torch.ops.load_library(path)
    except (OSError, RuntimeError) as e:
        reason = f"{e}: {e.__cause__}" if e.__cause__ is not None else str(e)  # load_library hides it there
        raise ImportError(
            f"{what}: failed to load the op library {path} (built against torch {built_against(path, marker)}, "
            f"running torch {torch.__version__}): {reason}. Rebuild it against this torch with "
            f"`pip install --no-build-isolation -e .`."
        ) from e
    _loaded[path] = what
    return path
