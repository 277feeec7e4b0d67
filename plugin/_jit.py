"""``torch.jit.script`` for the library's own functions, without the deprecation warning.

torch 2.13 warns on every ``torch.jit.script`` call. The warning concerns the user's
own scripting, not ours, so it is filtered around our calls only.
"""
import warnings

import torch


def script(obj):
    """``torch.jit.script(obj)`` with torch's TorchScript deprecation warnings silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        return torch.jit.script(obj)
